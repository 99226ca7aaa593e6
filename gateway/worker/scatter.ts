/**
 * Where the bytes of one range read land in a task buffer. A range of a chunk covers layers
 * [first, end) (or, for KV_2LTD, the K or the V halves of those layers); its bytes are split into
 * per-layer pieces that go to different places of the task buffer. Pure.
 */
import { layerRanges, slicePiece, type ByteRange, type Layout } from '../../schemas/layouts.js';
import type { TaskLayout } from '../threads/task-layout.js';
import { SEGMENT_SKIP_BYTES, type SegmentRead } from '../threads/protocol.js';

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

/**
 * A cache-hot staging buffer for copies into shared memory. V8 copies into a SharedArrayBuffer
 * with relaxed atomics: word by word when source and destination share their alignment, byte by
 * byte (about 2 GB/s) when they do not, which is most socket chunks. Staging such a chunk at the
 * destination's alignment first makes both copies word-wide (measured 7-9 GB/s together).
 */
let staging = new Uint8Array(64 * 1024 + 8);

export function copyInto(view: Uint8Array, at: number, source: Uint8Array): void {
  const dst = view.byteOffset + at;
  if (!(view.buffer instanceof SharedArrayBuffer) || (dst - source.byteOffset) % 8 === 0) {
    view.set(source, at);
    return;
  }
  const align = dst % 8;
  if (staging.byteLength < source.byteLength + 8) staging = new Uint8Array(source.byteLength + 8);
  staging.set(source, align);
  view.set(staging.subarray(align, align + source.byteLength), at);
}

/** Copies `chunk` into the views starting at byte `position` of the concatenated views. */
export class ScatterCursor {
  readonly #views: Uint8Array[];
  #index = 0;
  #offset = 0;
  written = 0;

  constructor(views: Uint8Array[]) {
    this.#views = views;
  }

  /** Returns false when `chunk` does not fit (the source sent more than the range). */
  write(chunk: Uint8Array): boolean {
    let from = 0;
    while (from < chunk.byteLength) {
      const view = this.#views[this.#index];
      if (!view) return false;
      const n = Math.min(view.byteLength - this.#offset, chunk.byteLength - from);
      copyInto(view, this.#offset, chunk.subarray(from, from + n));
      from += n;
      this.#offset += n;
      this.written += n;
      if (this.#offset === view.byteLength) {
        this.#index++;
        this.#offset = 0;
      }
    }
    return true;
  }
}
