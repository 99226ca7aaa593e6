/**
 * What the gateway knows of the objects of one budgeted bucket, and the order it would evict
 * them in. Pure bookkeeping: no I/O, no clock (times are passed in), so the eviction benchmark
 * replays the very same order offline (bench/capacity).
 *
 * A prefix's chunks form a chain: chunk i is useful only while chunks 0..i-1 are there, because a
 * lookup stops at the first missing chunk. The gateway learns the chains from the key order of the
 * descriptors and lookups it serves (`link`); chains share their heads (a system prompt's chunks
 * begin many prefixes), so together they form trees. The eviction order (`evictionOrder`):
 *
 * 1. Dead chunks first: a chunk one of whose predecessors is gone can never be read as part of its
 *    prefix again, however recently it was read.
 * 2. Then the least recently used leaf: a chunk no present chunk follows. Evicting only leaves
 *    trims a prefix from its tail and never opens a hole in it; among leaves read at the same time
 *    (one descriptor GET reads a whole prefix) the deepest goes first.
 *
 * A chunk never seen in a chain (written, or read by a plain GET only) is a chain of one: a leaf
 * and a head, ordered by its last access like any other leaf. Links are trusted only so far: a
 * chunk's predecessor is set once, by a request of the tenant that owns the chunk (or, for a chunk
 * not stored yet, kept for the tenant that names it and taken only when that tenant stores it),
 * and never so that a chain loops; so no tenant can make another's chunks dead or re-order them. A chunk that cannot be evicted now
 * (pinned, being read: the caller's `evictable`) is skipped, and so, being no leaf, is every chunk
 * before it: a pinned or busy tail protects its whole prefix.
 */

import { before, deadFirst, depthIn, KeptBack, MAX_DEPTH, PAUSE, PAUSE_EVERY, type Candidate, type Chunk, type Leaf, type OrderOptions } from './chunk.js';
import { KeyedHeap } from './keyed-heap.js';
import { StandingOrder } from './standing-order.js';

/**
 * Told of every chunk that comes into the index or leaves it, whatever the cause (a write through
 * this gateway or another, a delete, an eviction, a reconciliation with the store): the KV events
 * (gateway/kv-events/) are published from these. A new version of a key is its old one removed,
 * then the new one stored; the same version recorded again is neither.
 */
export interface ChunkChanges {
  /** `meta`: the object's user metadata when the write's answer or a HEAD gave it. */
  stored(chunk: Chunk, meta: Readonly<Record<string, string>> | undefined): void;
  removed(chunk: Chunk): void;
}

/** Links learned for keys not yet stored (an engine looks a prefix up before it stores it). */
const MAX_PENDING_LINKS = 50_000;
/**
 * Steps of loop checks one link() may take (a walk up the chain per link set): a request naming
 * thousands of chunks whose places are not known yet teaches the first few hundred, later requests
 * the rest, and no request holds the main thread for long (8,192 such chunks would otherwise cost
 * 33 million steps, 0.3 s here).
 */
const MAX_LINK_STEPS = 1 << 16;

