/**
 * Parsing bandwidth with units, for `--cap`, `--margin` and `objectcache plan`: decimal SI
 * (G = 1e9) for Gbps, Mbps, GB/s and MB/s, binary for GiB/s and MiB/s; a bare number is bytes
 * per second. Bits are divided by 8.
 */

const UNITS: Record<string, number> = {
  'b/s': 1,
  bps: 1 / 8,
  kbps: 1e3 / 8,
  mbps: 1e6 / 8,
  gbps: 1e9 / 8,
  'kb/s': 1e3,
  'mb/s': 1e6,
  'gb/s': 1e9,
  'kib/s': 1024,
  'mib/s': 1024 ** 2,
  'gib/s': 1024 ** 3,
};

/** Bytes per second, or a string saying what is wrong. */
export function parseRate(text: string): number | string {
  const m = /^\s*(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z/]*)\s*$/.exec(text);
  if (!m) return `expected a number with a unit such as 10Gbps, 500MB/s or 2GiB/s, got ${JSON.stringify(text)}`;
  const value = Number(m[1]);
  const unit = (m[2] ?? '').toLowerCase();
  const factor = unit === '' ? 1 : UNITS[unit];
  if (factor === undefined) return `unknown unit ${JSON.stringify(m[2])}; use Gbps, Mbps, GB/s, MB/s, GiB/s or MiB/s`;
  const bytes = value * factor;
  if (!Number.isFinite(bytes)) return `rate ${JSON.stringify(text)} is too large`;
  return bytes;
}

export function formatGbps(bytesPerSec: number): number {
  return Math.round(((bytesPerSec * 8) / 1e9) * 1e6) / 1e6;
}

/**
 * The Calibrated Stall-opt margin: a rate, or a percentage of the cap (`5%`). Bytes per second,
 * or a string saying what is wrong.
 */
export function parseMargin(text: string, capBytesPerSec: number): number | string {
  const percent = /^\s*(\d+(?:\.\d+)?)%\s*$/.exec(text);
  return percent ? (capBytesPerSec * Number(percent[1])) / 100 : parseRate(text);
}
