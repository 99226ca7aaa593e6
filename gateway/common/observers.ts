/**
 * What the subsystems report and what the metrics read of them, declared here so that the
 * metrics (metrics.ts) depend on these interfaces and not on the classes that implement them
 * (the capacity manager, the segments, the read pool, the scheduler, the S3 store).
 */

/** Why a chunk was evicted (gateway/capacity/capacity.ts). */
export type EvictionCause = 'lru' | 'idle' | 'dead' | 'quota';

/** Shared capacity state read from the store and not applied (gateway/capacity/shared-state.ts). */
export type Rejected = 'journal' | 'snapshot' | 'lease' | 'event';

/** What capacity management reports as it runs (gateway/capacity/capacity.ts). */
export interface CapacityObserver {
  evicted(bucket: string, cause: EvictionCause, bytes: number): void;
  syncFailed(what: string): void;
  /** Shared state read from the store and not applied (shared-state.ts Rejected; `unauthorized`: a put its tenant could not have made). */
  rejected(what: Rejected | 'unauthorized', count: number): void;
  /** Hints of an access key not journalled: past its share this sync period. */
  hintsDropped(count: number): void;
  /** An unfinished multipart upload aborted for --multipart-expiry. */
  uploadExpired(bucket: string): void;
  /** A write that had to wait for room in its bucket's budget: admitted once eviction made it, or refused (OC_ERR_CAPACITY_FULL). */
  waitedForRoom(bucket: string, outcome: 'admitted' | 'refused'): void;
}

/** What the KV events report (gateway/kv-events/). */
export interface KvEventsObserver {
  /** Batches handed to the socket, with their stored and removed events. */
  published(batches: number, stored: number, removed: number): void;
  dropped(reason: 'queue' | 'encode', events: number): void;
  /** A stored chunk published without tokens: `none` (its writer sent none), `unverified` (they did not hash to its key), `head` (its metadata could not be read). */
  withoutTokens(reason: 'none' | 'unverified' | 'head'): void;
  replayed(): void;
  subscribers(delta: 1 | -1): void;
}

/** A budgeted bucket's usage, as the capacity gauges read it. */
export interface BucketGauges {
  readonly bucket: string;
  readonly budget: number;
  readonly bytes: number;
  readonly chunks: number;
  readonly pinnedBytes: number;
  readonly uploadBytes: number;
  readonly uncheckedBytes: number;
}

/** What the capacity gauges read at each scrape (gateway/capacity/capacity.ts Capacity). */
export interface CapacityGauges {
  usage(): readonly BucketGauges[];
  tenants(): Iterable<readonly [string, number]>;
  quota(tenant: string): number | undefined;
  readonly quotas: Iterable<readonly [string, number]>;
  readonly isLeader: boolean;
}

/** Packed segments' events (gateway/segments/). */
export interface SegmentObserver {
  event(event: SegmentEvent): void;
}

export type SegmentEvent = 'packed' | 'discovered' | 'reread' | 'abandoned' | 'served' | 'stale' | 'rejected' | 'dropped' | 'evicted' | 'swept';

/** What the segment gauges read at each scrape (gateway/segments/). */
export interface SegmentGauges {
  readonly count: number;
  readonly knownBytes: number;
}

/** The read pool's counts (gateway/descriptor-get/reader-pool.ts). */
export interface ReaderPoolStats {
  readonly workers: number;
  readonly queued: number;
  readonly running: number;
  readonly completed: number;
  readonly utilization: number;
  /** Blocks of the shared task-buffer arena held by tasks or unsent frames. */
  readonly arenaBlocksInUse: number;
}

/** The S3 store's request counts (gateway/stores/s3-backend.ts). */
export interface BackendStats {
  /** Requests sent since start. */
  readonly requests: number;
  /** Requests whose response has not finished. */
  readonly inflight: number;
  readonly errors: number;
  /** Requests waiting for a connection (each at most the backend timeout). */
  readonly waiting: number;
}

/** The scheduler's state at one moment (gateway/descriptor-get/scheduler/epoch-scheduler.ts). */
export interface SchedulerSnapshot {
  readonly epoch: number;
  readonly capBytesPerSec: number;
  readonly capInUseBytesPerSec: number;
  readonly pending: number;
  readonly active: readonly { readonly id: string; readonly tenant: string; readonly rateBytesPerSec: number; readonly predictedStallMsPerLayer: number }[];
}
