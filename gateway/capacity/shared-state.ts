// Over 600 lines: one class, the shared capacity state (journal, snapshot, lease), whose parts read and write the same signed objects.
/**
 * The state every gateway in front of one store shares for capacity management, kept in the store
 * itself (the --capacity-state-bucket), so a single gateway needs no other server and a restart
 * loses nothing but its last few seconds of accesses:
 *
 * - `journal/<gateway>/<seq>`: what one gateway saw in one sync period (writes, deletes,
 *   accesses, chains, pins), newline-delimited JSON events, written with If-None-Match.
 * - `snapshot`: every chunk known, with the journals it already contains (`folded`), written by
 *   the lease holder with If-Match on the snapshot it replaces.
 * - `lease`: which gateway may evict, until when; taken with If-None-Match (none yet) or If-Match
 *   on an expired one, renewed with If-Match each sync. One gateway evicts at a time.
 *
 * Every gateway writes its journal each sync and applies the others'; when the snapshot changes
 * under it, it reloads (snapshot, then the journals not folded into it). The holder folds the
 * journals into a new snapshot every SNAPSHOT_EVERY syncs and deletes them. Failure modes (a
 * holder that dies, a lost journal, clocks) are in docs/architecture.md, "Capacity".
 *
 * Nothing read from the store is applied on trust (docs/reliability.md, Trust model):
 * - every journal, snapshot and lease ends with the MAC of the gateways' state key
 *   (gateway/common/state-key.ts), a journal's over its own name too (it cannot be replayed as another);
 *   one without it was written by no gateway holding the key, and is skipped and counted;
 * - a journal is read only up to MAX_JOURNAL_BYTES, and each event is checked for its shape and
 *   bounds (key lengths, sizes an object can have) before capacity.ts applies it, which checks
 *   the rest (the tenant may write the chunk; sizes against the store before eviction acts on them);
 * - what one access key adds to this gateway's journal (accesses, chains: hints, not facts) is
 *   bounded per sync period (HINT_BYTES_PER_KEY); its writes and deletes are bounded by its quota.
 * A journal is written in parts of at most JOURNAL_PART_BYTES, and a part that cannot be written
 * keeps its events, and every event after it, for the next sync.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { CapacityConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { StateKey } from '../common/state-key.js';
import type { CapacityStore } from '../stores/capacity-store.js';
import type { Rejected } from '../common/observers.js';

/**
 * One event of a journal or snapshot. `u: 1` on a snapshot's `put`: its size came from another
 * gateway's journal and was not yet checked against the store (capacity.ts).
 */
export type CapacityEvent =
  | { readonly t: 'put'; readonly b: string; readonly k: string; readonly s: number; readonly n: string; readonly e: string; readonly at: number; readonly u?: 1 }
  | { readonly t: 'del'; readonly b: string; readonly k: string; readonly e?: string; readonly at: number }
  | { readonly t: 'acc'; readonly b: string; readonly k: string; readonly at: number }
  | { readonly t: 'link'; readonly b: string; readonly keys: readonly string[]; readonly n?: string }
  | { readonly t: 'pin'; readonly b: string; readonly k: string; readonly until: number }
  /** A part `p` of the unfinished multipart upload `u` of key `k`, `s` bytes, by tenant `n`. */
  | {
      readonly t: 'part';
      readonly b: string;
      readonly k: string;
      readonly u: string;
      readonly p: number;
      readonly s: number;
      readonly n: string;
      readonly at: number;
      readonly c?: 0;
    }
  /** The upload `u` was completed, aborted or expired: its parts count no more. */
  | { readonly t: 'upend'; readonly b: string; readonly u: string };

/** Where an applied event comes from: this gateway's own journal (after a reload), another gateway's, or a snapshot. */
export type EventSource = 'own' | 'peer' | 'snapshot';

