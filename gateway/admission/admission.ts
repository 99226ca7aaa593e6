/**
 * Admission: what the gateway lets a request take, decided in one place, before the request is
 * served. Each refusal is a 503 SlowDown with Retry-After and a stable code, and comes before the
 * request holds anything it would have to give back.
 *
 * - Every authenticated request takes a place in its key's share of requests (KeyLimits, below:
 *   --max-requests-per-key, a quarter of it for presigned URLs and forms): one key's flood leaves
 *   room for every other key.
 * - A passthrough to an S3 backend takes one of its key's backend connections (three quarters of
 *   --backend-connections) for as long as its client takes; the HEADs the gateway makes for a
 *   key's lookup or encoded descriptor GET each wait for a place in the same share.
 * - A descriptor GET takes a slot (--max-descriptor-gets), one of its key's
 *   (--max-descriptor-gets-per-key), and only while buffered bytes (--max-buffered-bytes) and the read
 *   workers' queue (--worker-queue) have room.
 *
 * What comes after admission is pacing, not refusal: an admitted descriptor GET waits for its
 * epoch under a bandwidth cap (gateway/descriptor-get/scheduler/epoch-scheduler.ts), and its reads for buffer
 * space (gateway/common/fifo-budget.ts).
 */
import { ObjectCacheError } from '../../schemas/errors.js';
import type { ClientCredential, ConnectionLimits } from '../common/config.js';
import type { FifoBudget } from '../common/fifo-budget.js';

/** Gives back what was taken, once (later calls do nothing). */
export type Release = () => void;

/**
 * What must be one across the gateway's serving processes: each key's share of requests and of
 * layerwise slots, the layerwise slots in all, and the check of the buffered-byte budget. One
 * process holds them in `SharedSlots`; with several, the others reach the primary's
 * (gateway/cluster/remote.ts). Each call throws (or rejects with) the refusal.
 */
export interface AdmissionSlots {
  /** A request of the key, as it was signed (KeyLimits.admit). */
  request(key: string, by: SignedBy): Release | Promise<Release>;
  /** A descriptor GET's slot: the gateway's, the key's, and only while buffered bytes have room. */
  descriptorGet(key: string): Release | Promise<Release>;
}

/** The slots themselves: the gateway's layerwise slots and the keys' shares, over the byte budget. */
export class SharedSlots implements AdmissionSlots {
  readonly #keys: KeyLimits;
  readonly #maxDescriptorGets: number;
  readonly #budget: FifoBudget;
  #descriptorGets = 0;

  constructor(keys: KeyLimits, maxDescriptorGets: number, budget: FifoBudget) {
    this.#keys = keys;
    this.#maxDescriptorGets = maxDescriptorGets;
    this.#budget = budget;
  }

  /** Descriptor GETs being served now (a metric). */
  get descriptorGets(): number {
    return this.#descriptorGets;
  }

  request(key: string, by: SignedBy): Release {
    return this.#keys.admit(key, by);
  }

  descriptorGet(key: string): Release {
    if (this.#descriptorGets >= this.#maxDescriptorGets) {
      throw new ObjectCacheError('OC_ERR_ADMISSION_LIMIT', `The gateway is serving its limit of ${this.#maxDescriptorGets} layerwise GETs; retry shortly`, { retryable: true });
    }
    const own = this.#keys.layerwiseRefusal(key);
    if (own) throw own;
    if (this.#budget.used >= this.#budget.capacity)
      throw new ObjectCacheError('OC_ERR_ADMISSION_LIMIT', 'The gateway holds its limit of buffered bytes; retry shortly', { retryable: true });
    this.#descriptorGets++;
    const slot = this.#keys.takeLayerwise(key);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#descriptorGets--;
      slot();
    };
  }
}

export interface AdmissionOptions {
  /** This process's backend connections, shared among the keys. */
  readonly keys: KeyLimits;
  /** The slots every serving process shares. */
  readonly slots: AdmissionSlots;
  /** Whether this process's read workers' queue is full. */
  readonly poolSaturated: () => boolean;
}

/** 503s that are the gateway refusing more work, not a failure: counted, not logged as errors. */
export const THROTTLING: ReadonlySet<string> = new Set(['OC_ERR_ADMISSION_LIMIT', 'OC_ERR_KEY_CONCURRENCY', 'OC_ERR_POOL_BUSY']);

