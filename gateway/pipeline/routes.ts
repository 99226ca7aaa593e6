/**
 * The request pipeline, in one file: what a request is (classify), the route its kind names, and
 * the stages every request runs through in order, as a table. A route says how the request
 * authenticates, what it is admitted against (gateway/admission/: first its key's share of
 * requests), what it needs authorized from its request line before any body is read
 * (gateway/s3/auth/access.ts authorizeLine), and its handler, which reads and authorizes the
 * keys its body names and takes what else the route is admitted against. `handleRequest` runs the
 * stages for every kind; whatever a stage throws becomes one S3 error answer (failRequest), and
 * what a request holds is released when it is over (beginRequest).
 *
 *   kind            authenticates   authorized (line, then body)                 admitted against                    handler
 *   post-object     form policy     reserved buckets; the policy's conditions    key's request share (form)          s3/post-object.ts
 *   descriptor-get  signature       some object (s3:GetObject); then every       key's request share; a descriptor   descriptor-get/serve-descriptor-get.ts
 *                                   chunk the descriptor names                   GET slot once the descriptor is
 *                                                                                read and authorized
 *   prefix-lookup   signature       some object (s3:GetObject); its keys as      key's request share                 descriptor-get/lookup.ts
 *                                   read (lookup.ts)
 *   pin             signature       some object (objectcache:PinObject); its     key's request share                 capacity/pin-request.ts
 *                                   keys as read (pin-request.ts)
 *   s3              signature       the operation's requirement                  key's request share; a backend      the store (s3/backend.ts), or
 *                                   (s3/auth/access.ts requirementOf)            connection (S3 store)               capacity/serve-budgeted.ts
 *
 * Every signed kind's line authorization also keeps it from the store's reserved namespaces
 * (its path, and a copy's source) unless the administrator's key signed it.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { DESCRIPTOR_HEADER, decodeDescriptorHeader, parseDescriptor, type Descriptor } from '../../schemas/descriptor.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { tokensProblem } from '../../schemas/kv-tokens.js';
import { THROTTLING, type Admission } from '../admission/admission.js';
import type { Capacity } from '../capacity/capacity.js';
import { servePin } from '../capacity/pin-request.js';
import { serveBudgeted } from '../capacity/serve-budgeted.js';
import type { ClientCredential, DescriptorGetConfig, GatewayConfig } from '../common/config.js';
import type { ByteBudget } from '../common/fifo-budget.js';
import type { Logger } from '../common/logger.js';
import type { GatewayMetrics } from '../common/metrics.js';
import type { FirstLayers } from '../descriptor-get/first-layer-gate.js';
import { servePrefixLookup } from '../descriptor-get/lookup.js';
import type { ReaderPool } from '../descriptor-get/reader-pool.js';
import type { Scheduling } from '../descriptor-get/scheduler/epoch-scheduler.js';
import { serveDescriptorGet } from '../descriptor-get/serve-descriptor-get.js';
import type { Segments } from '../segments/segments.js';
import { authorizeKeys, authorizeLine, authorizeNamespace, tenantFor, type LineNeed } from '../s3/auth/access.js';
import type { AuthResult, RequestVerifier } from '../s3/auth/request-verifier.js';
import type { Backend } from '../s3/backend.js';
import { readSignedJsonBody } from '../s3/body/signed-json-body.js';
import { headerOf, type RequestContext } from '../s3/context.js';
import { sendBucketList, visibleBuckets } from '../s3/list-buckets.js';
import { s3Operation, type S3Operation } from '../s3/operation.js';
import { servePostObject } from '../s3/post-object.js';
import { assertBucketName, bucketFromHost, hasQuery, parseTarget, unhoistPresigned, type S3Target } from '../s3/request.js';
import { newRequestId, sendError, toObjectCacheError } from '../s3/respond.js';
import type { ConnectionGuard } from './connection-guard.js';

/** What the routes serve with: made once, at start-up (server.ts). */
export interface Services {
  readonly config: GatewayConfig;
  readonly logger: Logger;
  readonly metrics: GatewayMetrics;
  readonly guard: ConnectionGuard;
  readonly verifier: RequestVerifier;
  readonly admission: Admission;
  readonly backend: Backend;
  readonly pool: ReaderPool;
  /** Bytes read for descriptor GETs and not yet sent (--max-buffered-bytes). */
  readonly budget: ByteBudget;
  readonly scheduler: Scheduling | undefined;
  readonly firstLayers: FirstLayers;
  readonly capacity: Capacity | undefined;
  readonly segments: Segments | undefined;
  /** Clock for SigV4 and form policies (ms since the epoch). */
  readonly now: () => number;
}

