/**
 * A byte budget: read-ahead is bounded per request and in total (README, The layerwise GET: Read-ahead), so memory
 * stays flat under load. Acquisition waits in FIFO order; a single grant larger than the budget is
 * allowed when nothing else is held, so one oversized task cannot deadlock a request.
 *
 * A priority acquisition (a request's first layer group, which gates its client's first compute)
 * goes ahead of the ordinary waiters, in FIFO order among priority ones, so a new request's layer 0
 * does not queue behind earlier requests' read-ahead. bench:memory, 4 concurrent 16K GETs: median
 * layer 0 at 1.45 s against 1.99 s without it (16: 5.7 s against 6.1 s; the rest of that wait is
 * the shared worker pool and the two cores).
 */

interface Waiter {
  readonly bytes: number;
  readonly priority: boolean;
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

  acquire(bytes: number, signal?: AbortSignal, priority = false): Promise<void> {
    // An 'abort' listener added after the fact never fires: refuse at once.
    if (signal?.aborted) return Promise.reject(signal.reason);
    const ahead = priority ? this.#waiters.some((w) => w.priority) : this.#waiters.length > 0;
    if (!ahead && this.#fits(bytes)) {
      this.#used += bytes;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        bytes,
        priority,
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
      if (priority) {
        const firstOrdinary = this.#waiters.findIndex((w) => !w.priority);
        this.#waiters.splice(firstOrdinary === -1 ? this.#waiters.length : firstOrdinary, 0, waiter);
      } else {
        this.#waiters.push(waiter);
      }
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