/** Syncs between snapshots (with the default 2 s sync, one a minute). */
const SNAPSHOT_EVERY = 30;
/** Events a gateway keeps for its next journal at most. */
const MAX_PENDING_EVENTS = 200_000;
/** The most bytes of events in one journal object: a sync's events past it go in the next part. */
const JOURNAL_PART_BYTES = 8 * 1024 * 1024;
/** The largest journal read (a part, its longest line and its MAC); bigger ones are skipped and counted. */
const MAX_JOURNAL_BYTES = 2 * JOURNAL_PART_BYTES;
/** Bytes of hints (accesses, chains) one access key may add to this gateway's journal per sync period. */
export const HINT_BYTES_PER_KEY = 1024 * 1024;
/** The longest key (S3's limit, in UTF-8 bytes), tenant and chain an event may name. */
const MAX_KEY_BYTES = 1024;
const MAX_TENANT_CHARS = 256;
const MAX_CHAIN_KEYS = 4096;
/** The largest object S3 stores (5 TiB): no event's size may be more, nor an upload's parts together. */
const MAX_OBJECT_BYTES = 5 * 1024 ** 4;
/** A lease is a holder's name and a time: anything longer is no gateway's (read no further; it counts as expired). */
const MAX_LEASE_BYTES = 4096;
/** The holder lists the budgeted buckets again this often, ms. */
const RECONCILE_EVERY_MS = 10 * 60_000;
const SEQ_DIGITS = 12;

/** What was read from the store and not applied: a journal, snapshot or lease without the state key's MAC, a journal too large, or an event out of bounds. */

export interface SharedStateOptions {
  readonly store: CapacityStore;
  readonly config: CapacityConfig;
  /** What the journals, snapshot and lease are signed with, and must be signed with to be applied. */
  readonly key: StateKey;
  readonly logger: Pick<Logger, 'info' | 'warn' | 'error'>;
  readonly now: () => number;
  readonly gatewayId?: string;
  /** Applies one event (from a journal: this gateway's own or another's). */
  readonly apply: (event: CapacityEvent, source: EventSource) => void;
  /** Forgets everything and applies a snapshot's events. */
  readonly reset: (events: Iterable<CapacityEvent>) => void;
  /** A reload is complete: the snapshot, the journals on top and what is pending here are all applied. */
  readonly reloaded?: () => void;
  /** Everything known, as events. */
  readonly snapshot: () => Iterable<CapacityEvent>;
  /** Makes what is known agree with a listing of the store (the lease holder's job). */
  readonly reconcile: () => Promise<void>;
  readonly onFailure: (what: string) => void;
  /** Something read from the store was not applied (counted; `count` events or one object). */
  readonly onRejected: (what: Rejected, count: number) => void;
  /** Hints of an access key not journalled: past its HINT_BYTES_PER_KEY this sync period (counted). */
  readonly onHintsDropped: (count: number) => void;
}

interface Header {
  readonly v: 1;
  readonly at: number;
  /** For each gateway, the last journal the snapshot contains. */
  readonly folded: Record<string, number>;
  /**
   * One more than the snapshot it replaced: a gateway never applies one older than a snapshot it
   * applied (an old, signed snapshot put back would roll the state back).
   */
  readonly gen?: number;
}

const str = (v: unknown): v is string => typeof v === 'string';
const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const key = (v: unknown): v is string => str(v) && v.length > 0 && Buffer.byteLength(v) <= MAX_KEY_BYTES;
const tenant = (v: unknown): v is string => str(v) && v.length <= MAX_TENANT_CHARS;
const etag = (v: unknown): v is string => str(v) && v.length <= 256;
const uploadId = (v: unknown): v is string => str(v) && v.length > 0 && v.length <= 1024;

