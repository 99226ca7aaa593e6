/**
 * A small JSON request body that the request signature covers (a POSTed descriptor, a lookup, a
 * pin): the body decides what is read or kept, so an unsigned one is refused.
 */
import { decodeDescriptorJson } from '../../../schemas/descriptor.js';
import { ObjectCacheError } from '../../../schemas/errors.js';
import type { RequestContext } from '../context.js';
import { readWholeBody } from './upload-body.js';

/** Reads a small, signed JSON body (descriptor or lookup request). */
export async function readSignedJsonBody(ctx: RequestContext, maxBytes: number): Promise<unknown> {
  if (!/^[0-9a-f]{64}$/.test(ctx.auth.payloadHash) && !ctx.auth.payloadHash.startsWith('STREAMING-AWS4-HMAC-SHA256-PAYLOAD')) {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_UNSIGNED', 'The body must be covered by the signature: send x-amz-content-sha256 with its SHA-256 (not UNSIGNED-PAYLOAD)');
  }
  return decodeDescriptorJson((await readWholeBody(ctx.req, ctx.auth, maxBytes)).toString('utf8'));
}
