/**
 * The read-ahead of one layerwise GET (gateway/descriptor-get/read-ahead.ts) against a scripted task
 * runner standing in for the worker pool, so that timing and failures are under the test's
 * control: two requests sharing a budget smaller than their windows both finish, a cancellation
 * mid-group leaves nothing running or held, and every block is handed back exactly once.
 * (The real pool is exercised by the integration suites, test/layerwise.test.ts among them.)
 */
import { describe, expect, it } from 'vitest';
import { FifoBudget } from '../gateway/common/fifo-budget.js';
import { ReadAhead, type TaskRunner } from '../gateway/descriptor-get/read-ahead.js';
import { planLayerwise, planUnits, type Unit } from '../gateway/descriptor-get/read-plan.js';
import type { ReadResult, ReadTask } from '../gateway/threads/protocol.js';

const LAYER_BYTES = 1024;

/** Answers each task after `delayMs` with a block of its own, and counts what comes back. */
class ScriptedRunner implements TaskRunner {
  #next = 1;
  readonly running = new Map<number, () => void>();
  readonly cancelled = new Set<number>();
  readonly handedOut = new Set<Uint8Array>();
  readonly recycled = new Set<Uint8Array>();
  /** Every task as it was handed over, in order. */
  readonly tasks: Omit<ReadTask, 'buffer' | 'arenaOffset'>[] = [];
  doubleRecycles = 0;
  constructor(private readonly delayMs: number) {}

  async dispatch(task: Omit<ReadTask, 'id' | 'buffer' | 'arenaOffset'>, _bytes: number, signal: AbortSignal): Promise<{ result: Promise<ReadResult> }> {
    if (signal.aborted) throw signal.reason;
    const id = this.#next++;
    signal.addEventListener('abort', () => this.cancel(id), { once: true });
    return { result: this.run({ ...task, id }) };
  }
  run(task: Omit<ReadTask, 'buffer' | 'arenaOffset'>): Promise<ReadResult> {
    this.tasks.push(task);
    const bytes = (task.end - task.first) * task.keys.length * task.layerBytes;
    return new Promise((resolve) => {
      const finish = (): void => {
        this.running.delete(task.id);
        if (this.cancelled.has(task.id)) return resolve({ ok: false, code: 'OC_ERR_CANCELLED', message: 'cancelled', readAgain: false, requestId: task.requestId });
        const region = new Uint8Array(bytes);
        this.handedOut.add(region);
        const slices = (task.end - task.first) * task.keys.length;
        resolve({ ok: true, region, crcs: new Uint32Array(slices), etags: task.keys.map(() => '"e"'), reads: task.keys.length, retries: 0, readMs: 1, verified: true });
      };
      const timer = setTimeout(finish, this.delayMs);
      this.running.set(task.id, () => {
        clearTimeout(timer);
        finish();
      });
    });
  }
  cancel(id: number): void {
    this.cancelled.add(id);
    this.running.get(id)?.();
  }
  recycle(region: Uint8Array): void {
    if (this.recycled.has(region)) this.doubleRecycles++;
    this.recycled.add(region);
  }
}

function readAheadOf(
  runner: TaskRunner,
  budget: FifoBudget,
  signal: AbortSignal,
  chunks = 8,
  layers = 24,
  windowBytes = 64 * LAYER_BYTES,
): { readAhead: ReadAhead; units: Unit[] } {
  const plan = planLayerwise({
    layout: 'KV_L2TD',
    layerStart: 0,
    layerEnd: layers,
    layerBytes: LAYER_BYTES,
    chunks,
    readBytes: 4 * LAYER_BYTES,
    taskBytes: 8 * LAYER_BYTES,
    maxGroupBytes: 64 * LAYER_BYTES,
    firstGroupTasks: 4,
  });
  const units = planUnits(plan, true, 'layer-major', { layerBytes: LAYER_BYTES });
  const keys = Array.from({ length: chunks }, (_, c) => `kv/${c}`);
  const readAhead = new ReadAhead({
    pool: runner,
    plan,
    units,
    chunks: { requestId: 'r', bucket: 'b', keys, layout: 'KV_L2TD', layers, layerBytes: LAYER_BYTES },
    order: 'layer-major',
    windowBytes,
    budget,
    tasksInFlight: 4,
    firstUnitAlone: true,
    signal,
  });
  return { readAhead, units };
}

/** Sends every unit as serve-descriptor-get.ts does: wait for it, release it, recycle its blocks. */
async function consume(readAhead: ReadAhead, units: readonly Unit[]): Promise<number> {
  let bytes = 0;
  for (let u = 0; u < units.length; u++) {
    const reads = await readAhead.unit(u);
    bytes += reads.reduce((sum, r) => sum + r.region.byteLength, 0);
    readAhead.release(u);
    readAhead.recycle(u);
  }
  return bytes;
}

