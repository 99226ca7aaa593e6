/**
 * The ObjectCache client library: chunk keys, storing chunks, prefix lookup, and the layerwise
 * GET into a target buffer with per-layer ready notifications.
 */
export { ObjectCacheClient, withDescriptor, DESCRIPTOR_HEADER, MAX_HEADER_DESCRIPTOR_BYTES } from './client.js';
export type { ObjectCacheClientOptions, FetchOptions, FetchResult, PutChunksOptions, Transport } from './client.js';
export { FrameDecoder } from './frame-decoder.js';
export type { DecoderOptions, DecoderGeometry } from './frame-decoder.js';
export { chunkHashes, chunkKeys, keyPrefixFor, layoutFingerprint } from './keys.js';
export type { LayoutIdentity } from './keys.js';
export { layerMajor, syntheticChunk, toCanonical, toStoredLayout } from './kv-layout.js';
export { ObjectCacheError } from '../schemas/errors.js';
export type { ErrorCode } from '../schemas/errors.js';
export type { DescriptorInput } from '../schemas/descriptor-schema.js';
export type { EndSummary } from '../schemas/frames.js';
