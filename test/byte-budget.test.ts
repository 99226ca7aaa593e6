import { describe, expect, it } from 'vitest';
import { ByteBudget } from '../gateway/layerwise/byte-budget.js';

describe('ByteBudget', () => {
  it('grants in FIFO order within capacity, and one oversized grant when nothing is held', async () => {
    const budget = new ByteBudget(100);
    await budget.acquire(60);
    const order: string[] = [];
    const a = budget.acquire(50).then(() => order.push('a'));
    const b = budget.acquire(10).then(() => order.push('b'));
    await Promise.resolve();
    expect(order).toEqual([]); // b fits, but waits behind a (FIFO, no starvation)
    budget.release(60);
    await Promise.all([a, b]);
    expect(order).toEqual(['a', 'b']);
    budget.release(60);
    expect(budget.used).toBe(0);
    await budget.acquire(500); // larger than the budget, but nothing else is held
    expect(budget.used).toBe(500);
  });

  it('rejects waiters on abort, and refuses at once when the signal is already aborted', async () => {
    const budget = new ByteBudget(10);
    await budget.acquire(10);
    const controller = new AbortController();
    const waiting = budget.acquire(5, controller.signal);
    controller.abort(new Error('client gone'));
    await expect(waiting).rejects.toThrow('client gone');
    await expect(budget.acquire(1, controller.signal)).rejects.toThrow('client gone');
    budget.release(10);
    expect(budget.used).toBe(0);
  });

  it("serves priority acquisitions (a request's first layer group) ahead of ordinary waiters, FIFO among themselves", async () => {
    const budget = new ByteBudget(100);
    await budget.acquire(100);
    const order: string[] = [];
    const ordinary = budget.acquire(40).then(() => order.push('ordinary'));
    const first = budget.acquire(30, undefined, true).then(() => order.push('first'));
    const second = budget.acquire(30, undefined, true).then(() => order.push('second'));
    budget.release(60);
    await Promise.all([first, second]);
    expect(order).toEqual(['first', 'second']);
    expect(budget.used).toBe(100);
    budget.release(60);
    await ordinary;
    expect(order).toEqual(['first', 'second', 'ordinary']);
    // A priority acquisition that fits is granted even while ordinary waiters wait.
    const waiting = budget.acquire(90);
    await budget.acquire(20, undefined, true);
    expect(budget.used).toBe(100);
    budget.release(100);
    await waiting;
    expect(budget.used).toBe(90);
  });
});
