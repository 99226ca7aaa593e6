/**
 * Eviction policies the gateway does not use, measured beside it so that its order is chosen by
 * measurement (docs/benchmarks.md, "Other orders measured"): the policies built for traffic where
 * most objects are never read again, made prefix-aware as the gateway is (only a leaf, a chunk no
 * held chunk follows, is ever evicted: a chunk without its predecessor is useless).
 *
 * - s3-fifo: S3-FIFO (Yang et al., SOSP'23). A write enters a small FIFO queue (10% of the
 *   chunks held) unless its key is in the ghost queue (keys recently evicted from the small one,
 *   as many as the budget holds chunks), which sends it to the main queue. A chunk leaving the
 *   small queue moves to the main one if it was read while there, else it goes (its key to the
 *   ghost queue). The main queue is a FIFO that gives a chunk read since it last passed another
 *   turn (up to three reads are counted), as CLOCK does. It evicts one-hit wonders early.
 * - lfu-da: least frequently used with dynamic aging (GreedyDual with equal sizes, as Squid's
 *   heap LFUDA): a chunk's rank is its accesses plus the rank of the last chunk evicted when it was
 *   last accessed, least first, least recent among equals. Frequency decides, and age keeps chunks
 *   once popular from staying forever.
 *
 * Both decide on what a gateway sees (writes, reads, the key before a chunk), never on the future.
 */
import { KeyedHeap } from '../../gateway/capacity/keyed-heap.js';
import type { EvictionPolicy } from './eviction-policy.js';

interface Entry {
  readonly key: string;
  readonly depth: number;
  /** Which leaf heap it is ordered in (a queue of S3-FIFO; LFU-DA has one). */
  queue: number;
  rank: number;
  /** Orders equal ranks: the earlier first. */
  tie: number;
  /** Reads counted by the policy. */
  reads: number;
}

/** First the least rank, then the least tie, then the deepest, then by key. */
function before(a: Entry, b: Entry): boolean {
  if (a.rank !== b.rank) return a.rank < b.rank;
  if (a.tie !== b.tie) return a.tie < b.tie;
  if (a.depth !== b.depth) return a.depth > b.depth;
  return a.key < b.key;
}

/**
 * The prefix rule, shared: chunks held with their predecessor and how many held chunks follow
 * each; the leaves of each queue in a heap by the subclass's rank. The subclass ranks (write,
 * read), chooses the queue a victim comes from, and may keep a victim (moved or re-ranked) instead.
 */
abstract class LeafOrderPolicy implements EvictionPolicy {
  abstract readonly name: string;
  protected readonly entries = new Map<string, Entry>();
  /** The key before each chunk, as its first write named it. */
  private readonly pred = new Map<string, string | undefined>();
  /** Held chunks that follow each held chunk. */
  private readonly kids = new Map<string, number>();
  protected readonly leaves: KeyedHeap<Entry>[];

  constructor(
    private readonly chunkBytes: number,
    queues: number,
  ) {
    this.leaves = Array.from({ length: queues }, () => new KeyedHeap<Entry>((e) => e.key, before));
  }

