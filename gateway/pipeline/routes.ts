/**
 * The request pipeline, as a table. Every request is classified (classify.ts), and its kind
 * names its route: how it authenticates, what it is admitted against (gateway/admission/), how
 * it is authorized before its body is read, what is read and authorized after, and its handler.
 * `handleRequest` runs the stages in that order for every kind; whatever a stage throws becomes
 * one S3 error answer (request.ts failRequest).
 *
 *   kind            authenticates   admitted against                    authorized (line, then body)                handler
 *   post-object     form policy     key's request share (form)          reserved buckets; the policy's conditions  s3/post-object.ts
 *   descriptor-get  signature       key's request share; a descriptor   some object (s3:GetObject); then every      descriptor-get/serve-descriptor-get.ts
 *                                   GET slot once the descriptor is     chunk the descriptor names
 *                                   read and authorized
 *   prefix-lookup   signature       key's request share                 some object (s3:GetObject); its keys as     descriptor-get/lookup.ts
 *                                                                       read (lookup.ts)
 *   pin             signature       key's request share                 some object (objectcache:PinObject); its    capacity/pin-request.ts
 *                                                                       keys as read (pin-request.ts)
 *   s3              signature       key's request share; a backend      the operation's requirement                 the store (s3/backend.ts), or
 *                                   connection (S3 store)               (s3/auth/access.ts requirementOf)           capacity/serve-budgeted.ts
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Descriptor } from '../../schemas/descriptor.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { Admission } from '../admission/admission.js';
import type { Capacity } from '../capacity/capacity.js';
import { servePin } from '../capacity/pin-request.js';
import { serveBudgeted } from '../capacity/serve-budgeted.js';
import { s3Arn } from '../common/access-policy.js';
import type { ClientCredential, GatewayConfig } from '../common/config.js';
import type { FifoBudget } from '../common/fifo-budget.js';
import type { Logger } from '../common/logger.js';
import type { GatewayMetrics } from '../common/metrics.js';
import { readDescriptor } from '../descriptor-get/descriptor-request.js';
import type { FirstLayerGate } from '../descriptor-get/first-layer-gate.js';
import { servePrefixLookup } from '../descriptor-get/lookup.js';
import type { ReaderPool } from '../descriptor-get/read-pool/reader-pool.js';
import type { EpochScheduler } from '../descriptor-get/scheduler/epoch-scheduler.js';
import { serveDescriptorGet } from '../descriptor-get/serve-descriptor-get.js';
import type { Segments } from '../segments/segments.js';
import { authorize, authorizeKeys, authorizeNamespace, authorizeSomeObject, authorizeUnclassified, requirementOf, tenantFor } from '../s3/auth/access.js';
import type { AuthResult, RequestVerifier } from '../s3/auth/request-verifier.js';
import type { Backend } from '../s3/backend.js';
import { headerOf, type RequestContext } from '../s3/context.js';
import { sendBucketList, visibleBuckets } from '../s3/list-buckets.js';
import { servePostObject } from '../s3/post-object.js';
import { assertBucketName, bucketFromHost, parseCopySource, parseTarget, unhoistPresigned, type S3Target } from '../s3/request.js';
import { classify, type Classified } from './classify.js';
import { beginRequest, failRequest, type Request } from './request.js';
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
  readonly budget: FifoBudget;
  readonly scheduler: EpochScheduler | undefined;
  readonly firstLayers: FirstLayerGate;
  readonly capacity: Capacity | undefined;
  readonly segments: Segments | undefined;
  /** Clock for SigV4 and form policies (ms since the epoch). */
  readonly now: () => number;
}

/** A signed request's route: what it is authorized for before its body is read, and its handler. */
interface SignedRoute<Line> {
  readonly authenticates: 'signature';
  /** Authorization from the request line and headers alone, before any body is read. */
  authorize(ctx: RequestContext, s: Services): Line;
  handle(r: Request, ctx: RequestContext, line: Line, s: Services): Promise<void>;
}

interface FormRoute {
  readonly authenticates: 'form-policy';
  handle(r: Request, target: S3Target, s: Services): Promise<void>;
}