/** A signed request's route: what it needs authorized before its body is read, and its handler. */
interface SignedRoute {
  readonly authenticates: 'signature';
  /** Authorized from the request line and headers alone, before anything is held or read for the key. */
  readonly authorizes: LineNeed;
  handle(r: Request, ctx: RequestContext, line: LineAuthorized, s: Services): Promise<void>;
}

/** What the line authorization found: a bucket listing is answered filtered for a key that may not list them all. */
interface LineAuthorized {
  readonly filteredListing: boolean;
}

interface FormRoute {
  readonly authenticates: 'form-policy';
  handle(r: Request, target: S3Target, s: Services): Promise<void>;
}

type Routes = {
  readonly [K in Classified['kind']]: K extends 'post-object' ? FormRoute : SignedRoute;
};

/** Operations that change or remove an object: the packed segments that hold it are stale. */
const WRITES: ReadonlySet<string> = new Set(['PutObject', 'CopyObject', 'CompleteMultipartUpload', 'DeleteObject', 'DeleteObjects']);

export const ROUTES: Routes = {
  'post-object': {
    authenticates: 'form-policy',
    handle: serveForm,
  },
  'descriptor-get': {
    authenticates: 'signature',
    // A key that may read no object of the bucket is refused before the descriptor is read (up
    // to --max-descriptor-bytes of JSON otherwise).
    authorizes: { someObject: ['s3:GetObject'] },
    async handle(r, ctx, _line, s) {
      const credential = ctx.auth.credential;
      const { bucket } = ctx.target;
      const lw = s.config.descriptorGet;
      // The descriptor is read (bounded by --max-descriptor-bytes and the body timeouts) and every
      // chunk it names authorized before a slot is taken: a key that may read nothing cannot hold
      // a slot, however slowly it sends.
      const descriptor: Descriptor = await readDescriptor(ctx, lw);
      authorizeKeys(credential, 's3:GetObject', bucket, descriptor.keys);
      ctx.tenant = tenantFor(credential, descriptor.tenant);
      const release = await s.admission.descriptorGet(credential);
      try {
        const budgeted = budgetOf(s, bucket);
        if (budgeted) {
          // The chain the descriptor names, an access of each chunk, and no eviction under the read.
          budgeted.link(bucket, descriptor.keys, credential.tenant, credential.accessKeyId);
          r.hold(await budgeted.reading(bucket, descriptor.keys, credential.accessKeyId));
        }
        return await serveDescriptorGet(ctx, descriptor, {
          backend: headsOf(s, credential),
          pool: s.pool,
          config: lw,
          budget: s.budget,
          scheduler: s.scheduler,
          firstLayers: s.firstLayers,
          segments: s.segments,
          observer: s.metrics.descriptorGet,
          backendTimeoutMs: s.config.backend.kind === 's3' ? s.config.backend.timeoutMs : 30_000,
        });
      } finally {
        release();
      }
    },
  },
  'prefix-lookup': {
    authenticates: 'signature',
    authorizes: { someObject: ['s3:GetObject'] },
    async handle(_r, ctx, _line, s) {
      const credential = ctx.auth.credential;
      const { bucket } = ctx.target;
      const looked = await servePrefixLookup(ctx, s.config.descriptorGet, headsOf(s, credential));
      const budgeted = budgetOf(s, bucket);
      budgeted?.link(bucket, looked.keys, credential.tenant, credential.accessKeyId);
      budgeted?.accessed(bucket, looked.keys.slice(0, looked.matched), credential.accessKeyId);
    },
  },
  pin: {
    authenticates: 'signature',
    authorizes: { someObject: ['objectcache:PinObject'] },
    handle: (_r, ctx, _line, s) => servePin(ctx, s.capacity, s.config.descriptorGet.maxDescriptorBytes),
  },
  s3: {
    authenticates: 'signature',
    // A DeleteObjects request's keys are checked by the backend as it reads them
    // (s3/delete-objects.ts); a bucket listing without s3:ListAllMyBuckets is answered filtered.
    authorizes: 'operation',
    async handle(r, ctx, { filteredListing }, s) {
      const credential = ctx.auth.credential;
      const { bucket } = ctx.target;
      if (filteredListing) return sendBucketList(ctx, visibleBuckets(credential.access, await s.backend.listBuckets(ctx.signal)));
      // A passthrough holds a backend connection for as long as its client takes.
      if (s.config.backend.kind === 's3') r.hold(s.admission.backendConnection(credential));
      // A write or delete of a chunk makes the segments that hold it stale: dropped before the
      // store has it (and again after, for the keys a DeleteObjects names once its body is read).
      const segments = WRITES.has(ctx.operation) ? s.segments : undefined;
      segments?.changed(bucket, ctx.target.key);
      try {
        const budgeted = budgetOf(s, bucket);
        if (budgeted) return await serveBudgeted(ctx, budgeted, s.backend);
        return await s.backend.serveS3(ctx);
      } finally {
        if (segments) {
          segments.changed(bucket, ctx.target.key);
          for (const key of ctx.deleteKeys ?? []) segments.changed(bucket, key);
        }
      }
    },
  },
};

