/**
 * Admission: what the gateway lets a request take, decided in one place, before the request is
 * served. Each refusal is a 503 SlowDown with Retry-After and a stable code, and comes before the
 * request holds anything it would have to give back.
 *
 * - Every authenticated request takes a place in its key's share of requests (gateway/admission/key-limits.ts:
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
import type { ClientCredential } from '../common/config.js';
import type { FifoBudget } from '../common/fifo-budget.js';
import type { BackendGate, KeyLimits, SignedBy } from './key-limits.js';

export interface AdmissionOptions {
  readonly keys: KeyLimits;
  /** --max-descriptor-gets: descriptor GETs served at once. */
  readonly maxDescriptorGets: number;
  /** The gateway-wide budget of bytes read and not yet sent. */
  readonly budget: FifoBudget;
  /** Whether the read workers' queue is full. */
  readonly poolSaturated: () => boolean;
}

/** 503s that are the gateway refusing more work, not a failure: counted, not logged as errors. */
export const THROTTLING: ReadonlySet<string> = new Set(['OC_ERR_ADMISSION_LIMIT', 'OC_ERR_KEY_CONCURRENCY', 'OC_ERR_POOL_BUSY']);

export class Admission {
  readonly #o: AdmissionOptions;
  #descriptorGets = 0;

  constructor(options: AdmissionOptions) {
    this.#o = options;
  }

  /** Descriptor GETs being served now (a metric). */
  get descriptorGets(): number {
    return this.#descriptorGets;
  }

  /** A request of the key, as it was signed; throws OC_ERR_KEY_CONCURRENCY past its share. Returns its release. */
  request(credential: ClientCredential, by: SignedBy): () => void {
    return this.#o.keys.admit(credential, by);
  }

  /** A backend connection for a passthrough of the key; returns its release. */
  backendConnection(credential: ClientCredential): () => void {
    return this.#o.keys.takeBackend(credential);
  }

  /** The gate of the backend requests the gateway makes for the key (lookups' and indexes' HEADs), within its share. */
  backendGate(credential: ClientCredential): BackendGate {
    return this.#o.keys.backendGate(credential);
  }

  /**
   * A descriptor GET's slot; throws the refusal (OC_ERR_ADMISSION_LIMIT, OC_ERR_KEY_CONCURRENCY,
   * OC_ERR_POOL_BUSY) when it cannot be served now. Returns its release, to call once.
   */
  descriptorGet(credential: ClientCredential): () => void {
    const refusal = this.#descriptorGetRefusal(credential);
    if (refusal) throw refusal;
    this.#descriptorGets++;
    const slot = this.#o.keys.takeLayerwise(credential);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#descriptorGets--;
      slot();
    };
  }

  #descriptorGetRefusal(credential: ClientCredential): ObjectCacheError | undefined {
    const o = this.#o;
    if (this.#descriptorGets >= o.maxDescriptorGets) {
      return new ObjectCacheError('OC_ERR_ADMISSION_LIMIT', `The gateway is serving its limit of ${o.maxDescriptorGets} layerwise GETs; retry shortly`, { retryable: true });
    }
    const own = o.keys.layerwiseRefusal(credential);
    if (own) return own;
    if (o.budget.used >= o.budget.capacity)
      return new ObjectCacheError('OC_ERR_ADMISSION_LIMIT', 'The gateway holds its limit of buffered bytes; retry shortly', { retryable: true });
    if (o.poolSaturated()) return new ObjectCacheError('OC_ERR_POOL_BUSY', 'The gateway is busy; retry shortly', { retryable: true });
    return undefined;
  }
}
