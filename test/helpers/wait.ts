/**
 * The one way tests wait for a condition: vitest's `vi.waitUntil` with this project's defaults
 * (10 s, polled every 25 ms). It fails the test with vitest's timeout error when the condition
 * never holds.
 */
import { vi } from 'vitest';

export function until<T>(condition: () => T | Promise<T>, timeoutMs = 10_000): Promise<T> {
  return vi.waitUntil(condition, { timeout: timeoutMs, interval: 25 });
}
