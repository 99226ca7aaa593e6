/**
 * What the gateway serves from, chosen once at start-up: the embedded store on a local data
 * directory, or an S3 endpoint (MinIO, Ceph, AWS S3). Everything that differs between the two
 * sits behind this interface (chunk sizes and metadata for lookups and encoded chunks, plain S3 requests, browser-form uploads,
 * what the read workers open, readiness and counters); the rest of the gateway never asks which
 * one it has.
 */
import { escapeUriPath } from '@smithy/util-uri-escape';
import { LocalStore } from '../stores/embedded/local-store.js';
import { S3Backend } from '../stores/s3-backend.js';
import type { BackendStats } from '../common/observers.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { WorkerBackend } from '../threads/protocol.js';
import type { GatewayConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { BackendGate } from '../admission/admission.js';
import type { RequestContext } from './context.js';
import { userMetadata } from './metadata.js';
import { embeddedCapacityStore, s3CapacityStore, type CapacityStore } from '../stores/capacity-store.js';
import { serveEmbedded } from './embedded/router.js';
import { servePassthrough, type RetryObserver } from './passthrough.js';
import { parseBucketList, type BucketEntry } from './list-buckets.js';
import { backendPostSink, localPostSink, type PostSink } from './post-object.js';

export interface Backend {
  readonly kind: 'local' | 's3';
  /** How the read workers reach the chunks. */
  readonly workers: WorkerBackend;
  /** For the start-up log: the endpoint, or `local:<data dir>`. */
  readonly description: string;
  /** Where a browser-form (POST Object) upload is written. */
  readonly postSink: PostSink;
  /**
   * The size, ETag and user metadata (lowercase names without x-amz-meta-) of each of `keys` in
   * `bucket`, undefined where it does not exist; with `checkBucket` it first fails with
   * OC_ERR_STORE_NO_SUCH_BUCKET when the bucket does not exist. Prefix lookups and encoded
   * chunks' indexes read it.
   */
  heads(bucket: string, keys: readonly string[], signal: AbortSignal, checkBucket: boolean, gate?: BackendGate): Promise<(ObjectHead | undefined)[]>;
  /** Every bucket (for ListBuckets filtered by an access policy). */
  listBuckets(signal: AbortSignal): Promise<BucketEntry[]>;
  /** Answers a plain S3 request (the embedded handlers, or passthrough to the endpoint). */
  serveS3(ctx: RequestContext): Promise<void>;
  /** What capacity management (gateway/capacity/) lists, reads, writes and deletes through. */
  readonly capacity: CapacityStore;
  /** The endpoint's request counters; undefined for the embedded store. */
  stats(): BackendStats | undefined;
  /** For /readyz: the embedded store is ready once open, an endpoint when it answers HTTP. */
  ready(): Promise<boolean>;
  close(): Promise<void>;
}

/** What a HEAD tells about an object. */
export interface ObjectHead {
  readonly size: number;
  readonly etag: string | undefined;
  readonly meta: Readonly<Record<string, string>>;
}

const noSuchBucket = (bucket: string): ObjectCacheError =>
  new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });

/** How often the embedded store looks for uploads past --multipart-expiry (at most; a quarter of the expiry when shorter). */
const EXPIRE_UPLOADS_EVERY_MS = 60 * 60 * 1000;

