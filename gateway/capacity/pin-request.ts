/**
 * `POST /{bucket}?objectcache-pin` with `{"keys": [...], "until": "2026-12-31T00:00:00Z"}`:
 * retains the chunks (a paid prompt's prefix, say) until that time, whatever the budget asks;
 * `"until": null` (or a time already past) removes their pins. Answers
 * `{"bucket", "keys": n, "pinned": m, "until": time or null}`: m of the n chunks were pinned (or
 * unpinned), those stored and belonging to the key's tenant (any, for the administrator). The key
 * needs `objectcache:PinObject` on every chunk named; a pin holds at most 366 days. Pins apply to
 * budgeted buckets only (others never evict) and are shared with the other gateways through the
 * journals.
 */
import { ObjectCacheError } from '../../schemas/errors.js';
import { objectKeyProblem } from '../../schemas/object-key.js';
import { authorizeKeys } from '../s3/auth/access.js';
import type { RequestContext } from '../s3/context.js';
import { readSignedJsonBody } from '../s3/body/signed-json-body.js';
import { MAX_PIN_MS, type Capacity } from './capacity.js';

const USAGE = 'The pin body must be {"keys": [non-empty object keys], "until": an RFC 3339 time such as 2026-12-31T00:00:00Z, or null to unpin}';
/** Keys one pin may name (a 1M-token prefix in 256-token chunks is 4096). */
const MAX_PIN_KEYS = 8192;

export async function servePin(ctx: RequestContext, capacity: Capacity | undefined, maxBytes: number): Promise<void> {
  const bucket = ctx.target.bucket;
  if (!capacity?.manages(bucket)) {
    throw new ObjectCacheError('OC_ERR_CAPACITY_UNMANAGED', `The bucket ${bucket} has no --budget, so nothing in it is ever evicted and there is nothing to pin`, {
      details: { BucketName: bucket },
    });
  }
  const body = (await readSignedJsonBody(ctx, maxBytes)) as Record<string, unknown> | null;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new ObjectCacheError('OC_ERR_PIN_INVALID', USAGE);
  const unknown = Object.keys(body).find((name) => name !== 'keys' && name !== 'until');
  if (unknown !== undefined) throw new ObjectCacheError('OC_ERR_PIN_INVALID', `${USAGE}; unknown field ${JSON.stringify(unknown)}`);
  const keys = body['keys'];
  if (!Array.isArray(keys) || keys.length === 0 || keys.some((k) => typeof k !== 'string' || k === '')) throw new ObjectCacheError('OC_ERR_PIN_INVALID', USAGE);
  if (keys.length > MAX_PIN_KEYS) throw new ObjectCacheError('OC_ERR_PIN_INVALID', `The pin names ${keys.length} keys; the limit is ${MAX_PIN_KEYS}`);
  (keys as string[]).forEach((key, i) => {
    const problem = objectKeyProblem(key);
    if (problem !== undefined) throw new ObjectCacheError('OC_ERR_PIN_INVALID', `keys[${i}] ${problem}`);
  });
  const untilField = body['until'];
  let until = 0;
  if (untilField !== null) {
    // RFC 3339 with a zone, so every gateway reads the same instant.
    const parsed = typeof untilField === 'string' && /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(untilField) ? Date.parse(untilField) : NaN;
    if (!Number.isFinite(parsed)) throw new ObjectCacheError('OC_ERR_PIN_INVALID', `${USAGE}; "until" is ${JSON.stringify(untilField)}`);
    until = parsed;
  }
  if (until > Date.now() + MAX_PIN_MS) throw new ObjectCacheError('OC_ERR_PIN_INVALID', `"until" is more than ${MAX_PIN_MS / 86_400_000} days ahead`);
  authorizeKeys(ctx.auth.credential, 'objectcache:PinObject', bucket, keys as string[]);
  // A key pins its own tenant's chunks (the administrator's, any): pins are never a way to hold
  // another tenant's quota or budget.
  const owner = ctx.auth.credential.access.unrestricted ? undefined : ctx.auth.credential.tenant;
  const pinned = capacity.pin(bucket, keys as string[], until, owner);
  const holding = until > Date.now();
  const json = Buffer.from(JSON.stringify({ bucket, keys: keys.length, pinned, until: holding ? new Date(until).toISOString() : null }));
  ctx.res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(json.length) });
  ctx.res.end(json);
}
