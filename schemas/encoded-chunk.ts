/**
 * Encoded chunks (schemas/wire-format.md section 6): a chunk whose layer slices were each encoded
 * on their own by a codec (a compressor or a quantiser) and stored back to back in layer order.
 * Encoded slices differ in length, so the object carries its index in user metadata, where the
 * gateway reads it with one HEAD per chunk (and where every range GET's answer repeats it):
 *
 *   x-amz-meta-oc-codec        the codec's name (opaque to the gateway)
 *   x-amz-meta-oc-slice-bytes  base64 of L big-endian u32: each layer's encoded length
 *   x-amz-meta-oc-layer-crc32c base64 of L big-endian u32: each encoded slice's CRC32C (integrity.ts)
 *
 * Why metadata and not a header inside the object: the gateway must know every slice's length
 * before it plans a single read (to size buffer blocks and cut ranges), and HEADs answer that
 * (all chunks at once) without touching data; the object stays exactly its encoded slices, so
 * layer l is one plain range; and a raw range GET of an encoded object carries `oc-codec` in its
 * answer, so a reader that asked for raw bytes is refused at no extra cost. The price is S3's
 * 2 KB of user metadata: the two tables fit for up to MAX_ENCODED_LAYERS layers.
 */

/** User metadata names (x-amz-meta-... on the wire). */
export const CODEC_META = 'oc-codec';
export const SLICE_BYTES_META = 'oc-slice-bytes';

/** The codec of a chunk stored raw (no `oc-codec` metadata). */
export const RAW_CODEC = 'none';

/** Codec names: short, lowercase, so they fit in headers and metadata unchanged. */
export const CODEC_NAME = /^[a-z0-9][a-z0-9._-]{0,31}$/;

/**
 * Most layers of an encoded chunk: two tables of L u32 in base64 (2 x 4L x 4/3 bytes) plus the
 * names stay under S3's 2 KB of user metadata. Read by the Python client's contract
 * (scripts/gen-python-contract.mjs).
 * @public
 */
export const MAX_ENCODED_LAYERS = 160;

/**
 * Most bytes an encoded slice may take: a codec may grow incompressible bytes a little (frame
 * headers, tables), never to more than twice the raw slice; anything larger is a broken index.
 */
export function maxEncodedSliceBytes(layerBytes: number): number {
  return 2 * layerBytes + 4096;
}

/** The index of one stored chunk: its codec, and each layer's slice length as stored. */
export interface ChunkIndex {
  readonly codec: string;
  /** Bytes of each layer's stored slice, in layer order (all `layerBytes` for a raw chunk). */
  readonly sliceBytes: readonly number[];
  /** The object's ETag when the index was read (reads of the chunk are pinned to it). */
  readonly etag: string | undefined;
}

export function encodeSliceBytes(lengths: readonly number[]): string {
  const bytes = Buffer.alloc(lengths.length * 4);
  lengths.forEach((length, i) => bytes.writeUInt32BE(length, i * 4));
  return bytes.toString('base64');
}

/**
 * A stored chunk's index from its size and user metadata, or a reason string when the metadata
 * does not describe an object of `layers` layers of `size` bytes in total.
 */
export function chunkIndex(size: number, meta: Readonly<Record<string, string | undefined>>, layers: number, layerBytes: number, etag: string | undefined): ChunkIndex | string {
  const codec = meta[CODEC_META];
  if (codec === undefined) {
    if (size !== layers * layerBytes) return `is ${size} bytes, not layers x layerBytes (${layers * layerBytes}), and has no ${CODEC_META} metadata`;
    return { codec: RAW_CODEC, sliceBytes: new Array<number>(layers).fill(layerBytes), etag };
  }
  if (!CODEC_NAME.test(codec) || codec === RAW_CODEC) return `has an invalid ${CODEC_META} value ${JSON.stringify(codec.slice(0, 40))}`;
  const table = meta[SLICE_BYTES_META];
  if (table === undefined || !/^[A-Za-z0-9+/]+={0,2}$/.test(table)) return `is encoded (${codec}) but has no valid ${SLICE_BYTES_META} metadata`;
  const bytes = Buffer.from(table, 'base64');
  if (bytes.length !== layers * 4) return `has a ${SLICE_BYTES_META} table of ${Math.floor(bytes.length / 4)} layers, not ${layers}`;
  const sliceBytes = Array.from({ length: layers }, (_, i) => bytes.readUInt32BE(i * 4));
  const total = sliceBytes.reduce((a, b) => a + b, 0);
  if (total !== size) return `has slices adding up to ${total} bytes, but the object is ${size} bytes`;
  if (sliceBytes.some((n) => n === 0)) return `has an empty encoded slice`;
  const limit = maxEncodedSliceBytes(layerBytes);
  const big = sliceBytes.findIndex((n) => n > limit);
  if (big !== -1) return `has an encoded slice of ${sliceBytes[big]} bytes at layer ${big}, more than ${limit} for layerBytes ${layerBytes}`;
  return { codec, sliceBytes, etag };
}
