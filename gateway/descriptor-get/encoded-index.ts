/**
 * The index of an encoded prefix (schemas/encoded-chunk.ts), read before anything is planned: one
 * HEAD per chunk, all at once (the backend's connection pool queues them; the descriptor's key
 * limit bounds them), each answer's size and user metadata checked against the descriptor. One stream carries one encoding, so every chunk must share the codec of the first,
 * and that codec must be one the descriptor accepts; a raw chunk is codec `none`.
 */
import { setMaxListeners } from 'node:events';
import { ObjectCacheError, siteDetails } from '../../schemas/errors.js';
import { CODEC_META, chunkIndex, RAW_CODEC } from '../../schemas/encoded-chunk.js';
import { LAYER_CRC_META } from '../../schemas/integrity.js';
import type { Descriptor } from '../../schemas/descriptor.js';
import type { Backend } from '../s3/backend.js';
import type { EncodedChunks } from './encoded-chunks.js';

export async function readEncodedIndex(descriptor: Descriptor, bucket: string, backend: Pick<Backend, 'heads'>, signal: AbortSignal): Promise<EncodedChunks> {
  const accepted = descriptor.codecs ?? [RAW_CODEC];
  const sliceBytes: (readonly number[])[] = [];
  const etags: (string | undefined)[] = [];
  const recorded: (string | undefined)[] = [];
  let codec: string | undefined;
  // Every HEAD listens on the request's signal (one abort ends them all).
  setMaxListeners(descriptor.keys.length + 8, signal);
  const heads = await backend.heads(bucket, descriptor.keys, signal, true);
  heads.forEach((head, chunk) => {
    const key = descriptor.keys[chunk] as string;
    const site = { details: siteDetails({ chunk, key }) };
    if (!head) throw new ObjectCacheError('OC_ERR_CHUNK_MISSING', `chunk ${chunk} (${key}) does not exist`, site);
    const index = chunkIndex(head.size, head.meta, descriptor.layers, descriptor.layerBytes, head.etag);
    if (typeof index === 'string')
      throw new ObjectCacheError(head.meta[CODEC_META] === undefined ? 'OC_ERR_CHUNK_SIZE' : 'OC_ERR_CHUNK_INDEX', `chunk ${chunk} (${key}) ${index}`, site);
    if (!accepted.includes(index.codec))
      throw new ObjectCacheError('OC_ERR_CODEC_UNACCEPTED', `chunk ${chunk} (${key}) is stored as ${index.codec}; the descriptor accepts ${accepted.join(', ')}`, site);
    codec ??= index.codec;
    if (index.codec !== codec) throw new ObjectCacheError('OC_ERR_CODEC_MIXED', `chunk ${chunk} (${key}) is stored as ${index.codec}, the chunks before it as ${codec}`, site);
    sliceBytes.push(index.sliceBytes);
    etags.push(index.etag);
    recorded.push(head.meta[LAYER_CRC_META]);
  });
  return { codec: codec as string, sliceBytes, etags, recorded };
}

/** Payload bytes of an encoded prefix's delivered layers: the slices, and one u32 per slice for the segment tables. */
export function encodedPayloadBytes(descriptor: Descriptor, encoded: EncodedChunks): number {
  let bytes = 0;
  for (const sizes of encoded.sliceBytes) for (let layer = descriptor.layerStart; layer < descriptor.layerEnd; layer++) bytes += (sizes[layer] as number) + 4;
  return bytes;
}

/** The largest stored slice of the delivered layers: what the read plan sizes groups and tasks by. */
export function largestSlice(descriptor: Descriptor, encoded: EncodedChunks): number {
  let most = 1;
  for (const sizes of encoded.sliceBytes) for (let layer = descriptor.layerStart; layer < descriptor.layerEnd; layer++) most = Math.max(most, sizes[layer] as number);
  return most;
}
