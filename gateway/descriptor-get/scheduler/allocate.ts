/**
 * Bandwidth allocation among concurrent layerwise requests (section 3.6 and table A4 of the paper, docs/references.md;
 * docs/scheduler.md). Pure: a function of the requests, the cap and the policy.
 *
 * Request i moves s_i bytes per layer and computes c_i ms per layer. Its zero-stall rate is
 * r*_i = s_i / c_i; at rate r its per-layer stall is tau_i(r) = max(0, s_i/r - c_i).
 *
 * Stall-opt minimises sum_i s_i / r_i subject to sum_i r_i <= B and 0 < r_i <= cap_i (cap_i = r*_i;
 * Calibrated Stall-opt uses cap_i = r*_i + delta). The KKT conditions give water-filling:
 * r_i = min(cap_i, sqrt(s_i / lambda)), with lambda chosen so the rates use all of B, and every
 * request at its cap when the caps fit in B. Solved exactly here: sort by cap_i / sqrt(s_i);
 * requests whose cap is below the water level take their cap; the rest share what remains in
 * proportion to sqrt(s_i). No iteration, no tolerance.
 *
 * A request without a compute window is bandwidth-hungry: its zero-stall rate is unbounded.
 */
import type { Policy } from '../../common/config.js';

export interface AllocationRequest {
  readonly id: string;
  /** s_i: bytes delivered per layer (N * S). */
  readonly bytesPerLayer: number;
  /** c_i: compute time per layer in ms; absent for bandwidth-hungry requests. */
  readonly computeMsPerLayer?: number | undefined;
}

export interface AllocationOptions {
  /** B: bytes per second shared by the requests. */
  readonly capBytesPerSec: number;
  readonly policy: Policy;
  /** delta of Calibrated Stall-opt, bytes per second. */
  readonly marginBytesPerSec: number;
}

export interface Allocation {
  readonly id: string;
  readonly rateBytesPerSec: number;
  /** tau_i at the granted rate (for a bandwidth-hungry request: its whole transfer time per layer). */
  readonly predictedStallMsPerLayer: number;
}

/** r*_i in bytes per second (Infinity when there is no compute window). */
export function zeroStallRate(request: AllocationRequest): number {
  const c = request.computeMsPerLayer;
  return c === undefined || c <= 0 ? Number.POSITIVE_INFINITY : request.bytesPerLayer / (c / 1000);
}

/** tau_i(r) in ms per layer. */
export function predictedStall(request: AllocationRequest, rateBytesPerSec: number): number {
  if (rateBytesPerSec <= 0) return Number.POSITIVE_INFINITY;
  const transferMs = (request.bytesPerLayer / rateBytesPerSec) * 1000;
  return Math.max(0, transferMs - (request.computeMsPerLayer ?? 0));
}

/**
 * Water-filling: maximal rates r_i <= cap_i with sum r_i <= budget that minimise sum s_i / r_i.
 * Exposed for tests (the KKT property) and for the policies below.
 */
export function waterFill(weights: readonly number[], caps: readonly number[], budget: number): number[] {
  const n = weights.length;
  const rates = new Array<number>(n).fill(0);
  const roots = weights.map((s) => Math.sqrt(Math.max(s, 0)));
  // Requests in order of the water level at which they reach their cap.
  const order = [...Array(n).keys()].sort((a, b) => (caps[a] as number) / ((roots[a] as number) || 1) - (caps[b] as number) / ((roots[b] as number) || 1));
  let remaining = budget;
  let rootSum = roots.reduce((sum, r) => sum + r, 0);
  for (let k = 0; k < n; k++) {
    const i = order[k] as number;
    const root = roots[i] as number;
    const cap = caps[i] as number;
    // The share i would get if every request from here on were below its cap.
    const share = rootSum > 0 ? (remaining * root) / rootSum : remaining / (n - k);
    if (cap <= share) {
      rates[i] = cap;
      remaining -= cap;
      rootSum -= root;
      continue;
    }
    // Nobody else in the sorted order reaches its cap: share what remains by sqrt(s).
    for (let j = k; j < n; j++) {
      const m = order[j] as number;
      rates[m] = rootSum > 0 ? (remaining * (roots[m] as number)) / rootSum : remaining / (n - k);
    }
    break;
  }
  return rates;
}

export function allocate(requests: readonly AllocationRequest[], options: AllocationOptions): Allocation[] {
  const B = options.capBytesPerSec;
  const n = requests.length;
  if (n === 0) return [];
  let rates: number[];
  switch (options.policy) {
    case 'equal':
      rates = requests.map(() => B / n);
      break;
    case 'kv-prop': {
      const total = requests.reduce((sum, r) => sum + r.bytesPerLayer, 0);
      rates = requests.map((r) => (total > 0 ? (B * r.bytesPerLayer) / total : B / n));
      break;
    }
    case 'bw-prop': {
      // A bandwidth-hungry request weighs as if it alone needed the whole cap.
      const need = requests.map((r) => {
        const rate = zeroStallRate(r);
        return Number.isFinite(rate) ? rate : B;
      });
      const total = need.reduce((sum, x) => sum + x, 0);
      rates = need.map((x) => (total > 0 ? (B * x) / total : B / n));
      break;
    }
    case 'stall-opt':
    case 'cal-stall-opt': {
      const delta = options.policy === 'cal-stall-opt' ? options.marginBytesPerSec : 0;
      rates = waterFill(
        requests.map((r) => r.bytesPerLayer),
        requests.map((r) => zeroStallRate(r) + delta),
        B,
      );
      break;
    }
  }
  return requests.map((r, i) => {
    const rate = rates[i] as number;
    return { id: r.id, rateBytesPerSec: rate, predictedStallMsPerLayer: predictedStall(r, rate) };
  });
}