export class Admission {
  readonly #o: AdmissionOptions;

  constructor(options: AdmissionOptions) {
    this.#o = options;
  }

  /** A request of the key, as it was signed; rejects with OC_ERR_KEY_CONCURRENCY past its share. Resolves to its release. */
  async request(credential: ClientCredential, by: SignedBy): Promise<Release> {
    return this.#o.slots.request(credential.accessKeyId, by);
  }

  /** A backend connection for a passthrough of the key; returns its release. */
  backendConnection(credential: ClientCredential): Release {
    return this.#o.keys.takeBackend(credential);
  }

  /** The gate of the backend requests the gateway makes for the key (lookups' and indexes' HEADs), within its share. */
  backendGate(credential: ClientCredential): BackendGate {
    return this.#o.keys.backendGate(credential);
  }

  /**
   * A descriptor GET's slot; rejects with the refusal (OC_ERR_ADMISSION_LIMIT, OC_ERR_KEY_CONCURRENCY,
   * OC_ERR_POOL_BUSY) when it cannot be served now. Resolves to its release, to call once.
   */
  async descriptorGet(credential: ClientCredential): Promise<Release> {
    const release = await this.#o.slots.descriptorGet(credential.accessKeyId);
    if (this.#o.poolSaturated()) {
      release();
      throw new ObjectCacheError('OC_ERR_POOL_BUSY', 'The gateway is busy; retry shortly', { retryable: true });
    }
    return release;
  }
}

/*
 * Per-key shares of the gateway: requests in flight (--max-requests-per-key, a quarter of them
 * for the key's presigned URLs and forms together), layerwise slots (--max-descriptor-gets-per-key) and
 * backend connections (three quarters of --backend-connections). The gateway-wide limits
 * (connections, layerwise slots, buffered bytes) protect the process; these protect tenants from
 * each other, so one key's flood, slow or refused as its requests may be, leaves room for every
 * other key's.
 *
 * A request counts from its signature being verified (nothing is known of its key before) until
 * it is over (gateway/pipeline/connection-guard.ts track), however it ends.
 */

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
  /** The key's backend connections: held by each key, in all, and the gated requests waiting for one, in order. */
  readonly #backend = new BackendShares();

  constructor(limits: Pick<ConnectionLimits, 'maxRequestsPerKey' | 'maxDescriptorGetsPerKey'>, backendConnections = 0) {
    this.#requests = new Share(limits.maxRequestsPerKey, (key, held) => `The key ${key} has ${held} requests in flight, its limit (--max-requests-per-key)`);
    this.#delegated = new Share(
      Math.max(1, Math.floor(limits.maxRequestsPerKey / 4)),
      (key, held) => `The presigned URLs and forms of the key ${key} have ${held} requests in flight, a quarter of its limit (--max-requests-per-key)`,
    );
    this.#layerwise = new Share(
      limits.maxDescriptorGetsPerKey,
      (key, held) => `The key ${key} holds ${held} layerwise GETs, its share of the gateway (--max-descriptor-gets-per-key)`,
    );
    this.#backend.size(backendConnections);
  }

  /**
   * Counts a request of the key; throws OC_ERR_KEY_CONCURRENCY past the key's share (or, for
   * a presigned URL or a form, past the share of those). The returned function gives the place
   * back, once.
   */
  admit(key: string, by: SignedBy = 'signed'): Release {
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
   * takes (a passthrough); throws OC_ERR_KEY_CONCURRENCY when its share is taken, when the
   * connections left are the reserve for keys that hold none, or when others of its requests wait
   * for one. The returned function gives it back, once.
   */
  takeBackend(credential: ClientCredential): () => void {
    const key = credential.accessKeyId;
    if (!this.#backend.tryTake(key)) {
      throw new ObjectCacheError(
        'OC_ERR_KEY_CONCURRENCY',
        `The key ${key} holds ${this.#backend.heldBy(key)} backend connections: its share (three quarters of --backend-connections), or all but those kept for other keys; retry shortly`,
        { details: { AccessKeyId: key } },
      );
    }
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.#backend.give(key);
    };
  }

  /**
   * The gate of `credential`'s backend requests that the gateway makes for it (a lookup's HEADs, an
   * encoded prefix's index): each waits for a place within the key's share, behind the key's own
   * requests only, so one key's thousands of HEADs never queue in front of another key's.
   */
  backendGate(credential: ClientCredential): BackendGate {
    const key = credential.accessKeyId;
    return { acquire: (signal) => this.#backend.take(key, signal), release: () => this.#backend.give(key) };
  }

  /** Why the key may not take another layerwise slot, or undefined (admission control checks it in its order). */
  layerwiseRefusal(key: string): ObjectCacheError | undefined {
    return this.#layerwise.refusal(key);
  }

  /** Takes a layerwise slot for the key once admitted; the returned function gives it back, once. */
  takeLayerwise(key: string): Release {
    return this.#layerwise.take(key);
  }
}