/** Whether a parsed line is an event of the right shape and within bounds (anything else is skipped and counted). */
function isEvent(e: Record<string, unknown>): boolean {
  if (!str(e['b']) || e['b'].length > 63) return false;
  switch (e['t']) {
    case 'put':
      return (
        key(e['k']) &&
        Number.isSafeInteger(e['s']) &&
        (e['s'] as number) >= 0 &&
        (e['s'] as number) <= MAX_OBJECT_BYTES &&
        tenant(e['n']) &&
        etag(e['e']) &&
        num(e['at']) &&
        (e['u'] === undefined || e['u'] === 1)
      );
    case 'del':
      return key(e['k']) && num(e['at']) && (e['e'] === undefined || etag(e['e']));
    case 'acc':
      return key(e['k']) && num(e['at']);
    case 'link':
      return Array.isArray(e['keys']) && e['keys'].length <= MAX_CHAIN_KEYS && (e['keys'] as unknown[]).every(key) && (e['n'] === undefined || tenant(e['n']));
    case 'pin':
      return key(e['k']) && num(e['until']);
    case 'part':
      return (
        key(e['k']) &&
        uploadId(e['u']) &&
        Number.isSafeInteger(e['p']) &&
        (e['p'] as number) >= 1 &&
        (e['p'] as number) <= 10_000 &&
        Number.isSafeInteger(e['s']) &&
        (e['s'] as number) >= 0 &&
        (e['s'] as number) <= MAX_OBJECT_BYTES &&
        tenant(e['n']) &&
        num(e['at']) &&
        (e['c'] === undefined || e['c'] === 0)
      );
    case 'upend':
      return uploadId(e['u']);
    default:
      return false;
  }
}

/** The events of a journal's or snapshot's lines, and how many lines were not events (skipped). */
function parseEvents(lines: readonly string[]): { events: CapacityEvent[]; skipped: number } {
  const events: CapacityEvent[] = [];
  let skipped = 0;
  for (const line of lines) {
    if (line === '') continue;
    try {
      const parsed = JSON.parse(line) as unknown;
      if (parsed !== null && typeof parsed === 'object' && isEvent(parsed as Record<string, unknown>)) events.push(parsed as CapacityEvent);
      else skipped++;
    } catch {
      skipped++;
    }
  }
  return { events, skipped };
}

/** The bytes an event takes as a journal line (exact for printable ASCII, an upper bound otherwise). */
function lineBytes(strings: readonly string[]): number {
  let bytes = 64;
  for (const s of strings) bytes += /^[\x20-\x21\x23-\x5b\x5d-\x7e]*$/.test(s) ? s.length + 3 : Buffer.byteLength(JSON.stringify(s)) + 1;
  return bytes;
}

/**
 * A signed object's body: its lines, then a last line `{"mac":...}`, the state key's MAC of the
 * lines before it (and of `name`, which a journal is bound to).
 */
function seal(key: StateKey, kind: 'capacity-journal' | 'capacity-snapshot', name: string, payload: string): Buffer {
  return Buffer.from(`${payload}${JSON.stringify({ mac: key.mac(kind, `${name}\n${payload}`) })}\n`);
}

/** A signed object's lines (without the MAC line), or undefined when its MAC is not the state key's. */
function unseal(key: StateKey, kind: 'capacity-journal' | 'capacity-snapshot', name: string, body: Buffer): string[] | undefined {
  const text = body.toString('utf8');
  const end = text.endsWith('\n') ? text.length - 1 : text.length;
  const last = text.lastIndexOf('\n', end - 1) + 1;
  const payload = text.slice(0, last);
  let mac: unknown;
  try {
    mac = (JSON.parse(text.slice(last, end)) as { mac?: unknown } | null)?.mac;
  } catch {
    return undefined;
  }
  return key.verify(kind, `${name}\n${payload}`, mac) ? payload.split('\n') : undefined;
}

