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
 * A task's slice checksums (`crcs` in its result) are in the same order, one per slice.
 *
 * Encoded chunks (schemas/encoded-chunk.ts) have slices of differing lengths: given `sizes`
 * (each chunk's stored slice lengths, by layer), the slices lie in the same order, back to back,
 * each as long as its own length. Pure.
 */
import type { Delivery } from '../../schemas/descriptor.js';

export class TaskLayout {
  readonly order: Delivery;
  readonly first: number;
  readonly end: number;
  readonly chunks: number;
  /** Bytes of every slice when they are all alike (raw chunks). */
  readonly layerBytes: number;
  /** Encoded: each chunk's slice lengths by layer (`sizes[chunk][layer]`, chunk counted from the run's first). */
  readonly sizes: readonly (readonly number[])[] | undefined;
  /** Encoded: the byte offset of every slice in slice order, and the block's length last. */
  readonly #offsets: number[] | undefined;

  constructor(order: Delivery, first: number, end: number, chunks: number, layerBytes: number, sizes?: readonly (readonly number[])[]) {
    this.order = order;
    this.first = first;
    this.end = end;
    this.chunks = chunks;
    this.layerBytes = layerBytes;
    this.sizes = sizes;
    if (sizes) {
      const count = (end - first) * chunks;
      const lengths = new Array<number>(count);
      for (let chunk = 0; chunk < chunks; chunk++)
        for (let layer = first; layer < end; layer++) lengths[this.slice(layer, chunk)] = (sizes[chunk] as readonly number[])[layer] as number;
      this.#offsets = new Array<number>(count + 1);
      this.#offsets[0] = 0;
      for (let i = 0; i < count; i++) this.#offsets[i + 1] = (this.#offsets[i] as number) + (lengths[i] as number);
    }
  }

  /** The layout of a task over `layers` [first, end) of `chunks` chunks (their slice lengths `sizes` when encoded). */
  static of(order: Delivery, layers: { readonly first: number; readonly end: number }, chunks: number, layerBytes: number, sizes?: readonly (readonly number[])[]): TaskLayout {
    return new TaskLayout(order, layers.first, layers.end, chunks, layerBytes, sizes);
  }

  get layers(): number {
    return this.end - this.first;
  }

  /** Bytes of the block. */
  get bytes(): number {
    return this.#offsets ? (this.#offsets.at(-1) as number) : this.layers * this.chunks * this.layerBytes;
  }

  /** Index of (layer, chunk)'s slice, among the slices and among the checksums; `chunk` counts from the run's first. */
  slice(layer: number, chunk: number): number {
    const l = layer - this.first;
    return this.order === 'layer-major' ? l * this.chunks + chunk : chunk * this.layers + l;
  }

  /** Byte offset of (layer, chunk)'s slice in the block. */
  sliceOffset(layer: number, chunk: number): number {
    return this.offsetOf(this.slice(layer, chunk));
  }

  /** Byte offset of slice number `slice` (in slice order); `offsetOf(count)` is the block's length. */
  offsetOf(slice: number): number {
    return this.#offsets ? (this.#offsets[slice] as number) : slice * this.layerBytes;
  }

  /** Bytes of (layer, chunk)'s slice. */
  sliceBytes(layer: number, chunk: number): number {
    return this.sizes ? ((this.sizes[chunk] as readonly number[])[layer] as number) : this.layerBytes;
  }

  /** Layer-major: the run's piece of `layer` (every chunk's slice, in chunk order). */
  layerPiece(region: Uint8Array, layer: number): Uint8Array {
    const from = this.slice(layer, 0);
    return region.subarray(this.offsetOf(from), this.offsetOf(from + this.chunks));
  }

  /** Chunk-major: `chunk`'s delivered layers, a CHUNK frame's payload. */
  chunkPiece(region: Uint8Array, chunk: number): Uint8Array {
    const from = this.slice(this.first, chunk);
    return region.subarray(this.offsetOf(from), this.offsetOf(from + this.layers));
  }
}

/**
 * The ring of a stream task (gateway/worker/chunk-streams.ts): `slots` layer slots, layer
 * `first + s` in slot s, then `first + s + slots`, ...; each slot's layer split into runs of
 * `runChunks` chunks, each run in a block of its own that is a one-layer, layer-major task block
 * (a TaskLayout of one layer of `runChunks` chunks). The one place that says how big the ring and
 * its blocks are: the gateway budgets and allocates `bytes` (gateway/descriptor-get/read-pool/reader-pool.ts
 * takeRing, gateway/descriptor-get/stream-read-ahead.ts) and the worker places bytes with
 * `pieceOffset`.
 */
export class RingLayout {
  /** How one block lays out its run's chunks. */
  readonly block: TaskLayout;
  readonly runs: number;

  constructor(
    readonly slots: number,
    /** The request's chunks. */
    readonly chunks: number,
    readonly runChunks: number,
    readonly layerBytes: number,
  ) {
    this.block = new TaskLayout('layer-major', 0, 1, runChunks, layerBytes);
    this.runs = Math.ceil(chunks / runChunks);
  }

  /** Bytes of one block (a whole run's, the last run's too). */
  get blockBytes(): number {
    return this.block.bytes;
  }

  /** Bytes of the ring: every slot's every block. What a stream task holds, and is budgeted for. */
  get bytes(): number {
    return this.slots * this.runs * this.blockBytes;
  }

  /** Chunks in run `run` (the last may be short). */
  runLength(run: number): number {
    return Math.min(this.runChunks, this.chunks - run * this.runChunks);
  }

  /** The slot that holds `layer`, counted from the task's first layer. */
  slotOf(layerFromFirst: number): number {
    return layerFromFirst % this.slots;
  }

  /** Where `chunk`'s slice lies within its run's block (its K and V halves: schemas/layouts.ts slicePiece). */
  sliceOffset(chunk: number): number {
    return this.block.sliceOffset(0, chunk % this.runChunks);
  }
}
