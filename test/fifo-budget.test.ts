import { describe, expect, it } from 'vitest';
import { FifoBudget } from '../gateway/common/fifo-budget.js';

describe('FifoBudget', () => {
  it('grants in FIFO order within capacity, and one oversized grant when nothing is held', async () => {
    const budget = new FifoBudget(100);
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
    const budget = new FifoBudget(10);
    await budget.acquire(10);
    const controller = new AbortController();
    const waiting = budget.acquire(5, controller.signal);
    controller.abort(new Error('client gone'));
    await expect(waiting).rejects.toThrow('client gone');
    await expect(budget.acquire(1, controller.signal)).rejects.toThrow('client gone');
    budget.release(10);
    expect(budget.used).toBe(0);
  });
});
