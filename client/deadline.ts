/**
 * One call's overall deadline (the client's `deadlineMs`): a signal that aborts at its time (or
 * with the caller's own signal), and the error a call cut off by it fails with.
 */
import { ObjectCacheError } from '../schemas/errors.js';

/** The default of `deadlineMs`: 5 minutes. */
export const DEFAULT_DEADLINE_MS = 300_000;

export class Deadline {
  readonly signal: AbortSignal;
  readonly #timer: AbortSignal;
  readonly #ms: number;
  readonly #what: string;
  readonly #at: number;
  constructor(ms: number, what: string, outer?: AbortSignal) {
    this.#ms = ms;
    this.#what = what;
    this.#at = performance.now() + ms;
    this.#timer = AbortSignal.timeout(ms);
    this.signal = outer ? AbortSignal.any([outer, this.#timer]) : this.#timer;
  }

  get expired(): boolean {
    return this.#timer.aborted;
  }

  /** What is left of it, in ms (0 once passed). */
  remainingMs(): number {
    return Math.max(0, this.#at - performance.now());
  }

  /** OC_ERR_CLIENT_TIMEOUT in place of whatever a call cut off by its deadline failed with. */
  error(cause?: unknown): ObjectCacheError {
    return new ObjectCacheError('OC_ERR_CLIENT_TIMEOUT', `${this.#what} did not finish within its deadline of ${this.#ms} ms`, cause !== undefined ? { cause } : {});
  }

  /** Runs `op`; a failure after the deadline passed is the deadline's. */
  async run<T>(op: (signal: AbortSignal) => Promise<T>): Promise<T> {
    try {
      return await op(this.signal);
    } catch (error) {
      if (this.expired) throw this.error(error);
      throw error;
    }
  }
}

/** A deadline in ms, checked: `given` when set, else `fallback`. */
export function deadlineOf(given: number | undefined, fallback: number): number {
  if (given === undefined) return fallback;
  // Node's timers take whole milliseconds up to 2^31 - 1 (24.8 days); past that one fires at once.
  if (!Number.isSafeInteger(given) || given <= 0 || given > 2 ** 31 - 1)
    throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', `deadlineMs must be a whole number of milliseconds from 1 to 2147483647, got ${given}`);
  return given;
}
