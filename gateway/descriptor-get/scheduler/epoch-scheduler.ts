/**
 * Epoch admission of layerwise requests (section 3.6 of the paper, docs/references.md; docs/scheduler.md).
 *
 * - Requests wait for the next epoch boundary and are scheduled there as a batch.
 * - A batch is allocated (by the policy) from the budget that in-flight requests do not hold.
 * - A request keeps its rate for its whole load; bandwidth released by a finished request returns
 *   to the pool at the next boundary, never to requests already in flight.
 * - The sum of granted rates never exceeds the cap B.
 *
 * No request waits forever. The rule: pending requests are scheduled strictly in arrival order;
 * at a boundary the oldest k are scheduled, k being as many as the free budget can give at least
 * `minRate` each (when anything is pending, at least the oldest one once the free budget reaches
 * `minRate`). Every in-flight request holds a positive rate for a finite load, so it finishes in
 * finite time and returns its rate; the free budget therefore reaches `minRate` again after finite
 * time, and since no later arrival can overtake, every pending request is scheduled after at most
 * the loads ahead of it have finished. With `minRate = B / maxConcurrent`, at most
 * `maxConcurrent` requests are ever in flight.
 */
import { ObjectCacheError } from '../../../schemas/errors.js';
import { allocate, type Allocation } from './allocate.js';
import type { Policy } from '../../common/config.js';
import type { SchedulerSnapshot } from '../../common/observers.js';

function closedError(): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_SCHEDULER_CLOSED', 'The gateway is shutting down: no more layerwise GETs are admitted');
}

export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export interface SchedulerOptions {
  /** B, bytes per second. */
  readonly capBytesPerSec: number;
  readonly policy: Policy;
  readonly marginBytesPerSec: number;
  readonly epochMs: number;
  /** The smallest rate a request is scheduled with (default B / 64). */
  readonly minRateBytesPerSec?: number;
  readonly clock?: Clock;
}

export interface LoadRequest {
  readonly id: string;
  readonly tenant: string;
  readonly bytesPerLayer: number;
  readonly computeMsPerLayer?: number | undefined;
}

export interface Grant extends Allocation {
  readonly epoch: number;
  readonly waitedMs: number;
}

interface Pending {
  readonly request: LoadRequest;
  readonly arrived: number;
  readonly resolve: (grant: Grant) => void;
  readonly reject: (error: unknown) => void;
}

interface Active {
  readonly request: LoadRequest;
  readonly grant: Grant;
}

/** The scheduler as a layerwise GET uses it: an EpochScheduler in one process, the primary's with several. */
export interface Scheduling {
  /** Resolves at the epoch boundary that schedules the request, with its granted rate. */
  schedule(request: LoadRequest, signal?: AbortSignal): Promise<Grant>;
  /** The load finished (or failed): its rate returns to the pool at the next boundary. */
  release(id: string): void;
}

export class EpochScheduler implements Scheduling {
  readonly options: SchedulerOptions;
  readonly #clock: Clock;
  readonly #start: number;
  readonly #pending: Pending[] = [];
  readonly #active = new Map<string, Active>();
  #epoch = 0;
  #timer: unknown;
  #closed = false;

  constructor(options: SchedulerOptions) {
    if (!(options.capBytesPerSec > 0) || !(options.epochMs > 0)) throw new RangeError('the cap and the epoch length must be positive');
    this.options = options;
    this.#clock = options.clock ?? systemClock;
    this.#start = this.#clock.now();
  }

  get #minRate(): number {
    return this.options.minRateBytesPerSec ?? this.options.capBytesPerSec / 64;
  }

  /** Resolves at the epoch boundary that schedules the request, with its granted rate. */
  schedule(request: LoadRequest, signal?: AbortSignal): Promise<Grant> {
    if (this.#closed) return Promise.reject(closedError());
    if (signal?.aborted) return Promise.reject(signal.reason as unknown);
    return new Promise<Grant>((resolve, reject) => {
      const entry: Pending = { request, arrived: this.#clock.now(), resolve, reject };
      this.#pending.push(entry);
      signal?.addEventListener(
        'abort',
        () => {
          const at = this.#pending.indexOf(entry);
          if (at !== -1) {
            this.#pending.splice(at, 1);
            reject(signal.reason as unknown);
          }
        },
        { once: true },
      );
      this.#arm();
    });
  }

  /** The load finished (or failed): its rate returns to the pool at the next boundary. */
  release(id: string): void {
    this.#active.delete(id);
    this.#arm();
  }

  snapshot(): SchedulerSnapshot {
    const active = [...this.#active.values()].map(({ request, grant }) => ({
      id: request.id,
      tenant: request.tenant,
      rateBytesPerSec: grant.rateBytesPerSec,
      predictedStallMsPerLayer: grant.predictedStallMsPerLayer,
    }));
    return {
      epoch: this.#epoch,
      capBytesPerSec: this.options.capBytesPerSec,
      capInUseBytesPerSec: active.reduce((sum, a) => sum + a.rateBytesPerSec, 0),
      pending: this.#pending.length,
      active,
    };
  }

  /** Schedules the next boundary if anything is pending and no boundary is scheduled. */
  #arm(): void {
    if (this.#timer !== undefined || this.#pending.length === 0 || this.#closed) return;
    const elapsed = this.#clock.now() - this.#start;
    const next = (Math.floor(elapsed / this.options.epochMs) + 1) * this.options.epochMs;
    this.#timer = this.#clock.setTimeout(() => {
      this.#timer = undefined;
      this.#boundary();
    }, next - elapsed);
  }

  #boundary(): void {
    this.#epoch++;
    const inUse = [...this.#active.values()].reduce((sum, a) => sum + a.grant.rateBytesPerSec, 0);
    const free = Math.max(0, this.options.capBytesPerSec - inUse);
    const k = Math.min(this.#pending.length, Math.floor(free / this.#minRate + 1e-9));
    if (k > 0) {
      const batch = this.#pending.splice(0, k);
      const allocations = allocate(
        batch.map((p) => ({ id: p.request.id, bytesPerLayer: p.request.bytesPerLayer, computeMsPerLayer: p.request.computeMsPerLayer })),
        { capBytesPerSec: free, policy: this.options.policy, marginBytesPerSec: this.options.marginBytesPerSec },
      );
      const now = this.#clock.now();
      batch.forEach((p, i) => {
        const allocation = allocations[i] as Allocation;
        const grant: Grant = { ...allocation, epoch: this.#epoch, waitedMs: now - p.arrived };
        this.#active.set(p.request.id, { request: p.request, grant });
        p.resolve(grant);
      });
    }
    this.#arm();
  }

  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    for (const p of this.#pending.splice(0)) p.reject(closedError());
  }
}
