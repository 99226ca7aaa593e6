/**
 * The primary's shared state as serving processes reach it (gateway/cluster/coordinator.ts and
 * remote.ts), wired through an in-process channel that delivers each message on a later tick, as
 * IPC does: what a process takes it holds until it gives it back or leaves, and a call it gave up
 * never leaves anything held.
 */
import { describe, expect, it } from 'vitest';
import { ObjectCacheError } from '../schemas/errors.js';
import { Coordinator } from '../gateway/cluster/coordinator.js';
import { RemoteShared } from '../gateway/cluster/remote.js';
import type { ToPrimary, ToServing } from '../gateway/cluster/messages.js';
import { loadServeConfig } from '../gateway/common/config.js';
import { createShared, type LocalShared } from '../gateway/pipeline/shared.js';
import { CLIENT_KEY, CLIENT_SECRET } from './helpers/gateway.js';

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

function primary(args: string[] = []): { shared: LocalShared; coordinator: Coordinator; join: (id: number) => RemoteShared } {
  const config = loadServeConfig(['--processes', '2', ...args], { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET });
  const shared = createShared(config);
  const coordinator = new Coordinator(shared);
  const join = (id: number): RemoteShared => {
    const remote = new RemoteShared({ send: (message: ToPrimary) => void setImmediate(() => coordinator.receive(id, message)) }, config.scheduler !== undefined);
    coordinator.join(id, {
      send: (message: ToServing) => void setImmediate(() => remote.receive(message)),
    });
    return remote;
  };
  return { shared, coordinator, join };
}

describe('the shared state across serving processes', () => {
  it("holds a key's layerwise slots across processes and gives them back when a process leaves", async () => {
    const { shared, coordinator, join } = primary(['--max-descriptor-gets', '4', '--max-descriptor-gets-per-key', '1']);
    const one = join(1);
    const two = join(2);
    const release = await one.slots.descriptorGet('k');
    await expect(two.slots.descriptorGet('k')).rejects.toMatchObject({ code: 'OC_ERR_KEY_CONCURRENCY', retryable: true });
    expect(shared.slots.descriptorGets).toBe(1);
    release();
    await tick();
    const again = await two.slots.descriptorGet('k');
    expect(coordinator.held(2)).toMatchObject({ descriptorGets: 1 });
    // Process 2 dies holding it: the slot is free for process 1.
    void again;
    coordinator.leave(2);
    expect(shared.slots.descriptorGets).toBe(0);
    await expect(one.slots.descriptorGet('k')).resolves.toBeTypeOf('function');
  });

  it('grants budget bytes in FIFO order across processes, and a grant given up gives its bytes back', async () => {
    const { shared, coordinator, join } = primary(['--max-buffered-bytes', String(100 * 1024 * 1024)]);
    const capacity = shared.budget.capacity;
    const one = join(1);
    const two = join(2);
    await one.budget.acquire(capacity);
    let granted = false;
    const waiting = two.budget.acquire(capacity / 2).then(() => (granted = true));
    await tick();
    await tick();
    expect(granted).toBe(false);
    one.budget.release(capacity);
    await waiting;
    expect(coordinator.held(2)).toMatchObject({ bytes: capacity / 2 });
    // A call given up while it waits leaves nothing held.
    const controller = new AbortController();
    const gaveUp = one.budget.acquire(capacity, controller.signal);
    await tick();
    controller.abort(new Error('client left'));
    await expect(gaveUp).rejects.toThrow('client left');
    two.budget.release(capacity / 2);
    for (let i = 0; i < 6; i++) await tick();
    expect(shared.budget.used).toBe(0);
    expect(coordinator.held(1)).toMatchObject({ bytes: 0, waiting: 0 });
  });

  it('gives back a grant that arrives after its call was given up', async () => {
    const { shared, join } = primary();
    const one = join(1);
    const controller = new AbortController();
    const call = one.budget.acquire(1024, controller.signal);
    // Given up after the primary granted it, before the grant arrived.
    await tick();
    controller.abort(new Error('gone'));
    await expect(call).rejects.toThrow('gone');
    for (let i = 0; i < 6; i++) await tick();
    expect(shared.budget.used).toBe(0);
  });

  it('never frees more bytes than a process holds', async () => {
    const { shared, join } = primary();
    const one = join(1);
    const two = join(2);
    await one.budget.acquire(4096);
    two.budget.release(4096); // process 2 holds none
    for (let i = 0; i < 4; i++) await tick();
    expect(shared.budget.used).toBe(4096);
  });

  it('schedules loads of every process under one cap, and a process that leaves frees its rates and its first-layer tickets', async () => {
    const { shared, coordinator, join } = primary(['--cap', '100MB/s', '--epoch-ms', '20']);
    const one = join(1);
    const two = join(2);
    const [a, b] = await Promise.all([
      one.scheduler?.schedule({ id: 'r1', tenant: 'a', bytesPerLayer: 1e6 }),
      two.scheduler?.schedule({ id: 'r1', tenant: 'b', bytesPerLayer: 1e6 }),
    ]);
    // The same request id in two processes is two loads; together they hold no more than the cap.
    expect((a?.rateBytesPerSec ?? 0) + (b?.rateBytesPerSec ?? 0)).toBeLessThanOrEqual(100e6 + 1);
    expect(shared.scheduler?.snapshot().active).toHaveLength(2);
    two.firstLayers.begin();
    await tick();
    let clear = false;
    one.firstLayers.whenClear(() => (clear = true));
    await tick();
    await tick();
    expect(clear).toBe(false);
    coordinator.leave(2);
    for (let i = 0; i < 4; i++) await tick();
    expect(clear).toBe(true);
    expect(shared.scheduler?.snapshot().active.map((x) => x.tenant)).toEqual(['a']);
  });

  it('fails waiting calls with a retryable error once the primary is gone', async () => {
    const { join } = primary();
    const one = join(1);
    const waiting = one.slots.request('k', 'signed');
    one.close();
    const error = await waiting.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ObjectCacheError);
    expect(error).toMatchObject({ code: 'OC_ERR_SCHEDULER_CLOSED', retryable: true });
    await expect(one.budget.acquire(1)).rejects.toMatchObject({ code: 'OC_ERR_SCHEDULER_CLOSED' });
  });
});
