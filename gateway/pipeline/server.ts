/**
 * The gateway: the S3 front door (request id, SigV4, S3 XML errors, one log line per request)
 * in front of either the embedded store or an S3 backend, plus the admin endpoint.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { BackendStats, ReaderPoolStats, SchedulerSnapshot } from '../common/observers.js';
import { startAdminServer, type AdminServer } from './admin.js';
import { authorize, authorizeKeys, authorizeNamespace, authorizeSomeObject, authorizeUnclassified, requirementOf, tenantFor, tenantMayWrite } from '../s3/auth/access.js';
import { s3Arn } from '../common/access-policy.js';
import { RequestVerifier } from '../s3/auth/request-verifier.js';
import { sendBucketList, visibleBuckets } from '../s3/list-buckets.js';
import { classify, operationLabel, type Classified } from './classify.js';
import { isLoopback, type ClientCredential, type GatewayConfig } from '../common/config.js';
import { headerOf, type RequestContext } from '../s3/context.js';
import { createLogger, type Logger } from '../common/logger.js';
import { createMetrics, type GatewayMetrics } from '../common/metrics.js';
import { FifoBudget } from '../common/fifo-budget.js';
import { FirstLayerGate } from '../descriptor-get/first-layer-gate.js';
import { readDescriptor } from '../descriptor-get/descriptor-request.js';
import { servePrefixLookup } from '../descriptor-get/lookup.js';
import { serveDescriptorGet } from '../descriptor-get/serve-descriptor-get.js';
import { EpochScheduler } from '../descriptor-get/scheduler/epoch-scheduler.js';
import { ReaderPool } from '../descriptor-get/read-pool/reader-pool.js';
import { assertBucketName, bucketFromHost, parseCopySource, parseTarget, unhoistPresigned, type S3Target } from '../s3/request.js';
import { ConnectionGuard, CONNECTION_CHECK_INTERVAL_MS } from './connection-guard.js';
import { KeyLimits } from '../admission/key-limits.js';
import { Admission, THROTTLING } from '../admission/admission.js';
import type { AuthResult } from '../s3/auth/request-verifier.js';
import { servePostObject } from '../s3/post-object.js';
import { openBackend, type Backend } from '../s3/backend.js';
import { newRequestId, sendError, toObjectCacheError } from '../s3/respond.js';
import { errorXml } from '../s3/xml.js';
import { Capacity } from '../capacity/capacity.js';
import { Segments } from '../segments/segments.js';
import { servePin } from '../capacity/pin-request.js';
import { serveBudgeted } from '../capacity/serve-budgeted.js';
import { loadStateKey } from '../common/state-key.js';

export interface GatewayDependencies {
  readonly logger?: Logger;
  /** Clock for SigV4 (ms since the epoch); tests move it. */
  readonly now?: () => number;
}

export interface Gateway {
  /** `http://host:port` of the S3 endpoint. */
  readonly url: string;
  readonly port: number;
  /** `http://host:port` of the admin endpoint (/healthz, /readyz, /metrics). */
  readonly adminUrl: string;
  readonly metrics: GatewayMetrics;
  /** Backend request counters; undefined on the embedded store. */
  backendStats(): BackendStats | undefined;
  /** Read-worker pool counters. */
  poolStats(): ReaderPoolStats;
  /** Bytes read by layerwise GETs and not yet sent. */
  bufferedBytes(): number;
  /** The read-worker pool (diagnostics and fault tests). */
  readonly readerPool: ReaderPool;
  /** The bandwidth scheduler's state; undefined when --cap is unlimited. */
  schedulerSnapshot(): SchedulerSnapshot | undefined;
  /** Capacity management; undefined when no bucket has a --budget. */
  readonly capacity: Capacity | undefined;
  /** Packed segments; undefined when --segments is off. */
  readonly segments: Segments | undefined;
  close(): Promise<void>;
}

/** The most an early error response will read and discard of an unread request body. */
const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;
const CLOSE_GRACE_MS = 5_000;
/** Operations that change or remove an object: the packed segments that hold it are stale. */
const WRITES: ReadonlySet<string> = new Set(['PutObject', 'CopyObject', 'CompleteMultipartUpload', 'DeleteObject', 'DeleteObjects']);

