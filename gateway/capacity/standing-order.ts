/**
 * The eviction order of a bucket's index, kept standing as its chunks come, go, are read and are
 * linked (ChunkIndex calls attach, detach, settleAfter and touched), so that a trim reads its
 * victims in order at a cost in proportion to what it takes (O(k log k) for k chunks), not to the
 * bucket's size: the live chunks no live chunk follows (the leaves), by last access, and the dead
 * ones (a predecessor gone), by last access, each in a keyed heap (gateway/capacity/keyed-heap.ts).
 * test/capacity-index.test.ts checks it equal to the order computed from nothing but the chunks.
 */
import { before, deadFirst, depthIn, KeptBack, PAUSE, PAUSE_EVERY, type Candidate, type Chunk, type Leaf, type OrderOptions } from './chunk.js';
import { KeyedHeap } from './keyed-heap.js';

/** What the order reads of the index. */
export interface Chains {
  get(key: string): Chunk | undefined;
  /** The keys of the present chunks whose predecessor is `key`. */
  after(key: string): ReadonlySet<string> | undefined;
  values(): IterableIterator<Chunk>;
}

export class StandingOrder {
  readonly #chains: Chains;
  /**
   * The standing eviction order, kept as chunks come, go and are read (attach, detach): live
   * chunks no live chunk follows (the leaves), and chunks one of whose predecessors is gone (the
   * dead). A trim reads them in order and costs work in proportion to what it takes.
   */
  readonly #leaves = new KeyedHeap<Leaf>((l) => l.chunk.key, before);
  readonly #dead = new KeyedHeap<Chunk>(
    (c) => c.key,
    (a, b) => a.lastAccess < b.lastAccess || (a.lastAccess === b.lastAccess && a.key < b.key),
  );
  /** For each live chunk, how many live chunks follow it. */
  readonly #liveKids = new Map<string, number>();
  /** For each live chunk, how many chunks come before it. */
  readonly #depths = new Map<string, number>();
  /** False while a snapshot is loaded (suspend): the standing order is then built once, when next read. */
  #keeping = true;

  constructor(chains: Chains) {
    this.#chains = chains;
  }

  /** Whether the order is kept chunk by chunk now (not while suspended for a bulk load). */
  get keeping(): boolean {
    return this.#keeping;
  }

  /**
   * Stops keeping the order chunk by chunk, for a bulk load (a snapshot at start): it is built
   * once, in O(n log n), when it is next read (build), and kept again from then on.
   */
  suspend(): void {
    this.#keeping = false;
  }

  /** The key left the index for good: what counted its live successors goes (they are dead now). */
  forget(key: string): void {
    this.#liveKids.delete(key);
  }

  /** Whether the chunk is among the dead (while the order is kept). */
  isDead(key: string): boolean {
    return this.#dead.has(key);
  }

  /** The chunk was read: its place among the leaves or the dead moves. */
  touched(chunk: Chunk): void {
    if (!this.#keeping) return;
    const leaf = this.#leaves.get(chunk.key);
    if (leaf) this.#leaves.set(leaf);
    else if (this.#dead.has(chunk.key)) this.#dead.set(chunk);
  }

  /** Builds the order from the chunks alone (`live`: whether every predecessor of a chunk is here), and keeps it from now on. */
  build(live: (chunk: Chunk) => boolean): void {
    this.#leaves.clear();
    this.#dead.clear();
    this.#liveKids.clear();
    this.#depths.clear();
    const depthOf = depthIn((key) => this.#chains.get(key), this.#depths);
    for (const chunk of this.#chains.values()) {
      if (!live(chunk)) {
        this.#dead.set(chunk);
        continue;
      }
      depthOf(chunk);
      if (chunk.pred !== undefined) this.#liveKids.set(chunk.pred, (this.#liveKids.get(chunk.pred) ?? 0) + 1);
    }
    for (const chunk of this.#chains.values()) {
      if (!this.#dead.has(chunk.key) && !this.#liveKids.has(chunk.key)) this.#leaves.set({ chunk, depth: this.#depths.get(chunk.key) ?? 0 });
    }
    this.#keeping = true;
  }

  /** Whether the chunk is the index's version of its key still (a walk may hold one since gone or rewritten). */
  #current(chunk: Chunk): boolean {
    return this.#chains.get(chunk.key) === chunk;
  }

  /** Whether the chunk's predecessor (and so, the order being kept so, every one before it) is here and live. */
  #liveByPred(chunk: Chunk): boolean {
    if (chunk.pred === undefined) return true;
    return this.#chains.get(chunk.pred) !== undefined && !this.#dead.has(chunk.pred);
  }

  /** Places a chunk of the index in the standing order: among the dead, or live (a leaf while nothing live follows it). */
  attach(chunk: Chunk): void {
    if (!this.#keeping) return;
    if (!this.#liveByPred(chunk)) {
      this.#dead.set(chunk);
      return;
    }
    const pred = chunk.pred === undefined ? undefined : this.#chains.get(chunk.pred);
    const depth = pred ? (this.#depths.get(pred.key) ?? 0) + 1 : 0;
    this.#depths.set(chunk.key, depth);
    if (pred) {
      const kids = (this.#liveKids.get(pred.key) ?? 0) + 1;
      this.#liveKids.set(pred.key, kids);
      if (kids === 1) this.#leaves.delete(pred.key);
    }
    if ((this.#liveKids.get(chunk.key) ?? 0) === 0) this.#leaves.set({ chunk, depth });
  }

  /** Takes a chunk out of the standing order (before it goes, or changes its place in a chain). */
  detach(chunk: Chunk): void {
    if (!this.#keeping) return;
    if (this.#dead.delete(chunk.key)) return;
    this.#leaves.delete(chunk.key);
    this.#depths.delete(chunk.key);
    // Live, it was counted among its predecessor's (dead since, or not).
    const pred = chunk.pred === undefined ? undefined : this.#chains.get(chunk.pred);
    if (!pred) return;
    const kids = (this.#liveKids.get(pred.key) ?? 1) - 1;
    if (kids > 0) {
      this.#liveKids.set(pred.key, kids);
      return;
    }
    this.#liveKids.delete(pred.key);
    if (!this.#dead.has(pred.key)) this.#leaves.set({ chunk: pred, depth: this.#depths.get(pred.key) ?? 0 });
  }

  /** The chunks after `key` take their places again where it came, went, died, revived or moved (each chunk at most once). */
  settleAfter(key: string): void {
    if (!this.#keeping) return;
    if (this.#chains.after(key) === undefined) return;
    const stack = [key];
    const seen = new Set<string>(stack);
    for (let at = stack.pop(); at !== undefined; at = stack.pop()) {
      for (const childKey of this.#chains.after(at) ?? []) {
        const child = this.#chains.get(childKey);
        if (!child || seen.has(childKey)) continue;
        const wasLive = !this.#dead.has(childKey);
        const live = this.#liveByPred(child);
        const depth = live ? (this.#depths.get(at) ?? 0) + 1 : undefined;
        if (wasLive === live && (!live || this.#depths.get(childKey) === depth)) continue;
        this.detach(child);
        this.attach(child);
        seen.add(childKey);
        stack.push(childKey);
      }
    }
  }

  /**
   * The order read from the standing one: the dead (oldest access first; those written since
   * `deadIfWrittenBefore` kept back), then the leaves merged with those kept back, by last access,
   * each chunk's predecessor joining the leaves once everything live after it has been yielded.
   * Costs O(k log k) for k chunks yielded or skipped. Where the index changes while a walk gives
   * way to requests, the walk reads on in the changed heaps (KeyedHeap.ordered): a chunk that
   * came or moved meanwhile may be missed or met out of place, none is yielded twice, and the
   * caller checks every victim again before it goes (as it did when the whole order was built
   * up front and went stale while the pass deleted).
   */
  *walk(options: OrderOptions): Generator<Candidate | typeof PAUSE> {
    const evictable = options.evictable ?? (() => true);
    const gone = new Set<string>();
    let work = 0;
    const pause = (): boolean => ++work % PAUSE_EVERY === 0;
    const young = yield* deadFirst(this.#dead.ordered(), options, gone, pause, (chunk) => !this.#current(chunk));
    const keptBack = new KeptBack(young, (chunk) => this.#current(chunk) && this.#dead.has(chunk.key) && evictable(chunk), gone);
    const standing = this.#leaves.ordered();
    let nextStanding = standing.next();
    /** Chunks that became leaves in this walk. */
    const joined = new KeyedHeap<Leaf>((l) => l.chunk.key, before);
    const remaining = new Map<string, number>();
    for (;;) {
      if (pause()) yield PAUSE;
      const fromStanding = nextStanding.done ? undefined : nextStanding.value;
      const fromJoined = joined.peek();
      let leaf: Leaf | undefined;
      if (fromStanding && (!fromJoined || before(fromStanding, fromJoined))) {
        leaf = fromStanding;
        nextStanding = standing.next();
      } else if (fromJoined) leaf = joined.pop();
      if (!leaf) break;
      const chunk = leaf.chunk;
      yield* keptBack.until(chunk.lastAccess);
      if (gone.has(chunk.key) || !this.#current(chunk) || !evictable(chunk)) continue;
      gone.add(chunk.key);
      yield { chunk, reason: 'lru' };
      const pred = chunk.pred === undefined ? undefined : this.#chains.get(chunk.pred);
      if (pred && !gone.has(pred.key) && !this.#dead.has(pred.key)) {
        const left = (remaining.get(pred.key) ?? this.#liveKids.get(pred.key) ?? 1) - 1;
        remaining.set(pred.key, left);
        if (left === 0) joined.set({ chunk: pred, depth: this.#depths.get(pred.key) ?? 0 });
      }
    }
    yield* keptBack.until();
  }
}
