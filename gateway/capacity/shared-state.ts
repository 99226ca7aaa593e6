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
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { CapacityConfig } from '../config.js';
import type { Logger } from '../logger.js';
import type { CapacityStore } from './store.js';

export type CapacityEvent =
  | { readonly t: 'put'; readonly b: string; readonly k: string; readonly s: number; readonly n: string; readonly e: string; readonly at: number }
  | { readonly t: 'del'; readonly b: string; readonly k: string; readonly e?: string; readonly at: number }
  | { readonly t: 'acc'; readonly b: string; readonly k: string; readonly at: number }
  | { readonly t: 'link'; readonly b: string; readonly keys: readonly string[]; readonly n?: string }
  | { readonly t: 'pin'; readonly b: string; readonly k: string; readonly until: number };

/** Syncs between snapshots (with the default 2 s sync, one a minute). */
const SNAPSHOT_EVERY = 30;
/** Events a gateway keeps for its next journal at most. */
const MAX_PENDING_EVENTS = 200_000;
/** The largest journal another gateway's reading takes (bigger ones are skipped with a warning). */
const MAX_JOURNAL_BYTES = 256 * 1024 * 1024;
/** The holder lists the budgeted buckets again this often, ms. */
const RECONCILE_EVERY_MS = 10 * 60_000;
const SEQ_DIGITS = 12;

export interface SharedStateOptions {
  readonly store: CapacityStore;
  readonly config: CapacityConfig;
  readonly logger: Pick<Logger, 'info' | 'warn' | 'error'>;
  readonly now: () => number;
  readonly gatewayId?: string;
  /** Applies one event (from another gateway's journal, or a snapshot). */
  readonly apply: (event: CapacityEvent) => void;
  /** Forgets everything and applies a snapshot's events. */
  readonly reset: (events: Iterable<CapacityEvent>) => void;
  /** Everything known, as events. */
  readonly snapshot: () => Iterable<CapacityEvent>;
  /** Makes what is known agree with a listing of the store (the lease holder's job). */
  readonly reconcile: () => Promise<void>;
  readonly onFailure: (what: string) => void;
}

interface Header {
  readonly v: 1;
  readonly at: number;
  /** For each gateway, the last journal the snapshot contains. */
  readonly folded: Record<string, number>;
}

const str = (v: unknown): v is string => typeof v === 'string';
const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** Whether a parsed line is an event of the right shape (anything else is skipped). */
function isEvent(e: Record<string, unknown>): boolean {
  if (!str(e['b'])) return false;
  switch (e['t']) {
    case 'put':
      return str(e['k']) && num(e['s']) && str(e['n']) && str(e['e']) && num(e['at']);
    case 'del':
      return str(e['k']) && num(e['at']) && (e['e'] === undefined || str(e['e']));
    case 'acc':
      return str(e['k']) && num(e['at']);
    case 'link':
      return Array.isArray(e['keys']) && (e['keys'] as unknown[]).every(str) && (e['n'] === undefined || str(e['n']));
    case 'pin':
      return str(e['k']) && num(e['until']);
    default:
      return false;
  }
}

