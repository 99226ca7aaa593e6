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
 * and a head, ordered by its last access like any other leaf. A chunk that cannot be evicted now
 * (pinned, being read: the caller's `evictable`) is skipped, and so, being no leaf, is every chunk
 * before it: a pinned or busy tail protects its whole prefix.
 */

export interface Chunk {
  readonly key: string;
  size: number;
  /** The tenant whose key wrote it. */
  tenant: string;
  /** The ETag it was written with: an eviction deletes only this version. */
  etag: string;
  /** When it was written, ms since the epoch. */
  written: number;
  /** When it was last read or written, ms since the epoch. */
  lastAccess: number;
  /** The chunk before it in its prefix, when a descriptor or lookup named both. */
  pred: string | undefined;
}

export type EvictionReason = 'dead' | 'lru';

export interface Candidate {
  readonly chunk: Chunk;
  readonly reason: EvictionReason;
}

/** Links learned for keys not yet stored (an engine looks a prefix up before it stores it). */
const MAX_PENDING_LINKS = 100_000;
/** A chain longer than this is cut when its depth is measured (1M tokens in 256-token chunks). */
const MAX_DEPTH = 4096;

export class ChunkIndex {
  private readonly chunks = new Map<string, Chunk>();
  /** For each key, the present chunks whose `pred` it is. */
  private readonly children = new Map<string, Set<string>>();
  private readonly pendingLinks = new Map<string, string>();
  #bytes = 0;
  readonly #tenantBytes = new Map<string, number>();

  /** Bytes of every chunk present. */
  get bytes(): number {
    return this.#bytes;
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

  /** Records a write (or what a listing found): a new version replaces the old one. */
  put(key: string, facts: { size: number; tenant: string; etag: string; at: number; lastAccess?: number; pred?: string | undefined }): Chunk {
    const old = this.chunks.get(key);
    if (old) this.account(old, -1);
    const pred = facts.pred ?? old?.pred ?? this.pendingLinks.get(key);
    this.pendingLinks.delete(key);
    const chunk: Chunk = { key, size: facts.size, tenant: facts.tenant, etag: facts.etag, written: facts.at, lastAccess: Math.max(facts.lastAccess ?? facts.at, old?.lastAccess ?? 0), pred };
    this.chunks.set(key, chunk);
    this.account(chunk, 1);
    if (!old && pred !== undefined) this.addChild(pred, key);
    else if (old && old.pred !== pred) {
      if (old.pred !== undefined) this.removeChild(old.pred, key);
      if (pred !== undefined) this.addChild(pred, key);
    }
    return chunk;
  }

  /** Forgets a chunk (deleted, evicted, or found gone); its successors become dead. */
  remove(key: string): Chunk | undefined {
    const chunk = this.chunks.get(key);
    if (!chunk) return undefined;
    this.chunks.delete(key);
    this.account(chunk, -1);
    if (chunk.pred !== undefined) this.removeChild(chunk.pred, key);
    return chunk;
  }

  /** A read; false when the key is not known. */
  touch(key: string, at: number): boolean {
    const chunk = this.chunks.get(key);
    if (!chunk) return false;
    if (at > chunk.lastAccess) chunk.lastAccess = at;
    return true;
  }

  /**
   * The chain a descriptor or lookup names: each key follows the one before it. A key already
   * linked elsewhere is relinked (the latest request wins); keys not stored yet keep the link
   * until they are.
   */
  link(keys: readonly string[]): void {
    for (let i = 1; i < keys.length; i++) {
      const key = keys[i] as string;
      const pred = keys[i - 1] as string;
      const chunk = this.chunks.get(key);
      if (!chunk) {
        if (this.pendingLinks.size >= MAX_PENDING_LINKS && !this.pendingLinks.has(key)) {
          const oldest = this.pendingLinks.keys().next().value as string;
          this.pendingLinks.delete(oldest);
        }
        this.pendingLinks.set(key, pred);
        continue;
      }
      if (chunk.pred === pred) continue;
      if (chunk.pred !== undefined) this.removeChild(chunk.pred, key);
      chunk.pred = pred;
      this.addChild(pred, key);
    }
  }

  /** Whether one of the chunk's predecessors is gone (or the chain loops). */
  isDead(chunk: Chunk): boolean {
    return this.liveness(new Map())(chunk) === false;
  }

  /** How many present chunks come before it in its chain. */
  depth(chunk: Chunk): number {
    let depth = 0;
    let pred = chunk.pred;
    while (pred !== undefined && depth < MAX_DEPTH) {
      const before = this.chunks.get(pred);
      if (!before) break;
      depth++;
      pred = before.pred;
    }
    return depth;
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
   * is no leaf of its). Lazy: the caller stops when it has freed enough; chunks yielded are
   * counted as gone for the rest of the walk, not removed from the index.
   */
  *evictionOrder(options: { evictable?: (chunk: Chunk) => boolean; tenant?: string } = {}): Generator<Candidate> {
    const evictable = options.evictable ?? (() => true);
    const mine = (chunk: Chunk): boolean => options.tenant === undefined || chunk.tenant === options.tenant;
    const live = this.liveness(new Map());
    const dead: Chunk[] = [];
    for (const chunk of this.chunks.values()) if (!live(chunk) && mine(chunk)) dead.push(chunk);
    dead.sort((a, b) => a.lastAccess - b.lastAccess);
    const gone = new Set<string>();
    for (const chunk of dead) {
      if (!evictable(chunk)) continue;
      gone.add(chunk.key);
      yield { chunk, reason: 'dead' };
    }
    // Live chunks followed by no live chunk. A dead successor (skipped above as busy or pinned)
    // does not keep its predecessor from being a leaf: it is unreachable either way.
    const remaining = new Map<string, number>();
    const heap = new LeafHeap();
    for (const chunk of this.chunks.values()) {
      if (gone.has(chunk.key) || !live(chunk)) continue;
      let after = 0;
      for (const child of this.children.get(chunk.key) ?? []) {
        const c = this.chunks.get(child);
        if (c && live(c)) after++;
      }
      remaining.set(chunk.key, after);
      if (after === 0) heap.push(chunk, this.depth(chunk));
    }
    for (let next = heap.pop(); next !== undefined; next = heap.pop()) {
      const chunk = next;
      if (!mine(chunk) || !evictable(chunk)) continue;
      gone.add(chunk.key);
      yield { chunk, reason: 'lru' };
      const pred = chunk.pred === undefined ? undefined : this.chunks.get(chunk.pred);
      if (pred && !gone.has(pred.key)) {
        const left = (remaining.get(pred.key) ?? 1) - 1;
        remaining.set(pred.key, left);
        if (left === 0) heap.push(pred, this.depth(pred));
      }
    }
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
        if (seen.has(current.key) || path.length > MAX_DEPTH) {
          result = false; // a loop (two requests disagreeing on an order): nothing to keep it by
          break;
        }
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

/** Leaves by last access, then deepest first, then key (so the order is deterministic). */
class LeafHeap {
  private readonly items: { chunk: Chunk; depth: number }[] = [];

  push(chunk: Chunk, depth: number): void {
    const items = this.items;
    items.push({ chunk, depth });
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }

  pop(): Chunk | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined) return undefined;
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < items.length && before(items[l]!, items[m]!)) m = l;
        if (r < items.length && before(items[r]!, items[m]!)) m = r;
        if (m === i) break;
        [items[i], items[m]] = [items[m]!, items[i]!];
        i = m;
      }
    }
    return top.chunk;
  }
}

function before(a: { chunk: Chunk; depth: number }, b: { chunk: Chunk; depth: number }): boolean {
  if (a.chunk.lastAccess !== b.chunk.lastAccess) return a.chunk.lastAccess < b.chunk.lastAccess;
  if (a.depth !== b.depth) return a.depth > b.depth;
  return a.chunk.key < b.chunk.key;
}
