/**
 * First layers first (docs/layerwise-get.md, Streamed reads): while any layerwise GET waits for its first layer
 * group, streamed GETs get no new layer buffers, so their held-open responses stay paused and
 * leave the store, the read worker and the cores to the reads a client's first compute waits on.
 * Measured without it: next to one streamed GET, three grouped ones had their first layer at a
 * median 3.8 s against 1.0 s with all four grouped.
 */
/** The gate as the data path uses it: a FirstLayerGate in one process, the primary's with several. */
export interface FirstLayers {
  /** A GET starts reading its first layer group; call the result once it is in (or failed), once. */
  begin(): () => void;
  /** Runs `go` once no GET waits for its first layer group, or after the gate's longest hold. */
  whenClear(go: () => void): void;
}

export class FirstLayerGate implements FirstLayers {
  /** The longest a streamed GET's layer buffer is held back. */
  readonly maxHoldMs: number;
  #pending = 0;
  #waiting: (() => void)[] = [];

  constructor(maxHoldMs = 1000) {
    this.maxHoldMs = maxHoldMs;
  }

  /** A GET starts reading its first layer group; call the result once it is in (or failed), once. */
  begin(): () => void {
    this.#pending++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#pending--;
      if (this.#pending === 0) {
        const waiting = this.#waiting;
        this.#waiting = [];
        for (const go of waiting) go();
      }
    };
  }

  /**
   * Runs `go` now if no GET waits for its first layer group, else once none does or after
   * `maxHoldMs`, whichever comes first: a GET waiting for its first layers may itself wait for
   * byte budget a held-back streamed GET would release, and under steady arrivals the gate might
   * never clear, so nothing is held back for long.
   */
  whenClear(go: () => void, maxHoldMs = this.maxHoldMs): void {
    if (this.#pending === 0) return go();
    let timer: NodeJS.Timeout | undefined;
    const once = (): void => {
      if (timer === undefined) return;
      clearTimeout(timer);
      timer = undefined;
      go();
    };
    timer = setTimeout(() => {
      this.#waiting = this.#waiting.filter((w) => w !== once);
      once();
    }, maxHoldMs);
    timer.unref();
    this.#waiting.push(once);
  }

  get pending(): number {
    return this.#pending;
  }
}
