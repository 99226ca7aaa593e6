/**
 * The bandwidth scheduler as pure functions: allocation properties on random instances (the cap
 * is never exceeded, caps are respected, the KKT condition holds, the objective matches a
 * brute-force optimum within 0.1%), each policy on hand-computed cases, epoch semantics with an
 * injected clock, pacing arithmetic, and rate parsing.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allocate, waterFill, zeroStallRate, type AllocationRequest } from '../gateway/descriptor-get/scheduler/allocate.js';
import { EpochScheduler, type Clock } from '../gateway/descriptor-get/scheduler/epoch-scheduler.js';
import { Pacer } from '../gateway/descriptor-get/scheduler/pacer.js';
import { parseRate } from '../gateway/common/rate.js';

const GB = 1e9;

const requestArb = fc.record({
  bytesPerLayer: fc.integer({ min: 1_000, max: 500_000_000 }),
  computeMsPerLayer: fc.option(fc.double({ min: 0.5, max: 300, noNaN: true }), { nil: undefined }),
});

function objective(requests: readonly AllocationRequest[], rates: readonly number[]): number {
  return requests.reduce((sum, r, i) => sum + r.bytesPerLayer / (rates[i] as number), 0);
}

/** min sum s_i / r_i, sum r_i <= B, r_i <= cap_i, by exhaustive grid (n = 2 or 3). */
function bruteForce(weights: number[], caps: number[], B: number): number {
  const f = (rates: number[]): number => rates.reduce((sum, r, i) => sum + (weights[i] as number) / r, 0);
  let best = Number.POSITIVE_INFINITY;
  const steps = weights.length === 2 ? 200_000 : 1500;
  const c0 = Math.min(caps[0] as number, B);
  for (let a = 1; a <= steps; a++) {
    const r0 = (c0 * a) / steps;
    if (weights.length === 2) {
      const r1 = Math.min(caps[1] as number, B - r0);
      if (r1 > 0) best = Math.min(best, f([r0, r1]));
      continue;
    }
    const c1 = Math.min(caps[1] as number, B - r0);
    for (let b = 1; b <= steps; b++) {
      const r1 = (c1 * b) / steps;
      const r2 = Math.min(caps[2] as number, B - r0 - r1);
      if (r2 > 0) best = Math.min(best, f([r0, r1, r2]));
    }
  }
  return best;
}