  get bytes(): number {
    return this.entries.size * this.chunkBytes;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  begin(): void {}

  keys(): Iterable<string> {
    return this.entries.keys();
  }

  /** A new chunk's queue, rank and tie. */
  protected abstract admit(key: string, at: number): Pick<Entry, 'queue' | 'rank' | 'tie'>;
  /** A held chunk is read: update its rank or reads (it is re-placed after). */
  protected abstract onRead(entry: Entry, at: number): void;
  /** The queue the next victim comes from. */
  protected abstract victimQueue(): number;
  /** Whether the leaf taken is kept (after changing its queue or rank) rather than evicted. */
  protected abstract keep(entry: Entry): boolean;
  /** The leaf taken is evicted. */
  protected abstract onEvicted(entry: Entry): void;

  read(key: string, at: number): void {
    const entry = this.entries.get(key);
    if (entry === undefined) return;
    this.onRead(entry, at);
    this.place(entry);
  }

  write(key: string, pred: string | undefined, at: number): void {
    if (this.entries.has(key)) return;
    if (!this.pred.has(key)) this.pred.set(key, pred);
    const before = this.pred.get(key);
    const parent = before === undefined ? undefined : this.entries.get(before);
    const entry: Entry = { key, depth: parent === undefined ? 0 : parent.depth + 1, reads: 0, ...this.admit(key, at) };
    this.entries.set(key, entry);
    if (parent !== undefined) {
      this.kids.set(parent.key, (this.kids.get(parent.key) ?? 0) + 1);
      this.leaves[parent.queue]?.delete(parent.key);
    }
    this.place(entry);
  }

  /** Puts a leaf in its queue's heap at its rank (a chunk with successors held is in none). */
  protected place(entry: Entry): void {
    if ((this.kids.get(entry.key) ?? 0) > 0) return;
    for (const [queue, heap] of this.leaves.entries()) if (queue !== entry.queue) heap.delete(entry.key);
    this.leaves[entry.queue]?.set(entry);
  }

  evict(targetBytes: number): number {
    let evicted = 0;
    while (this.bytes > targetBytes) {
      const preferred = this.victimQueue();
      const heap = (this.leaves[preferred]?.size ?? 0) > 0 ? this.leaves[preferred] : this.leaves.find((h) => h.size > 0);
      const entry = heap?.pop();
      if (entry === undefined) break;
      if (this.keep(entry)) {
        this.place(entry);
        continue;
      }
      this.entries.delete(entry.key);
      this.onEvicted(entry);
      evicted++;
      const before = this.pred.get(entry.key);
      const parent = before === undefined ? undefined : this.entries.get(before);
      if (parent !== undefined) {
        const left = (this.kids.get(parent.key) ?? 1) - 1;
        if (left > 0) this.kids.set(parent.key, left);
        else {
          this.kids.delete(parent.key);
          this.place(parent);
        }
      }
    }
    return evicted;
  }
}

const SMALL = 0;
const MAIN = 1;

/** S3-FIFO over leaves: a small probationary FIFO, a main FIFO with second chances, a ghost queue. */
export class S3FifoPolicy extends LeafOrderPolicy {
  readonly name = 's3-fifo';
  /** Keys evicted from the small queue, oldest first, as many as the budget holds chunks. */
  private readonly ghost = new Set<string>();
  private readonly ghostLimit: number;
  private readonly smallShare: number;
  private smallCount = 0;
  private seq = 0;

  constructor(chunkBytes: number, budgetChunks: number, options: { smallShare?: number } = {}) {
    super(chunkBytes, 2);
    this.ghostLimit = Math.max(1, Math.floor(budgetChunks));
    this.smallShare = options.smallShare ?? 0.1;
  }

  protected admit(key: string): Pick<Entry, 'queue' | 'rank' | 'tie'> {
    const queue = this.ghost.delete(key) ? MAIN : SMALL;
    if (queue === SMALL) this.smallCount++;
    return { queue, rank: this.seq++, tie: 0 };
  }

  protected onRead(entry: Entry): void {
    entry.reads = Math.min(entry.reads + 1, 3);
  }

  protected victimQueue(): number {
    return this.smallCount > this.smallShare * this.entries.size ? SMALL : MAIN;
  }

  protected keep(entry: Entry): boolean {
    if (entry.queue === SMALL && entry.reads > 0) {
      // Read while on probation: to the main queue's head.
      entry.queue = MAIN;
      entry.reads = 0;
      entry.rank = this.seq++;
      this.smallCount--;
      return true;
    }
    if (entry.queue === MAIN && entry.reads > 0) {
      entry.reads--;
      entry.rank = this.seq++;
      return true;
    }
    return false;
  }

  protected onEvicted(entry: Entry): void {
    if (entry.queue !== SMALL) return;
    this.smallCount--;
    this.ghost.add(entry.key);
    if (this.ghost.size > this.ghostLimit) this.ghost.delete(this.ghost.values().next().value as string);
  }
}

/** LFU with dynamic aging over leaves. */
export class LfuDaPolicy extends LeafOrderPolicy {
  readonly name = 'lfu-da';
  /** The rank of the last chunk evicted: the age added to a chunk's count when it is accessed. */
  private age = 0;

  constructor(chunkBytes: number) {
    super(chunkBytes, 1);
  }

  protected admit(_key: string, at: number): Pick<Entry, 'queue' | 'rank' | 'tie'> {
    return { queue: 0, rank: this.age + 1, tie: at };
  }

  protected onRead(entry: Entry, at: number): void {
    entry.reads++;
    entry.rank = this.age + entry.reads + 1;
    entry.tie = at;
  }

  protected victimQueue(): number {
    return 0;
  }

  protected keep(): boolean {
    return false;
  }

  protected onEvicted(entry: Entry): void {
    this.age = entry.rank;
  }
}