interface Waiter {
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
  /** Given up (its request went): skipped when its turn comes. */
  gone: boolean;
}

/** A FIFO of one key's waiters: O(1) at both ends whatever its length. */
class Queue {
  readonly #items: Waiter[] = [];
  #head = 0;
  /** Waiters not given up. */
  live = 0;

  push(waiter: Waiter): void {
    this.#items.push(waiter);
    this.live++;
  }

  /** The first waiter not given up, taken off the queue, or undefined. */
  shift(): Waiter | undefined {
    while (this.#head < this.#items.length) {
      const waiter = this.#items[this.#head++] as Waiter;
      if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
        this.#items.splice(0, this.#head);
        this.#head = 0;
      }
      if (!waiter.gone) {
        this.live--;
        return waiter;
      }
    }
    return undefined;
  }
}

/**
 * The backend connections the keys hold: each key at most its share (three quarters of the pool),
 * and a key that holds some takes another only while the connections held are fewer than the pool
 * less a reserve (an eighth of it, at least one), which is kept for the first connection of keys
 * that hold none: so one or a few greedy keys never shut every other key out (with 64 connections,
 * it takes nine keys acting together). Gated requests wait in a FIFO of their own key's, and keys
 * take turns in the order they began to wait; a given-back connection costs the keys that wait,
 * not the waiters.
 */
class BackendShares {
  #pool = 1;
  #share = 1;
  #reserve = 1;
  #total = 0;
  readonly #held = new Map<string, number>();
  /** The keys with waiters, in the order they began to wait, and each one's queue. */
  readonly #waiting = new Map<string, Queue>();

  size(connections: number): void {
    this.#pool = Math.max(1, connections);
    this.#share = Math.max(1, Math.floor((connections * 3) / 4));
    this.#reserve = Math.max(1, Math.floor(connections / 8));
  }

  heldBy(key: string): number {
    return this.#held.get(key) ?? 0;
  }

  #may(key: string): boolean {
    const mine = this.heldBy(key);
    if (mine >= this.#share) return false;
    // A key's first connection is never held back here (the pool's own queue bounds its wait).
    return mine === 0 || this.#total < this.#pool - this.#reserve;
  }

  #take(key: string): void {
    this.#held.set(key, this.heldBy(key) + 1);
    this.#total++;
  }

  tryTake(key: string): boolean {
    if ((this.#waiting.get(key)?.live ?? 0) > 0 || !this.#may(key)) return false;
    this.#take(key);
    return true;
  }

  take(key: string, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason as unknown);
    if (this.tryTake(key)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        if (waiter.gone) return;
        waiter.gone = true;
        const queue = this.#waiting.get(key);
        if (queue) {
          queue.live--;
          if (queue.live === 0) this.#waiting.delete(key);
        }
        reject(signal?.reason as unknown);
      };
      const waiter: Waiter = {
        gone: false,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        reject,
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      let queue = this.#waiting.get(key);
      if (!queue) this.#waiting.set(key, (queue = new Queue()));
      queue.push(waiter);
    });
  }

  give(key: string): void {
    const left = this.heldBy(key) - 1;
    if (left < 0) return;
    if (left === 0) this.#held.delete(key);
    else this.#held.set(key, left);
    this.#total--;
    this.#grant();
  }

  /** Grants, key by key in the order they began to wait, each key's waiters in order while it may take one. */
  #grant(): void {
    for (const [key, queue] of this.#waiting) {
      while (queue.live > 0 && this.#may(key)) {
        const waiter = queue.shift();
        if (!waiter) break;
        this.#take(key);
        waiter.resolve();
      }
      if (queue.live === 0) this.#waiting.delete(key);
    }
  }
}
