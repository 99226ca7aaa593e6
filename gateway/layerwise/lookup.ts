/**
 * Prefix lookup in one round trip: `POST /{bucket}?objectcache-lookup` with
 * `{"keys": [...], "keyPrefix"?: "..."}` answers `{"matched": n, "keys": total}`, the number of
 * leading chunks that exist. Chunks of a prefix are written in order, so the first missing key
 * ends the match; keys are checked in windows of concurrent HEADs and the check stops there.
 */
import { escapeUriPath } from '@smithy/util-uri-escape';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { LocalStore } from '../../storage-worker/local-store/local-store.js';
import type { S3Backend } from '../../storage-worker/s3-backend.js';
import type { LayerwiseConfig } from '../config.js';
import type { RequestContext } from '../context.js';
import { readSignedJsonBody } from './descriptor-request.js';

const WINDOW = 32;

/** Which of `keys` exist; `first` is true for the first window of a lookup (check the bucket then). */
export type ExistsCheck = (bucket: string, keys: readonly string[], signal: AbortSignal, first: boolean) => Promise<boolean[]>;

export function localExists(store: LocalStore): ExistsCheck {
  return async (bucket, keys) => {
    if (!store.hasBucket(bucket)) throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
    return keys.map((key) => {
      try {
        store.headObject(bucket, key);
        return true;
      } catch {
        return false;
      }
    });
  };
}

export function backendExists(backend: S3Backend): ExistsCheck {
  const head = async (path: string, signal: AbortSignal): Promise<number> => {
    const res = await backend.request({ method: 'HEAD', path: escapeUriPath(path), signal });
    await res.body.dump();
    return res.statusCode;
  };
  return async (bucket, keys, signal, first) => {
    if (first && (await head(`/${bucket}`, signal)) === 404) throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
    return Promise.all(
      keys.map(async (key) => {
        const status = await head(`/${bucket}/${key}`, signal);
        if (status === 200) return true;
        if (status === 404) return false;
        throw new ObjectCacheError(status >= 500 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_BACKEND_PROTOCOL', `HEAD of ${key} answered ${status}`);
      }),
    );
  };
}

export async function servePrefixLookup(ctx: RequestContext, config: LayerwiseConfig, exists: ExistsCheck): Promise<void> {
  ctx.operation = 'PrefixLookup';
  const body = (await readSignedJsonBody(ctx, config.maxDescriptorBytes)) as { keys?: unknown; keyPrefix?: unknown } | null;
  const keys = body?.keys;
  const prefix = body?.keyPrefix ?? '';
  if (!Array.isArray(keys) || keys.length === 0 || keys.some((k) => typeof k !== 'string' || k === '') || typeof prefix !== 'string') {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', 'The lookup body must be {"keys": [non-empty strings], "keyPrefix"?: string}');
  }
  if (keys.length > config.limits.maxKeys) throw new ObjectCacheError('OC_ERR_DESCRIPTOR_LIMIT', `The lookup names ${keys.length} keys; the limit is ${config.limits.maxKeys}`);
  const full = (keys as string[]).map((k) => prefix + k);
  let matched = 0;
  for (let at = 0; at < full.length; at += WINDOW) {
    const window = full.slice(at, at + WINDOW);
    const found = await exists(ctx.target.bucket, window, ctx.signal, at === 0);
    const miss = found.indexOf(false);
    if (miss !== -1) {
      matched = at + miss;
      break;
    }
    matched = at + window.length;
  }
  const json = Buffer.from(JSON.stringify({ matched, keys: full.length }));
  ctx.res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(json.length) });
  ctx.res.end(json);
}
