// Over 600 lines: one class, the capacity manager (admission of writes, eviction, pins, uploads), whose parts share its index and locks.
/**
 * Capacity management: keeps each budgeted bucket within its budget and each tenant within its
 * quota, by access-based, prefix-aware eviction (the order: gateway/capacity/chunk-index.ts),
 * with pins, and never under a read in flight or over a newer version of a chunk. The state
 * every gateway in front of the store shares (access journals, a snapshot, the eviction lease)
 * lives in the store itself: gateway/capacity/shared-state.ts. docs/capacity.md is the user's
 * account; docs/architecture.md, "Capacity", the design and its failure modes.
 *
 * What the server tells it (gateway/pipeline/server.ts): a read starting and ending (`reading`), which
 * also counts as an access; a chain of keys (`link`, from descriptors and lookups); a write about
 * to happen (`admitWrite`, which enforces the tenant's quota) and done (`written`); a delete
 * (`deleted`); a pin (`pin`).
 */
import { ObjectCacheError } from '../../schemas/errors.js';
import { AFTER_META } from '../../schemas/chain.js';
import type { CapacityConfig } from '../common/config.js';
import { FifoBudget } from '../common/fifo-budget.js';
import type { Logger } from '../common/logger.js';
import type { Candidate, Chunk, OrderOptions } from './chunk.js';
import { type ChunkChanges, ChunkIndex } from './chunk-index.js';
import type { CapacityStore } from '../stores/capacity-store.js';
import { SharedState, type CapacityEvent, type EventSource } from './shared-state.js';
import type { StateKey } from '../common/state-key.js';
import type { CapacityObserver, EvictionCause } from '../common/observers.js';
import type { DerivedData, DerivedItem } from '../common/derived-data.js';

/**
 * Whether a key of `tenant` may write `key` in `bucket` (its access policy allows s3:PutObject
 * there): a journal's write of a chunk no key of its tenant could have made is not applied.
 */
export type MayWrite = (tenant: string, bucket: string, key: string) => boolean;

/** The time before now within which an access keeps a chunk from eviction even if its read is at another gateway. */
const RECENT_ACCESS_GRACE_SYNCS = 2;
/** Victims a quota decision may delete for one write. */
const MAX_QUOTA_VICTIMS = 256;
/** How often the leader checks the budgets, ms. */
const TRIM_INTERVAL_MS = 250;
/**
 * A write that would take its bucket past its budget waits this long at most for eviction to make
 * room (deleting at full speed meanwhile), then is refused with a retryable OC_ERR_CAPACITY_FULL:
 * so the bucket stays within its budget whatever the write rate.
 */
export const ROOM_WAIT_MS = 5000;
/** How often a write waiting for room looks again. */
const ROOM_POLL_MS = 20;
/** Waiting writes start a trimming pass at most this often. */
const ROOM_KICK_MS = 100;
/** With other gateways about, a bucket this full (of its budget, everything counted) is trimmed at full speed: their writes may be waiting for room. */
const FULL_FRACTION = 0.99;
/**
 * The most of a budget kept free for a write another gateway may be waiting to make (as large as
 * the largest chunk present): the gap of the earlier default marks (95 to 85, and their 15%).
 */
const UNSEEN_WRITE_SHARE = 0.15;
/** How often the leader looks for idle chunks, ms. */
const IDLE_SCAN_MS = 30_000;
/** A chunk whose predecessor is missing counts as dead only once it is this old, ms (its prefix may be mid-write). */
const DEAD_AFTER_MS = 30_000;
/** The longest a pin may hold. */
export const MAX_PIN_MS = 366 * 86_400_000;
/** Sizes of chunks learnt from other gateways' journals the lease holder checks (HEADs) per trimming pass, and at once. */
const CHECKS_PER_PASS = 256;
const CHECKS_AT_ONCE = 16;
/** How often the lease holder lists the budgeted buckets' unfinished uploads (their parts' bytes, and those past --multipart-expiry), ms. */
const UPLOAD_SWEEP_MS = 60_000;
/** Uploads a sweep looks at per bucket (a ListParts each). */
const UPLOADS_PER_SWEEP = 1000;
/**
 * Unfinished uploads and their parts counted at once, in all and per tenant: past these a new
 * upload's or a new part's write is refused (its tenant finishes or aborts some first), so what a
 * tenant's uploads make the gateway hold is bounded, whatever their size (a part may be empty).
 */
export interface UploadLimits {
  readonly uploads: number;
  readonly uploadsPerTenant: number;
  readonly parts: number;
  readonly partsPerTenant: number;
}
const UPLOAD_LIMITS: UploadLimits = { uploads: 100_000, uploadsPerTenant: 10_000, parts: 1_000_000, partsPerTenant: 100_000 };
/** Ended uploads remembered (#ended), so that news of them arriving late does not count them again. */
const ENDED_KEPT = 100_000;

/**
 * An unfinished multipart upload of a budgeted bucket: its parts count against the bucket's
 * budget and its tenant's quota from the first, until it is completed, aborted or expired.
 */
interface Upload {
  readonly bucket: string;
  readonly key: string;
  readonly uploadId: string;
  tenant: string;
  /** Bytes of each part, by number (a part uploaded again replaces its bytes). */
  readonly parts: Map<number, number>;
  bytes: number;
  /** When this gateway first knew of it, and last learnt a part of it, ms since the epoch. */
  readonly seen: number;
  changed: number;
  /** Its bytes are the store's (parts through this gateway, or the holder's listing), not only a journal's. */
  checked: boolean;
}

const slot = (bucket: string, key: string): string => `${bucket}\0${key}`;

/** A derived object in the eviction order (#derivedOrder). */
interface DerivedAt {
  readonly item: DerivedItem;
  readonly at: number;
}

export interface BucketUsage {
  readonly bucket: string;
  readonly budget: number;
  /** Chunks and derived data (segments) together. */
  readonly bytes: number;
  /** Of `bytes`, derived data's. */
  readonly derivedBytes: number;
  /** Of `bytes`, those learnt from other gateways' journals and not checked against the store yet (eviction does not act on them). */
  readonly uncheckedBytes: number;
  /** Of `bytes`, the parts of unfinished multipart uploads. */
  readonly uploadBytes: number;
  readonly chunks: number;
  readonly pinnedBytes: number;
}

export interface ColdPrefix {
  /** The chunk that would go next (the tail of its prefix). */
  readonly tail: string;
  /** Chunks before it in its prefix. */
  readonly depth: number;
  readonly bytes: number;
  readonly lastAccess: number;
  readonly reason: 'dead' | 'lru';
}

/** The most coldest chunks per bucket the /capacity document lists (`?top=`, gateway/pipeline/admin.ts). */
export const MAX_REPORT_TOP = 1000;

/** The admin endpoint's /capacity document. */
export interface CapacityReport {
  readonly leader: boolean;
  readonly gateway: string;
  readonly buckets: readonly (BucketUsage & {
    readonly highBytes: number;
    readonly lowBytes: number;
    readonly coldest: readonly (ColdPrefix & { readonly idleSeconds: number })[];
  })[];
  readonly tenants: readonly { readonly tenant: string; readonly bytes: number; readonly quota: number | null }[];
}

