/**
 * The one retry policy of ObjectCache's clients, the same in TypeScript (client/retry.ts) and
 * Python (objectcache/retry.py, whose numbers scripts/gen-python-contract.mjs writes from this
 * module into _contract.py).
 *
 * What is tried again: a request the gateway refused with a retryable answer (its
 * `x-objectcache-retryable` header, else the code's `retryable` in schemas/errors.ts: the 503
 * SlowDown of its admission limits, an unreachable or slow store, a chunk overwritten while it
 * was read), before any byte of the answer was used, at most `retries` times. When: after the
 * answer's Retry-After (RFC 9110 section 10.2.3, delay-seconds) up to MAX_RETRY_AFTER_MS, else
 * after FIRST_BACKOFF_MS doubled at each try (0.2, 0.4, 0.8 s). A wait that would outlast the
 * call's deadline is not begun: the refusal is the answer. A gateway that cannot be reached at
 * all is not a refusal: the next endpoint is tried (failover), never the same one again.
 */

/** How often a retryable refusal is tried again unless the client is told otherwise. */
export const DEFAULT_RETRIES = 3;

/** The wait before the first retry of an answer without Retry-After, in ms; doubled at each next one. */
export const FIRST_BACKOFF_MS = 200;

/** The longest Retry-After honoured, in ms (a longer one is waited for this long). */
export const MAX_RETRY_AFTER_MS = 30_000;

/**
 * A Retry-After the clients honour: delay-seconds (a decimal fraction is taken too). Anything else
 * (an HTTP-date, a negative number, junk) is ignored and the backoff applies.
 */
export const RETRY_AFTER = /^[0-9]{1,9}(\.[0-9]{1,9})?$/;

/** The wait before retry `attempt` (1 for the first), in ms: the answer's Retry-After, capped, else the backoff. */
export function retryDelayMs(retryAfter: string | undefined, attempt: number): number {
  const said = retryAfter?.trim();
  if (said !== undefined && RETRY_AFTER.test(said)) return Math.min(Number(said) * 1000, MAX_RETRY_AFTER_MS);
  return Math.min(FIRST_BACKOFF_MS * 2 ** (attempt - 1), MAX_RETRY_AFTER_MS);
}