/**
 * One request through its route's stages: classify, authenticate, authorize its line, admit (its
 * key's share of requests), handle. A browser form authenticates itself with its signed policy
 * and goes from classification to its handler.
 */
export async function handleRequest(req: IncomingMessage, res: ServerResponse, s: Services): Promise<void> {
  const r = beginRequest(req, res, s.logger, s.metrics, s.guard);
  try {
    const { target, classified } = classifyRequest(req, s.config);
    r.target = target;
    r.classified = classified;
    if (classified.kind === 'post-object') return await ROUTES['post-object'].handle(r, target, s);
    const route = ROUTES[classified.kind];
    const auth = await authenticate(r, target, s);
    // The key's share first: a request its policy refuses is drained to its end (its client reads
    // the 403), and that drain holds the key's place like any request of the key.
    r.hold(await s.admission.request(auth.credential, auth.mode === 'presigned' ? 'presigned' : 'signed'));
    const ctx = contextOf(r, auth, classified, s.config);
    const line = authorizeLine(auth.credential, req.method ?? 'GET', ctx.target, req.headers, s.config.reservedBuckets, route.authorizes);
    await route.handle(r, ctx, line, s);
  } catch (error) {
    failRequest(r, error, s.metrics);
  }
}

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
      throw new ObjectCacheError(
        'OC_ERR_REQUEST_INVALID_ARGUMENT',
        `The header ${name} holds bytes outside printable ASCII; encode non-ASCII metadata (RFC 2047, or percent-encoding for x-amz-copy-source)`,
        {
          details: { ArgumentName: name },
        },
      );
    }
  }
}