export class SharedState {
  readonly #o: SharedStateOptions;
  readonly #bucket: string;
  readonly id: string;
  #seq = 0;
  /** Events recorded since the last journal. */
  #pending: CapacityEvent[] = [];
  /** Accesses since the last journal, latest per key (one line each, whatever the read rate). */
  #accesses = new Map<string, CapacityEvent>();
  /**
   * Pins since the last journal, the latest per key: pinning the same chunks again and again adds
   * nothing, so what a tenant's pins take of a journal is bounded by its own chunks.
   */
  #pinned = new Map<string, CapacityEvent>();
  #dropped = 0;
  /** Hint bytes each access key added to the journal this sync period (HINT_BYTES_PER_KEY). */
  #hintBytes = new Map<string, number>();
  /** The last journal applied, per gateway (this one's: the last written). */
  readonly #applied = new Map<string, number>();
  #snapshotEtag: string | undefined;
  /** The generation and time of the newest snapshot applied or written here, and the highest generation seen in any signed one. */
  #gen = 0;
  #genAt = 0;
  #seenGen = 0;
  #leaseEtag: string | undefined;
  #leaseUntil = 0;
  #syncs = 0;
  #lastReconcile = 0;
  #timer: NodeJS.Timeout | undefined;
  #syncing: Promise<void> | undefined;
  #peersSeenAt = 0;
  #loaded = false;
  #reconciling = false;

  constructor(options: SharedStateOptions) {
    this.#o = options;
    this.#bucket = options.config.stateBucket;
    this.id = options.gatewayId ?? `${hostname().replace(/[^A-Za-z0-9.-]/g, '-')}-${process.pid}-${randomBytes(3).toString('hex')}`;
  }

  /** Whether this gateway holds the eviction lease with a sync's margin left. */
  get isLeader(): boolean {
    // The local deadline is on the monotonic clock: a wall-clock step cannot lengthen the lease.
    return this.#leaseEtag !== undefined && performance.now() < this.#leaseUntil - this.#o.config.syncMs;
  }

  /** Whether another gateway wrote a journal within the lease's lifetime. */
  get hasPeers(): boolean {
    return this.#o.now() - this.#peersSeenAt < this.#o.config.leaseMs;
  }

  /**
   * Queues an event for the next journal. An access made by a request of access key `by` is a
   * hint: journalled only while the key's hints this sync period are within HINT_BYTES_PER_KEY.
   */
  record(event: CapacityEvent, by?: string): void {
    if (event.t === 'acc') {
      const id = `${event.b}\0${event.k}`;
      if (this.#accesses.has(id)) this.#accesses.set(id, event);
      else if (this.#accesses.size < MAX_PENDING_EVENTS && this.#hint(by, lineBytes([event.b, event.k]))) this.#accesses.set(id, event);
    } else if (event.t === 'pin') {
      const id = `${event.b}\0${event.k}`;
      this.#pinned.delete(id);
      this.#pinned.set(id, event);
    } else this.#push(event);
  }

  /** Whether access key `by` may add `bytes` more of hints to this sync period's journal (counted if so). */
  #hint(by: string | undefined, bytes: number): boolean {
    if (by === undefined) return true;
    const used = (this.#hintBytes.get(by) ?? 0) + bytes;
    if (used > HINT_BYTES_PER_KEY) {
      this.#o.onHintsDropped(1);
      return false;
    }
    this.#hintBytes.set(by, used);
    return true;
  }

  /**
   * Queues an event for the next journal. Past MAX_PENDING_EVENTS (a store unreachable for long)
   * the oldest are dropped, a sixteenth of the bound at a time (one shift per event would move
   * the whole queue for each): the next holder's listing restores sizes and tenants, and what is
   * lost is access times and chains, never an eviction decision.
   */
  #push(event: CapacityEvent): void {
    if (this.#pending.length >= MAX_PENDING_EVENTS) {
      const drop = Math.ceil(MAX_PENDING_EVENTS / 16);
      this.#pending.splice(0, drop);
      this.#dropped += drop;
    }
    this.#pending.push(event);
  }

