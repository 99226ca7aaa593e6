/**
 * The client's one retry policy (schemas/retry-policy.ts states it, for both clients): every call
 * of the client, whichever transport carries it (the AWS SDK, whose own retries are off; the
 * signed undici POSTs; the socket path of fetches), runs its tries through `retrying`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ObjectCacheError } from '../schemas/errors.js';
import { retryDelayMs } from '../schemas/retry-policy.js';
import type { Deadline } from './deadline.js';

/**
 * Whether a failure is a refusal the policy tries again: an answer of the gateway (it has a
 * status) that is retryable. A gateway that could not be reached is not one: the client has
 * already tried the other endpoints.
 */
export function retryableRefusal(error: ObjectCacheError): boolean {
  return error.retryable && typeof error.details['Status'] === 'number';
}

/**
 * Runs `attempt` until it succeeds, fails with anything but a retryable refusal, or has been
 * tried `retries` times more, waiting between tries as the policy says (retryDelayMs of the
 * refusal's Retry-After, details.RetryAfter). A wait that would outlast the deadline is not
 * begun: the refusal is the answer; a call cut off by the deadline fails with its
 * OC_ERR_CLIENT_TIMEOUT, one the caller aborted with the caller's reason. `attempt` fails with
 * ObjectCacheErrors (client/answers.ts toObjectCacheError maps the transports' own), or with what
 * the caller's own code threw (an onLayerReady callback), passed on as it is.
 */
export async function retrying<T>(retries: number, deadline: Deadline, attempt: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const signal = deadline.signal;
  for (let tried = 1; ; tried++) {
    let refused: ObjectCacheError;
    try {
      return await attempt(signal);
    } catch (error) {
      if (deadline.expired) throw deadline.error(error);
      // The caller's own abort: its reason, as given.
      if (signal.aborted) throw signal.reason;
      if (!(error instanceof ObjectCacheError)) throw error;
      refused = error;
    }
    if (!retryableRefusal(refused) || tried > retries) throw refused;
    const retryAfter = refused.details['RetryAfter'];
    const delay = retryDelayMs(typeof retryAfter === 'string' ? retryAfter : undefined, tried);
    if (delay >= deadline.remainingMs()) throw refused;
    try {
      await sleep(delay, undefined, { signal });
    } catch {
      if (deadline.expired) throw deadline.error(refused);
      throw signal.reason;
    }
  }
}