export class Capacity {
  readonly #config: CapacityConfig;
  readonly #store: CapacityStore;
  readonly #log: Pick<Logger, 'info' | 'warn' | 'error'>;
  readonly #observer: CapacityObserver;
  readonly #now: () => number;
  readonly #indexes = new Map<string, ChunkIndex>();
  /** Reads in flight at this gateway, per bucket and key. */
  readonly #readers = new Map<string, number>();
  /** Deletes in flight: a read that starts meanwhile waits for it. */
  readonly #deleting = new Map<string, Promise<void>>();
  /** Writes in flight per bucket and key: not evicted under them. */
  readonly #writing = new Map<string, number>();
  /** Bytes admitted for writes in flight, per tenant. */
  readonly #reserved = new Map<string, number>();
  /** Bytes admitted for writes in flight, per bucket (a write is admitted only within its bucket's budget). */
  readonly #bucketReserved = new Map<string, number>();
  /** Writes waiting for room, per bucket: while any wait, eviction deletes at full speed. */
  readonly #waitingForRoom = new Map<string, number>();
  /** The bytes those writes need, per bucket: a pass trims far enough for them. */
  readonly #waitingBytes = new Map<string, number>();
  /** When the last trimming pass ended (performance.now()): waiting writes start one at most every ROOM_KICK_MS. */
  #lastPassEnded = 0;
  /**
   * Buckets that passed their high mark and are not yet down to their low one: trimmed pass after
   * pass until they are, so writes admitted while a pass runs (it chose its victims before them)
   * do not leave the bucket stuck between the marks.
   */
  readonly #draining = new Set<string>();
  /** Chunks decided for eviction and not yet deleted (not chosen twice; their bytes count as freed). */
  readonly #queued = new Set<string>();
  readonly #pendingFree = new Map<string, number>();
  /** Pins: retain until this time, ms. */
  readonly #pins = new Map<string, number>();
  /** Unfinished multipart uploads, by bucket and upload id; changed only through #setUpload. */
  readonly #uploads = new Map<string, Upload>();
  /** What #uploads holds, summed as it changes: per tenant (bytes, uploads, parts) and per bucket (bytes, those checked). */
  readonly #uploadsByTenant = new Map<string, { bytes: number; uploads: number; parts: number }>();
  readonly #uploadsByBucket = new Map<string, { bytes: number; checked: number }>();
  #uploadParts = 0;
  readonly #uploadLimits: UploadLimits;
  /** When uploads ended here, the latest ENDED_KEPT: a listing that began before is not to count them again. */
  readonly #ended = new Map<string, number>();
  #lastUploadSweep = 0;
  readonly #shared: SharedState;
  #trimTimer: NodeJS.Timeout | undefined;
  #trimming = false;
  /**
   * One eviction-order walk at a time (a lock of one): one tenant's walk (a quota's) holds maps as
   * large as the bucket's index, and since walks give way to requests (ChunkIndex.evictionOrderPaced)
   * nothing else would stop over-quota writes, a trimming pass and admin reports from each running one at once.
   */
  readonly #walking = new FifoBudget(1);
  /** The /capacity document being made: concurrent requests share it rather than walk again. */
  #reporting: Promise<CapacityReport> | undefined;
  #closed = false;
  #derived: DerivedData | undefined;

  readonly #mayWrite: MayWrite;
  readonly #changes: ((bucket: string) => ChunkChanges) | undefined;
  /** The state was loaded once: what comes and goes from then on is told to #changes. */
  #listening = false;
  /** While a reload runs (its snapshot applied, its journals not yet): the indexes before it. */
  #beforeReload: Map<string, ChunkIndex> | undefined;

