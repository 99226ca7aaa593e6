/**
 * Where a layerwise GET's descriptor comes from (schemas/wire-format.md sections 2-3): the
 * `x-objectcache-descriptor` header of `GET /{bucket}/{key}`, or the JSON body of
 * `POST /{bucket}?objectcache` for descriptors too large for a header. Either way the descriptor
 * must be covered by the request signature, since it decides which objects are read.
 */
import { DESCRIPTOR_HEADER, decodeDescriptorHeader, parseDescriptor, type Descriptor } from '../../schemas/descriptor.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { readSignedJsonBody } from '../s3/body/signed-json-body.js';
import type { DescriptorGetConfig } from '../common/config.js';
import { headerOf, type RequestContext } from '../s3/context.js';

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
