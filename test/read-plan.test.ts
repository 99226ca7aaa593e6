/**
 * The read plan (pure): groups cover the requested layers in order, the first is one layer,
 * every read stays within readBytes unless one layer alone exceeds it, a group never exceeds the
 * read-ahead window unless it is one layer, and every group's tasks cover every chunk once.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { planChunkwise, planLayerwise, type PlanInput } from '../gateway/descriptor-get/read-plan.js';
import type { Layout } from '../schemas/layouts.js';

const inputs = fc.record({
  layout: fc.constantFrom<Layout>('KV_L2TD', 'KV_2LTD', 'MLA'),
  layers: fc.integer({ min: 1, max: 128 }),
  start: fc.nat(),
  halfS: fc.integer({ min: 1, max: 1 << 20 }),
  chunks: fc.integer({ min: 1, max: 2000 }),
  readBytes: fc.integer({ min: 4096, max: 64 << 20 }),
  taskBytes: fc.integer({ min: 4096, max: 64 << 20 }),
  window: fc.integer({ min: 4096, max: 4 * 1024 ** 3 }),
  firstGroupTasks: fc.integer({ min: 1, max: 64 }),
});

function planInput(r: {
  layout: Layout;
  layers: number;
  start: number;
  halfS: number;
  chunks: number;
  readBytes: number;
  taskBytes: number;
  window: number;
  firstGroupTasks: number;
}): PlanInput {
  return {
    layout: r.layout,
    layerStart: r.start % r.layers,
    layerEnd: r.layers,
    layerBytes: r.halfS * 2,
    chunks: r.chunks,
    readBytes: r.readBytes,
    taskBytes: r.taskBytes,
    maxGroupBytes: r.window,
    firstGroupTasks: r.firstGroupTasks,
  };
}

describe('read plan', () => {
  it('covers the layers in order within the read size and the window', () => {
    fc.assert(
      fc.property(inputs, (r) => {
        const input = planInput(r);
        const plan = planLayerwise(input);
        expect(plan.groups[0]).toEqual([input.layerStart, input.layerStart + 1]);
        let next = input.layerStart;
        for (const [first, end] of plan.groups) {
          expect(first).toBe(next);
          expect(end).toBeGreaterThan(first);
          const layers = end - first;
          const perRead = input.layout === 'KV_2LTD' ? input.layerBytes / 2 : input.layerBytes;
          if (layers > 1) {
            expect(layers * perRead).toBeLessThanOrEqual(input.readBytes);
            expect(layers * input.layerBytes * input.chunks).toBeLessThanOrEqual(input.maxGroupBytes);
          }
          next = end;
        }
        expect(next).toBe(input.layerEnd);
        plan.groups.forEach((_, g) => {
          const covered = plan.tasks.filter((t) => t.group === g).flatMap((t) => Array.from({ length: t.chunkEnd - t.chunkStart }, (_, i) => t.chunkStart + i));
          expect(covered).toEqual(Array.from({ length: input.chunks }, (_, i) => i));
        });
        expect(plan.reads).toBe(plan.groups.length * input.chunks * (input.layout === 'KV_2LTD' ? 2 : 1));
      }),
    );
  });

  it('reads a 16K Llama-3.1-8B prefix at G=64 in 4 MiB-class reads, a few per chunk', () => {
    // 224 chunks of 32 layers x 256 KiB; 512 MiB window: groups 1, 4, 8 (window-bound), ...
    const plan = planLayerwise({
      layout: 'KV_L2TD',
      layerStart: 0,
      layerEnd: 32,
      layerBytes: 256 * 1024,
      chunks: 224,
      readBytes: 4 << 20,
      taskBytes: 8 << 20,
      maxGroupBytes: 512 << 20,
      firstGroupTasks: 8,
    });
    expect(plan.groups.map(([a, b]) => b - a)).toEqual([1, 4, 9, 9, 9]);
    expect(plan.reads).toBe(5 * 224);
  });

  it('reads every chunk once in chunkwise delivery', () => {
    const plan = planChunkwise({ layout: 'KV_2LTD', layerStart: 2, layerEnd: 10, layerBytes: 1024, chunks: 50, readBytes: 4096, taskBytes: 64 * 1024, maxGroupBytes: 1 << 20 });
    expect(plan.tasks.flatMap((t) => Array.from({ length: t.chunkEnd - t.chunkStart }, (_, i) => t.chunkStart + i))).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(plan.reads).toBe(100);
  });
});