describe('ReadAhead', () => {
  it('serves two requests whose windows together exceed the shared budget, to the end, without deadlock', async () => {
    const runner = new ScriptedRunner(2);
    // The budget holds one request's window and a bit: the two must take turns by unit.
    const budget = new FifoBudget(80 * LAYER_BYTES);
    const a = readAheadOf(runner, budget, new AbortController().signal);
    const b = readAheadOf(runner, budget, new AbortController().signal);
    const done = Promise.all([consume(a.readAhead, a.units), consume(b.readAhead, b.units)]);
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('deadlock: the requests did not finish within 10 s')), 10_000));
    const [bytesA, bytesB] = (await Promise.race([done, timeout])) as [number, number];
    expect(bytesA).toBe(8 * 24 * LAYER_BYTES);
    expect(bytesB).toBe(8 * 24 * LAYER_BYTES);
    await Promise.all([a.readAhead.close(), b.readAhead.close()]);
    expect(budget.used).toBe(0);
    expect(runner.recycled.size).toBe(runner.handedOut.size);
    expect(runner.doubleRecycles).toBe(0);
  });

  it('cancelled mid-group, ends what runs, gives every block back once and holds no budget', async () => {
    const runner = new ScriptedRunner(20);
    const budget = new FifoBudget(1024 * LAYER_BYTES);
    const client = new AbortController();
    const { readAhead, units } = readAheadOf(runner, budget, client.signal);
    // Unit 0 sent; unit 1's tasks are in flight when the client leaves.
    await readAhead.unit(0);
    readAhead.release(0);
    readAhead.recycle(0);
    await new Promise((r) => setTimeout(r, 5));
    expect(runner.running.size).toBeGreaterThan(0);
    client.abort(new Error('client gone'));
    await expect(readAhead.unit(units.length - 1)).rejects.toThrow();
    await readAhead.close();
    expect(runner.running.size).toBe(0);
    expect(runner.cancelled.size).toBeGreaterThan(0);
    expect(budget.used).toBe(0);
    // Blocks of tasks that finished before the cancellation went back too, each once.
    expect(runner.recycled.size).toBe(runner.handedOut.size);
    expect(runner.doubleRecycles).toBe(0);
  });

  it("hands the pool each planned task as a worker task: its chunks' keys and position, its layers, the order, the request, and the pins once known", async () => {
    const runner = new ScriptedRunner(1);
    const { readAhead, units } = readAheadOf(runner, new FifoBudget(1024 * LAYER_BYTES), new AbortController().signal, 8, 6);
    await consume(readAhead, units);
    await readAhead.close();
    const plan = planLayerwise({
      layout: 'KV_L2TD',
      layerStart: 0,
      layerEnd: 6,
      layerBytes: LAYER_BYTES,
      chunks: 8,
      readBytes: 4 * LAYER_BYTES,
      taskBytes: 8 * LAYER_BYTES,
      maxGroupBytes: 64 * LAYER_BYTES,
      firstGroupTasks: 4,
    });
    expect(runner.tasks.map((t) => [t.first, t.end, t.chunkOffset, t.keys.join(',')])).toEqual(
      plan.tasks.map((t) => [t.first, t.end, t.chunkStart, Array.from({ length: t.chunkEnd - t.chunkStart }, (_, i) => `kv/${t.chunkStart + i}`).join(',')]),
    );
    for (const task of runner.tasks) expect(task).toMatchObject({ requestId: 'r', bucket: 'b', layout: 'KV_L2TD', layers: 6, layerBytes: LAYER_BYTES, order: 'layer-major' });
    // The first unit reads every chunk unpinned; every later task carries its chunks' ETags.
    const firstUnit = units[0]?.to ?? 0;
    expect(runner.tasks.slice(0, firstUnit).every((t) => t.etags === undefined)).toBe(true);
    expect(runner.tasks.slice(firstUnit).every((t) => t.etags?.length === t.keys.length && t.etags.every((e) => e === '"e"'))).toBe(true);
  });

  it('cancelled while a unit is half dispatched, gives back the blocks of its tasks that had finished', async () => {
    // The window runs out in the middle of a unit: some of its tasks have answered, the rest
    // wait for room that never comes because nothing is sent. Those answered tasks belong to no
    // complete unit, and their blocks must still go back when the request ends.
    const runner = new ScriptedRunner(1);
    const budget = new FifoBudget(1024 * LAYER_BYTES);
    const client = new AbortController();
    const { readAhead, units } = readAheadOf(runner, budget, client.signal, 16, 24, 100 * LAYER_BYTES);
    await readAhead.unit(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(runner.running.size).toBe(0); // stalled on the window, every dispatched task answered
    const stalled = units.findIndex((unit) => unit.from < runner.tasks.length && runner.tasks.length < unit.to);
    expect(stalled).toBeGreaterThan(0); // a unit is half dispatched
    client.abort(new Error('client gone'));
    await readAhead.close();
    expect(budget.used).toBe(0);
    expect(runner.recycled.size).toBe(runner.handedOut.size);
    expect(runner.doubleRecycles).toBe(0);
  });

  it('gives a block back once even when a unit is recycled twice (frame flushed, then close)', async () => {
    const runner = new ScriptedRunner(1);
    const budget = new FifoBudget(1024 * LAYER_BYTES);
    const { readAhead, units } = readAheadOf(runner, budget, new AbortController().signal, 4, 6);
    await consume(readAhead, units);
    for (let u = 0; u < units.length; u++) readAhead.recycle(u);
    await readAhead.close();
    expect(runner.doubleRecycles).toBe(0);
    expect(runner.recycled.size).toBe(runner.handedOut.size);
  });
});
