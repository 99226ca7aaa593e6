/**
 * One request's own state as the pipeline (pipeline.ts) carries it through its stages: its id,
 * what it holds until it is over, its abort signal, its one log line and count, and the one S3
 * error answer whatever stage fails becomes.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ObjectCacheError } from '../../schemas/errors.js';
import { THROTTLING } from '../admission/admission.js';
import type { Logger } from '../common/logger.js';
import type { GatewayMetrics } from '../common/metrics.js';
import type { RequestContext } from '../s3/context.js';
import type { S3Target } from '../s3/request.js';
import { newRequestId, sendError, toObjectCacheError } from '../s3/respond.js';
import { operationLabel, type Classified } from './classify.js';
import type { ConnectionGuard } from './connection-guard.js';

/** The most an early error response will read and discard of an unread request body. */
const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;

export interface Request {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly requestId: string;
  readonly log: Logger;
  /** performance.now() when it arrived. */
  readonly startedAt: number;
  target?: S3Target;
  classified?: Classified;
  ctx?: RequestContext;
  failure?: ObjectCacheError;
  clientGone: boolean;
  /** Holds `release` until the request is over (at once if it already is: a place taken after an await). */
  hold(release: () => void): void;
  signal(): AbortSignal;
}

/** Authentication failures: counted, and never forwarded to the backend. */
function isAuthFailure(code: string): boolean {
  return code.startsWith('OC_ERR_AUTH_') || code === 'OC_ERR_REQUEST_MISSING_CONTENT_SHA256';
}

/** A request as it arrives: its id set on the response, its log line written when it is over. */
export function beginRequest(req: IncomingMessage, res: ServerResponse, logger: Logger, metrics: GatewayMetrics, guard: ConnectionGuard): Request {
  const started = process.hrtime.bigint();
  const requestId = newRequestId();
  res.setHeader('x-amz-request-id', requestId);
  res.setHeader('server', 'ObjectCache');
  // The client going away aborts the signal; its controller is made only when someone asks.
  let abort: AbortController | undefined;
  /**
   * What the request holds (its key's places) until the connection guard says it is over: both
   * ways, or its socket gone (gateway/pipeline/connection-guard.ts track).
   */
  const releases: (() => void)[] = [];
  let over = false;
  let logged = false;
  const r: Request = {
    req,
    res,
    requestId,
    log: logger.child({ requestId }),
    startedAt: performance.now(),
    clientGone: false,
    hold(release) {
      if (over) release();
      else releases.push(release);
    },
    signal() {
      if (!abort) {
        abort = new AbortController();
        if (r.clientGone) abort.abort();
      }
      return abort.signal;
    },
  };
  const clientLeft = (): void => {
    if (r.clientGone || res.writableFinished) return;
    r.clientGone = true;
    abort?.abort();
  };
  /** One log line and one count per request, when its response closes or its socket goes. */
  const logLine = (): void => {
    if (logged) return;
    logged = true;
    const { ctx, classified, failure } = r;
    const operation = ctx ? operationLabel(ctx.operation, ctx.mode) : classified?.kind === 'post-object' ? classified.operation : 'Unauthenticated';
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const status = res.writableFinished ? res.statusCode : 499;
    metrics.requests.inc({ operation, status: String(status) });
    metrics.requestDuration.observe({ operation }, seconds);
    r.log.info(
      {
        method: req.method,
        path: r.target?.path ?? req.url,
        operation,
        status,
        ms: Math.round(seconds * 1e4) / 10,
        accessKey: ctx?.auth.credential.accessKeyId,
        tenant: ctx?.tenant,
        ...(failure ? { code: failure.code } : {}),
        ...(status === 499 ? { aborted: true } : {}),
      },
      'request',
    );
  };
  guard.track(req, res, () => {
    over = true;
    for (const release of releases) release();
    clientLeft();
    logLine();
  });
  res.once('close', () => {
    clientLeft();
    logLine();
  });
  return r;
}

/** Any stage's failure as one S3 error answer (nothing, when the client is gone). */
export function failRequest(r: Request, error: unknown, metrics: GatewayMetrics): void {
  const { req, res } = r;
  if (r.clientGone) return;
  const failure = toObjectCacheError(error);
  r.failure = failure;
  if (isAuthFailure(failure.code)) metrics.authFailures.inc({ code: failure.code });
  // Nothing more is read of a request refused before its key was known (a client that never
  // authenticated gets no 64 MiB of grace), nor of one too slow to send: the answer closes it.
  const closing = r.ctx === undefined || (failure.code === 'OC_ERR_REQUEST_TIMEOUT' && !req.complete);
  if (closing && !res.headersSent) res.setHeader('connection', 'close');
  // The gateway's own throttling (a full gateway, a key past its share) is the request line's
  // code alone: a flood must not also flood the log with stacks.
  if (failure.code === 'OC_ERR_INTERNAL' || failure.code === 'OC_ERR_STORE_IO' || (failure.status === 503 && !THROTTLING.has(failure.code))) {
    r.log.error({ error: failure }, 'request failed');
  }
  sendError(res, failure, r.requestId, r.target?.path ?? req.url ?? '/', closing ? 0 : DRAIN_LIMIT_BYTES);
}
