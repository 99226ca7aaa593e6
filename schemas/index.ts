/**
 * The wire contract shared by the gateway, the workers and clients: errors, the descriptor, the
 * layouts and presets, and the stream frames (specified in wire-format.md).
 */
export { ERRORS, ObjectCacheError } from './errors.js';
export type { ErrorCode, ErrorSpec, ObjectCacheErrorOptions } from './errors.js';
export { DESCRIPTOR_SCHEMA } from './descriptor-schema.js';
export type { DescriptorInput } from './descriptor-schema.js';
export { DEFAULT_DESCRIPTOR_LIMITS, DESCRIPTOR_HEADER, decodeDescriptorHeader, decodeDescriptorJson, encodeDescriptorHeader, parseDescriptor } from './descriptor.js';
export type { Delivery, Descriptor, DescriptorLimits, RequestedMode } from './descriptor.js';
export { LAYOUTS, PRESETS, layerRanges, presetNamed } from './layouts.js';
export type { ByteRange, Layout, ModelPreset } from './layouts.js';
export { FRAME_HEADER_BYTES, FrameType, PREAMBLE_BYTES, STREAM_CONTENT_TYPE, STREAM_MAGIC, STREAM_VERSION, checkPreamble, decodeFrameHeader, encodeFrameHeader, encodePreamble } from './frames.js';
export type { EndSummary, ErrorPayload, FrameHeader } from './frames.js';
export { DEFAULT_RETRIES, FIRST_BACKOFF_MS, MAX_RETRY_AFTER_MS, RETRY_AFTER, retryDelayMs } from './retry-policy.js';
