/**
 * Per-key shares of the gateway: requests in flight (--max-requests-per-key) and layerwise slots
 * (--max-layerwise-per-key). The gateway-wide limits (connections, layerwise slots, buffered
 * bytes) protect the process; these protect tenants from each other, so one key's flood, slow or
 * refused as its requests may be, leaves room for every other key's.
 *
 * A request counts from its signature being verified (nothing is known of its key before) to its
 * response closing, however it ends.
 */
import { ObjectCacheError } from '../schemas/errors.js';
import type { ClientCredential, ConnectionLimits } from './config.js';

export class KeyLimits {
  readonly #maxRequests: number;
  readonly #maxLayerwise: number;
  readonly #requests = new Map<string, number>();
  readonly #layerwise = new Map<string, number>();

  constructor(limits: Pick<ConnectionLimits, 'maxRequestsPerKey' | 'maxLayerwisePerKey'>) {
    this.#maxRequests = limits.maxRequestsPerKey;
    this.#maxLayerwise = limits.maxLayerwisePerKey;
  }

  /**
   * Counts a request of `credential`; throws OC_ERR_KEY_CONCURRENCY past the key's share. The
   * returned function (called when the response closes) gives the place back, once.
   */
  admit(credential: ClientCredential): () => void {
    const key = credential.accessKeyId;
    const now = this.#requests.get(key) ?? 0;
    if (now >= this.#maxRequests) {
      throw new ObjectCacheError('OC_ERR_KEY_CONCURRENCY', `The key ${key} has ${now} requests in flight, its limit (--max-requests-per-key); retry shortly`, { details: { AccessKeyId: key } });
    }
    this.#requests.set(key, now + 1);
    return once(() => decrement(this.#requests, key));
  }

  /** Why `credential` may not take another layerwise slot, or undefined. */
  layerwiseRefusal(credential: ClientCredential): ObjectCacheError | undefined {
    const key = credential.accessKeyId;
    const now = this.#layerwise.get(key) ?? 0;
    if (now < this.#maxLayerwise) return undefined;
    return new ObjectCacheError('OC_ERR_KEY_CONCURRENCY', `The key ${key} holds ${now} layerwise GETs, its share of the gateway (--max-layerwise-per-key); retry shortly`, { details: { AccessKeyId: key } });
  }

  /** Takes a layerwise slot for `credential`; the returned function gives it back (once). */
  takeLayerwise(credential: ClientCredential): () => void {
    const key = credential.accessKeyId;
    this.#layerwise.set(key, (this.#layerwise.get(key) ?? 0) + 1);
    return once(() => decrement(this.#layerwise, key));
  }

  /** Requests in flight for `accessKeyId` (diagnostics and tests). */
  inFlight(accessKeyId: string): number {
    return this.#requests.get(accessKeyId) ?? 0;
  }
}

function once(release: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    release();
  };
}

function decrement(counts: Map<string, number>, key: string): void {
  const left = (counts.get(key) ?? 1) - 1;
  if (left <= 0) counts.delete(key);
  else counts.set(key, left);
}
