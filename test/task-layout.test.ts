/**
 * The layout of a read task's block (gateway/threads/task-layout.ts) and the scatter of range
 * bytes into it (task-layout.ts rangeTargets, and the read worker's ScatterCursor in
 * gateway/worker/range-reader.ts): every slice has one place, the places tile the block,
 * frame pieces are the slices they claim, and bytes copied into shared memory at any alignment
 * land exactly.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { slicePiece } from '../schemas/layouts.js';
import { RingLayout, TaskLayout, rangeTargets } from '../gateway/threads/task-layout.js';
import { ScatterCursor, copyInto } from '../gateway/worker/range-reader.js';

const layouts = fc
  .record({
    order: fc.constantFrom('layer-major' as const, 'chunk-major' as const),
    first: fc.nat(8),
    layers: fc.integer({ min: 1, max: 6 }),
    chunks: fc.integer({ min: 1, max: 7 }),
    layerBytes: fc.integer({ min: 1, max: 64 }),
  })
  .map((r) => new TaskLayout(r.order, r.first, r.first + r.layers, r.chunks, r.layerBytes));

describe('TaskLayout', () => {
  it('lays encoded slices of differing lengths back to back, each readable by its place, in both orders', () => {
    const encoded = fc.record({
      order: fc.constantFrom('layer-major' as const, 'chunk-major' as const),
      first: fc.nat(3),
      layers: fc.integer({ min: 1, max: 4 }),
      sizes: fc.array(fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 8, maxLength: 8 }), { minLength: 1, maxLength: 5 }),
    });
    fc.assert(
      fc.property(encoded, ({ order, first, layers, sizes }) => {
        const layout = new TaskLayout(order, first, first + layers, sizes.length, 64, sizes);
        const region = new Uint8Array(layout.bytes);
        let total = 0;
        for (let layer = first; layer < first + layers; layer++) {
          for (let chunk = 0; chunk < sizes.length; chunk++) {
            const bytes = layout.sliceBytes(layer, chunk);
            expect(bytes).toBe(sizes[chunk]?.[layer]);
            total += bytes;
            region.fill((layer * 16 + chunk) & 0xff, layout.sliceOffset(layer, chunk), layout.sliceOffset(layer, chunk) + bytes);
          }
        }
        // The slices tile the block: every byte was written by exactly its slice's fill.
        expect(layout.bytes).toBe(total);
        const mark = (layer: number, chunk: number): number[] => new Array<number>(sizes[chunk]?.[layer] as number).fill((layer * 16 + chunk) & 0xff);
        if (order === 'layer-major') {
          for (let layer = first; layer < first + layers; layer++) expect([...layout.layerPiece(region, layer)]).toEqual(sizes.flatMap((_, chunk) => mark(layer, chunk)));
        } else {
          for (let chunk = 0; chunk < sizes.length; chunk++)
            expect([...layout.chunkPiece(region, chunk)]).toEqual(Array.from({ length: layers }, (_, i) => mark(first + i, chunk)).flat());
        }
        // A chunk's range covers its layers' stored bytes, from where layer `first` starts.
        for (let chunk = 0; chunk < sizes.length; chunk++) {
          const [range] = rangeTargets({ layout: 'KV_L2TD', layers: 8 }, layout, region, chunk);
          const row = sizes[chunk] as number[];
          expect(range?.offset).toBe(row.slice(0, first).reduce((a, b) => a + b, 0));
          expect(range?.length).toBe(row.slice(first, first + layers).reduce((a, b) => a + b, 0));
          expect(range?.views.reduce((n, v) => n + v.byteLength, 0)).toBe(range?.length);
        }
      }),
    );
  });

  it('gives every (layer, chunk) its own slice, and the slices tile the block', () => {
    fc.assert(
      fc.property(layouts, (layout) => {
        const seen = new Set<number>();
        for (let layer = layout.first; layer < layout.end; layer++) {
          for (let chunk = 0; chunk < layout.chunks; chunk++) {
            const slice = layout.slice(layer, chunk);
            expect(seen.has(slice)).toBe(false);
            seen.add(slice);
            expect(layout.sliceOffset(layer, chunk)).toBe(slice * layout.layerBytes);
          }
        }
        expect([...seen].sort((a, b) => a - b)).toEqual(Array.from({ length: layout.layers * layout.chunks }, (_, i) => i));
        expect(layout.bytes).toBe(seen.size * layout.layerBytes);
      }),
    );
  });

  it("cuts a LAYER frame's piece and a CHUNK frame's payload out of exactly the slices they claim", () => {
    fc.assert(
      fc.property(layouts, (layout) => {
        // Each slice's bytes say which (layer, chunk) it is.
        const region = new Uint8Array(layout.bytes);
        for (let layer = layout.first; layer < layout.end; layer++)
          for (let chunk = 0; chunk < layout.chunks; chunk++)
            region.fill((layer * 16 + chunk) & 0xff, layout.sliceOffset(layer, chunk), layout.sliceOffset(layer, chunk) + layout.layerBytes);
        const mark = (layer: number, chunk: number): number[] => new Array<number>(layout.layerBytes).fill((layer * 16 + chunk) & 0xff);
        if (layout.order === 'layer-major') {
          for (let layer = layout.first; layer < layout.end; layer++) {
            expect([...layout.layerPiece(region, layer)]).toEqual(Array.from({ length: layout.chunks }, (_, c) => mark(layer, c)).flat());
          }
        } else {
          for (let chunk = 0; chunk < layout.chunks; chunk++) {
            expect([...layout.chunkPiece(region, chunk)]).toEqual(Array.from({ length: layout.layers }, (_, l) => mark(layout.first + l, chunk)).flat());
          }
        }
      }),
    );
  });
});

describe('scatter', () => {
  it("places a chunk's ranges (KV_L2TD and KV_2LTD) at the task's slices, K half then V half", () => {
    const layout = new TaskLayout('layer-major', 1, 3, 2, 8);
    const region = new Uint8Array(layout.bytes);
    // Chunk 1 of a 4-layer object: KV_2LTD stores all K halves, then all V halves.
    const targets = rangeTargets({ layout: 'KV_2LTD', layers: 4 }, layout, region, 1);
    expect(targets.map((t) => [t.offset, t.length])).toEqual([
      [4, 8], // K of layers 1 and 2 (4 bytes each), after layer 0's K
      [16 + 4, 8], // V of layers 1 and 2
    ]);
    new ScatterCursor(targets[0]?.views ?? []).write(Uint8Array.from([1, 1, 1, 1, 2, 2, 2, 2]));
    new ScatterCursor(targets[1]?.views ?? []).write(Uint8Array.from([3, 3, 3, 3, 4, 4, 4, 4]));
    expect([...layout.layerPiece(region, 1).subarray(8, 16)]).toEqual([1, 1, 1, 1, 3, 3, 3, 3]);
    expect([...layout.layerPiece(region, 2).subarray(8, 16)]).toEqual([2, 2, 2, 2, 4, 4, 4, 4]);
    expect([...layout.layerPiece(region, 1).subarray(0, 8)]).toEqual(new Array(8).fill(0)); // chunk 0 untouched
    // KV_L2TD: one range, coalesced into one view where the slices touch (chunk-major).
    const byChunk = new TaskLayout('chunk-major', 1, 3, 2, 8);
    const plain = rangeTargets({ layout: 'KV_L2TD', layers: 4 }, byChunk, new Uint8Array(byChunk.bytes), 0);
    expect(plain.map((t) => [t.offset, t.length, t.views.length])).toEqual([[8, 16, 1]]);
  });

  it('refuses bytes beyond the range, and copies into shared memory exactly at every alignment', () => {
    const cursor = new ScatterCursor([new Uint8Array(4), new Uint8Array(4)]);
    expect(cursor.write(new Uint8Array(6))).toBe(true);
    expect(cursor.write(new Uint8Array(3))).toBe(false);
    fc.assert(
      fc.property(fc.nat(15), fc.nat(15), fc.uint8Array({ minLength: 1, maxLength: 300 }), (dst, src, bytes) => {
        const shared = new Uint8Array(new SharedArrayBuffer(400));
        const source = new Uint8Array(bytes.length + 16);
        source.set(bytes, src);
        copyInto(shared.subarray(8), dst, source.subarray(src, src + bytes.length));
        expect([...shared.subarray(8 + dst, 8 + dst + bytes.length)]).toEqual([...bytes]);
        expect(shared.subarray(0, 8 + dst).every((b) => b === 0)).toBe(true);
        expect(shared.subarray(8 + dst + bytes.length).every((b) => b === 0)).toBe(true);
      }),
    );
  });
});

describe('RingLayout', () => {
  it('sizes the ring as it is taken and budgeted: every slot holds a whole block per run, the last run too', () => {
    // 10 chunks in runs of 4: runs of 4, 4 and 2 chunks, each in a block of 4 slices.
    const ring = new RingLayout(3, 10, 4, 1000);
    expect(ring.runs).toBe(3);
    expect(ring.blockBytes).toBe(4000);
    expect(ring.bytes).toBe(3 * 3 * 4000);
    expect([0, 1, 2].map((r) => ring.runLength(r))).toEqual([4, 4, 2]);
    expect([0, 1, 2, 3, 4].map((l) => ring.slotOf(l))).toEqual([0, 1, 2, 0, 1]);
  });

  it("places a chunk's slice at its place in its run's block, and a KV_2LTD slice's V half after its K half", () => {
    const ring = new RingLayout(2, 10, 4, 1000);
    expect(ring.sliceOffset(0)).toBe(0);
    expect(ring.sliceOffset(5)).toBe(1000); // the second chunk of the second run
    expect(slicePiece('KV_2LTD', 1000, 1)).toEqual({ offset: 500, length: 500 });
    expect(slicePiece('KV_L2TD', 1000, 0)).toEqual({ offset: 0, length: 1000 });
  });
});