/**
 * Headers the gateway reads or passes to the store must be printable ASCII. Node reads header
 * bytes as latin1 and the store (Go) as UTF-8, so raw UTF-8 would mean one name to the access
 * check and another to the store; and a byte over 0x7f in a header the gateway re-signs is hashed
 * as two bytes here and one there (MinIO answers SignatureDoesNotMatch). S3 wants non-ASCII
 * metadata RFC 2047-encoded (filename*= for Content-Disposition), and botocore refuses it raw.
 */
const INTERPRETED_HEADER = /^(x-amz-|x-objectcache-|x-minio-|content-|if-|authorization$|host$|range$|cache-control$|expires$)/;

function assertAsciiHeaders(rawHeaders: readonly string[]): void {
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = (rawHeaders[i] as string).toLowerCase();
    if (!INTERPRETED_HEADER.test(name)) continue;
    if (/[^\x20-\x7e\t]/.test(rawHeaders[i + 1] as string)) {
      throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `The header ${name} holds bytes outside printable ASCII; encode non-ASCII metadata (RFC 2047, or percent-encoding for x-amz-copy-source)`, {
        details: { ArgumentName: name },
      });
    }
  }
}

/** This process's soft limit on open files (Linux, /proc/self/limits), or undefined. */
function openFileLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    return soft === undefined || soft === 'unlimited' ? undefined : Number(soft);
  } catch {
    return undefined;
  }
}

/** Authentication failures: counted, and never forwarded to the backend. */
function isAuthFailure(code: string): boolean {
  return code.startsWith('OC_ERR_AUTH_') || code === 'OC_ERR_REQUEST_MISSING_CONTENT_SHA256';
}

function urlOf(address: AddressInfo): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