  constructor(options: {
    config: CapacityConfig;
    key: StateKey;
    mayWrite: MayWrite;
    store: CapacityStore;
    logger: Pick<Logger, 'info' | 'warn' | 'error'>;
    observer: CapacityObserver;
    now?: () => number;
    gatewayId?: string;
    derived?: DerivedData;
    uploadLimits?: UploadLimits;
    /** Told of every chunk of a bucket that comes or goes once the state is loaded (the KV events). */
    changes?: (bucket: string) => ChunkChanges;
  }) {
    this.#changes = options.changes;
    this.#derived = options.derived;
    this.#uploadLimits = options.uploadLimits ?? UPLOAD_LIMITS;
    this.#mayWrite = options.mayWrite;
    this.#config = options.config;
    this.#store = options.store;
    this.#log = options.logger;
    this.#observer = options.observer;
    this.#now = options.now ?? Date.now;
    for (const bucket of this.#config.budgets.keys()) this.#indexes.set(bucket, new ChunkIndex());
    this.#shared = new SharedState({
      store: options.store,
      config: options.config,
      key: options.key,
      logger: options.logger,
      now: this.#now,
      ...(options.gatewayId ? { gatewayId: options.gatewayId } : {}),
      apply: (event, source) => this.#apply(event, source),
      reset: (events) => this.#reset(events),
      reloaded: () => this.#reloaded(),
      snapshot: () => this.#snapshot(),
      reconcile: () => this.#reconcile(),
      onFailure: (what) => options.observer.syncFailed(what),
      onRejected: (what, count) => options.observer.rejected(what, count),
      onHintsDropped: (count) => options.observer.hintsDropped(count),
    });
  }

  /** Loads the shared state (snapshot and journals) and starts syncing and, when leader, trimming. */
  async start(): Promise<void> {
    await this.#shared.start();
    this.#trimTimer = setInterval(() => void this.#trimOnce(), TRIM_INTERVAL_MS);
    this.#trimTimer.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#trimTimer) clearInterval(this.#trimTimer);
    await this.#shared.close();
  }

  /** Whether the bucket has a budget. */
  manages(bucket: string): boolean {
    return this.#indexes.has(bucket);
  }

  get isLeader(): boolean {
    return this.#shared.isLeader;
  }

  // ---- what the server reports ----

  /**
   * A read of `keys` starting: they count as accessed, and are not evicted until `release`. A
   * read of a chunk being deleted waits for the delete (then finds it gone, never torn).
   */
  async reading(bucket: string, keys: readonly string[], by?: string): Promise<() => void> {
    const index = this.#indexes.get(bucket);
    if (!index) return () => {};
    const at = this.#now();
    const taken: string[] = [];
    for (const key of keys) {
      const s = slot(bucket, key);
      this.#readers.set(s, (this.#readers.get(s) ?? 0) + 1);
      taken.push(s);
      if (index.touch(key, at)) this.#shared.record({ t: 'acc', b: bucket, k: key, at }, by);
    }
    const deletes = taken.map((s) => this.#deleting.get(s)).filter((p): p is Promise<void> => p !== undefined);
    if (deletes.length > 0) await Promise.all(deletes);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const s of taken) {
        const left = (this.#readers.get(s) ?? 1) - 1;
        if (left === 0) this.#readers.delete(s);
        else this.#readers.set(s, left);
      }
    };
  }

  /** Lookup hits of access key `by`: an access each (nothing is held: a lookup reads metadata only). */
  accessed(bucket: string, keys: readonly string[], by?: string): void {
    const index = this.#indexes.get(bucket);
    if (!index) return;
    const at = this.#now();
    for (const key of keys) if (index.touch(key, at)) this.#shared.record({ t: 'acc', b: bucket, k: key, at }, by);
  }

  /**
   * The key order of a descriptor or lookup by a key of `tenant` (access key `by`): each key
   * follows the one before it (kept only for the tenant's own chunks: ChunkIndex.link). Only
   * what it taught is journalled, within the access key's share of the journal.
   */
  link(bucket: string, keys: readonly string[], tenant: string, by?: string): void {
    const index = this.#indexes.get(bucket);
    if (!index || keys.length < 2) return;
    const chains = index.learn(keys, tenant);
    if (chains.length > 0) this.#shared.recordLink(bucket, chains, tenant, by);
  }

  /**
   * A write of `bytes` by `tenant` about to go to the store. Within its quota it passes; past
   * it, the tenant's own coldest chunks are evicted first; when not enough of its own can go, it
   * is refused (QuotaExceeded). A write of a chunk being deleted waits for the delete, so the
   * delete can never take the new version. Returns what the caller calls when the write is over:
   * with the size and ETag stored when the gateway knows them (a PUT whose body it checked
   * against its length, and the store's answer), with true when the store is to be asked (a
   * copy), with false when nothing was stored. The bytes stay reserved until they are known.
   */
  async admitWrite(
    bucket: string,
    key: string,
    tenant: string,
    bytes: number,
    replaces = true,
  ): Promise<(stored: boolean | { readonly size: number; readonly etag: string; readonly meta?: Readonly<Record<string, string>> }) => void> {
    if (!this.#indexes.has(bucket)) return () => {};
    const s = slot(bucket, key);
    const quota = this.#config.quotas.get(tenant);
    // Registered before anything awaits: an eviction deciding now sees the write and skips the chunk.
    this.#writing.set(s, (this.#writing.get(s) ?? 0) + 1);
    if (quota !== undefined) this.#reserved.set(tenant, (this.#reserved.get(tenant) ?? 0) + bytes);
    let roomTaken = false;
    const unreserve = (): void => {
      if (quota !== undefined) this.#reserved.set(tenant, Math.max(0, (this.#reserved.get(tenant) ?? 0) - bytes));
      if (roomTaken) this.#bucketReserved.set(bucket, Math.max(0, (this.#bucketReserved.get(bucket) ?? 0) - bytes));
      roomTaken = false;
    };
    const unregister = (): void => {
      const left = (this.#writing.get(s) ?? 1) - 1;
      if (left === 0) this.#writing.delete(s);
      else this.#writing.set(s, left);
    };
    try {
      await this.#deleting.get(s);
      if (quota !== undefined) {
        // A part replaces nothing yet (the object it completes may).
        const replaced = replaces ? this.#indexes.get(bucket)?.get(key) : undefined;
        const over = this.tenantBytes(tenant) + (this.#reserved.get(tenant) ?? 0) - (replaced?.tenant === tenant ? replaced.size : 0) - quota;
        if (over > 0) await this.#evictForQuota(tenant, over, bytes, quota);
      }
      await this.#roomFor(bucket, key, bytes, replaces);
      roomTaken = true;
    } catch (error) {
      unreserve();
      unregister();
      throw error;
    }
    let done = false;
    return (stored) => {
      if (done) return;
      done = true;
      unregister();
      if (stored === false) return unreserve();
      if (stored === true) {
        void this.#learnWrite(bucket, key, tenant).finally(unreserve);
        return;
      }
      this.#record(bucket, key, tenant, stored.size, stored.etag, this.#now(), stored.meta);
      unreserve();
    };
  }

  /**
   * Takes room in the bucket's budget for a write of `bytes` (less what it replaces): at once
   * where it fits, else once eviction has made it (the lease holder trims at full speed while
   * writes wait; another gateway waits for its journals to say so), at most ROOM_WAIT_MS. Then
   * OC_ERR_CAPACITY_FULL, retryable: nothing was stored. The room is held (#bucketReserved) from
   * here until the write is known in the index or failed.
   */
  async #roomFor(bucket: string, key: string, bytes: number, replaces: boolean): Promise<void> {
    const budget = this.#config.budgets.get(bucket);
    if (budget === undefined) return;
    const fits = (): boolean => {
      const replaced = replaces ? (this.#indexes.get(bucket)?.get(key)?.size ?? 0) : 0;
      return this.#bucketBytes(bucket) + bytes - replaced <= budget;
    };
    if (!fits()) {
      if (bytes > budget)
        throw new ObjectCacheError('OC_ERR_CAPACITY_TOO_LARGE', `Storing ${bytes} bytes in bucket ${bucket} can never fit its budget of ${budget} bytes; nothing was stored`, {
          details: { Bucket: bucket, BudgetBytes: String(budget) },
        });
      const deadline = performance.now() + ROOM_WAIT_MS;
      this.#waitingForRoom.set(bucket, (this.#waitingForRoom.get(bucket) ?? 0) + 1);
      this.#waitingBytes.set(bucket, (this.#waitingBytes.get(bucket) ?? 0) + bytes);
      try {
        while (!fits()) {
          if (this.#closed || performance.now() >= deadline) {
            this.#observer.waitedForRoom(bucket, 'refused');
            throw new ObjectCacheError(
              'OC_ERR_CAPACITY_FULL',
              `Storing ${bytes} bytes would take bucket ${bucket} past its budget of ${budget} bytes, and eviction did not make room within ${ROOM_WAIT_MS} ms (pinned, being read, or written faster than the store deletes); nothing was stored`,
              { details: { Bucket: bucket, BudgetBytes: String(budget) } },
            );
          }
          if (this.#shared.isLeader && performance.now() - this.#lastPassEnded >= ROOM_KICK_MS) void this.#trimOnce();
          await new Promise((resolve) => setTimeout(resolve, ROOM_POLL_MS));
        }
        this.#observer.waitedForRoom(bucket, 'admitted');
      } finally {
        const left = (this.#waitingForRoom.get(bucket) ?? 1) - 1;
        if (left === 0) this.#waitingForRoom.delete(bucket);
        else this.#waitingForRoom.set(bucket, left);
        const need = (this.#waitingBytes.get(bucket) ?? bytes) - bytes;
        if (left === 0 || need <= 0) this.#waitingBytes.delete(bucket);
        else this.#waitingBytes.set(bucket, need);
      }
    }
    this.#bucketReserved.set(bucket, (this.#bucketReserved.get(bucket) ?? 0) + bytes);
  }

  /** What the bucket holds and is about to: its chunks, its unfinished uploads' parts, derived data, and writes admitted. */
  #bucketBytes(bucket: string): number {
    const index = this.#indexes.get(bucket);
    return (index?.bytes ?? 0) + this.#uploadBytes(bucket) + (this.#derived?.bytes(bucket) ?? 0) + (this.#bucketReserved.get(bucket) ?? 0);
  }

  /**
   * A write done without `admitWrite` (a completed multipart upload, a form upload): learnt
   * from the store. Past its tenant's quota then (a multipart upload is counted once complete),
   * the tenant's own coldest chunks are evicted to bring it back within it.
   */
  written(bucket: string, key: string, tenant: string): void {
    if (!this.#indexes.has(bucket)) return;
    void this.#learnWrite(bucket, key, tenant).then(async () => {
      const quota = this.#config.quotas.get(tenant);
      const over = quota === undefined ? 0 : this.tenantBytes(tenant) + (this.#reserved.get(tenant) ?? 0) - quota;
      if (quota !== undefined && over > 0) {
        await this.#evictForQuota(tenant, over, 0, quota).catch((error: unknown) => {
          this.#log.warn({ bucket, key, tenant, error }, 'capacity: a completed upload left its tenant past its quota, and evicting its own chunks to make room failed');
        });
      }
    });
  }

  /** A delete whose outcome per key is not known here (DeleteObjects, a version): asks the store. */
  verify(bucket: string, key: string): void {
    const index = this.#indexes.get(bucket);
    if (!index?.get(key)) return;
    void this.#store.head(bucket, key).then(
      (head) => {
        const chunk = index.get(key);
        if (!chunk) return;
        if (head === undefined) {
          index.remove(key);
          this.#shared.record({ t: 'del', b: bucket, k: key, e: chunk.etag, at: this.#now() });
        } else if (head.etag !== chunk.etag) this.#record(bucket, key, chunk.tenant, head.size, head.etag);
      },
      () => this.#observer.syncFailed('head'),
    );
  }

  /** A client deleted the key. */
  deleted(bucket: string, key: string): void {
    const removed = this.#indexes.get(bucket)?.remove(key);
    if (removed) this.#shared.record({ t: 'del', b: bucket, k: key, e: removed.etag, at: this.#now() });
  }

  /**
   * Retains `keys` until `until` (ms; at most MAX_PIN_MS ahead); a time not in the future removes
   * their pins. Only stored chunks of `tenant` are pinned or unpinned (any, when `tenant` is
   * undefined: the administrator). Returns how many were.
   */
  pin(bucket: string, keys: readonly string[], until: number, tenant: string | undefined): number {
    const index = this.#indexes.get(bucket);
    if (!index) return 0;
    const capped = Math.min(until, this.#now() + MAX_PIN_MS);
    let pinned = 0;
    for (const key of new Set(keys)) {
      const chunk = index.get(key);
      if (!chunk || (tenant !== undefined && chunk.tenant !== tenant)) continue;
      this.#applyPin(bucket, key, capped);
      this.#shared.record({ t: 'pin', b: bucket, k: key, until: capped });
      pinned++;
    }
    return pinned;
  }

  // ---- what operators ask ----

  usage(): BucketUsage[] {
    const now = this.#now();
    // From the pins, not the chunks: each metrics scrape asks, and pins are few beside chunks.
    const pinned = new Map<string, number>();
    for (const [s, until] of this.#pins) {
      if (until <= now) continue;
      const [bucket, key] = s.split('\0') as [string, string];
      const size = this.#indexes.get(bucket)?.get(key)?.size ?? 0;
      pinned.set(bucket, (pinned.get(bucket) ?? 0) + size);
    }
    return [...this.#indexes].map(([bucket, index]) => {
      const derivedBytes = this.#derived?.bytes(bucket) ?? 0;
      const uploadBytes = this.#uploadBytes(bucket);
      const uncheckedBytes = index.uncheckedBytes + uploadBytes - this.#uploadBytes(bucket, true);
      return {
        bucket,
        budget: this.#config.budgets.get(bucket) ?? 0,
        bytes: index.bytes + derivedBytes + uploadBytes,
        derivedBytes,
        uncheckedBytes,
        uploadBytes,
        chunks: index.size,
        pinnedBytes: pinned.get(bucket) ?? 0,
      };
    });
  }

  /** Bytes of the tenant's chunks and unfinished uploads' parts over the budgeted buckets. */
  tenantBytes(tenant: string): number {
    let bytes = this.#uploadsByTenant.get(tenant)?.bytes ?? 0;
    for (const index of this.#indexes.values()) bytes += index.tenantBytes(tenant);
    return bytes;
  }

  /** Bytes of the bucket's unfinished uploads' parts (`checked`: only those the store's answers gave). */
  #uploadBytes(bucket: string, checked = false): number {
    const sums = this.#uploadsByBucket.get(bucket);
    return (checked ? sums?.checked : sums?.bytes) ?? 0;
  }

  /** Sets (or, with undefined, removes) an upload, keeping the sums of #uploads with it. */
  #setUpload(id: string, upload: Upload | undefined): void {
    const old = this.#uploads.get(id);
    if (old) this.#count(old, -1);
    if (upload) {
      this.#uploads.set(id, upload);
      this.#count(upload, 1);
    } else this.#uploads.delete(id);
  }

  #count(upload: Upload, sign: 1 | -1): void {
    const tenant = this.#uploadsByTenant.get(upload.tenant) ?? { bytes: 0, uploads: 0, parts: 0 };
    tenant.bytes += sign * upload.bytes;
    tenant.uploads += sign;
    tenant.parts += sign * upload.parts.size;
    if (tenant.uploads === 0) this.#uploadsByTenant.delete(upload.tenant);
    else this.#uploadsByTenant.set(upload.tenant, tenant);
    const bucket = this.#uploadsByBucket.get(upload.bucket) ?? { bytes: 0, checked: 0 };
    bucket.bytes += sign * upload.bytes;
    if (upload.checked) bucket.checked += sign * upload.bytes;
    this.#uploadsByBucket.set(upload.bucket, bucket);
    this.#uploadParts += sign * upload.parts.size;
  }

  /** Forgets an upload that ended (completed, aborted, expired), remembering that it did. */
  #endUpload(id: string): boolean {
    remember(this.#ended, id, this.#now());
    const known = this.#uploads.has(id);
    this.#setUpload(id, undefined);
    return known;
  }

  // ---- multipart uploads ----

  /**
   * Whether part `partNumber` of `uploadId` by `tenant` may be counted: refused
   * (OC_ERR_QUOTA_EXCEEDED) when it would be a new upload or a new part past the limits
   * (UploadLimits), its tenant's or all tenants'. Called before the part is sent to the store.
   */
  admitPart(bucket: string, uploadId: string, partNumber: number, tenant: string): void {
    if (!this.#indexes.has(bucket)) return;
    const upload = this.#uploads.get(slot(bucket, uploadId));
    if (upload?.parts.has(partNumber)) return; // uploaded again: it replaces its bytes
    const limits = this.#uploadLimits;
    const mine = this.#uploadsByTenant.get(tenant) ?? { uploads: 0, parts: 0 };
    const refuse = (what: string, held: number, most: number, all: number): never => {
      throw new ObjectCacheError(
        'OC_ERR_QUOTA_EXCEEDED',
        `Tenant ${tenant} has ${held} ${what} of unfinished multipart uploads counted in budgeted buckets, the most at once (${most}; ${all} for all tenants): complete or abort some first`,
        {
          details: { Tenant: tenant },
        },
      );
    };
    if (!upload && (mine.uploads >= limits.uploadsPerTenant || this.#uploads.size >= limits.uploads)) refuse('uploads', mine.uploads, limits.uploadsPerTenant, limits.uploads);
    if (mine.parts >= limits.partsPerTenant || this.#uploadParts >= limits.parts) refuse('parts', mine.parts, limits.partsPerTenant, limits.parts);
  }

  /** A part of an unfinished upload was stored (its bytes as checked against its length): counted from now. */
  partStored(bucket: string, key: string, uploadId: string, partNumber: number, bytes: number, tenant: string): void {
    if (!this.#indexes.has(bucket)) return;
    const at = this.#now();
    this.#part(bucket, key, uploadId, partNumber, bytes, tenant, true, at);
    this.#shared.record({ t: 'part', b: bucket, k: key, u: uploadId, p: partNumber, s: bytes, n: tenant, at });
  }

  /** The upload was completed or aborted: its parts count no more (a completed object is learnt as a write). */
  uploadEnded(bucket: string, uploadId: string): void {
    if (!this.#indexes.has(bucket)) return;
    if (this.#endUpload(slot(bucket, uploadId))) this.#shared.record({ t: 'upend', b: bucket, u: uploadId });
  }

  #part(bucket: string, key: string, uploadId: string, partNumber: number, bytes: number, tenant: string, checked: boolean, at: number): void {
    const id = slot(bucket, uploadId);
    if (this.#ended.has(id)) return; // completed, aborted or expired: its parts count no more
    const upload = this.#uploads.get(id) ?? { bucket, key, uploadId, tenant, parts: new Map(), bytes: 0, seen: at, changed: at, checked };
    this.#setUpload(id, undefined); // its sums leave while it changes, and come back with it
    upload.bytes += bytes - (upload.parts.get(partNumber) ?? 0);
    upload.parts.set(partNumber, bytes);
    upload.checked &&= checked;
    upload.changed = Math.max(upload.changed, this.#now());
    // A holder's listing learns an upload before its part's own news, with no tenant: this names it.
    if (upload.tenant === '') upload.tenant = tenant;
    this.#setUpload(id, upload);
  }

  /**
   * The lease holder's look at the budgeted buckets' unfinished uploads, every UPLOAD_SWEEP_MS:
   * those begun before --multipart-expiry are aborted (their parts freed); the others' bytes are
   * taken from the store's own listing of their parts (so uploads made past the gateway, or
   * through another, count, checked); those the store no longer has are forgotten.
   */
  async #sweepUploads(now: number): Promise<void> {
    const expiry = this.#config.multipartExpiryMs;
    for (const bucket of this.#indexes.keys()) {
      const seen = new Set<string>();
      let looked = 0;
      let complete = true;
      for (let after: Awaited<ReturnType<CapacityStore['uploads']>>['next']; ;) {
        const page = await this.#store.uploads(bucket, after);
        for (const listed of page.uploads) {
          const id = slot(bucket, listed.uploadId);
          seen.add(id);
          if ((this.#ended.get(id) ?? -Infinity) >= now) continue; // ended while the listing ran
          if (expiry !== undefined && listed.initiated > 0 && listed.initiated < now - expiry) {
            await this.#store.abortUpload(bucket, listed.key, listed.uploadId);
            this.#observer.uploadExpired(bucket);
            this.#log.info(
              { bucket, key: listed.key, uploadId: listed.uploadId, initiated: new Date(listed.initiated).toISOString() },
              'capacity: aborted a multipart upload left unfinished past --multipart-expiry',
            );
            this.uploadEnded(bucket, listed.uploadId);
            continue;
          }
          if (looked++ >= UPLOADS_PER_SWEEP) {
            complete = false;
            continue;
          }
          const asked = this.#now();
          const parts = await this.#store.uploadParts(bucket, listed.key, listed.uploadId);
          if (parts === undefined || (this.#ended.get(id) ?? -Infinity) >= now) continue;
          // The store's own part sizes. A part learnt while they were asked for stays as learnt too.
          const known = this.#uploads.get(id);
          if (known && known.changed >= asked) for (const [n, bytes] of known.parts) if (!parts.has(n)) parts.set(n, bytes);
          let bytes = 0;
          for (const size of parts.values()) bytes += size;
          this.#setUpload(id, {
            bucket,
            key: listed.key,
            uploadId: listed.uploadId,
            tenant: known?.tenant ?? '',
            parts,
            bytes,
            seen: known?.seen ?? now,
            changed: asked,
            checked: true,
          });
        }
        after = page.next;
        if (after === undefined || this.#closed) break;
      }
      if (!complete) continue;
      // Gone from the store since (completed or aborted elsewhere), unless learnt after the listing began.
      for (const [id, upload] of this.#uploads) {
        if (upload.bucket === bucket && !seen.has(id) && upload.seen < now) this.uploadEnded(bucket, upload.uploadId);
      }
    }
  }

  /** Bytes per tenant over the budgeted buckets. */
  tenants(): Map<string, number> {
    const out = new Map<string, number>();
    for (const index of this.#indexes.values()) for (const [tenant, bytes] of index.tenants()) out.set(tenant, (out.get(tenant) ?? 0) + bytes);
    return out;
  }

  quota(tenant: string): number | undefined {
    return this.#config.quotas.get(tenant);
  }

  get quotas(): ReadonlyMap<string, number> {
    return this.#config.quotas;
  }

  /** The next `count` chunks eviction would take from the bucket, with how deep each sits in its prefix. */
  async coldest(bucket: string, count: number): Promise<ColdPrefix[]> {
    const index = this.#indexes.get(bucket);
    if (!index || count <= 0) return [];
    const out: ColdPrefix[] = [];
    for await (const { chunk, reason } of this.#order(index, { evictable: (c) => this.#evictable(bucket, c, this.#now()), deadIfWrittenBefore: this.#now() - DEAD_AFTER_MS })) {
      out.push({ tail: chunk.key, depth: index.depth(chunk), bytes: chunk.size, lastAccess: chunk.lastAccess, reason });
      if (out.length >= count) break;
    }
    return out;
  }

  /**
   * The admin endpoint's /capacity document with the `top` coldest chunks of each bucket (at most
   * MAX_REPORT_TOP). Requests that arrive while one is being made share it.
   */
  async report(top: number): Promise<CapacityReport> {
    this.#reporting ??= this.#report().finally(() => {
      this.#reporting = undefined;
    });
    const full = await this.#reporting;
    return { ...full, buckets: full.buckets.map((b) => ({ ...b, coldest: b.coldest.slice(0, Math.max(0, top)) })) };
  }

  async #report(): Promise<CapacityReport> {
    const now = this.#now();
    const buckets: CapacityReport['buckets'][number][] = [];
    for (const u of this.usage()) {
      const coldest = await this.coldest(u.bucket, MAX_REPORT_TOP);
      buckets.push({
        ...u,
        highBytes: Math.floor(u.budget * this.#config.highFraction),
        lowBytes: Math.floor(u.budget * this.#config.lowFraction),
        coldest: coldest.map((c) => ({ ...c, idleSeconds: Math.max(0, Math.round((now - c.lastAccess) / 1000)) })),
      });
    }
    return {
      leader: this.isLeader,
      gateway: this.#shared.id,
      buckets,
      tenants: [...this.tenants()].map(([tenant, bytes]) => ({ tenant, bytes, quota: this.quota(tenant) ?? null })),
    };
  }

  /** The bucket's eviction order, built in slices, while this walk is the only one (`#walking`). */
  async *#order(index: ChunkIndex, options: OrderOptions): AsyncGenerator<Candidate> {
    await this.#walking.acquire(1);
    try {
      yield* index.evictionOrderPaced(options);
    } finally {
      this.#walking.release(1);
    }
  }

  /** The chunk as this gateway knows it (tests, the admin endpoint). */
  chunk(bucket: string, key: string): Chunk | undefined {
    return this.#indexes.get(bucket)?.get(key);
  }

  // ---- eviction ----

  /** Whether the chunk may be evicted now (`chosen`: it is the one being evicted, queued already). */
  #evictable(bucket: string, chunk: Chunk, now: number, chosen = false): boolean {
    const s = slot(bucket, chunk.key);
    if (this.#readers.has(s) || this.#writing.has(s)) return false;
    if (!chosen && (this.#queued.has(s) || this.#deleting.has(s))) return false;
    if (this.#indexes.get(bucket)?.get(chunk.key) !== chunk) return false; // rewritten or gone since
    if ((this.#pins.get(s) ?? 0) > now) return false;
    // A read at another gateway is known only from its journal: with other gateways about, what
    // was read this recently stays. Alone, this gateway knows every read in flight.
    return !this.#shared.hasPeers || chunk.lastAccess <= now - RECENT_ACCESS_GRACE_SYNCS * this.#config.syncMs;
  }

  #lastIdleScan = 0;

  /**
   * One pass of the leader: buckets past their high mark trimmed to the low one, and (every
   * IDLE_SCAN_MS) idle chunks evicted. The victims are read from the index's standing order (work
   * in proportion to what is taken, ChunkIndex), in slices that leave the event loop to requests;
   * they are then deleted at --evict-rate, each checked again just before (still wanted, not read
   * since, still a tail or still dead, not being read or written).
   */
  async #trimOnce(): Promise<void> {
    if (this.#trimming || this.#closed) return;
    if (!this.#shared.isLeader) {
      this.#draining.clear(); // a drain is the lease holder's; one that takes the lease again decides afresh
      return;
    }
    this.#trimming = true;
    try {
      const now = this.#now();
      this.#prunePins(now);
      // Every IDLE_SCAN_MS, or every half of a shorter --evict-idle (a chunk goes within 1.5 times its idle limit).
      const idleMs = this.#config.idleMs;
      const idleScan = idleMs !== undefined && now - this.#lastIdleScan >= Math.min(IDLE_SCAN_MS, Math.max(TRIM_INTERVAL_MS, idleMs / 2));
      if (idleScan) this.#lastIdleScan = now;
      const expiry = this.#config.multipartExpiryMs;
      if (now - this.#lastUploadSweep >= Math.min(UPLOAD_SWEEP_MS, Math.max(1000, (expiry ?? UPLOAD_SWEEP_MS) / 4))) {
        this.#lastUploadSweep = now;
        // A store that cannot list uploads now does not keep this pass from trimming.
        await this.#sweepUploads(now).catch((error: unknown) => {
          this.#log.warn({ error }, 'capacity: listing the unfinished multipart uploads failed; the next sweep retries');
          this.#observer.syncFailed('uploads');
        });
      }
      // While writes wait for room somewhere, a pass serves those buckets only, first.
      const someWait = this.#waitingForRoom.size > 0;
      for (const [bucket, index] of this.#indexes) {
        const waiting = (): boolean => (this.#waitingForRoom.get(bucket) ?? 0) > 0;
        if (someWait && !waiting()) continue;
        // Sizes learnt from other gateways' journals are checked against the store before
        // eviction acts on them; until then they do not count here.
        await this.#checkSizes(bucket, index);
        const budget = this.#config.budgets.get(bucket) ?? 0;
        const uncounted = index.uncheckedBytes + this.#uploadBytes(bucket) - this.#uploadBytes(bucket, true) + (this.#bucketReserved.get(bucket) ?? 0);
        const uploads = this.#uploadBytes(bucket, true);
        const usage = (): number => index.bytes - index.uncheckedBytes + uploads + (this.#derived?.bytes(bucket) ?? 0) - (this.#pendingFree.get(bucket) ?? 0);
        // Past the high mark, a bucket drains to the low one over as many passes as it takes. With
        // other gateways about, whose waiting writes this one does not see, the low mark is also
        // kept far enough under the budget for one write as large as the largest chunk present to
        // fit (with close marks there may be less room than that between the low mark and the
        // budget), and a bucket without that room drains too; but never more than
        // UNSEEN_WRITE_SHARE of the budget, so that one tenant's huge object cannot drain everyone
        // else's chunks.
        const unseenWrite = this.#shared.hasPeers ? Math.min(index.largest, budget * UNSEEN_WRITE_SHARE) : 0;
        const low = Math.min(budget * this.#config.lowFraction, budget - unseenWrite);
        // Down to the low mark, and, for writes waiting, far enough that they fit beside what
        // the trim does not count (unchecked sizes, uploads' unchecked parts, admitted writes).
        const target = Math.min(low, waiting() ? budget - (this.#waitingBytes.get(bucket) ?? 0) - uncounted : Infinity);
        const used = usage();
        if (used > budget * this.#config.highFraction || used + unseenWrite > budget) this.#draining.add(bucket);
        else if (used <= low) this.#draining.delete(bucket);
        // Writes waiting for room trim too, whatever the marks (a large write can need room below the high mark).
        const trim = this.#draining.has(bucket) || waiting();
        if (!trim && !idleScan) continue;
        const idleBefore = idleScan && idleMs !== undefined ? now - idleMs : undefined;
        let victims: { chunk: Chunk; cause: EvictionCause }[] = [];
        let free = usage();
        // Derived data (packed segments) in the chunks' least-recently-used order, each just before
        // the least recently used chunk it copies: a hot prefix's segment outlives colder chunks,
        // and goes before any chunk of its own (it is rebuilt from them, never the other way round).
        const derived = trim ? this.#derivedOrder(bucket, index) : [];
        const derivedVictims = new Set<string>();
        let nextDerived = 0;
        const takeDerived = (upTo: number): void => {
          for (; nextDerived < derived.length && free > target && (derived[nextDerived] as DerivedAt).at <= upTo; nextDerived++) {
            const { item } = derived[nextDerived] as DerivedAt;
            derivedVictims.add(item.id);
            free -= item.bytes;
          }
        };
        // A chunk whose size is not checked yet does not count in the usage, so it is not taken to bring it down.
        for await (const { chunk, reason } of this.#order(index, { evictable: (c) => c.checked && this.#evictable(bucket, c, now), deadIfWrittenBefore: now - DEAD_AFTER_MS })) {
          const idle = idleBefore !== undefined && chunk.lastAccess < idleBefore;
          if (trim && free > target && reason === 'lru') takeDerived(chunk.lastAccess);
          if (trim && free > target) {
            victims.push({ chunk, cause: reason === 'dead' ? 'dead' : idle ? 'idle' : 'lru' });
            free -= chunk.size;
          } else if (idle) victims.push({ chunk, cause: reason === 'dead' ? 'dead' : 'idle' });
          else if (reason === 'lru') break; // leaves come oldest first: nothing later is idle or needed
        }
        takeDerived(Infinity); // no chunk left to take: the rest of the derived data, if need be
        if (derivedVictims.size > 0 && this.#derived) await this.#derived.evict(bucket, derivedVictims);
        // Nothing evictable (pinned, being read or written): the high mark starts the next drain.
        if (victims.length === 0 && derivedVictims.size === 0) this.#draining.delete(bucket);
        // The walk gave way to requests while it ran: what a quota eviction queued, or a read
        // started on, meanwhile is left out here, in the same tick as the rest are queued.
        victims = victims.filter((v) => this.#evictable(bucket, v.chunk, now));
        for (const victim of victims) this.#queue(bucket, victim.chunk);
        let at = 0;
        try {
          for (; at < victims.length; at++) {
            const { chunk, cause } = victims[at] as { chunk: Chunk; cause: EvictionCause };
            // Writes began waiting in another bucket: this one gives way (what is left is unqueued).
            if (!waiting() && this.#waitingForRoom.size > 0) break;
            // At --evict-rate, unless writes wait for room: here, or, with other gateways about
            // (whose waiting writes this one does not see), the bucket being full. Then as fast
            // as the store deletes.
            await this.#paced(waiting() || (this.#shared.hasPeers && this.#bucketBytes(bucket) >= budget * FULL_FRACTION));
            if (this.#closed || !this.#shared.isLeader) break;
            // Still wanted? The pass may have waited; a chunk trimmed for the budget goes only while
            // the bucket is above its low mark (other chunks may have gone meanwhile).
            const still = cause === 'idle' || cause === 'dead' || usage() + chunk.size > target;
            // Read since it was chosen (a lookup that found it, a GET about to load it), or no
            // longer a tail (the chunk after it was stored meanwhile): the next pass decides again.
            // Dead no longer (its predecessor was stored while the order was built): decided again too.
            const changed = chunk.lastAccess > now || (cause === 'dead' ? !index.isDead(chunk) : index.successors(chunk.key) > 0);
            if (still && !changed) await this.#evict(bucket, chunk, cause, () => this.#shared.isLeader);
            else this.#unqueue(bucket, chunk);
          }
        } finally {
          for (const left of victims.slice(at)) this.#unqueue(bucket, left.chunk);
        }
        if (usage() <= low) this.#draining.delete(bucket);
      }
    } catch (error) {
      this.#log.warn({ error }, 'capacity: a trimming pass failed; the next one retries');
      this.#observer.syncFailed('trim');
    } finally {
      this.#trimming = false;
      this.#lastPassEnded = performance.now();
    }
  }

  /** The bucket's derived data, least recently used first, each at the least recent of its own use and its chunks' (DerivedData). */
  #derivedOrder(bucket: string, index: ChunkIndex): DerivedAt[] {
    if (!this.#derived) return [];
    const order: DerivedAt[] = [];
    for (const item of this.#derived.items(bucket)) {
      let at = item.lastUsed;
      for (const key of item.keys) at = Math.min(at, index.get(key)?.lastAccess ?? Infinity);
      order.push({ item, at });
    }
    return order.sort((a, b) => a.at - b.at);
  }

  /**
   * The lease holder checks the sizes other gateways journalled against the store's own (a HEAD
   * each, CHECKS_AT_ONCE at a time, at most CHECKS_PER_PASS a pass): a chunk the store does not
   * have is forgotten, one it has takes the store's size and ETag. Until then a size from a
   * journal is not acted on, whoever wrote it.
   */
  async #checkSizes(bucket: string, index: ChunkIndex): Promise<void> {
    const keys: string[] = [];
    for (const key of index.unchecked()) {
      keys.push(key);
      if (keys.length >= CHECKS_PER_PASS) break;
    }
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < keys.length && !this.#closed) {
        const key = keys[next++] as string;
        const chunk = index.get(key);
        if (!chunk || chunk.checked) continue;
        let head: Awaited<ReturnType<CapacityStore['head']>>;
        try {
          head = await this.#store.head(bucket, key);
        } catch {
          // Left unchecked (not counted by trimming) for a later pass; one key the store will not
          // answer for must not stop the others' checks, nor trimming.
          this.#observer.syncFailed('head');
          index.deferCheck(key);
          continue;
        }
        if (index.get(key) !== chunk) continue; // rewritten or gone meanwhile: what came after stands
        if (head === undefined) {
          index.remove(key);
          this.#shared.record({ t: 'del', b: bucket, k: key, e: chunk.etag, at: this.#now() });
        } else if (head.etag === chunk.etag && head.size === chunk.size) index.markChecked(key);
        else this.#record(bucket, key, chunk.tenant, head.size, head.etag, chunk.written);
      }
    };
    await Promise.all(Array.from({ length: Math.min(CHECKS_AT_ONCE, keys.length) }, lane));
  }

  #prunePins(now: number): void {
    for (const [s, until] of this.#pins) if (until <= now) this.#pins.delete(s);
  }

  #nextDeleteAt = 0;

  /** Waits for the next delete the rate allows (`urgent`: none, writes wait for the room). */
  async #paced(urgent = false): Promise<void> {
    const gap = 1000 / this.#config.evictPerSecond;
    const now = performance.now();
    if (urgent) {
      this.#nextDeleteAt = Math.max(this.#nextDeleteAt, now);
      return;
    }
    const at = Math.max(now, this.#nextDeleteAt);
    this.#nextDeleteAt = at + gap;
    if (at > now) await new Promise((resolve) => setTimeout(resolve, at - now));
  }

  #queue(bucket: string, chunk: Chunk): void {
    this.#queued.add(slot(bucket, chunk.key));
    this.#pendingFree.set(bucket, (this.#pendingFree.get(bucket) ?? 0) + chunk.size);
  }

  #unqueue(bucket: string, chunk: Chunk): void {
    if (!this.#queued.delete(slot(bucket, chunk.key))) return;
    this.#pendingFree.set(bucket, Math.max(0, (this.#pendingFree.get(bucket) ?? 0) - chunk.size));
  }

  /**
   * Deletes the version of the chunk that was decided on, unless it may no longer go (a read or
   * write started, a pin, a recent read elsewhere; `allowed` false: the lease was lost), and
   * unless it was rewritten (the store refuses, or its ETag changed). The chunk is marked as
   * being deleted before the last check, in the same tick: a read or write that starts after it
   * waits for the delete.
   */
  async #evict(bucket: string, chunk: Chunk, cause: EvictionCause, allowed: () => boolean = () => true): Promise<boolean> {
    const s = slot(bucket, chunk.key);
    try {
      if (this.#deleting.has(s)) return false;
      let finish = (): void => {};
      this.#deleting.set(s, new Promise<void>((resolve) => (finish = resolve)));
      let outcome: 'deleted' | 'changed' | 'gone';
      try {
        if (!allowed() || !this.#evictable(bucket, chunk, this.#now(), true)) return false;
        outcome = await this.#store.deleteVersion(bucket, chunk.key, chunk.etag);
      } finally {
        this.#deleting.delete(s);
        finish();
      }
      const index = this.#indexes.get(bucket);
      if (outcome === 'changed') {
        // Rewritten since: learn the new version (its size and ETag) rather than delete it.
        const now = await this.#store.head(bucket, chunk.key);
        if (now && index?.get(chunk.key)?.etag === chunk.etag) this.#record(bucket, chunk.key, chunk.tenant, now.size, now.etag);
        return false;
      }
      if (index?.get(chunk.key)?.etag === chunk.etag) index.remove(chunk.key);
      this.#shared.record({ t: 'del', b: bucket, k: chunk.key, e: chunk.etag, at: this.#now() });
      if (outcome === 'deleted') this.#observer.evicted(bucket, cause, chunk.size);
      return outcome === 'deleted';
    } finally {
      this.#unqueue(bucket, chunk);
    }
  }

  async #evictForQuota(tenant: string, over: number, incoming: number, quota: number): Promise<void> {
    const now = this.#now();
    let candidates: { bucket: string; chunk: Chunk; dead: boolean }[] = [];
    for (const [bucket, index] of this.#indexes) {
      let found = 0;
      for await (const { chunk, reason } of this.#order(index, { tenant, evictable: (c) => this.#evictable(bucket, c, now), deadIfWrittenBefore: now - DEAD_AFTER_MS })) {
        candidates.push({ bucket, chunk, dead: reason === 'dead' });
        found += chunk.size;
        if (found >= over) break;
      }
    }
    // Dead chunks first, then the coldest across the buckets; none that a trimming pass queued,
    // or a read started on, while the walks gave way to requests.
    candidates = candidates.filter((c) => this.#evictable(c.bucket, c.chunk, now));
    candidates.sort((a, b) => (a.dead !== b.dead ? (a.dead ? -1 : 1) : a.chunk.lastAccess - b.chunk.lastAccess));
    const victims: { bucket: string; chunk: Chunk; dead: boolean }[] = [];
    let freed = 0;
    for (const candidate of candidates) {
      if (freed >= over || victims.length >= MAX_QUOTA_VICTIMS) break;
      victims.push(candidate);
      freed += candidate.chunk.size;
    }
    if (freed < over) {
      throw new ObjectCacheError(
        'OC_ERR_QUOTA_EXCEEDED',
        `Storing ${incoming} bytes would take tenant ${tenant} past its quota of ${quota} bytes, and not enough of its own chunks can be evicted (pinned, being read or written)`,
        {
          details: { Tenant: tenant, QuotaBytes: String(quota) },
        },
      );
    }
    for (const victim of victims) this.#queue(victim.bucket, victim.chunk);
    let short = 0;
    for (const victim of victims) {
      // Paced like trimming (the write waits): eviction never crowds out reads at the store.
      await this.#paced();
      if (!(await this.#evict(victim.bucket, victim.chunk, victim.dead ? 'dead' : 'quota'))) short += victim.chunk.size;
    }
    if (freed - short < over) {
      throw new ObjectCacheError(
        'OC_ERR_QUOTA_EXCEEDED',
        `Storing ${incoming} bytes would take tenant ${tenant} past its quota of ${quota} bytes; its chunks chosen for eviction were read or rewritten meanwhile`,
        {
          details: { Tenant: tenant, QuotaBytes: String(quota) },
        },
      );
    }
  }

  /** A chunk as the store's own answer has it (a write's, a HEAD's): its size is checked. */
  #record(bucket: string, key: string, tenant: string, size: number, etag: string, at = this.#now(), meta?: Readonly<Record<string, string>>): void {
    const index = this.#indexes.get(bucket);
    if (!index) return;
    const e = etag.startsWith('"') ? etag : `"${etag}"`;
    index.put(key, { size, tenant, etag: e, at, ...(meta ? { meta } : {}) });
    this.#shared.record({ t: 'put', b: bucket, k: key, s: size, n: tenant, e, at });
  }

  /** After a write whose answer does not say its size (a copy, a multipart upload): ask the store. */
  async #learnWrite(bucket: string, key: string, tenant: string): Promise<void> {
    try {
      const head = await this.#store.head(bucket, key);
      if (head) this.#record(bucket, key, tenant, head.size, head.etag, this.#now(), head.meta);
    } catch (error) {
      this.#log.warn({ error, bucket, key }, 'capacity: could not learn the size of a chunk just written; the next reconciliation will');
      this.#observer.syncFailed('head');
    }
  }

  // ---- shared state ----

  #applyPin(bucket: string, key: string, until: number): void {
    const s = slot(bucket, key);
    if (until > this.#now()) this.#pins.set(s, until);
    else this.#pins.delete(s);
  }

  /**
   * Applies an event of a journal (this gateway's own, after a reload, or another's) or of a
   * snapshot. Another gateway's write is applied only if a key of its tenant may write the chunk
   * (else dropped and counted), and its size is unchecked until the lease holder checks it
   * against the store (#checkSizes); so is a snapshot's where it says so (`u`).
   */
  #apply(event: CapacityEvent, source: EventSource): void {
    const index = this.#indexes.get(event.b);
    if (!index) return;
    switch (event.t) {
      case 'put': {
        if (source === 'peer' && event.n !== '' && !this.#mayWrite(event.n, event.b, event.k)) {
          this.#observer.rejected('unauthorized', 1);
          break;
        }
        // Journals of different gateways are applied gateway by gateway, not in time order: an
        // older write never replaces a newer one.
        const known = index.get(event.k);
        const checked = source === 'own' || (source === 'snapshot' && event.u !== 1);
        if (!known || event.at >= known.written) index.put(event.k, { size: event.s, tenant: event.n, etag: event.e, at: event.at, checked });
        break;
      }
      case 'del': {
        // Only the version deleted (a write after the delete, through another gateway, stays).
        const known = index.get(event.k);
        if (known && (event.e === undefined || event.e === known.etag)) index.remove(event.k);
        break;
      }
      case 'acc':
        index.touch(event.k, event.at);
        break;
      case 'link':
        index.link(event.keys, event.n ?? '');
        break;
      case 'pin':
        this.#applyPin(event.b, event.k, event.until);
        break;
      case 'part':
        if (source === 'peer' && event.n !== '' && !this.#mayWrite(event.n, event.b, event.k)) {
          this.#observer.rejected('unauthorized', 1);
          break;
        }
        this.#part(event.b, event.k, event.u, event.p, event.s, event.n, source === 'own' || (source === 'snapshot' && event.c === undefined), event.at);
        break;
      case 'upend':
        // Remembered: a part journalled before its upload ended, applied after, must not bring it back.
        this.#endUpload(slot(event.b, event.u));
        break;
    }
  }

  /** Replaces everything known with a snapshot's events (then the journals are applied on top). */
  #reset(events: Iterable<CapacityEvent>): void {
    // Told of nothing until the reload is complete (#reloaded), then of what it changed.
    if (this.#listening) this.#beforeReload ??= new Map(this.#indexes);
    for (const bucket of this.#indexes.keys()) {
      const index = new ChunkIndex();
      index.suspendOrder(); // built once, after the snapshot, not chunk by chunk
      this.#indexes.set(bucket, index);
    }
    this.#pins.clear();
    for (const id of [...this.#uploads.keys()]) this.#setUpload(id, undefined);
    for (const event of events) this.#apply(event, 'snapshot');
    for (const index of this.#indexes.values()) index.buildOrder();
  }

  /**
   * A reload is complete. The first is the baseline: what the store held then is not told. A later
   * one (another gateway's snapshot) is told as what it changed against the indexes before it.
   */
  #reloaded(): void {
    const before = this.#beforeReload;
    this.#beforeReload = undefined;
    this.#listening = this.#changes !== undefined;
    for (const [bucket, index] of this.#indexes) {
      const changes = this.#changes?.(bucket);
      index.changes = changes;
      const old = before?.get(bucket);
      if (!changes || !old) continue;
      for (const chunk of old.values()) if (index.get(chunk.key)?.etag !== chunk.etag) changes.removed(chunk);
      for (const chunk of index.values()) {
        const was = old.get(chunk.key);
        if (was?.etag === chunk.etag) {
          if (chunk.model === undefined && was.model !== undefined) chunk.model = was.model;
        } else changes.stored(chunk, undefined);
      }
    }
  }

  /** Everything known, as events a snapshot holds. */
  *#snapshot(): Generator<CapacityEvent> {
    const now = this.#now();
    for (const [bucket, index] of this.#indexes) {
      for (const c of index.values()) {
        yield { t: 'put', b: bucket, k: c.key, s: c.size, n: c.tenant, e: c.etag, at: c.written, ...(c.checked ? {} : { u: 1 as const }) };
        yield { t: 'acc', b: bucket, k: c.key, at: c.lastAccess };
        if (c.pred !== undefined) yield { t: 'link', b: bucket, keys: [c.pred, c.key], n: c.tenant };
      }
    }
    for (const [s, until] of this.#pins) {
      if (until <= now) continue;
      const [b, k] = s.split('\0') as [string, string];
      yield { t: 'pin', b, k, until };
    }
    for (const u of this.#uploads.values()) {
      for (const [p, s] of u.parts) yield { t: 'part', b: u.bucket, k: u.key, u: u.uploadId, p, s, n: u.tenant, at: u.seen, ...(u.checked ? {} : { c: 0 as const }) };
    }
  }

  /**
   * Makes the index agree with the store: objects it does not know (written past the gateway, or
   * whose journal was lost) are added, with their tenant from their metadata and their write
   * time as their last access; chunks the store no longer has are forgotten. Only what was
   * written before the listing began is forgotten, so a write racing the listing is kept.
   */
  async #reconcile(): Promise<void> {
    for (const bucket of [...this.#indexes.keys()]) {
      const started = this.#now();
      const seen = new Set<string>();
      let after: string | undefined;
      for (;;) {
        const page = await this.#store.list(bucket, '', after);
        for (const object of page.objects) {
          seen.add(object.key);
          // The index as it is now: a reload while the listing runs (it runs beside syncs) replaces it.
          let index = this.#indexes.get(bucket);
          const known = index?.get(object.key);
          if (known && known.etag === object.etag) {
            // The listing is the store's own word on its size.
            if (known.size !== object.size) this.#record(bucket, object.key, known.tenant, object.size, object.etag, known.written);
            else index?.markChecked(object.key);
            continue;
          }
          const head = await this.#store.head(bucket, object.key);
          index = this.#indexes.get(bucket);
          if (!head || !index) continue;
          const tenant = head.meta['objectcache-tenant'] ?? known?.tenant ?? '';
          // The chain the writer recorded with the object (schemas/chain.ts), when the journals lost it.
          const after = head.meta[AFTER_META];
          const facts = {
            size: head.size,
            tenant,
            etag: head.etag,
            at: object.lastModified,
            lastAccess: known?.lastAccess ?? object.lastModified,
            ...(after !== undefined && after !== object.key ? { pred: after } : {}),
            meta: head.meta,
          };
          index.put(object.key, facts);
          this.#shared.record({ t: 'put', b: bucket, k: object.key, s: head.size, n: tenant, e: head.etag, at: object.lastModified });
          if (facts.pred !== undefined) this.#shared.record({ t: 'link', b: bucket, keys: [facts.pred, object.key], n: tenant });
        }
        after = page.objects.at(-1)?.key;
        if (!page.truncated || after === undefined) break;
      }
      const index = this.#indexes.get(bucket);
      if (!index) return;
      for (const chunk of [...index.values()]) {
        if (!seen.has(chunk.key) && chunk.written < started && !this.#writing.has(slot(bucket, chunk.key))) {
          index.remove(chunk.key);
          this.#shared.record({ t: 'del', b: bucket, k: chunk.key, e: chunk.etag, at: started });
        }
      }
    }
  }
}

/** Sets `key` as the most recent entry of `map`, forgetting the oldest past ENDED_KEPT. */
function remember(map: Map<string, number>, key: string, value: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > ENDED_KEPT) map.delete(map.keys().next().value as string);
}