/** Stage 1: what the request is (classify). Refuses headers the store reserves or cannot read as we do, and bad bucket names. */
function classifyRequest(req: IncomingMessage, config: GatewayConfig): { target: S3Target; classified: Classified } {
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
 * Stage 2: the signature. A presigned URL's signed query parameters become the headers they
 * stand for, so that the stages after it see one kind of request.
 */
async function authenticate(r: Request, target: S3Target, s: Services): Promise<AuthResult> {
  const { req } = r;
  const auth = await s.verifier.verify({ method: req.method ?? 'GET', headers: req.headers, canonicalPath: target.signedPath, query: target.query, rawPath: target.sigV2Path });
  if (auth.mode === 'presigned') {
    const unhoisted = unhoistPresigned(target);
    r.target = unhoisted.target;
    for (const [name, value] of Object.entries(unhoisted.headers)) req.headers[name] ??= value;
  }
  return auth;
}

function contextOf(r: Request, auth: AuthResult, classified: Classified, config: GatewayConfig): RequestContext {
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

/** Capacity management, when the bucket has a budget. */
function budgetOf(s: Services, bucket: string): Capacity | undefined {
  return s.capacity?.manages(bucket) === true ? s.capacity : undefined;
}

/**
 * The backend's HEADs as a request of `credential` makes them: each within the key's share of
 * the store's connections (gateway/admission/admission.ts KeyLimits), on an S3 store (the embedded one has none).
 */
function headsOf(s: Services, credential: ClientCredential): Pick<Backend, 'heads'> {
  if (s.config.backend.kind !== 's3') return s.backend;
  const gate = s.admission.backendGate(credential);
  return { heads: (bucket, keys, signal, checkBucket) => s.backend.heads(bucket, keys, signal, checkBucket, gate) };
}

/** A browser-form upload: the signed policy in the form is its authentication. */
async function serveForm(r: Request, target: S3Target, s: Services): Promise<void> {
  const { config } = s;
  // Nobody uploads into the store's own APIs by form (the administrator has a key for that).
  authorizeNamespace(undefined, target.bucket, config.reservedBuckets);
  const bucket = target.bucket;
  await servePostObject(r.req, r.res, target, {
    verifier: s.verifier,
    sink: s.backend.postSink,
    maxObjectBytes: config.maxObjectBytes,
    maxFieldsBytes: config.limits.maxFormFieldsBytes,
    fieldsTimeoutMs: config.limits.headerTimeoutMs,
    admit: async (credential) => r.hold(await s.admission.request(credential, 'form')),
    now: s.now,
    storing: async (credential, key, userMeta) => {
      const budgeted = budgetOf(s, bucket);
      s.segments?.changed(bucket, key);
      if (!budgeted) return () => {};
      // The tokens a form records are checked as a PUT's are (gateway/capacity/serve-budgeted.ts).
      const problem = tokensProblem(key, userMeta);
      if (problem !== undefined) throw new ObjectCacheError('OC_ERR_KV_TOKENS', problem);
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

/**
 * What a request is, decided once, before authentication, from its method, path, query and
 * headers: a browser-form upload, a descriptor GET (the layerwise GET, in either delivery mode), a
 * prefix lookup, a pin, or a plain S3 operation. Requests are routed on the kind; the operation
 * name labels the request's log line and metrics, and nothing renames it later.
 *
 * Presigned requests carry their x-amz-* headers in the query until authentication hoists them
 * (gateway/s3/request.ts unhoistPresigned), so x-amz-copy-source is looked for in both places.
 */
export type Classified =
  /** A browser-form POST upload: its signed policy is its authentication. */
  | { readonly kind: 'post-object'; readonly operation: 'PostObject' }
  /**
   * A GET carrying a descriptor (header form) or `POST /{bucket}?objectcache` (body form). Its
   * metrics label is its delivery mode's, once chosen (operationLabel).
   */
  | { readonly kind: 'descriptor-get'; readonly operation: 'DescriptorGet' }
  | { readonly kind: 'prefix-lookup'; readonly operation: 'PrefixLookup' }
  /** `POST /{bucket}?objectcache-pin`: retain chunks of a budgeted bucket until a time (gateway/capacity/pin-request.ts). */
  | { readonly kind: 'pin'; readonly operation: 'PinObjects' }
  /** An S3 API call; `Other` when it is none this gateway names (passed through, or refused by the embedded store). */
  | { readonly kind: 's3'; readonly operation: S3Operation | 'CopyObject' | 'UploadPartCopy' | 'Other' };

export function classify(method: string, target: S3Target, headers: IncomingHttpHeaders): Classified {
  const { bucket, key } = target;
  if (method === 'POST' && bucket !== '' && key === '') {
    if (target.query.length === 0 && /^multipart\/form-data/i.test(headers['content-type'] ?? '')) return { kind: 'post-object', operation: 'PostObject' };
    if (hasQuery(target, 'objectcache')) return { kind: 'descriptor-get', operation: 'DescriptorGet' };
    if (hasQuery(target, 'objectcache-lookup')) return { kind: 'prefix-lookup', operation: 'PrefixLookup' };
    if (hasQuery(target, 'objectcache-pin')) return { kind: 'pin', operation: 'PinObjects' };
  }
  if (method === 'GET' && key !== '' && headers[DESCRIPTOR_HEADER] !== undefined) return { kind: 'descriptor-get', operation: 'DescriptorGet' };
  const operation = s3Operation(method, target);
  // A presigned request's x-amz-* headers are in its query until authentication hoists them.
  const presigned = target.query.some(([name]) => name === 'X-Amz-Signature');
  const copies = headers['x-amz-copy-source'] !== undefined || (presigned && target.query.some(([name]) => name.toLowerCase() === 'x-amz-copy-source'));
  if (copies && operation === 'PutObject') return { kind: 's3', operation: 'CopyObject' };
  if (copies && operation === 'UploadPart') return { kind: 's3', operation: 'UploadPartCopy' };
  return { kind: 's3', operation: operation ?? 'Other' };
}

/**
 * The operation label of a request's metrics and log line. Descriptor GETs keep the labels they
 * have always had: `LayerwiseGet` or `ChunkwiseGet` by the delivery mode once it is chosen
 * (`LayerwiseGet` when refused before, as by admission control).
 */
export function operationLabel(operation: string, mode: 'layerwise' | 'chunkwise' | undefined): string {
  if (operation !== 'DescriptorGet') return operation;
  return mode === 'chunkwise' ? 'ChunkwiseGet' : 'LayerwiseGet';
}

/**
 * The descriptor-get route's body: its descriptor, from the `x-objectcache-descriptor` header of
 * `GET /{bucket}/{key}`, or the JSON body of `POST /{bucket}?objectcache` for descriptors too
 * large for a header (schemas/wire-format.md sections 2-3). Either way the descriptor must be
 * covered by the request signature, since it decides which objects are read.
 */
export async function readDescriptor(ctx: RequestContext, config: DescriptorGetConfig): Promise<Descriptor> {
  if (ctx.req.method === 'GET') {
    if (!ctx.auth.signedHeaders.includes(DESCRIPTOR_HEADER)) {
      throw new ObjectCacheError('OC_ERR_DESCRIPTOR_UNSIGNED', `The ${DESCRIPTOR_HEADER} header must be one of the signed headers`);
    }
    const descriptor = parseDescriptor(decodeDescriptorHeader(headerOf(ctx.req, DESCRIPTOR_HEADER) ?? ''), config.limits);
    const last = descriptor.keys.at(-1);
    if (last !== ctx.target.key) {
      throw new ObjectCacheError(
        'OC_ERR_DESCRIPTOR_KEY_MISMATCH',
        `The request path names ${JSON.stringify(ctx.target.key)}, but the descriptor's last chunk is ${JSON.stringify(last)}`,
        { details: { Key: ctx.target.key } },
      );
    }
    return descriptor;
  }
  return parseDescriptor(await readSignedJsonBody(ctx, config.maxDescriptorBytes), config.limits);
}

/** The most an early error response will read and discard of an unread request body. */
const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;

/**
 * One request's own state as the stages carry it: its id, what it holds until it is over, its
 * abort signal, its one log line and count, and the one S3 error answer whatever stage fails
 * becomes.
 */
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
  // Nothing more is read of a request refused before it held a place in its key's share (a
  // client that never authenticated, or a key past its share, gets no 64 MiB of grace), nor of
  // one too slow to send: the answer closes it. A request refused after (by its key's policy, a
  // reserved bucket, a bad argument) is read to its end, up to 64 MiB, holding its place, so
  // that an S3 client sending a body reads the answer.
  const closing = r.ctx === undefined || (failure.code === 'OC_ERR_REQUEST_TIMEOUT' && !req.complete);
  if (closing && !res.headersSent) res.setHeader('connection', 'close');
  // The gateway's own throttling (a full gateway, a key past its share) is the request line's
  // code alone: a flood must not also flood the log with stacks.
  if (failure.code === 'OC_ERR_INTERNAL' || failure.code === 'OC_ERR_STORE_IO' || (failure.status === 503 && !THROTTLING.has(failure.code))) {
    r.log.error({ error: failure }, 'request failed');
  }
  sendError(res, failure, r.requestId, r.target?.path ?? req.url ?? '/', closing ? 0 : DRAIN_LIMIT_BYTES);
}
