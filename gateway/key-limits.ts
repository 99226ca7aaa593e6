/**
 * Per-key shares of the gateway: requests in flight (--max-requests-per-key, a quarter of them
 * for the key's presigned URLs and forms together), layerwise slots (--max-layerwise-per-key) and
 * backend connections (three quarters of --backend-connections). The gateway-wide limits
 * (connections, layerwise slots, buffered bytes) protect the process; these protect tenants from
 * each other, so one key's flood, slow or refused as its requests may be, leaves room for every
 * other key's.
 *
 * A request counts from its signature being verified (nothing is known of its key before) until
 * it is over (gateway/connection-guard.ts track), however it ends.
 */
import { ObjectCacheError } from '../schemas/errors.js';
import type { ClientCredential, ConnectionLimits } from './config.js';
import { FifoBudget } from './fifo-budget.js';

/**
 * One backend request's place in its key's share of backend connections: taken before the
 * request goes to the store (waiting, in order, behind the key's own requests only), given back
 * once its answer is in.
 */
export interface BackendGate {
  acquire(signal?: AbortSignal): Promise<void>;
  release(): void;
}

/**
 * How a request was signed. A presigned URL or a form policy is handed to others, so what its
 * holders may take of the signing key's share is bounded apart: they cannot lock the key out.
 */
export type SignedBy = 'signed' | 'presigned' | 'form';

/** One share: how many of something each key holds, and the most it may. */
class Share {
  readonly #held = new Map<string, number>();
  constructor(
    readonly max: number,
    /** Why a key holding `held` may not take another, for its 503. */
    readonly why: (key: string, held: number) => string,
  ) {}

  refusal(key: string): ObjectCacheError | undefined {
    const held = this.#held.get(key) ?? 0;
    return held < this.max ? undefined : new ObjectCacheError('OC_ERR_KEY_CONCURRENCY', `${this.why(key, held)}; retry shortly`, { details: { AccessKeyId: key } });
  }

  /** Takes one (unchecked: call refusal first); the returned function gives it back, once. */
  take(key: string): () => void {
    this.#held.set(key, (this.#held.get(key) ?? 0) + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.#held.get(key) ?? 1) - 1;
      if (left <= 0) this.#held.delete(key);
      else this.#held.set(key, left);
    };
  }
}

export class KeyLimits {
  readonly #requests: Share;
  readonly #delegated: Share;
  readonly #layerwise: Share;
  /** Each key's backend connections in use, and its requests waiting for one (made when first needed, dropped when idle). */
  readonly #backend = new Map<string, FifoBudget>();
  readonly #backendShare: number;

  /** `backendConnections`: the S3 backend's pool (0 on the embedded store, where there is none to share). */
  constructor(limits: Pick<ConnectionLimits, 'maxRequestsPerKey' | 'maxLayerwisePerKey'>, backendConnections = 0) {
    this.#requests = new Share(limits.maxRequestsPerKey, (key, held) => `The key ${key} has ${held} requests in flight, its limit (--max-requests-per-key)`);
    this.#delegated = new Share(Math.max(1, Math.floor(limits.maxRequestsPerKey / 4)), (key, held) => `The presigned URLs and forms of the key ${key} have ${held} requests in flight, a quarter of its limit (--max-requests-per-key)`);
    this.#layerwise = new Share(limits.maxLayerwisePerKey, (key, held) => `The key ${key} holds ${held} layerwise GETs, its share of the gateway (--max-layerwise-per-key)`);
    this.#backendShare = Math.max(1, Math.floor((backendConnections * 3) / 4));
  }

  /**
   * Counts a request of `credential`; throws OC_ERR_KEY_CONCURRENCY past the key's share (or, for
   * a presigned URL or a form, past the share of those). The returned function gives the place
   * back, once.
   */
  admit(credential: ClientCredential, by: SignedBy = 'signed'): () => void {
    const key = credential.accessKeyId;
    const delegated = by !== 'signed';
    const refusal = this.#requests.refusal(key) ?? (delegated ? this.#delegated.refusal(key) : undefined);
    if (refusal) throw refusal;
    const request = this.#requests.take(key);
    if (!delegated) return request;
    const delegation = this.#delegated.take(key);
    return () => {
      request();
      delegation();
    };
  }

  /**
   * Takes one of the backend connections `credential` may hold at once for as long as its client
   * takes (a passthrough); throws OC_ERR_KEY_CONCURRENCY when its share is taken or others of its
   * requests wait for one. The returned function gives it back, once.
   */
  takeBackend(credential: ClientCredential): () => void {
    const key = credential.accessKeyId;
    const share = this.#backendOf(key);
    if (!share.tryAcquire(1)) {
      throw new ObjectCacheError('OC_ERR_KEY_CONCURRENCY', `The key ${key} holds ${share.used} backend connections, three quarters of --backend-connections; retry shortly`, { details: { AccessKeyId: key } });
    }
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.#giveBack(key, share);
    };
  }

  /**
   * The gate of `credential`'s backend requests that the gateway makes for it (a lookup's HEADs, an
   * encoded prefix's index): each waits for a place in the key's share, behind the key's own
   * requests only, so one key's thousands of HEADs never queue in front of another key's.
   */
  backendGate(credential: ClientCredential): BackendGate {
    const key = credential.accessKeyId;
    return {
      acquire: async (signal) => {
        const share = this.#backendOf(key);
        try {
          await share.acquire(1, signal);
        } catch (error) {
          if (share.used === 0 && share.waiting === 0) this.#backend.delete(key);
          throw error;
        }
      },
      release: () => {
        const share = this.#backend.get(key);
        if (share) this.#giveBack(key, share);
      },
    };
  }

  #backendOf(key: string): FifoBudget {
    let share = this.#backend.get(key);
    if (!share) this.#backend.set(key, (share = new FifoBudget(this.#backendShare)));
    return share;
  }

  #giveBack(key: string, share: FifoBudget): void {
    share.release(1);
    if (share.used === 0 && share.waiting === 0 && this.#backend.get(key) === share) this.#backend.delete(key);
  }

  /** Why `credential` may not take another layerwise slot, or undefined (admission control checks it in its order). */
  layerwiseRefusal(credential: ClientCredential): ObjectCacheError | undefined {
    return this.#layerwise.refusal(credential.accessKeyId);
  }

  /** Takes a layerwise slot for `credential` once admitted; the returned function gives it back, once. */
  takeLayerwise(credential: ClientCredential): () => void {
    return this.#layerwise.take(credential.accessKeyId);
  }
}
