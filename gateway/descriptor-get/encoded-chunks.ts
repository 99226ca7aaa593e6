/**
 * An encoded prefix's index (docs/compression.md; schemas/encoded-chunk.ts): what a descriptor
 * GET that names `codecs` reads first (encoded-index.ts, one HEAD per chunk), and what its plan,
 * its blocks, its frames and a segment packed from it follow.
 */

/** An encoded prefix's index: one codec, each chunk's stored slice lengths, and the versions they describe. */
export interface EncodedChunks {
  readonly codec: string;
  /** By prefix position, then layer (all L layers). */
  readonly sliceBytes: readonly (readonly number[])[];
  /** Each chunk's ETag when its index was read: every read of the chunk is locked to it. */
  readonly etags: readonly (string | undefined)[];
  /** Each chunk's `oc-layer-crc32c` as its index HEAD found it (its writer's CRC32Cs), if any. */
  readonly recorded: readonly (string | undefined)[];
}
