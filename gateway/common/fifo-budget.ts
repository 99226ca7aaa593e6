/**
 * A budget of units taken and given back in FIFO order: bytes read but not yet sent (per request
 * and gateway-wide, docs/layerwise-get.md, Read-ahead, so memory stays flat under load), a
 * request's task slots in the worker pool, stream tasks and chunk streams. Acquisition waits in
 * FIFO order, so nobody starves; a single grant larger than the budget is allowed when nothing
 * else is held, so one oversized task cannot deadlock a request.
 */

/**
 * The gateway-wide budget of bytes read and not yet sent, as the data path uses it: a FifoBudget
 * in one process, the primary's through gateway/cluster/remote.ts with several.
 */
export interface ByteBudget {
  acquire(units: number, signal?: AbortSignal): Promise<void>;
  release(units: number): void;
}

interface Waiter {
  readonly units: number;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export class FifoBudget implements ByteBudget {
  readonly capacity: number;
  #used = 0;
  readonly #waiters: Waiter[] = [];

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get used(): number {
    return this.#used;
  }

  #fits(units: number): boolean {
    return this.#used === 0 || this.#used + units <= this.capacity;
  }

  /** Takes `units` at once if they fit and nobody waits; never waits. */
  tryAcquire(units: number): boolean {
    if (this.#waiters.length > 0 || this.#used + units > this.capacity) return false;
    this.#used += units;
    return true;
  }

  acquire(units: number, signal?: AbortSignal): Promise<void> {
    // An 'abort' listener added after the fact never fires: refuse at once.
    if (signal?.aborted) return Promise.reject(signal.reason as unknown);
    if (this.#waiters.length === 0 && this.#fits(units)) {
      this.#used += units;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        units,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        reject,
      };
      const onAbort = (): void => {
        const at = this.#waiters.indexOf(waiter);
        if (at !== -1) this.#waiters.splice(at, 1);
        reject(signal?.reason as unknown);
        this.#grant();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  release(units: number): void {
    this.#used = Math.max(0, this.#used - units);
    this.#grant();
  }

  #grant(): void {
    while (this.#waiters.length > 0) {
      const head = this.#waiters[0] as Waiter;
      if (!this.#fits(head.units)) return;
      this.#waiters.shift();
      this.#used += head.units;
      head.resolve();
    }
  }
}
