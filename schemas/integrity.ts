/**
 * End-to-end integrity of stored chunks: when the client library stores a chunk it records the
 * CRC32C of every layer's slice (in delivered KV_L2TD form) in the object's user metadata, as the
 * base64 of big-endian u32 values in layer order. Range GET responses carry user metadata, so the
 * gateway can check every slice it reads at no extra request. S3 allows 2 KB of user metadata,
 * which holds the checksums of up to 256 layers.
 */
import { crc32c } from '../native/crc32c.js';

/** User metadata name (x-amz-meta-oc-layer-crc32c on the wire). */
export const LAYER_CRC_META = 'oc-layer-crc32c';
export const MAX_CHECKSUMMED_LAYERS = 256;

export function encodeLayerCrcs(crcs: readonly number[]): string {
  const bytes = Buffer.alloc(crcs.length * 4);
  crcs.forEach((crc, i) => bytes.writeUInt32BE(crc >>> 0, i * 4));
  return bytes.toString('base64');
}

/** The recorded checksums, or undefined when absent or not for `layers` layers. */
export function decodeLayerCrcs(value: string | undefined, layers: number): number[] | undefined {
  if (value === undefined || !/^[A-Za-z0-9+/]+={0,2}$/.test(value)) return undefined;
  const bytes = Buffer.from(value, 'base64');
  if (bytes.length !== layers * 4) return undefined;
  return Array.from({ length: layers }, (_, i) => bytes.readUInt32BE(i * 4));
}

/** CRC32C of each layer's slice of a chunk given in KV_L2TD form. */
export function layerCrcs(canonicalChunk: Uint8Array, layers: number, layerBytes: number): number[] {
  return Array.from({ length: layers }, (_, l) => crc32c(canonicalChunk.subarray(l * layerBytes, (l + 1) * layerBytes)));
}
