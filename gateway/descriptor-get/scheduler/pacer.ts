/**
 * Paced delivery: each layerwise stream sends at its granted rate (a virtual-clock pacer, which
 * for fixed rates whose sum is at most the cap delivers what weighted deficit round robin
 * would: every stream its rate, the link at most B). Sends are cut into slices so one large layer
 * does not burst; socket backpressure is still honoured by the writer.
 */
import type { Clock } from './epoch-scheduler.js';
import { systemClock } from './epoch-scheduler.js';

/** Largest burst sent without waiting. */
export const PACE_SLICE_BYTES = 256 * 1024;

export class Pacer {
  readonly rateBytesPerSec: number;
  readonly #clock: Clock;
  /** When (clock ms) the link of this stream is free again. */
  #next: number;

  constructor(rateBytesPerSec: number, clock: Clock = systemClock) {
    this.rateBytesPerSec = rateBytesPerSec;
    this.#clock = clock;
    this.#next = clock.now();
  }

  /** Waits until `bytes` may be sent at the granted rate. */
  async take(bytes: number): Promise<void> {
    if (!Number.isFinite(this.rateBytesPerSec)) return;
    const now = this.#clock.now();
    const start = Math.max(now, this.#next);
    this.#next = start + (bytes / this.rateBytesPerSec) * 1000;
    const wait = start - now;
    if (wait < 1) return;
    // The writer checks after each slice whether the client is still there.
    await new Promise<void>((resolve) => this.#clock.setTimeout(resolve, wait));
  }
}