describe('allocate: properties on random instances', () => {
  it('never exceeds the cap, respects the caps, and satisfies KKT (s_i / r_i^2 equal for uncapped)', () => {
    fc.assert(
      fc.property(
        fc.array(requestArb, { minLength: 1, maxLength: 12 }),
        fc.double({ min: 0.1 * GB, max: 20 * GB, noNaN: true }),
        fc.constantFrom('stall-opt', 'cal-stall-opt'),
        fc.double({ min: 0, max: 2 * GB, noNaN: true }),
        (raw, B, policy, delta) => {
          const requests = raw.map((r, i) => ({ id: String(i), ...r }));
          const result = allocate(requests, { capBytesPerSec: B, policy: policy, marginBytesPerSec: delta });
          const rates = result.map((a) => a.rateBytesPerSec);
          const total = rates.reduce((a, b) => a + b, 0);
          expect(total).toBeLessThanOrEqual(B * (1 + 1e-9));
          const caps = requests.map((r) => zeroStallRate(r) + (policy === 'cal-stall-opt' ? delta : 0));
          rates.forEach((rate, i) => {
            expect(rate).toBeGreaterThan(0);
            expect(rate).toBeLessThanOrEqual((caps[i] as number) * (1 + 1e-9));
          });
          const capsFit = caps.reduce((a, b) => a + b, 0) <= B;
          if (capsFit) rates.forEach((rate, i) => expect(rate).toBeCloseTo(caps[i] as number, 0));
          else expect(total).toBeCloseTo(B, -1);
          const uncapped = rates.map((rate, i) => ({ rate, i })).filter(({ rate, i }) => rate < (caps[i] as number) * (1 - 1e-9));
          const lambdas = uncapped.map(({ rate, i }) => (requests[i]?.bytesPerLayer as number) / (rate * rate));
          for (const l of lambdas) expect(Math.abs(l - (lambdas[0] as number)) / (lambdas[0] as number)).toBeLessThan(1e-6);
          // Capped requests would gain less than the water level from more bandwidth (KKT).
          if (lambdas.length > 0) {
            rates.forEach((rate, i) => {
              if (rate >= (caps[i] as number) * (1 - 1e-9))
                expect((requests[i]?.bytesPerLayer as number) / (rate * rate)).toBeGreaterThanOrEqual((lambdas[0] as number) * (1 - 1e-6));
            });
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('matches a brute-force optimum within 0.1%', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ s: fc.integer({ min: 1_000_000, max: 100_000_000 }), c: fc.double({ min: 1, max: 100, noNaN: true }) }), { minLength: 2, maxLength: 3 }),
        fc.double({ min: 0.05 * GB, max: 5 * GB, noNaN: true }),
        (raw, B) => {
          const requests = raw.map((r, i) => ({ id: String(i), bytesPerLayer: r.s, computeMsPerLayer: r.c }));
          const caps = requests.map(zeroStallRate);
          const ours = objective(
            requests,
            allocate(requests, { capBytesPerSec: B, policy: 'stall-opt', marginBytesPerSec: 0 }).map((a) => a.rateBytesPerSec),
          );
          const best = bruteForce(
            requests.map((r) => r.bytesPerLayer),
            caps,
            B,
          );
          expect(ours).toBeLessThanOrEqual(best * (1 + 1e-9));
          expect((best - ours) / best).toBeLessThan(0.001);
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('allocate: each policy on hand-computed cases', () => {
  // s = 30, 60, 90 MB per layer; c = 10, 10, 90 ms: r* = 3, 6, 1 GB/s.
  const requests: AllocationRequest[] = [
    { id: 'a', bytesPerLayer: 30e6, computeMsPerLayer: 10 },
    { id: 'b', bytesPerLayer: 60e6, computeMsPerLayer: 10 },
    { id: 'c', bytesPerLayer: 90e6, computeMsPerLayer: 90 },
  ];
  const rates = (policy: 'equal' | 'kv-prop' | 'bw-prop' | 'stall-opt' | 'cal-stall-opt', B: number, delta = 0): number[] =>
    allocate(requests, { capBytesPerSec: B, policy, marginBytesPerSec: delta }).map((a) => Math.round(a.rateBytesPerSec / 1e6));

  it('Equal splits the cap evenly', () => expect(rates('equal', 6 * GB)).toEqual([2000, 2000, 2000]));
  it('KV-prop splits in proportion to bytes', () => expect(rates('kv-prop', 6 * GB)).toEqual([1000, 2000, 3000]));
  it('BW-prop splits in proportion to zero-stall rates', () => expect(rates('bw-prop', 5 * GB)).toEqual([1500, 3000, 500]));
  it('Stall-opt gives every request its zero-stall rate when they fit, and no more', () => {
    expect(rates('stall-opt', 20 * GB)).toEqual([3000, 6000, 1000]);
  });
  it('Stall-opt water-fills a tight cap: c capped at 1 GB/s, a and b share 4 GB/s by sqrt(s)', () => {
    // sqrt(30):sqrt(60) = 1:1.414 of 4 GB/s -> 1657 and 2343; both below their caps 3000 and 6000.
    expect(rates('stall-opt', 5 * GB)).toEqual([1657, 2343, 1000]);
    const stall = allocate(requests, { capBytesPerSec: 5 * GB, policy: 'stall-opt', marginBytesPerSec: 0 });
    expect(stall[2]?.predictedStallMsPerLayer).toBeCloseTo(0, 6);
    expect(stall[0]?.predictedStallMsPerLayer).toBeCloseTo((30e6 / 1.657e9) * 1000 - 10, 0);
  });
  it('Calibrated Stall-opt adds the margin to every cap', () => {
    expect(rates('cal-stall-opt', 20 * GB, 0.5 * GB)).toEqual([3500, 6500, 1500]);
    // Tight: c capped at 1.5 GB/s, a and b share 3.5 GB/s by sqrt(s).
    expect(rates('cal-stall-opt', 5 * GB, 0.5 * GB)).toEqual([1450, 2050, 1500]);
  });
  it('serves a request without a compute window as bandwidth-hungry', () => {
    const hungry = allocate(
      [
        { id: 'h', bytesPerLayer: 40e6 },
        { id: 'a', bytesPerLayer: 10e6, computeMsPerLayer: 10 },
      ],
      { capBytesPerSec: 4 * GB, policy: 'stall-opt', marginBytesPerSec: 0 },
    );
    // a's cap is 1 GB/s; sqrt share would give a 4*1/3 = 1.33 > 1, so a is capped and h takes the rest.
    expect(hungry.map((a) => Math.round(a.rateBytesPerSec / 1e6))).toEqual([3000, 1000]);
  });
  it('water-fills with zero weights and infinite caps', () => {
    expect(waterFill([4, 1], [Infinity, Infinity], 3)).toEqual([2, 1]);
  });
});

class FakeClock implements Clock {
  time = 0;
  #timers: { at: number; fn: () => void; id: number }[] = [];
  #next = 0;
  now(): number {
    return this.time;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.#next;
    this.#timers.push({ at: this.time + ms, fn, id });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.#timers = this.#timers.filter((t) => t.id !== handle);
  }
  async advance(ms: number): Promise<void> {
    const end = this.time + ms;
    for (;;) {
      this.#timers.sort((a, b) => a.at - b.at);
      const due = this.#timers[0];
      if (!due || due.at > end) break;
      this.#timers.shift();
      this.time = due.at;
      due.fn();
      await Promise.resolve();
    }
    this.time = end;
    await new Promise((r) => setImmediate(r));
  }
}

describe('EpochScheduler', () => {
  const base = { policy: 'equal' as const, marginBytesPerSec: 0, epochMs: 100 };

  it('admits pending requests as a batch at the next epoch boundary', async () => {
    const clock = new FakeClock();
    const scheduler = new EpochScheduler({ ...base, capBytesPerSec: 900, clock });
    const granted: string[] = [];
    void scheduler.schedule({ id: 'a', tenant: 't', bytesPerLayer: 1 }).then((g) => granted.push(`a@${g.epoch}:${g.rateBytesPerSec}`));
    await clock.advance(40);
    void scheduler.schedule({ id: 'b', tenant: 't', bytesPerLayer: 1 }).then((g) => granted.push(`b@${g.epoch}:${g.rateBytesPerSec}`));
    await clock.advance(59);
    expect(granted).toEqual([]);
    await clock.advance(1);
    expect(granted).toEqual(['a@1:450', 'b@1:450']);
    expect(scheduler.snapshot().capInUseBytesPerSec).toBe(900);
  });

  it('allocates a later batch only from the budget in-flight requests do not hold, and keeps in-flight rates', async () => {
    const clock = new FakeClock();
    const scheduler = new EpochScheduler({ ...base, capBytesPerSec: 1000, minRateBytesPerSec: 100, clock });
    const a = scheduler.schedule({ id: 'a', tenant: 't', bytesPerLayer: 1 });
    await clock.advance(100);
    expect((await a).rateBytesPerSec).toBe(1000);
    const b = scheduler.schedule({ id: 'b', tenant: 't', bytesPerLayer: 1 });
    let bGrant: number | undefined;
    void b.then((g) => (bGrant = g.rateBytesPerSec));
    await clock.advance(300);
    expect(bGrant).toBeUndefined(); // nothing is free while a holds the whole cap
    scheduler.release('a');
    expect(bGrant).toBeUndefined(); // released bandwidth returns at the next boundary, not at once
    await clock.advance(100);
    expect(bGrant).toBe(1000);
    expect(scheduler.snapshot().active.map((x) => x.id)).toEqual(['b']);
  });

  it('never exceeds the cap and admits in arrival order (no starvation)', async () => {
    const clock = new FakeClock();
    const scheduler = new EpochScheduler({ ...base, capBytesPerSec: 1000, minRateBytesPerSec: 250, clock });
    const order: string[] = [];
    const ids = Array.from({ length: 10 }, (_, i) => `r${i}`);
    for (const id of ids) void scheduler.schedule({ id, tenant: 't', bytesPerLayer: 1 }).then(() => order.push(id));
    for (let epoch = 0; epoch < 10 && order.length < ids.length; epoch++) {
      await clock.advance(100);
      expect(scheduler.snapshot().capInUseBytesPerSec).toBeLessThanOrEqual(1000);
      // Each admitted load finishes one epoch later.
      for (const a of scheduler.snapshot().active) scheduler.release(a.id);
    }
    expect(order).toEqual(ids);
  });

  it('refuses pending and new requests with OC_ERR_SCHEDULER_CLOSED once closed (retryable: another gateway may admit them)', async () => {
    const clock = new FakeClock();
    const scheduler = new EpochScheduler({ ...base, capBytesPerSec: 1000, clock });
    const pending = scheduler.schedule({ id: 'waiting', tenant: 't', bytesPerLayer: 1 });
    scheduler.close();
    await expect(pending).rejects.toMatchObject({ code: 'OC_ERR_SCHEDULER_CLOSED', retryable: true, status: 503 });
    await expect(scheduler.schedule({ id: 'late', tenant: 't', bytesPerLayer: 1 })).rejects.toMatchObject({ code: 'OC_ERR_SCHEDULER_CLOSED' });
  });

  it('drops a pending request whose client went away', async () => {
    const clock = new FakeClock();
    const scheduler = new EpochScheduler({ ...base, capBytesPerSec: 1000, clock });
    const controller = new AbortController();
    const pending = scheduler.schedule({ id: 'gone', tenant: 't', bytesPerLayer: 1 }, controller.signal);
    controller.abort(new Error('client gone'));
    await expect(pending).rejects.toThrow('client gone');
    await clock.advance(100);
    expect(scheduler.snapshot().active).toEqual([]);
  });
});

describe('Pacer', () => {
  it('spaces sends at the granted rate', async () => {
    const clock = new FakeClock();
    const pacer = new Pacer(1000, clock); // 1000 bytes per second
    const resolved: boolean[] = [false, false, false];
    void pacer.take(500).then(() => (resolved[0] = true)); // starts at 0; the link is busy until 500 ms
    void pacer.take(500).then(() => (resolved[1] = true)); // starts at 500
    void pacer.take(1000).then(() => (resolved[2] = true)); // starts at 1000
    await clock.advance(0);
    expect(resolved).toEqual([true, false, false]);
    await clock.advance(499);
    expect(resolved).toEqual([true, false, false]);
    await clock.advance(1);
    expect(resolved).toEqual([true, true, false]);
    await clock.advance(500);
    expect(resolved).toEqual([true, true, true]);
  });
});

describe('parseRate', () => {
  it('accepts the documented units (decimal G = 1e9, binary GiB)', () => {
    expect(parseRate('80Gbps')).toBe(10e9);
    expect(parseRate('100 Mbps')).toBe(12.5e6);
    expect(parseRate('2.5GB/s')).toBe(2.5e9);
    expect(parseRate('500MB/s')).toBe(500e6);
    expect(parseRate('1GiB/s')).toBe(1024 ** 3);
    expect(parseRate('512MiB/s')).toBe(512 * 1024 ** 2);
    expect(parseRate('12345')).toBe(12345);
    for (const bad of ['fast', '10 furlongs', '-5Gbps', '']) expect(typeof parseRate(bad)).toBe('string');
  });
});
