/**
 * Prefix lookup in one round trip: `POST /{bucket}?objectcache-lookup` with
 * `{"keys": [...], "keyPrefix"?: "...", "layers"?: L, "layerBytes"?: S, "codecs"?: [...]}` answers
 * `{"matched": n, "keys": total}`, the number of leading chunks that exist (and, when the lookup
 * names the geometry, are exactly L x S bytes: a chunk the fetch would refuse is not a match; with
 * `codecs`, a chunk matches when it is stored in one of them with a valid index for L layers).
 * Chunks of a prefix are written in order, so the first miss ends the match; keys are checked in
 * windows of concurrent HEADs and the check stops there.
 */
import { setMaxListeners } from 'node:events';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { Backend, ObjectHead } from '../s3/backend.js';
import { CODEC_NAME, chunkIndex, RAW_CODEC } from '../../schemas/encoded-chunk.js';
import type { DescriptorGetConfig } from '../common/config.js';
import type { RequestContext } from '../s3/context.js';
import { authorizeKeys } from '../s3/auth/access.js';
import { objectKeyProblem } from '../../schemas/object-key.js';
import { readSignedJsonBody } from '../s3/body/signed-json-body.js';

const WINDOW = 32;
const LOOKUP_FIELDS = new Set(['keys', 'keyPrefix', 'layers', 'layerBytes', 'codecs']);

/** Answers the lookup; resolves to the keys it named (keyPrefix applied) and how many matched. */
export async function servePrefixLookup(ctx: RequestContext, config: DescriptorGetConfig, backend: Pick<Backend, 'heads'>): Promise<{ keys: string[]; matched: number }> {
  const body = (await readSignedJsonBody(ctx, config.maxDescriptorBytes)) as Record<string, unknown> | null;
  const usage = 'The lookup body must be {"keys": [non-empty strings], "keyPrefix"?: string, "layers"?: integer, "layerBytes"?: integer, "codecs"?: [codec names]}';
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
  if (
    (layers === undefined) !== (layerBytes === undefined) ||
    (layers !== undefined && (!positive(layers) || !positive(layerBytes) || !Number.isSafeInteger(layers * layerBytes)))
  ) {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', `${usage}; "layers" and "layerBytes" come together, as positive integers`);
  }
  const codecs = body['codecs'];
  if (codecs !== undefined && (layers === undefined || !Array.isArray(codecs) || codecs.length === 0 || codecs.some((c) => typeof c !== 'string' || !CODEC_NAME.test(c)))) {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', `${usage}; "codecs" is a non-empty array of codec names, and needs "layers" and "layerBytes"`);
  }
  /** Whether a chunk is one the fetch would serve, when the lookup names the geometry. */
  const fits = (head: ObjectHead): boolean => {
    if (layers === undefined) return true;
    const index = chunkIndex(head.size, head.meta, layers, layerBytes as number, head.etag);
    return typeof index !== 'string' && ((codecs as string[] | undefined) ?? [RAW_CODEC]).includes(index.codec);
  };
  if (keys.length > config.limits.maxKeys) throw new ObjectCacheError('OC_ERR_DESCRIPTOR_LIMIT', `The lookup names ${keys.length} keys; the limit is ${config.limits.maxKeys}`);
  const full = (keys as string[]).map((k) => prefix + k);
  full.forEach((key, i) => {
    const problem = objectKeyProblem(key);
    if (problem !== undefined) throw new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', `keys[${i}] (after keyPrefix) ${problem}`);
  });
  // Every key is checked before any is looked at: a refused key refuses the lookup (never a miss,
  // which would tell whether the object exists).
  authorizeKeys(ctx.auth.credential, 's3:GetObject', ctx.target.bucket, full);
  let matched = 0;
  // A window's HEADs all listen on the request's signal (one abort ends them all): WINDOW
  // listeners at once is expected, not a leak.
  setMaxListeners(WINDOW + 8, ctx.signal);
  for (let at = 0; at < full.length; at += WINDOW) {
    const window = full.slice(at, at + WINDOW);
    const heads = await backend.heads(ctx.target.bucket, window, ctx.signal, at === 0);
    const miss = heads.findIndex((head) => head === undefined || !fits(head));
    if (miss !== -1) {
      matched = at + miss;
      break;
    }
    matched = at + window.length;
  }
  const json = Buffer.from(JSON.stringify({ matched, keys: full.length }));
  ctx.res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(json.length) });
  ctx.res.end(json);
  return { keys: full, matched };
}