  /**
   * What a chain taught the index (ChunkIndex.link): runs of consecutive keys, each key following
   * the one before it. A hint of access key `by` (bounded like its accesses).
   */
  recordLink(bucket: string, chains: readonly (readonly string[])[], tenant: string, by?: string): void {
    for (const chain of chains) {
      for (let at = 0; at + 1 < chain.length; at += MAX_CHAIN_KEYS - 1) {
        const keys = chain.slice(at, at + MAX_CHAIN_KEYS);
        if (!this.#hint(by, lineBytes([bucket, tenant, ...keys]))) return;
        this.#push({ t: 'link', b: bucket, keys, n: tenant });
      }
    }
  }

  /**
   * Loads the snapshot and journals and takes part in syncing. A store that cannot be reached
   * does not keep the gateway from starting: the load is retried each sync, and until it
   * succeeds nothing is evicted (no lease is taken) and nothing this gateway records is lost.
   */
  async start(): Promise<void> {
    this.#timer = setInterval(() => void this.#syncOnce(), this.#o.config.syncMs);
    this.#timer.unref();
    await this.#syncOnce();
  }

  /** Writes what is pending; a holder writes a last snapshot and lets the lease go. */
  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    await this.#syncing;
    if (!this.#loaded) return;
    try {
      await this.#flush();
      if (this.#leaseEtag !== undefined) {
        await this.#writeSnapshot();
        await this.#o.store.put(this.#bucket, 'lease', this.#leaseBody(0), { ifMatch: this.#leaseEtag });
        this.#leaseEtag = undefined;
      }
    } catch (error) {
      this.#o.logger.warn({ error }, 'capacity: could not write the last journal or snapshot at close');
    }
  }

  #syncOnce(): Promise<void> {
    this.#syncing ??= this.#sync()
      .catch((error: unknown) => {
        this.#o.logger.warn({ error }, 'capacity: a sync with the store failed; the next one retries');
        this.#o.onFailure('sync');
      })
      .finally(() => (this.#syncing = undefined));
    return this.#syncing;
  }

  /** One sync: write this gateway's journal, take in the others', keep or take the lease, fold. */
  async #sync(): Promise<void> {
    if (!this.#loaded) {
      await this.#o.store.ensureBucket(this.#bucket);
      await this.#reload();
      this.#loaded = true;
    }
    await this.#flush();
    const snapshot = await this.#o.store.head(this.#bucket, 'snapshot');
    if (snapshot !== undefined && snapshot.etag !== this.#snapshotEtag) await this.#reload();
    else await this.#readJournals(false);
    await this.#lease();
    this.#syncs++;
    if (this.#leaseEtag === undefined) return;
    if (this.#o.now() - this.#lastReconcile > RECONCILE_EVERY_MS && !this.#reconciling) {
      // Beside the syncs, not in them: a long listing must not hold up the lease's renewal.
      this.#lastReconcile = this.#o.now();
      this.#reconciling = true;
      void this.#o
        .reconcile()
        .catch((error: unknown) => {
          this.#o.logger.warn({ error }, 'capacity: listing the budgeted buckets failed; the next holder or period retries');
          this.#o.onFailure('reconcile');
          this.#lastReconcile = 0;
        })
        .finally(() => (this.#reconciling = false));
    }
    if (this.#syncs % SNAPSHOT_EVERY === 0) await this.#writeSnapshot();
  }

  /**
   * Writes what is pending as this gateway's next journal, in parts of at most JOURNAL_PART_BYTES
   * each (a part is one journal object). A part the store does not take keeps its events, and
   * all after it, for the next sync: nothing recorded is lost to a failed write.
   */
  async #flush(): Promise<void> {
    const events = [...this.#pending, ...this.#pinned.values(), ...this.#accesses.values()];
    this.#hintBytes = new Map();
    if (events.length === 0) return;
    this.#pending = [];
    this.#pinned = new Map();
    this.#accesses = new Map();
    if (this.#dropped > 0) {
      this.#o.logger.warn({ dropped: this.#dropped }, 'capacity: journal events were dropped while the store could not take them');
      this.#dropped = 0;
    }
    let written = 0;
    try {
      while (written < events.length) {
        let payload = '';
        let bytes = 0;
        let end = written;
        for (; end < events.length; end++) {
          const line = `${JSON.stringify(events[end])}\n`;
          const lineBytes = Buffer.byteLength(line);
          if (end > written && bytes + lineBytes > JOURNAL_PART_BYTES) break;
          payload += line;
          bytes += lineBytes;
        }
        await this.#writeJournal(payload);
        written = end;
      }
    } catch (error) {
      // Kept for the next sync rather than lost, in front of what came meanwhile, in one step (one
      // unshift per event would move the whole queue for each: seconds at the bound); what does
      // not fit under the bound, the oldest, is dropped and counted.
      const unwritten = events.slice(written);
      const kept = unwritten.slice(Math.max(0, unwritten.length - Math.max(0, MAX_PENDING_EVENTS - this.#pending.length)));
      this.#dropped += unwritten.length - kept.length;
      this.#pending = [...kept, ...this.#pending];
      throw error;
    }
  }

  /** Writes one journal object under this gateway's next number, signed with that name. */
  async #writeJournal(payload: string): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const seq = this.#seq + 1;
      const name = journalName(this.id, seq);
      const body = seal(this.#o.key, 'capacity-journal', name, payload);
      const etag = await this.#o.store.put(this.#bucket, name, body, { ifNoneMatch: true });
      this.#seq = seq;
      this.#applied.set(this.id, seq);
      if (etag !== undefined) return;
      // The name is taken: by this very journal (an answer lost on the way back), or by an
      // earlier one; then the next number.
      const there = await this.#o.store.get(this.#bucket, name, MAX_JOURNAL_BYTES);
      if (there !== undefined && there.body.equals(body)) return;
      if (attempt >= 3) throw new Error(`journal names of ${this.id} up to ${seq} are taken`);
    }
  }

  /** The journals not yet applied, in order; with `own`, this gateway's too (after a reload). */
  async #readJournals(own: boolean): Promise<void> {
    let after: string | undefined;
    for (;;) {
      const page = await this.#o.store.list(this.#bucket, 'journal/', after);
      for (const object of page.objects) {
        const [, gateway, seqText] = object.key.split('/');
        const seq = Number(seqText);
        if (gateway === undefined || !Number.isSafeInteger(seq)) continue;
        if (gateway === this.id && !own) continue;
        if (seq <= (this.#applied.get(gateway) ?? 0)) continue;
        if (object.size > MAX_JOURNAL_BYTES) {
          this.#o.logger.warn({ journal: object.key, bytes: object.size }, 'capacity: skipped a journal too large to read (no gateway writes one that large)');
          this.#o.onRejected('journal', 1);
          this.#applied.set(gateway, seq);
          continue;
        }
        // Bounded again as read: it may have been replaced since it was listed.
        const got = await this.#o.store.get(this.#bucket, object.key, MAX_JOURNAL_BYTES);
        if (got === undefined) continue; // folded and deleted meanwhile: the next snapshot has it
        this.#applied.set(gateway, seq);
        // Signed over its own name: a journal copied or renamed from elsewhere does not verify.
        const lines = unseal(this.#o.key, 'capacity-journal', journalName(gateway, seq), got.body);
        if (lines === undefined) {
          this.#o.logger.warn(
            { journal: object.key },
            'capacity: skipped a journal not signed with this gateway\u2019s state key (is OBJECTCACHE_STATE_KEY the same on every gateway?)',
          );
          this.#o.onRejected('journal', 1);
          continue;
        }
        const { events, skipped } = parseEvents(lines);
        if (skipped > 0) this.#o.onRejected('event', skipped);
        const source = gateway === this.id ? 'own' : 'peer';
        for (const event of events) this.#o.apply(event, source);
        if (gateway !== this.id) this.#peersSeenAt = Math.max(this.#peersSeenAt, object.lastModified, this.#o.now());
      }
      after = page.objects.at(-1)?.key;
      if (!page.truncated || after === undefined) break;
    }
  }

  /**
   * The snapshot, then every journal not folded into it (this gateway's own included). A snapshot
   * that is unreadable or not signed with the state key is not applied: what is known is rebuilt
   * from the journals and, at the lease holder, a listing of the store.
   */
  async #reload(): Promise<void> {
    const got = await this.#o.store.get(this.#bucket, 'snapshot');
    const lines = got === undefined ? [] : unseal(this.#o.key, 'capacity-snapshot', 'snapshot', got.body);
    let header: Header = { v: 1, at: 0, folded: {} };
    let events: CapacityEvent[] = [];
    if (lines === undefined) {
      this.#o.onRejected('snapshot', 1);
      this.#o.logger.error(
        { bucket: this.#bucket },
        'capacity: the snapshot is not signed with this gateway\u2019s state key; not applied, rebuilding from the journals and a listing of the store (is OBJECTCACHE_STATE_KEY the same on every gateway?)',
      );
    } else if (lines.length > 0) {
      try {
        const parsed = JSON.parse(lines[0] as string) as Partial<Header> | null;
        if (parsed?.v === 1 && parsed.folded !== null && typeof parsed.folded === 'object' && Object.values(parsed.folded).every((seq) => Number.isSafeInteger(seq)))
          header = parsed as Header;
        else throw new Error('not a snapshot header');
        const read = parseEvents(lines.slice(1));
        events = read.events;
        if (read.skipped > 0) this.#o.onRejected('event', read.skipped);
      } catch {
        this.#o.logger.error({ bucket: this.#bucket }, 'capacity: the snapshot is unreadable; rebuilding from the journals and a listing of the store');
      }
    }
    const gen = Number.isSafeInteger(header.gen) ? (header.gen as number) : 0;
    const at = typeof header.at === 'number' && Number.isFinite(header.at) ? header.at : 0;
    this.#seenGen = Math.max(this.#seenGen, gen);
    if (gen < this.#gen && at <= this.#genAt) {
      // Older than one applied here, and written no later: put back by someone (a replay), not
      // written by a holder (a holder that had to rebuild, with a lower generation, writes a later
      // time). Not applied; the next snapshot the holder writes replaces it (If-Match on this one).
      this.#o.onRejected('snapshot', 1);
      this.#o.logger.error(
        { bucket: this.#bucket, generation: gen, applied: this.#gen },
        'capacity: the snapshot in the store is older than one this gateway applied (put back?); not applied',
      );
      this.#snapshotEtag = got?.etag;
      return;
    }
    this.#gen = gen;
    this.#genAt = at;
    this.#o.reset(events);
    this.#snapshotEtag = got?.etag;
    this.#applied.clear();
    for (const [gateway, seq] of Object.entries(header.folded)) this.#applied.set(gateway, seq);
    await this.#readJournals(true);
    // What this gateway recorded and has not written yet is in no journal: apply it again.
    for (const event of [...this.#pending, ...this.#pinned.values(), ...this.#accesses.values()]) this.#o.apply(event, 'own');
    this.#o.reloaded?.();
  }

  /** The lease's body: its holder and expiry, with the state key's MAC of both. */
  #leaseBody(expires: number): Buffer {
    return Buffer.from(JSON.stringify({ holder: this.id, expires, mac: this.#o.key.mac('capacity-lease', `${this.id}\n${expires}`) }));
  }

  async #lease(): Promise<void> {
    const now = this.#o.now();
    const started = performance.now();
    const body = (): Buffer => this.#leaseBody(this.#o.now() + this.#o.config.leaseMs);
    if (this.#leaseEtag !== undefined) {
      const etag = await this.#o.store.put(this.#bucket, 'lease', body(), { ifMatch: this.#leaseEtag });
      if (etag !== undefined) {
        this.#leaseEtag = etag;
        this.#leaseUntil = started + this.#o.config.leaseMs;
        return;
      }
      this.#o.logger.warn({ gateway: this.id }, 'capacity: lost the eviction lease (another gateway took it); eviction stops here');
      this.#leaseEtag = undefined;
    }
    const current = await this.#o.store.get(this.#bucket, 'lease', MAX_LEASE_BYTES);
    let etag: string | undefined;
    if (current === undefined) etag = await this.#o.store.put(this.#bucket, 'lease', body(), { ifNoneMatch: true });
    else {
      let held: { holder?: unknown; expires?: unknown; mac?: unknown } = {};
      try {
        held = (JSON.parse(current.body.toString('utf8')) as typeof held | null) ?? {};
      } catch {
        // An unreadable lease is an expired one.
      }
      // So is one no gateway holding the state key wrote: it cannot keep the gateways from evicting.
      if (!this.#o.key.verify('capacity-lease', `${String(held.holder)}\n${String(held.expires)}`, held.mac) || typeof held.expires !== 'number') {
        if (current.body.length > 0) this.#o.onRejected('lease', 1);
        held = {};
      }
      if (held.holder !== this.id && ((held.expires as number | undefined) ?? 0) > now) return;
      etag = await this.#o.store.put(this.#bucket, 'lease', body(), { ifMatch: current.etag });
    }
    if (etag === undefined) return; // another gateway took it first
    this.#leaseEtag = etag;
    this.#leaseUntil = started + this.#o.config.leaseMs;
    this.#lastReconcile = 0; // a new holder first makes the index agree with the store
    this.#o.logger.info({ gateway: this.id }, 'capacity: holding the eviction lease');
  }

  /** Folds every journal applied into a new snapshot, then deletes them. */
  async #writeSnapshot(): Promise<void> {
    await this.#flush();
    const folded = Object.fromEntries(this.#applied);
    const header: Header = { v: 1, at: this.#o.now(), folded, gen: Math.max(this.#gen, this.#seenGen) + 1 };
    const lines = [JSON.stringify(header)];
    for (const event of this.#o.snapshot()) lines.push(JSON.stringify(event));
    const body = seal(this.#o.key, 'capacity-snapshot', 'snapshot', `${lines.join('\n')}\n`);
    const condition = this.#snapshotEtag === undefined ? ({ ifNoneMatch: true } as const) : { ifMatch: this.#snapshotEtag };
    const etag = await this.#o.store.put(this.#bucket, 'snapshot', body, condition);
    if (etag === undefined) {
      // Another snapshot was written meanwhile (a holder this one replaced): take it in instead.
      await this.#reload();
      return;
    }
    this.#snapshotEtag = etag;
    this.#gen = header.gen as number;
    this.#genAt = header.at;
    let after: string | undefined;
    const folds: string[] = [];
    for (;;) {
      const page = await this.#o.store.list(this.#bucket, 'journal/', after);
      for (const object of page.objects) {
        const [, gateway, seqText] = object.key.split('/');
        if (gateway !== undefined && Number(seqText) <= (folded[gateway] ?? 0)) folds.push(object.key);
      }
      after = page.objects.at(-1)?.key;
      if (!page.truncated || after === undefined) break;
    }
    for (const key of folds) await this.#o.store.delete(this.#bucket, key);
  }
}

/** A journal's key: `journal/<gateway>/<seq, 12 digits>`; also the name its MAC is made over. */
function journalName(gateway: string, seq: number): string {
  return `journal/${gateway}/${String(seq).padStart(SEQ_DIGITS, '0')}`;
}