function embeddedBackend(store: LocalStore, multipartExpiryMs: number | undefined, logger?: Pick<Logger, 'warn' | 'info'>): Backend {
  let timer: NodeJS.Timeout | undefined;
  if (multipartExpiryMs !== undefined) {
    const expire = (): void => {
      store.expireUploads(Date.now() - multipartExpiryMs).then(
        (expired) => {
          if (expired.length > 0) logger?.info({ uploads: expired.length }, 'embedded store: aborted multipart uploads left unfinished past --multipart-expiry');
        },
        (error: unknown) => logger?.warn({ error }, 'embedded store: could not abort multipart uploads past --multipart-expiry'),
      );
    };
    expire();
    timer = setInterval(expire, Math.max(1000, Math.min(EXPIRE_UPLOADS_EVERY_MS, multipartExpiryMs / 4)));
    timer.unref();
  }
  return {
    kind: 'local',
    workers: { kind: 'local', dataDir: store.dataDir },
    description: `local:${store.dataDir}`,
    postSink: localPostSink(store),
    async heads(bucket, keys) {
      if (!store.hasBucket(bucket)) throw noSuchBucket(bucket);
      return keys.map((key) => {
        try {
          const meta = store.headObject(bucket, key);
          return { size: meta.size, etag: meta.etag, meta: meta.userMeta };
        } catch {
          return undefined;
        }
      });
    },
    listBuckets: async () => store.listBuckets(),
    serveS3: (ctx) => serveEmbedded(ctx, store),
    capacity: embeddedCapacityStore(store),
    stats: () => undefined,
    ready: async () => true,
    close: () => {
      clearInterval(timer);
      return store.close();
    },
  };
}

function s3Backend(config: Extract<GatewayConfig['backend'], { kind: 's3' }>, onRetry?: RetryObserver): Backend {
  const backend = new S3Backend(config);
  const head = async (path: string, signal: AbortSignal): Promise<{ status: number; object: ObjectHead }> => {
    const res = await backend.request({ method: 'HEAD', path: escapeUriPath(path), signal });
    await res.body.dump();
    const meta = userMetadata(res.headers);
    const etag = res.headers['etag'];
    return { status: res.statusCode, object: { size: Number(res.headers['content-length']), etag: typeof etag === 'string' ? etag : undefined, meta } };
  };
  return {
    kind: 's3',
    workers: { ...config, endpoint: config.endpoint.origin },
    description: config.endpoint.origin,
    postSink: backendPostSink(backend),
    async heads(bucket, keys, signal, checkBucket, gate) {
      // Each HEAD holds a place in its key's share of the store's connections (`gate`): a key's
      // thousands of HEADs wait behind its own, never in the pool in front of other keys' requests.
      const gated = async (path: string): Promise<{ status: number; object: ObjectHead }> => {
        await gate?.acquire(signal);
        try {
          return await head(path, signal);
        } finally {
          gate?.release();
        }
      };
      if (checkBucket && (await gated(`/${bucket}`)).status === 404) throw noSuchBucket(bucket);
      return Promise.all(
        keys.map(async (key) => {
          const { status, object } = await gated(`/${bucket}/${key}`);
          if (status === 200) return object;
          if (status === 404) return undefined;
          throw new ObjectCacheError(status >= 500 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_BACKEND_PROTOCOL', `HEAD of ${key} answered ${status}`);
        }),
      );
    },
    async listBuckets(signal) {
      const res = await backend.request({ method: 'GET', path: '/', signal });
      const text = await res.body.text();
      if (res.statusCode !== 200)
        throw new ObjectCacheError(res.statusCode >= 500 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_BACKEND_PROTOCOL', `ListBuckets at the store answered ${res.statusCode}`);
      return parseBucketList(text);
    },
    serveS3: (ctx) => servePassthrough(ctx, backend, onRetry),
    capacity: s3CapacityStore(backend),
    stats: () => backend.stats(),
    ready: () => backend.reachable(2_000),
    close: () => backend.close(),
  };
}

/**
 * Opens the configured backend; `onRetry` counts passthrough requests repeated after a retryable
 * failure. `logger` gets a warning for each file the embedded store found unreadable at start-up
 * and moved aside (it serves the rest): an operator must learn that objects went missing.
 */
export async function openBackend(config: GatewayConfig['backend'], onRetry?: RetryObserver, logger?: Pick<Logger, 'warn' | 'info'>, multipartExpiryMs?: number): Promise<Backend> {
  if (config.kind !== 'local') return s3Backend(config, onRetry);
  const store = await LocalStore.open(config.dataDir);
  for (const { path, movedTo, reason } of store.damaged) {
    logger?.warn({ file: path, movedTo, reason }, 'embedded store: moved an unreadable file aside; its object or part is no longer served');
  }
  return embeddedBackend(store, multipartExpiryMs, logger);
}