export class ChunkIndex {
  /** Told of what comes and goes (undefined: nobody listens, as while a snapshot is loaded). */
  changes: ChunkChanges | undefined;
  private readonly chunks = new Map<string, Chunk>();
  /** For each key, the present chunks whose `pred` it is. */
  private readonly children = new Map<string, Set<string>>();
  private readonly pendingLinks = new Map<string, { readonly pred: string; readonly tenant: string }>();
  /** Each tenant's pending links' keys, oldest first (makePendingRoom finds the oldest at once). */
  private readonly pendingByTenant = new Map<string, Set<string>>();
  #bytes = 0;
  readonly #tenantBytes = new Map<string, number>();
  /** Chunks whose size is not checked against the store yet, in the order they were learnt. */
  readonly #unchecked = new Set<string>();
  #uncheckedBytes = 0;
  /** How many chunks present have each size, largest first: `largest` must fall when the largest goes. */
  readonly #sizes = new KeyedHeap<{ size: number; count: number }>(
    (entry) => String(entry.size),
    (a, b) => a.size > b.size,
  );
  readonly #order = new StandingOrder({ get: (key) => this.chunks.get(key), after: (key) => this.children.get(key), values: () => this.chunks.values() });

  /** Bytes of every chunk present. */
  get bytes(): number {
    return this.#bytes;
  }

  /** The size of the largest chunk present: what one more write may well need. */
  get largest(): number {
    return this.#sizes.peek()?.size ?? 0;
  }

  /** Of `bytes`, those of chunks whose size is not checked against the store yet. */
  get uncheckedBytes(): number {
    return this.#uncheckedBytes;
  }

  /** The keys of chunks whose size is not checked against the store yet, the earliest learnt first. */
  unchecked(): IterableIterator<string> {
    return this.#unchecked.values();
  }

  get size(): number {
    return this.chunks.size;
  }

  tenantBytes(tenant: string): number {
    return this.#tenantBytes.get(tenant) ?? 0;
  }

  /** Bytes per tenant. */
  tenants(): ReadonlyMap<string, number> {
    return this.#tenantBytes;
  }

  get(key: string): Chunk | undefined {
    return this.chunks.get(key);
  }

  values(): IterableIterator<Chunk> {
    return this.chunks.values();
  }

  constructor(changes?: ChunkChanges) {
    this.changes = changes;
  }

  /** Records a write (or what a listing found): a new version replaces the old one. */
  put(
    key: string,
    facts: { size: number; tenant: string; etag: string; at: number; lastAccess?: number; pred?: string | undefined; checked?: boolean; meta?: Readonly<Record<string, string>> },
  ): Chunk {
    const old = this.chunks.get(key);
    if (old) this.account(old, -1);
    const pending = this.pendingLinks.get(key);
    this.forgetPending(key);
    let pred = facts.pred ?? old?.pred ?? (pending?.tenant === facts.tenant ? pending.pred : undefined);
    if (pred !== undefined && this.reaches(pred, key)) pred = undefined;
    const chunk: Chunk = {
      key,
      size: facts.size,
      tenant: facts.tenant,
      etag: facts.etag,
      written: facts.at,
      lastAccess: Math.max(facts.lastAccess ?? facts.at, old?.lastAccess ?? 0),
      pred,
      checked: facts.checked ?? true,
      ...(old?.etag === facts.etag && old.model !== undefined ? { model: old.model } : {}),
    };
    if (old) this.#order.detach(old);
    this.chunks.set(key, chunk);
    this.account(chunk, 1);
    if (!old && pred !== undefined) this.addChild(pred, key);
    else if (old && old.pred !== pred) {
      if (old.pred !== undefined) this.removeChild(old.pred, key);
      if (pred !== undefined) this.addChild(pred, key);
    }
    this.#order.attach(chunk);
    // A new version in the same place leaves every chunk after it where it was (a widely shared
    // head rewritten costs nothing per successor).
    if (!old || old.pred !== pred) this.#order.settleAfter(key);
    if (old?.etag !== chunk.etag) {
      if (old) this.changes?.removed(old);
      this.changes?.stored(chunk, facts.meta);
    }
    return chunk;
  }

  /** The chunk's size could not be checked now: it goes to the back of the unchecked ones. */
  deferCheck(key: string): void {
    if (this.#unchecked.delete(key)) this.#unchecked.add(key);
  }

  /** The chunk's size was found to be the store's (a HEAD, a listing). */
  markChecked(key: string): void {
    const chunk = this.chunks.get(key);
    if (!chunk || chunk.checked) return;
    this.#uncheckedBytes -= chunk.size;
    this.#unchecked.delete(key);
    chunk.checked = true;
  }

  /** Forgets a chunk (deleted, evicted, or found gone); its successors become dead. */
  remove(key: string): Chunk | undefined {
    const chunk = this.chunks.get(key);
    if (!chunk) return undefined;
    this.#order.detach(chunk);
    this.chunks.delete(key);
    this.account(chunk, -1);
    if (chunk.pred !== undefined) this.removeChild(chunk.pred, key);
    this.#order.settleAfter(key);
    this.#order.forget(key);
    this.changes?.removed(chunk);
    return chunk;
  }

  /** A read; false when the key is not known. */
  touch(key: string, at: number): boolean {
    const chunk = this.chunks.get(key);
    if (!chunk) return false;
    if (at > chunk.lastAccess) {
      chunk.lastAccess = at;
      this.#order.touched(chunk);
    }
    return true;
  }

  /**
   * The chain a descriptor or lookup of `tenant` names: each key follows the one before it. A
   * chunk's predecessor is set once, and only for the tenant's own chunks; for keys not stored
   * yet the link is kept until that tenant stores them. A link that would close a loop is
   * ignored. Returns whether anything was learnt.
   */
  link(keys: readonly string[], tenant: string): boolean {
    return this.learn(keys, tenant).length > 0;
  }

  /**
   * link(), returning what was learnt (what is worth journalling): the runs of consecutive keys
   * of `keys` each of which follows the one before it for the first time, never the whole list.
   */
  learn(keys: readonly string[], tenant: string): string[][] {
    const chains: string[][] = [];
    let run: string[] | undefined;
    const learnt = (i: number): void => {
      if (run && run.at(-1) === keys[i - 1]) run.push(keys[i] as string);
      else chains.push((run = [keys[i - 1] as string, keys[i] as string]));
    };
    const budget = { steps: MAX_LINK_STEPS };
    for (let i = 1; i < keys.length; i++) {
      const key = keys[i] as string;
      const pred = keys[i - 1] as string;
      if (key === pred) continue;
      const chunk = this.chunks.get(key);
      if (!chunk) {
        const known = this.pendingLinks.get(key);
        if (known?.pred === pred && known.tenant === tenant) continue;
        // Another tenant's link for the key stays: naming someone's future chunk cannot undo theirs.
        if (known !== undefined && known.tenant !== tenant) continue;
        if (known !== undefined) this.forgetPending(key);
        else if (this.pendingLinks.size >= MAX_PENDING_LINKS) this.makePendingRoom();
        this.pendingLinks.set(key, { pred, tenant });
        let mine = this.pendingByTenant.get(tenant);
        if (!mine) this.pendingByTenant.set(tenant, (mine = new Set()));
        mine.add(key);
        learnt(i);
        continue;
      }
      if (chunk.pred !== undefined || chunk.tenant !== tenant) continue;
      if (budget.steps <= 0) break; // the rest is learnt by later requests
      if (this.reaches(pred, key, budget)) continue;
      this.#order.detach(chunk);
      chunk.pred = pred;
      this.addChild(pred, key);
      this.#order.attach(chunk);
      this.#order.settleAfter(key);
      learnt(i);
    }
    return chains;
  }

  /**
   * The pending links are full: the oldest of the tenant holding the most goes, so that one
   * tenant's lookups of keys it never stores cannot push out the links another is about to use.
   */
  private makePendingRoom(): void {
    let most: Set<string> | undefined;
    for (const keys of this.pendingByTenant.values()) if (most === undefined || keys.size > most.size) most = keys;
    const oldest = most?.values().next().value;
    if (oldest !== undefined) this.forgetPending(oldest);
  }

  private forgetPending(key: string): void {
    const link = this.pendingLinks.get(key);
    if (!link) return;
    this.pendingLinks.delete(key);
    const mine = this.pendingByTenant.get(link.tenant);
    mine?.delete(key);
    if (mine?.size === 0) this.pendingByTenant.delete(link.tenant);
  }

  /**
   * Whether walking back from `from` through the present chunks' predecessors meets `key` (or the
   * walk runs out of `budget`: then it is taken as met, and no link is made).
   */
  private reaches(from: string, key: string, budget: { steps: number } = { steps: MAX_DEPTH + 1 }): boolean {
    let at: string | undefined = from;
    for (let steps = 0; at !== undefined && steps <= MAX_DEPTH; steps++) {
      if (at === key || --budget.steps < 0) return true;
      at = this.chunks.get(at)?.pred;
    }
    // A chain longer than MAX_DEPTH is taken as met too: no link then, and so no loop that long.
    return at !== undefined;
  }

  /**
   * Stops keeping the eviction order chunk by chunk, for a bulk load (a snapshot at start): it is
   * built once, in O(n log n), when it is next read (buildOrder), and kept again from then on.
   */
  suspendOrder(): void {
    this.#order.suspend();
  }

  /** Builds the eviction order from the chunks alone, and keeps it from now on. */
  buildOrder(): void {
    this.#order.build(this.liveness(new Map()));
  }

  /** Whether one of the chunk's predecessors is gone (or the chain loops). */
  isDead(chunk: Chunk): boolean {
    if (this.#order.keeping && this.chunks.get(chunk.key) === chunk) return this.#order.isDead(chunk.key);
    return this.liveness(new Map())(chunk) === false;
  }

  /** How many present chunks come before it in its chain. */
  depth(chunk: Chunk): number {
    return depthIn((key) => this.chunks.get(key), new Map())(chunk);
  }

  /** Present chunks that follow the key. */
  successors(key: string): number {
    return this.children.get(key)?.size ?? 0;
  }

  /**
   * Chunks in the order they should go: dead ones (oldest access first), then leaves by last
   * access, deepest first among equals, each chunk's predecessor becoming a leaf once everything
   * after it has been yielded. `evictable` skips (and so protects the prefix of) what cannot go
   * now; `tenant` limits the order to one tenant's chunks (a chunk followed by another tenant's
   * is no leaf of its); a chunk with a missing predecessor counts as dead only when written
   * before `deadIfWrittenBefore` (its predecessor may still be on its way), and is otherwise
   * placed among the leaves by its last access (it is no leaf: nothing keeps it ahead of colder
   * ones, or chunks whose predecessor never comes would hold the budget). Lazy: the caller stops when it has freed enough; chunks yielded are
   * counted as gone for the rest of the walk, not removed from the index.
   */
  *evictionOrder(options: OrderOptions = {}): Generator<Candidate> {
    for (const step of this.#walkOrder(options)) if (step !== PAUSE) yield step;
  }

  /**
   * The same order, read without holding the event loop: the walk hands control back whenever it
   * has run for `sliceMs` (a tenant's walk, a pass over every chunk, takes seconds for a million).
   * The index may change between slices; the order is then a little stale, never unsafe: whoever
   * deletes checks each victim again (`isDead`, `successors`, its identity).
   */
  async *evictionOrderPaced(options: OrderOptions = {}, sliceMs = 10): AsyncGenerator<Candidate> {
    let since = performance.now();
    for (const step of this.#walkOrder(options)) {
      if (step !== PAUSE) yield step;
      if (performance.now() - since >= sliceMs) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        since = performance.now();
      }
    }
  }

  /** The order: read from the standing one, or, for one tenant's, walked afresh over the whole index. */
  #walkOrder(options: OrderOptions): Generator<Candidate | typeof PAUSE> {
    if (!this.#order.keeping) this.buildOrder();
    return options.tenant === undefined ? this.#order.walk(options) : this.walk(options);
  }

  /** One tenant's order, walked afresh over the whole index, with PAUSE at points where the walk may stop for a while (every PAUSE_EVERY chunks of set-up). */
  private *walk(options: OrderOptions): Generator<Candidate | typeof PAUSE> {
    const evictable = options.evictable ?? (() => true);
    const mine = (chunk: Chunk): boolean => options.tenant === undefined || chunk.tenant === options.tenant;
    const live = this.liveness(new Map());
    const depthOf = depthIn((key) => this.chunks.get(key), new Map());
    const dead: Chunk[] = [];
    let work = 0;
    const pause = (): boolean => ++work % PAUSE_EVERY === 0;
    for (const chunk of this.chunks.values()) {
      if (!live(chunk) && mine(chunk)) dead.push(chunk);
      if (pause()) yield PAUSE;
    }
    dead.sort((a, b) => a.lastAccess - b.lastAccess || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const gone = new Set<string>();
    const keptBack = new KeptBack(yield* deadFirst(dead, options, gone, pause), evictable, gone);
    // Live chunks followed by no live chunk. A dead successor (skipped above as busy or pinned)
    // does not keep its predecessor from being a leaf: it is unreachable either way. In a
    // tenant's order only the tenant's own successors count: another tenant building on its
    // chunks cannot hold its quota.
    const remaining = new Map<string, number>();
    const heap = new KeyedHeap<Leaf>((l) => l.chunk.key, before);
    for (const chunk of this.chunks.values()) {
      if (pause()) yield PAUSE;
      if (gone.has(chunk.key) || !live(chunk)) continue;
      let after = 0;
      for (const child of this.children.get(chunk.key) ?? []) {
        const c = this.chunks.get(child);
        if (c && live(c) && mine(c)) after++;
      }
      remaining.set(chunk.key, after);
      if (after === 0) heap.set({ chunk, depth: depthOf(chunk) });
    }
    for (let leaf = heap.pop(); leaf !== undefined; leaf = heap.pop()) {
      if (pause()) yield PAUSE;
      const chunk = leaf.chunk;
      yield* keptBack.until(chunk.lastAccess);
      if (!mine(chunk) || !evictable(chunk)) continue;
      gone.add(chunk.key);
      yield { chunk, reason: 'lru' };
      const pred = chunk.pred === undefined ? undefined : this.chunks.get(chunk.pred);
      if (pred && !gone.has(pred.key)) {
        const left = (remaining.get(pred.key) ?? 1) - 1;
        remaining.set(pred.key, left);
        if (left === 0) heap.set({ chunk: pred, depth: depthOf(pred) });
      }
    }
    yield* keptBack.until();
  }

  /** A memoised test: does every predecessor of the chunk exist (and the chain end)? */
  private liveness(memo: Map<string, boolean>): (chunk: Chunk) => boolean {
    return (chunk) => {
      const known = memo.get(chunk.key);
      if (known !== undefined) return known;
      const path: string[] = [];
      let current: Chunk | undefined = chunk;
      let result = true;
      const seen = new Set<string>();
      while (current) {
        const cached = memo.get(current.key);
        if (cached !== undefined) {
          result = cached;
          break;
        }
        if (seen.has(current.key)) {
          result = false; // a loop (link() never makes one; a snapshot from elsewhere might)
          break;
        }
        if (path.length > MAX_DEPTH) break; // longer than any prefix: counted as live
        seen.add(current.key);
        path.push(current.key);
        if (current.pred === undefined) break;
        const pred = this.chunks.get(current.pred);
        if (!pred) {
          result = false;
          break;
        }
        current = pred;
      }
      for (const key of path) memo.set(key, result);
      return result;
    };
  }

  private account(chunk: Chunk, sign: 1 | -1): void {
    this.#bytes += sign * chunk.size;
    const sized = this.#sizes.get(String(chunk.size));
    if (sign === 1) {
      if (sized) sized.count++;
      else this.#sizes.set({ size: chunk.size, count: 1 });
    } else if (sized && --sized.count === 0) this.#sizes.delete(String(chunk.size));
    if (!chunk.checked) {
      this.#uncheckedBytes += sign * chunk.size;
      if (sign === 1) this.#unchecked.add(chunk.key);
      else this.#unchecked.delete(chunk.key);
    }
    const now = (this.#tenantBytes.get(chunk.tenant) ?? 0) + sign * chunk.size;
    if (now === 0) this.#tenantBytes.delete(chunk.tenant);
    else this.#tenantBytes.set(chunk.tenant, now);
  }

  private addChild(pred: string, key: string): void {
    let set = this.children.get(pred);
    if (!set) this.children.set(pred, (set = new Set()));
    set.add(key);
  }

  private removeChild(pred: string, key: string): void {
    const set = this.children.get(pred);
    if (!set) return;
    set.delete(key);
    if (set.size === 0) this.children.delete(pred);
  }
}
