/**
 * Prefix lookup in one round trip: `POST /{bucket}?objectcache-lookup` with
 * `{"keys": [...], "keyPrefix"?: "...", "layers"?: L, "layerBytes"?: S}` answers
 * `{"matched": n, "keys": total}`, the number of leading chunks that exist (and, when the lookup
 * names the geometry, are exactly L x S bytes: a chunk the fetch would refuse is not a match).
 * Chunks of a prefix are written in order, so the first miss ends the match; keys are checked in
 * windows of concurrent HEADs and the check stops there.
 */
import { escapeUriPath } from '@smithy/util-uri-escape';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { LocalStore } from '../../storage-worker/local-store/local-store.js';
import type { S3Backend } from '../../storage-worker/s3-backend.js';
import type { LayerwiseConfig } from '../config.js';
import type { RequestContext } from '../context.js';
import { readSignedJsonBody } from './descriptor-request.js';

const WINDOW = 32;
const LOOKUP_FIELDS = new Set(['keys', 'keyPrefix', 'layers', 'layerBytes']);

/**
 * The size of each of `keys`, or undefined where it does not exist; `first` is true for the first
 * window of a lookup (check the bucket then).
 */
export type ExistsCheck = (bucket: string, keys: readonly string[], signal: AbortSignal, first: boolean) => Promise<(number | undefined)[]>;

export function localExists(store: LocalStore): ExistsCheck {
  return async (bucket, keys) => {
    if (!store.hasBucket(bucket)) throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
    return keys.map((key) => {
      try {
        return store.headObject(bucket, key).size;
      } catch {
        return undefined;
      }
    });
  };
}

export function backendExists(backend: S3Backend): ExistsCheck {
  const head = async (path: string, signal: AbortSignal): Promise<{ status: number; size: number }> => {
    const res = await backend.request({ method: 'HEAD', path: escapeUriPath(path), signal });
    await res.body.dump();
    return { status: res.statusCode, size: Number(res.headers['content-length']) };
  };
  return async (bucket, keys, signal, first) => {
    if (first && (await head(`/${bucket}`, signal)).status === 404) throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
    return Promise.all(
      keys.map(async (key) => {
        const { status, size } = await head(`/${bucket}/${key}`, signal);
        if (status === 200) return size;
        if (status === 404) return undefined;
        throw new ObjectCacheError(status >= 500 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_BACKEND_PROTOCOL', `HEAD of ${key} answered ${status}`);
      }),
    );
  };
}

export async function servePrefixLookup(ctx: RequestContext, config: LayerwiseConfig, exists: ExistsCheck): Promise<void> {
  ctx.operation = 'PrefixLookup';
  const body = (await readSignedJsonBody(ctx, config.maxDescriptorBytes)) as Record<string, unknown> | null;
  const usage = 'The lookup body must be {"keys": [non-empty strings], "keyPrefix"?: string, "layers"?: integer, "layerBytes"?: integer}';
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', usage);
  const unknown = Object.keys(body).filter((name) => !LOOKUP_FIELDS.has(name));
  if (unknown.length > 0) throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', `${usage}; unknown field ${JSON.stringify(unknown[0])}`);
  const keys = body['keys'];
  const prefix = body['keyPrefix'] ?? '';
  if (!Array.isArray(keys) || keys.length === 0 || keys.some((k) => typeof k !== 'string' || k === '') || typeof prefix !== 'string') {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', usage);
  }
  const layers = body['layers'];
  const layerBytes = body['layerBytes'];
  const positive = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v > 0;
  if ((layers === undefined) !== (layerBytes === undefined) || (layers !== undefined && (!positive(layers) || !positive(layerBytes) || !Number.isSafeInteger(layers * (layerBytes as number))))) {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', `${usage}; "layers" and "layerBytes" come together, as positive integers`);
  }
  /** The size a matching chunk must have, when the lookup names the geometry. */
  const objectBytes = layers === undefined ? undefined : (layers as number) * (layerBytes as number);
  if (keys.length > config.limits.maxKeys) throw new ObjectCacheError('OC_ERR_DESCRIPTOR_LIMIT', `The lookup names ${keys.length} keys; the limit is ${config.limits.maxKeys}`);
  const full = (keys as string[]).map((k) => prefix + k);
  let matched = 0;
  for (let at = 0; at < full.length; at += WINDOW) {
    const window = full.slice(at, at + WINDOW);
    const sizes = await exists(ctx.target.bucket, window, ctx.signal, at === 0);
    const miss = sizes.findIndex((size) => size === undefined || (objectBytes !== undefined && size !== objectBytes));
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
