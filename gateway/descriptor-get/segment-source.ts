/**
 * What a read of a packed segment needs (docs/segments.md): the segment object a request reads its
 * first chunks from, as gateway/segments/ finds it and the read-ahead (read-ahead.ts) turns it into
 * the workers' SegmentRead (gateway/threads/protocol.ts).
 */
import type { SegmentRead } from '../threads/protocol.js';

/**
 * A packed segment a request reads its first chunks from: the object (SegmentRead's bucket, key,
 * ETag and size), the layers and chunks it holds, where each slice lies (`offset`), every slice's
 * CRC32C in the segment's order (layer-major), and the chunks' ETags the segment was packed from,
 * by prefix position.
 */
export interface SegmentSource extends Pick<SegmentRead, 'bucket' | 'key' | 'etag' | 'bytes'> {
  readonly first: number;
  readonly end: number;
  readonly chunks: number;
  /** Byte offset in the segment of chunk `chunk`'s slice of layer `layer`. */
  readonly offset: (layer: number, chunk: number) => number;
  readonly crcs: Uint32Array;
  readonly etags: readonly string[];
}

/** What a read of a segment that is gone, changed or damaged fails with (not a timeout or a cancellation: those pass). */
export const SEGMENT_BROKEN: ReadonlySet<string> = new Set(['OC_ERR_CHUNK_MISSING', 'OC_ERR_CHUNK_CHANGED', 'OC_ERR_CHUNK_CORRUPT', 'OC_ERR_CHUNK_SIZE', 'OC_ERR_BACKEND_RANGE']);
