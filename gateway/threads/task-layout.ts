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
 * each as long as its own length.
 *
 * And where the bytes of one range read land in a block (rangeTargets, segmentTargets; the read
 * worker's ScatterCursor, gateway/worker/range-reader.ts, copies them there): a range of a chunk
 * covers layers [first, end) (or, for KV_2LTD, the K or the V halves of those layers); its bytes
 * are split into per-layer pieces that go to different places of the block. Pure (but for the
 * one scratch buffer skipped bytes land in).
 */
import type { Delivery } from '../../schemas/descriptor.js';
import { layerRanges, slicePiece, type ByteRange, type Layout } from '../../schemas/layouts.js';
import { SEGMENT_SKIP_BYTES, type SegmentRead } from './protocol.js';

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

/** The part of a planned task a layout is of: layers [first, end) of chunks [chunkStart, chunkEnd). */
export interface TaskSpan {
  readonly first: number;
  readonly end: number;
  readonly chunkStart: number;
  readonly chunkEnd: number;
}

/** How long a request's slices are: all `layerBytes`, or (encoded chunks) each chunk's own, by prefix position then layer. */
export interface Slices {
  readonly layerBytes: number;
  readonly encoded?: { readonly sliceBytes: readonly (readonly number[])[] } | undefined;
}

/** Each planned task's layout, made once (a task belongs to one request, so to one `slices`). */
const layouts = new WeakMap<TaskSpan, TaskLayout>();

/**
 * The layout of a planned task's block (gateway/descriptor-get/read-plan.ts PlannedTask), its slices in `order`:
 * built the first time it is asked for and shared by everyone who asks after (the plan's unit
 * sizes, the read-ahead's budget and task block, the frame stream). The read worker, across the
 * thread boundary, builds its own from the task's fields.
 */
export function layoutOf(task: TaskSpan, order: Delivery, slices: Slices): TaskLayout {
  const known = layouts.get(task);
  if (known?.order === order) return known;
  const layout = TaskLayout.of(order, task, task.chunkEnd - task.chunkStart, slices.layerBytes, slices.encoded?.sliceBytes.slice(task.chunkStart, task.chunkEnd));
  layouts.set(task, layout);
  return layout;
}

/**
 * The ring of a stream task (gateway/worker/chunk-streams.ts): `slots` layer slots, layer
 * `first + s` in slot s, then `first + s + slots`, ...; each slot's layer split into runs of
 * `runChunks` chunks, each run in a block of its own that is a one-layer, layer-major task block
 * (a TaskLayout of one layer of `runChunks` chunks). The one place that says how big the ring and
 * its blocks are: the gateway budgets and allocates `bytes` (gateway/descriptor-get/reader-pool.ts
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

/* Where a range read's bytes land. */

export interface RangeTarget extends ByteRange {
  /** Destinations in the order the range's bytes arrive; their lengths add up to `length`. */
  readonly views: Uint8Array[];
}

/** How a chunk object is stored: its layout and its layer count (the task's layers are `task`'s). */
export interface StoredChunk {
  readonly layout: Layout;
  readonly layers: number;
}

/**
 * The ranges to read for chunk `chunk` (index within the task) and where each byte goes in
 * `region` (the task's block, laid out as `task` says).
 */
export function rangeTargets(stored: StoredChunk, task: TaskLayout, region: Uint8Array, chunk: number): RangeTarget[] {
  const { layerBytes, first, end } = task;
  if (task.sizes) {
    // Encoded: the layers' slices lie back to back in the object, so [first, end) is one range.
    const sizes = task.sizes[chunk] as readonly number[];
    let offset = 0;
    for (let layer = 0; layer < first; layer++) offset += sizes[layer] as number;
    const views: Uint8Array[] = [];
    let length = 0;
    for (let layer = first; layer < end; layer++) {
      const at = task.sliceOffset(layer, chunk);
      views.push(region.subarray(at, at + (sizes[layer] as number)));
      length += sizes[layer] as number;
    }
    return [{ offset, length, views: coalesce(views) }];
  }
  const ranges = layerRanges(stored.layout, stored.layers, layerBytes, first, end);
  return ranges.map((range, part) => {
    const piece = slicePiece(stored.layout, layerBytes, part);
    const views: Uint8Array[] = [];
    for (let layer = first; layer < end; layer++) {
      const at = task.sliceOffset(layer, chunk) + piece.offset;
      views.push(region.subarray(at, at + piece.length));
    }
    // Consecutive destinations that touch can be one view (fewer copies and syscalls).
    return { ...range, views: coalesce(views) };
  });
}

/**
 * The ranges of a packed segment (protocol.ts SegmentRead) that hold a task's slices, and where
 * each byte goes in `region`: one range per layer (the task's chunks' slices of a layer lie
 * together in the segment), and ranges separated by at most SEGMENT_SKIP_BYTES read as one, the bytes
 * between them dropped into scratch memory. A task over every chunk of the segment is one range.
 */
export function segmentTargets(segment: SegmentRead, task: TaskLayout, region: Uint8Array): RangeTarget[] {
  const targets: RangeTarget[] = [];
  for (let layer = task.first; layer < task.end; layer++) {
    const offset = segment.offsets[layer - task.first] as number;
    const views: Uint8Array[] = [];
    let length = 0;
    for (let chunk = 0; chunk < task.chunks; chunk++) {
      const at = task.sliceOffset(layer, chunk);
      const bytes = task.sliceBytes(layer, chunk);
      views.push(region.subarray(at, at + bytes));
      length += bytes;
    }
    const last = targets.at(-1);
    const gap = last ? offset - (last.offset + last.length) : Infinity;
    if (last && gap <= SEGMENT_SKIP_BYTES) {
      if (gap > 0) last.views.push(scratch(gap));
      last.views.push(...views);
      targets[targets.length - 1] = { offset: last.offset, length: offset + length - last.offset, views: last.views };
    } else targets.push({ offset, length, views });
  }
  return targets.map((target) => ({ ...target, views: coalesce(target.views) }));
}

/** Memory that skipped bytes are read into and dropped (one buffer, every gap a view of it). */
let skipped = new Uint8Array(0);

function scratch(bytes: number): Uint8Array {
  if (skipped.byteLength < bytes) skipped = new Uint8Array(bytes);
  return skipped.subarray(0, bytes);
}

function coalesce(views: Uint8Array[]): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const view of views) {
    const last = out.at(-1);
    if (last && last.buffer === view.buffer && last.byteOffset + last.byteLength === view.byteOffset) {
      out[out.length - 1] = new Uint8Array(last.buffer, last.byteOffset, last.byteLength + view.byteLength);
    } else {
      out.push(view);
    }
  }
  return out;
}