function parseEvents(text: string): CapacityEvent[] {
  const out: CapacityEvent[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    try {
      const parsed = JSON.parse(line) as unknown;
      if (parsed !== null && typeof parsed === 'object' && isEvent(parsed as Record<string, unknown>)) out.push(parsed as CapacityEvent);
    } catch {
      // A torn line (a journal is written whole, so only from a damaged object): skipped.
    }
  }
  return out;
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
  #dropped = 0;
  /** The last journal applied, per gateway (this one's: the last written). */
  readonly #applied = new Map<string, number>();
  #snapshotEtag: string | undefined;
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

  record(event: CapacityEvent): void {
    if (event.t === 'acc') {
      const id = `${event.b}\0${event.k}`;
      if (this.#accesses.has(id) || this.#accesses.size < MAX_PENDING_EVENTS) this.#accesses.set(id, event);
    } else this.#push(event);
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

  /** A chain that taught the index something (ChunkIndex.link returned true). */
  recordLink(bucket: string, keys: readonly string[], tenant: string): void {
    this.#push({ t: 'link', b: bucket, keys: [...keys], n: tenant });
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
        await this.#o.store.put(this.#bucket, 'lease', Buffer.from(JSON.stringify({ holder: this.id, expires: 0 })), { ifMatch: this.#leaseEtag });
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

  async #flush(): Promise<void> {
    const events = [...this.#pending, ...this.#accesses.values()];
    if (events.length === 0) return;
    this.#pending = [];
    this.#accesses = new Map();
    if (this.#dropped > 0) {
      this.#o.logger.warn({ dropped: this.#dropped }, 'capacity: journal events were dropped while the store could not take them');
      this.#dropped = 0;
    }
    const body = Buffer.from(events.map((e) => JSON.stringify(e)).join('\n') + '\n');
    try {
      for (let attempt = 0; ; attempt++) {
        const seq = this.#seq + 1;
        const key = `journal/${this.id}/${String(seq).padStart(SEQ_DIGITS, '0')}`;
        const etag = await this.#o.store.put(this.#bucket, key, body, { ifNoneMatch: true });
        this.#seq = seq;
        this.#applied.set(this.id, seq);
        if (etag !== undefined) return;
        // The name is taken: by this very journal (an answer lost on the way back), or by an
        // earlier one; then the next number.
        const there = await this.#o.store.get(this.#bucket, key);
        if (there !== undefined && there.body.equals(body)) return;
        if (attempt >= 3) throw new Error(`journal names of ${this.id} up to ${seq} are taken`);
      }
    } catch (error) {
      // Kept for the next sync rather than lost, in front of what came meanwhile, in one step (one
      // unshift per event would move the whole queue for each: seconds at the bound); what does
      // not fit under the bound, the oldest, is dropped and counted.
      const kept = events.slice(Math.max(0, events.length - Math.max(0, MAX_PENDING_EVENTS - this.#pending.length)));
      this.#dropped += events.length - kept.length;
      this.#pending = [...kept, ...this.#pending];
      throw error;
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
          this.#o.logger.warn({ journal: object.key, bytes: object.size }, 'capacity: skipped a journal too large to read');
          this.#applied.set(gateway, seq);
          continue;
        }
        const got = await this.#o.store.get(this.#bucket, object.key);
        if (got === undefined) continue; // folded and deleted meanwhile: the next snapshot has it
        for (const event of parseEvents(got.body.toString('utf8'))) this.#o.apply(event);
        this.#applied.set(gateway, seq);
        if (gateway !== this.id) this.#peersSeenAt = Math.max(this.#peersSeenAt, object.lastModified, this.#o.now());
      }
      after = page.objects.at(-1)?.key;
      if (!page.truncated || after === undefined) break;
    }
  }

  /** The snapshot, then every journal not folded into it (this gateway's own included). */
  async #reload(): Promise<void> {
    const got = await this.#o.store.get(this.#bucket, 'snapshot');
    const text = got?.body.toString('utf8') ?? '';
    const newline = text.indexOf('\n');
    let header: Header = { v: 1, at: 0, folded: {} };
    if (got !== undefined && newline > 0) {
      try {
        header = JSON.parse(text.slice(0, newline)) as Header;
      } catch {
        this.#o.logger.error({ bucket: this.#bucket }, 'capacity: the snapshot is unreadable; rebuilding from the journals and a listing of the store');
      }
    }
    this.#o.reset(parseEvents(newline > 0 ? text.slice(newline + 1) : ''));
    this.#snapshotEtag = got?.etag;
    this.#applied.clear();
    for (const [gateway, seq] of Object.entries(header.folded)) this.#applied.set(gateway, seq);
    await this.#readJournals(true);
    // What this gateway recorded and has not written yet is in no journal: apply it again.
    for (const event of [...this.#pending, ...this.#accesses.values()]) this.#o.apply(event);
  }

  async #lease(): Promise<void> {
    const now = this.#o.now();
    const started = performance.now();
    const body = (): Buffer => Buffer.from(JSON.stringify({ holder: this.id, expires: this.#o.now() + this.#o.config.leaseMs }));
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
    const current = await this.#o.store.get(this.#bucket, 'lease');
    let etag: string | undefined;
    if (current === undefined) etag = await this.#o.store.put(this.#bucket, 'lease', body(), { ifNoneMatch: true });
    else {
      let held: { holder?: string; expires?: number } = {};
      try {
        held = JSON.parse(current.body.toString('utf8')) as typeof held;
      } catch {
        // An unreadable lease is an expired one.
      }
      if (held.holder !== this.id && (held.expires ?? 0) > now) return;
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
    const header: Header = { v: 1, at: this.#o.now(), folded };
    const lines = [JSON.stringify(header)];
    for (const event of this.#o.snapshot()) lines.push(JSON.stringify(event));
    const body = Buffer.from(lines.join('\n') + '\n');
    const condition = this.#snapshotEtag === undefined ? ({ ifNoneMatch: true } as const) : { ifMatch: this.#snapshotEtag };
    const etag = await this.#o.store.put(this.#bucket, 'snapshot', body, condition);
    if (etag === undefined) {
      // Another snapshot was written meanwhile (a holder this one replaced): take it in instead.
      await this.#reload();
      return;
    }
    this.#snapshotEtag = etag;
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