/** Starts the gateway; resolves once both ports listen. */
export async function startGateway(config: GatewayConfig, deps: GatewayDependencies = {}): Promise<Gateway> {
  const logger = deps.logger ?? createLogger(config.logLevel);
  // Metrics need the backend's counters, and the backend reports retries to the metrics.
  let countRetry = (_kind: 'passthrough'): void => {};
  const backend = await openBackend(config.backend, (kind) => countRetry(kind), logger, config.multipartExpiryMs);
  const lw = config.descriptorGet;
  const pool = new ReaderPool({
    backend: backend.workers,
    workers: lw.workers,
    logErrors: config.logLevel !== 'silent',
    maxQueue: lw.workerQueue,
    readConcurrency: lw.readConcurrency,
    tasksPerWorker: 4,
    // Task buffers live in shared memory: as much as may be buffered, in blocks of a task's size.
    arenaBytes: lw.maxBufferedBytes,
    arenaBlockBytes: lw.taskBytes,
    maxChunkStreams: lw.maxChunkStreams,
    streamReceiveBufferBytes: lw.streamReceiveBufferBytes,
    // Slots for stream tasks only where streamed reads may run (else grouped tasks keep 4 a worker).
    streamTasksPerWorker: lw.chunkReads === 'auto' ? 16 : 0,
  });
  const budget = new FifoBudget(lw.maxBufferedBytes);
  const firstLayers = new FirstLayerGate();
  const scheduler = config.scheduler ? new EpochScheduler(config.scheduler) : undefined;
  const metrics = createMetrics({
    backend: () => backend.stats(),
    pool: () => pool.stats(),
    bufferedBytes: () => budget.used,
    scheduler: () => scheduler?.snapshot(),
    activeLayerwise: () => admission.descriptorGets,
  });
  countRetry = (kind) => metrics.backendRetries.inc({ kind });
  // What the gateways in front of the store sign their own state with (gateway/common/state-key.ts).
  const stateKey = loadStateKey(config.stateKey, config.backend);
  const segments = config.segments
    ? new Segments({ config: config.segments, key: stateKey, store: backend.capacity, workerEtag: (etag) => (backend.kind === 's3' ? `"${etag}"` : etag), logger, observer: metrics.segments })
    : undefined;
  metrics.watchSegments(segments);
  const capacity = config.capacity
    ? new Capacity({ config: config.capacity, key: stateKey, mayWrite: (tenant, bucket, key) => tenantMayWrite(config.clientCredentials, tenant, bucket, key), store: backend.capacity, logger, observer: metrics.capacity, ...(segments ? { derived: segments } : {}) })
    : undefined;
  metrics.watchCapacity(capacity);
  const verifier = new RequestVerifier({ credentials: config.clientCredentials, region: config.region, sigV2: config.sigV2, sigV2MaxExpiresSeconds: config.sigV2MaxExpiresSeconds, ...(deps.now ? { now: deps.now } : {}) });
  const admission = new Admission({
    keys: new KeyLimits(config.limits, config.backend.kind === 's3' ? config.backend.connections : 0),
    maxDescriptorGets: lw.maxLayerwiseRequests,
    budget,
    poolSaturated: () => pool.saturated(),
  });

  /**
   * One request, in five stages: classify (what it is, from its method, path and headers),
   * authenticate (its signature, and the store's own APIs kept out), admit (its key's share of
   * the gateway, gateway/admission/admission.ts), authorize (what its key may do with it) and dispatch (the
   * handler for its kind). A browser form authenticates itself with its signed policy and goes
   * from classification to its handler. Whatever a stage throws becomes one S3 error answer.
   */
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const r = begin(req, res);
    try {
      const { target, classified } = classifyRequest(req);
      r.target = target;
      r.classified = classified;
      if (classified.kind === 'post-object') return await serveForm(r, target);
      const auth = await authenticate(r, target);
      r.hold(admission.request(auth.credential, auth.mode === 'presigned' ? 'presigned' : 'signed'));
      const ctx = contextOf(r, auth, classified);
      const filteredListing = authorizeRequest(ctx, classified);
      await dispatch(r, ctx, classified, filteredListing);
    } catch (error) {
      fail(r, error);
    }
  }

  /** A request's own state: its id, what it holds until it is over, its abort signal and its log line. */
  interface Request {
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

  function begin(req: IncomingMessage, res: ServerResponse): Request {
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
      r.log.info({
        method: req.method,
        path: r.target?.path ?? req.url,
        operation,
        status,
        ms: Math.round(seconds * 1e4) / 10,
        accessKey: ctx?.auth.credential.accessKeyId,
        tenant: ctx?.tenant,
        ...(failure ? { code: failure.code } : {}),
        ...(status === 499 ? { aborted: true } : {}),
      }, 'request');
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

  /** Stage 1: what the request is. Refuses headers the store reserves or cannot read as we do, and bad bucket names. */
  function classifyRequest(req: IncomingMessage): { target: S3Target; classified: Classified } {
    for (const name of Object.keys(req.headers)) {
      if (name.startsWith('x-minio-internal-')) throw new ObjectCacheError('OC_ERR_AUTH_FORBIDDEN_HEADER', `The header ${name} is reserved for the object store`);
    }
    assertAsciiHeaders(req.rawHeaders);
    const target = parseTarget(req.url ?? '/', bucketFromHost(req.headers.host, config.domains));
    // A path-style bucket follows S3's naming rules like a virtual-hosted one: `.`, `..` or
    // `.minio.sys` as a bucket would reach the store as a path it may resolve elsewhere.
    if (target.bucket !== '' && !target.virtualHosted) assertBucketName(target.bucket);
    return { target, classified: classify(req.method ?? 'GET', target, req.headers) };
  }

  /**
   * Stage 2: the signature, then the store's own APIs (the path, and a copy's source) kept from
   * every key but the administrator's, before anything else is read or held for the key. A
   * presigned URL's signed query parameters become the headers they stand for.
   */
  async function authenticate(r: Request, target: S3Target): Promise<AuthResult> {
    const { req } = r;
    const auth = await verifier.verify({ method: req.method ?? 'GET', headers: req.headers, canonicalPath: target.signedPath, query: target.query, rawPath: target.sigV2Path });
    authorizeNamespace(auth.credential, target.bucket, config.reservedBuckets);
    if (auth.mode === 'presigned') {
      const unhoisted = unhoistPresigned(target);
      r.target = unhoisted.target;
      for (const [name, value] of Object.entries(unhoisted.headers)) req.headers[name] ??= value;
    }
    const copySource = headerOf(req, 'x-amz-copy-source');
    if (copySource !== undefined) authorizeNamespace(auth.credential, parseCopySource(copySource).bucket, config.reservedBuckets, 'x-amz-copy-source');
    return auth;
  }

  function contextOf(r: Request, auth: AuthResult, classified: Classified): RequestContext {
    const ctx: RequestContext = {
      req: r.req,
      res: r.res,
      requestId: r.requestId,
      target: r.target as S3Target,
      auth,
      config,
      logger: r.log,
      startedAt: r.startedAt,
      operation: classified.operation,
      tenant: auth.credential.tenant,
      get signal() {
        return r.signal();
      },
    };
    r.ctx = ctx;
    return ctx;
  }

  /**
   * Stage 4: what the key may do, as far as the request's line and headers tell. A descriptor GET
   * or lookup of a key that may read no object of the bucket is refused before its body is read
   * (up to --max-descriptor-bytes of JSON otherwise); the keys it names are authorized once read
   * (dispatch). A DeleteObjects request's keys are checked by the backend as it reads them
   * (s3/delete-objects.ts); a bucket listing without s3:ListAllMyBuckets is answered filtered
   * (returns true for that one).
   */
  function authorizeRequest(ctx: RequestContext, classified: Classified): boolean {
    const credential = ctx.auth.credential;
    switch (classified.kind) {
      case 'descriptor-get':
      case 'prefix-lookup':
        authorizeSomeObject(credential, ['s3:GetObject'], ctx.target.bucket);
        return false;
      case 'pin':
        authorizeSomeObject(credential, ['objectcache:PinObject'], ctx.target.bucket);
        return false;
      default: {
        const requirement = requirementOf(ctx.req.method ?? 'GET', ctx.target, ctx.req.headers);
        if (requirement.kind === 'checks') authorize(credential, requirement.checks);
        else if (requirement.kind === 'unclassified') authorizeUnclassified(credential, requirement.what);
        return requirement.kind === 'list-buckets' && !credential.access.allows('s3:ListAllMyBuckets', s3Arn('*'));
      }
    }
  }

  /** Capacity management, when the bucket has a budget. */
  const budgetOf = (bucket: string): Capacity | undefined => (capacity?.manages(bucket) === true ? capacity : undefined);

  /**
   * The backend's HEADs as a request of `credential` makes them: each within the key's share of
   * the store's connections (gateway/admission/key-limits.ts), on an S3 store (the embedded one has none).
   */
  const headsOf = (credential: ClientCredential): Pick<Backend, 'heads'> => {
    if (config.backend.kind !== 's3') return backend;
    const gate = admission.backendGate(credential);
    return { heads: (bucket, keys, signal, checkBucket) => backend.heads(bucket, keys, signal, checkBucket, gate) };
  };

  /** Stage 5: the handler for the request's kind. */
  async function dispatch(r: Request, ctx: RequestContext, classified: Classified, filteredListing: boolean): Promise<void> {
    const { bucket } = ctx.target;
    const credential = ctx.auth.credential;
    const budgeted = budgetOf(bucket);
    switch (classified.kind) {
      case 'pin':
        return servePin(ctx, capacity, lw.maxDescriptorBytes);
      case 'descriptor-get': {
        // The descriptor is read (bounded by --max-descriptor-bytes and the body timeouts) and
        // every chunk it names authorized before a slot is taken: a key that may read nothing
        // cannot hold a slot, however slowly it sends.
        const descriptor = await readDescriptor(ctx, lw);
        authorizeKeys(credential, 's3:GetObject', bucket, descriptor.keys);
        ctx.tenant = tenantFor(credential, descriptor.tenant);
        const release = admission.descriptorGet(credential);
        try {
          if (budgeted) {
            // The chain the descriptor names, an access of each chunk, and no eviction under the read.
            budgeted.link(bucket, descriptor.keys, credential.tenant, credential.accessKeyId);
            r.hold(await budgeted.reading(bucket, descriptor.keys, credential.accessKeyId));
          }
          return await serveDescriptorGet(ctx, descriptor, { backend: headsOf(credential), checks: backend, pool, config: lw, budget, scheduler, firstLayers, segments, observer: metrics.descriptorGet, backendTimeoutMs: config.backend.kind === 's3' ? config.backend.timeoutMs : 30_000 });
        } finally {
          release();
        }
      }
      case 'prefix-lookup': {
        const looked = await servePrefixLookup(ctx, lw, headsOf(credential));
        budgeted?.link(bucket, looked.keys, credential.tenant, credential.accessKeyId);
        budgeted?.accessed(bucket, looked.keys.slice(0, looked.matched), credential.accessKeyId);
        return;
      }
      default: {
        if (filteredListing) {
          return sendBucketList(ctx, visibleBuckets(credential.access, await backend.listBuckets(ctx.signal)));
        }
        // A passthrough holds a backend connection for as long as its client takes.
        if (config.backend.kind === 's3') r.hold(admission.backendConnection(credential));
        // A write or delete of a chunk makes the segments that hold it stale: dropped before the
        // store has it (and again after, for the keys a DeleteObjects names once its body is read).
        const writes = segments !== undefined && WRITES.has(ctx.operation);
        if (writes) segments.changed(bucket, ctx.target.key);
        try {
          if (budgeted) return await serveBudgeted(ctx, budgeted, backend);
          return await backend.serveS3(ctx);
        } finally {
          if (writes) {
            segments.changed(bucket, ctx.target.key);
            for (const key of ctx.deleteKeys ?? []) segments.changed(bucket, key);
          }
        }
      }
    }
  }

  /** A browser-form upload: the signed policy in the form is its authentication. */
  async function serveForm(r: Request, target: S3Target): Promise<void> {
    // Nobody uploads into the store's own APIs by form (the administrator has a key for that).
    authorizeNamespace(undefined, target.bucket, config.reservedBuckets);
    const bucket = target.bucket;
    await servePostObject(r.req, r.res, target, {
      verifier,
      sink: backend.postSink,
      maxObjectBytes: config.maxObjectBytes,
      maxFieldsBytes: config.limits.maxFormFieldsBytes,
      fieldsTimeoutMs: config.limits.headerTimeoutMs,
      admit: (credential) => r.hold(admission.request(credential, 'form')),
      now: deps.now ?? Date.now,
      storing: async (credential, key, userMeta) => {
        const budgeted = budgetOf(bucket);
        segments?.changed(bucket, key);
        if (!budgeted) return () => {};
        // The form's own tenant field is dropped: only the gateway names an object's tenant.
        userMeta['objectcache-tenant'] = credential.tenant;
        // The file's size is known once it is stored: the whole form's length bounds it, and is
        // what the quota admits (a form without a length is bounded by --max-object-bytes).
        const length = Number(r.req.headers['content-length']);
        const bytes = Number.isSafeInteger(length) && length > 0 ? Math.min(length, config.maxObjectBytes) : config.maxObjectBytes;
        const admitted = await budgeted.admitWrite(bucket, key, credential.tenant, bytes);
        return (stored) => {
          admitted(false); // a form's size is known once stored: learnt, and its quota kept, after
          if (stored) budgeted.written(bucket, key, credential.tenant);
        };
      },
    });
  }

  /** Any stage's failure as one S3 error answer (nothing, when the client is gone). */
  function fail(r: Request, error: unknown): void {
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

  const server: Server = createServer(
    {
      maxHeaderSize: config.maxHeaderBytes,
      requestTimeout: config.limits.requestTimeoutMs,
      headersTimeout: config.limits.headerTimeoutMs,
      connectionsCheckingInterval: CONNECTION_CHECK_INTERVAL_MS,
      keepAliveTimeout: 65_000,
    },
    (req, res) => {
      handle(req, res).catch((error: unknown) => {
        logger.error({ error }, 'unhandled request failure');
        res.destroy();
      });
    },
  );
  const guard = new ConnectionGuard(server, config.limits, (kind) => metrics.connectionTimeouts.inc({ kind }));
  /** Errors Node finds on a connection before (or instead of) a request handler, answered as S3 does. */
  const CLIENT_ERRORS: Readonly<Record<string, () => ObjectCacheError>> = {
    HPE_HEADER_OVERFLOW: () => new ObjectCacheError('OC_ERR_REQUEST_HEADER_TOO_LARGE', `Your request's headers exceed the maximum of ${config.maxHeaderBytes} bytes`),
    // --header-timeout-ms or --request-timeout-ms ran out (Node's own 408 would carry no S3 error).
    ERR_HTTP_REQUEST_TIMEOUT: () => new ObjectCacheError('OC_ERR_REQUEST_TIMEOUT', 'Your socket connection to the server was not read from or written to within the timeout period; the connection is closed'),
  };
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    const known = CLIENT_ERRORS[error.code ?? ''];
    // Nothing of a response may have gone out on it yet (a request timeout can come mid-body).
    const answering = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
    if (known === undefined || !socket.writable || answering?.headersSent === true) {
      socket.destroy();
      return;
    }
    const failure = known();
    const requestId = newRequestId();
    const xml = errorXml({ code: failure.s3Code, message: failure.message, resource: '/', requestId });
    socket.end(
      `HTTP/1.1 ${failure.status} Bad Request\r\ncontent-type: application/xml\r\ncontent-length: ${Buffer.byteLength(xml)}\r\n` +
        `x-amz-request-id: ${requestId}\r\nx-objectcache-error-code: ${failure.code}\r\nx-objectcache-retryable: false\r\nserver: ObjectCache\r\nconnection: close\r\n\r\n${xml}`,
    );
  });

  let admin: AdminServer | undefined;
  try {
    await capacity?.start();
    server.listen(config.port, config.host);
    await once(server, 'listening');
    admin = await startAdminServer({
      host: config.metricsHost,
      port: config.metricsPort,
      registry: metrics.registry,
      ready: () => backend.ready(),
      ...(capacity ? { capacity: (top: number) => capacity.report(top) } : {}),
      token: config.adminToken,
      loopback: isLoopback(config.metricsHost),
    });
  } catch (error) {
    server.close();
    await capacity?.close();
    await pool.close();
    await backend.close();
    throw error;
  }
  const address = server.address() as AddressInfo;
  logger.info({ url: urlOf(address), admin: admin.url, backend: backend.description, stateKey: stateKey.origin }, 'gateway listening');
  const files = openFileLimit();
  const needed = config.limits.maxConnections + (config.backend.kind === 's3' ? config.backend.connections + lw.maxChunkStreams : 0) + 64;
  if (files !== undefined && files < needed) {
    // Past the limit every new file fails (EMFILE): another tenant's upload, a backend connection.
    logger.warn({ openFileLimit: files, needed }, `the open-file limit (ulimit -n ${files}) is below what --max-connections and the backend connections may use (${needed}); lower --max-connections or raise the limit`);
  }

  let closing: Promise<void> | undefined;
  const adminServer = admin;
  return {
    url: urlOf(address),
    port: address.port,
    adminUrl: adminServer.url,
    metrics,
    backendStats: () => backend.stats(),
    poolStats: () => pool.stats(),
    readerPool: pool,
    bufferedBytes: () => budget.used,
    schedulerSnapshot: () => scheduler?.snapshot(),
    capacity,
    segments,
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        // GETs still waiting for admission are refused now (503, retryable), not cut later.
        scheduler?.close();
        server.closeIdleConnections();
        const timer = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
        await closed;
        clearTimeout(timer);
        await adminServer.close();
        segments?.close();
        await capacity?.close();
        await pool.close();
        await backend.close();
      })();
      return closing;
    },
  };
}
