/**
 * A byte budget: read-ahead is bounded per request and in total (README, The layerwise GET: Read-ahead), so memory
 * stays flat under load. Acquisition waits in FIFO order; a single grant larger than the budget is
 * allowed when nothing else is held, so one oversized task cannot deadlock a request.
 */

interface Waiter {
  readonly bytes: number;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export class ByteBudget {
  readonly capacity: number;
  #used = 0;
  readonly #waiters: Waiter[] = [];

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get used(): number {
    return this.#used;
  }

  #fits(bytes: number): boolean {
    return this.#used === 0 || this.#used + bytes <= this.capacity;
  }

  /** Takes `bytes` at once if they fit and nobody waits; never waits. */
  tryAcquire(bytes: number): boolean {
    if (this.#waiters.length > 0 || this.#used + bytes > this.capacity) return false;
    this.#used += bytes;
    return true;
  }

  acquire(bytes: number, signal?: AbortSignal): Promise<void> {
    // An 'abort' listener added after the fact never fires: refuse at once.
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#waiters.length === 0 && this.#fits(bytes)) {
      this.#used += bytes;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        bytes,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        reject,
      };
      const onAbort = (): void => {
        const at = this.#waiters.indexOf(waiter);
        if (at !== -1) this.#waiters.splice(at, 1);
        reject(signal?.reason);
        this.#grant();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  release(bytes: number): void {
    this.#used = Math.max(0, this.#used - bytes);
    this.#grant();
  }

  #grant(): void {
    while (this.#waiters.length > 0) {
      const head = this.#waiters[0] as Waiter;
      if (!this.#fits(head.bytes)) return;
      this.#waiters.shift();
      this.#used += head.bytes;
      head.resolve();
    }
  }
}