type Routes = {
  readonly [K in Classified['kind']]: K extends 'post-object' ? FormRoute : SignedRoute<K extends 's3' ? { readonly filteredListing: boolean } : void>;
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
    authorize: (ctx) => authorizeSomeObject(ctx.auth.credential, ['s3:GetObject'], ctx.target.bucket),
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
      const release = s.admission.descriptorGet(credential);
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
    authorize: (ctx) => authorizeSomeObject(ctx.auth.credential, ['s3:GetObject'], ctx.target.bucket),
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
    authorize: (ctx) => authorizeSomeObject(ctx.auth.credential, ['objectcache:PinObject'], ctx.target.bucket),
    handle: (_r, ctx, _line, s) => servePin(ctx, s.capacity, s.config.descriptorGet.maxDescriptorBytes),
  },
  s3: {
    authenticates: 'signature',
    // A DeleteObjects request's keys are checked by the backend as it reads them
    // (s3/delete-objects.ts); a bucket listing without s3:ListAllMyBuckets is answered filtered.
    authorize(ctx) {
      const credential = ctx.auth.credential;
      const requirement = requirementOf(ctx.req.method ?? 'GET', ctx.target, ctx.req.headers);
      if (requirement.kind === 'checks') authorize(credential, requirement.checks);
      else if (requirement.kind === 'unclassified') authorizeUnclassified(credential, requirement.what);
      return { filteredListing: requirement.kind === 'list-buckets' && !credential.access.allows('s3:ListAllMyBuckets', s3Arn('*')) };
    },
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
 * One request through its route's stages: classify, authenticate, admit (its key's share of
 * requests), authorize, handle. A browser form authenticates itself with its signed policy and
 * goes from classification to its handler.
 */
export async function handleRequest(req: IncomingMessage, res: ServerResponse, s: Services): Promise<void> {
  const r = beginRequest(req, res, s.logger, s.metrics, s.guard);
  try {
    const { target, classified } = classifyRequest(req, s.config);
    r.target = target;
    r.classified = classified;
    if (classified.kind === 'post-object') return await ROUTES['post-object'].handle(r, target, s);
    const auth = await authenticate(r, target, s);
    r.hold(s.admission.request(auth.credential, auth.mode === 'presigned' ? 'presigned' : 'signed'));
    const ctx = contextOf(r, auth, classified, s.config);
    // One kind at a time, so that each route's line authorization types its handler's.
    switch (classified.kind) {
      case 'descriptor-get':
        return await run(ROUTES['descriptor-get'], r, ctx, s);
      case 'prefix-lookup':
        return await run(ROUTES['prefix-lookup'], r, ctx, s);
      case 'pin':
        return await run(ROUTES.pin, r, ctx, s);
      case 's3':
        return await run(ROUTES.s3, r, ctx, s);
    }
  } catch (error) {
    failRequest(r, error, s.metrics);
  }
}

async function run<Line>(route: SignedRoute<Line>, r: Request, ctx: RequestContext, s: Services): Promise<void> {
  const line = route.authorize(ctx, s);
  await route.handle(r, ctx, line, s);
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

/** Stage 1: what the request is. Refuses headers the store reserves or cannot read as we do, and bad bucket names. */
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
 * Stage 2: the signature, then the store's own APIs (the path, and a copy's source) kept from
 * every key but the administrator's, before anything else is read or held for the key. A
 * presigned URL's signed query parameters become the headers they stand for.
 */
async function authenticate(r: Request, target: S3Target, s: Services): Promise<AuthResult> {
  const { req } = r;
  const auth = await s.verifier.verify({ method: req.method ?? 'GET', headers: req.headers, canonicalPath: target.signedPath, query: target.query, rawPath: target.sigV2Path });
  authorizeNamespace(auth.credential, target.bucket, s.config.reservedBuckets);
  if (auth.mode === 'presigned') {
    const unhoisted = unhoistPresigned(target);
    r.target = unhoisted.target;
    for (const [name, value] of Object.entries(unhoisted.headers)) req.headers[name] ??= value;
  }
  const copySource = headerOf(req, 'x-amz-copy-source');
  if (copySource !== undefined) authorizeNamespace(auth.credential, parseCopySource(copySource).bucket, s.config.reservedBuckets, 'x-amz-copy-source');
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
 * the store's connections (gateway/admission/key-limits.ts), on an S3 store (the embedded one has none).
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
    admit: (credential) => r.hold(s.admission.request(credential, 'form')),
    now: s.now,
    storing: async (credential, key, userMeta) => {
      const budgeted = budgetOf(s, bucket);
      s.segments?.changed(bucket, key);
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
