/**
 * The layout of a read task's buffer block: the one place that says where each slice lies. The
 * gateway sizes blocks and cuts frames with it, the read worker places bytes and checks slices
 * with it, and a stream task's ring uses it for each run of chunks.
 *
 * A task covers layers [first, end) of a run of `chunks` consecutive chunks. Its block holds
 * (end - first) x chunks slices of `layerBytes` bytes (one layer of one chunk, in KV_L2TD form
 * whatever the stored layout), in one of two orders:
 * - layer-major: for each layer, each chunk's slice. A layer's slices for the run lie together,
 *   the run's piece of a LAYER frame.
 * - chunk-major: for each chunk, each layer's slice. A chunk's slices lie together, a whole CHUNK
 *   frame's payload.
 *
 * A task's slice checksums (`crcs` in its result) are in the same order, one per slice. Pure.
 */
import type { Delivery } from '../schemas/descriptor.js';

export class TaskLayout {
  readonly order: Delivery;
  readonly first: number;
  readonly end: number;
  readonly chunks: number;
  readonly layerBytes: number;

  constructor(order: Delivery, first: number, end: number, chunks: number, layerBytes: number) {
    this.order = order;
    this.first = first;
    this.end = end;
    this.chunks = chunks;
    this.layerBytes = layerBytes;
  }

  /** The layout of a task over `layers` [first, end) of `chunks` chunks. */
  static of(order: Delivery, layers: { readonly first: number; readonly end: number }, chunks: number, layerBytes: number): TaskLayout {
    return new TaskLayout(order, layers.first, layers.end, chunks, layerBytes);
  }

  get layers(): number {
    return this.end - this.first;
  }

  /** Bytes of the block. */
  get bytes(): number {
    return this.layers * this.chunks * this.layerBytes;
  }

  /** Index of (layer, chunk)'s slice, among the slices and among the checksums; `chunk` counts from the run's first. */
  slice(layer: number, chunk: number): number {
    const l = layer - this.first;
    return this.order === 'layer-major' ? l * this.chunks + chunk : chunk * this.layers + l;
  }

  /** Byte offset of (layer, chunk)'s slice in the block. */
  sliceOffset(layer: number, chunk: number): number {
    return this.slice(layer, chunk) * this.layerBytes;
  }

  /** Layer-major: the run's piece of `layer` (every chunk's slice, in chunk order). */
  layerPiece(region: Uint8Array, layer: number): Uint8Array {
    const at = this.sliceOffset(layer, 0);
    return region.subarray(at, at + this.chunks * this.layerBytes);
  }

  /** Chunk-major: `chunk`'s delivered layers, a CHUNK frame's payload. */
  chunkPiece(region: Uint8Array, chunk: number): Uint8Array {
    const at = this.sliceOffset(this.first, chunk);
    return region.subarray(at, at + this.layers * this.layerBytes);
  }
}
