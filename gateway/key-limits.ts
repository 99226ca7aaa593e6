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

/**
 * How a request was signed. A presigned URL or a form policy is handed to others, so what its
 * holders may take of the signing key's share is bounded apart: they cannot lock the key out.
 */
export type SignedBy = 'signed' | 'presigned' | 'form';

export class KeyLimits {
  readonly #maxRequests: number;
  readonly #maxDelegated: number;
  readonly #maxLayerwise: number;
  readonly #maxBackend: number;
  readonly #requests = new Map<string, number>();
  readonly #delegated = new Map<string, number>();
  readonly #layerwise = new Map<string, number>();
  readonly #backend = new Map<string, number>();

  /** `backendConnections`: the S3 backend's pool (0 on the embedded store). */
  constructor(limits: Pick<ConnectionLimits, 'maxRequestsPerKey' | 'maxLayerwisePerKey'>, backendConnections = 0) {
    this.#maxRequests = limits.maxRequestsPerKey;
    // A quarter of the key's share for the holders of its presigned URLs and forms together.
    this.#maxDelegated = Math.max(1, Math.floor(limits.maxRequestsPerKey / 4));
    this.#maxLayerwise = limits.maxLayerwisePerKey;
    // Three quarters of the backend's connections: a key's slow readers (a paused relay holds its
    // connection) leave the rest to other keys.
    this.#maxBackend = Math.max(1, Math.floor((backendConnections * 3) / 4));
  }

  /**
   * Counts a request of `credential`; throws OC_ERR_KEY_CONCURRENCY past the key's share (or,
   * for a presigned URL or a form, past the share of those). The returned function gives the
   * place back, once.
   */
  admit(credential: ClientCredential, by: SignedBy = 'signed'): () => void {
    const key = credential.accessKeyId;
    const now = this.#requests.get(key) ?? 0;
    if (now >= this.#maxRequests) {
      throw new ObjectCacheError('OC_ERR_KEY_CONCURRENCY', `The key ${key} has ${now} requests in flight, its limit (--max-requests-per-key); retry shortly`, { details: { AccessKeyId: key } });
    }
    const delegated = by !== 'signed';
    const held = this.#delegated.get(key) ?? 0;
    if (delegated && held >= this.#maxDelegated) {
      throw new ObjectCacheError('OC_ERR_KEY_CONCURRENCY', `The presigned URLs and forms of the key ${key} have ${held} requests in flight, a quarter of its limit (--max-requests-per-key); retry shortly`, { details: { AccessKeyId: key } });
    }
    this.#requests.set(key, now + 1);
    if (delegated) this.#delegated.set(key, held + 1);
    return once(() => {
      decrement(this.#requests, key);
      if (delegated) decrement(this.#delegated, key);
    });
  }

  /**
   * Takes one of the backend connections `credential` may hold at once (a passthrough request to
   * the S3 backend); throws OC_ERR_KEY_CONCURRENCY past its share. The returned function gives it
   * back, once.
   */
  takeBackend(credential: ClientCredential): () => void {
    const key = credential.accessKeyId;
    const now = this.#backend.get(key) ?? 0;
    if (now >= this.#maxBackend) {
      throw new ObjectCacheError('OC_ERR_KEY_CONCURRENCY', `The key ${key} holds ${now} backend connections, three quarters of --backend-connections; retry shortly`, { details: { AccessKeyId: key } });
    }
    this.#backend.set(key, now + 1);
    return once(() => decrement(this.#backend, key));
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
