/**
 * The one way tests wait for a condition: vitest's `vi.waitUntil` with this project's defaults
 * (10 s, polled every 25 ms). It fails the test with vitest's timeout error when the condition
 * never holds.
 */
import { vi } from 'vitest';

export function until<T>(condition: () => T | Promise<T>, timeoutMs = 10_000): Promise<T> {
  return vi.waitUntil(condition, { timeout: timeoutMs, interval: 25 });
}

/**
 * The same, named: polls `check` every 25 ms until it holds, and fails with "timed out waiting
 * until <what>" after `timeoutMs` (15 s). An error `check` throws fails at once.
 */
export async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
