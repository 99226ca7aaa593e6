/**
 * Eviction policies of a budgeted bucket, and the engine loop that replays a trace against one.
 * Every policy holds whole chunks of one size and answers the same four questions (is a key here,
 * a read, a write, evict down to so many bytes); the loop is shared, so policies differ only in
 * what they evict.
 *
 * - prefix-aware: the gateway's own ChunkIndex (gateway/capacity/chunk-index.ts), fed as the
 *   gateway feeds it: link() with each request's keys (the lookup), touch() on each hit read,
 *   put() on each write, and victims taken from evictionOrder(). The benchmark measures that code.
 * - lru: least recently used chunk first, blind to prefixes. Accesses are ordered as the engine
 *   makes them (a prefix is read from its first chunk to its last, then the missing chunks are
 *   written in order), so within one request the head is the least recent: plain LRU trims a
 *   prefix from its head, and the rest of it stays, unreachable, until LRU gets to it.
 * - write-age: oldest written first. This is what an S3 lifecycle expiration rule does (it deletes
 *   objects some days after their creation, whatever their reads); run against a byte budget, the
 *   rule's age is the one that keeps the bucket under it, i.e. the oldest-written chunks go first.
 *   It is also FIFO: the engine never rewrites a chunk that is present (it checks before it
 *   stores, as vLLM's offloading manager and LMCache do), so write time and first insertion order
 *   are the same order. They would differ only for an engine that overwrote present chunks
 *   blindly: the overwrite would renew the object's age (S3 resets Last-Modified), not its FIFO
 *   place.
 * - belady: the offline reference. It knows the trace: among leaves (chunks no present chunk
 *   follows), the one whose next use is farthest goes first, a chunk never used again before any.
 *   A chunk's next use is never later than its successor's (a prompt that holds a chunk holds all
 *   before it), so this is Belady's MIN restricted to orders that keep prefixes whole. MIN is
 *   optimal for one-page-at-a-time demand paging; here eviction comes in watermark batches, the
 *   engine must store every chunk it computes (no bypass) and a hit counts only up to the first
 *   miss, so it is a heuristic upper reference, not a proven optimum. With engine caches in front
 *   (SimulationOptions.engines) its future counts uses the engines serve themselves too, so it is
 *   a rougher reference still.
 */
import { ChunkIndex } from '../../gateway/capacity/chunk-index.js';
import type { Trace, TraceRequest } from './workload.js';

export interface EvictionPolicy {
  readonly name: string;
  /** Bytes held. */
  readonly bytes: number;
  has(key: string): boolean;
  /** A request begins (its lookup names its keys); `at` is its index in the trace. */
  begin(request: TraceRequest, at: number): void;
  /** A hit chunk is read. */
  read(key: string, at: number): void;
  /** A computed chunk is stored; `pred` is the key before it in the prompt. */
  write(key: string, pred: string | undefined, at: number): void;
  /** Evicts until at most `targetBytes` are held; returns how many chunks went. */
  evict(targetBytes: number): number;
  /** Keys held. */
  keys(): Iterable<string>;
}

export const POLICY_NAMES = ['prefix-aware', 'lru', 'write-age', 'belady'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export function makePolicy(name: PolicyName, trace: Trace): EvictionPolicy {
  switch (name) {
    case 'prefix-aware':
      return new PrefixAwarePolicy(trace.chunkBytes);
    case 'lru':
      return new LruPolicy(trace.chunkBytes);
    case 'write-age':
      return new WriteAgePolicy(trace.chunkBytes);
    case 'belady':
      return new BeladyPolicy(trace);
  }
}

/** The gateway's ChunkIndex and its eviction order. */
export class PrefixAwarePolicy implements EvictionPolicy {
  readonly name = 'prefix-aware';
  readonly index = new ChunkIndex();
  /** Victims by reason, for the report. */
  readonly evicted = { dead: 0, lru: 0 };

  constructor(private readonly chunkBytes: number) {}

  get bytes(): number {
    return this.index.bytes;
  }

  has(key: string): boolean {
    return this.index.get(key) !== undefined;
  }

  begin(request: TraceRequest): void {
    this.index.link(request.keys, 'bench');
  }

  read(key: string, at: number): void {
    this.index.touch(key, at);
  }

  write(key: string, _pred: string | undefined, at: number): void {
    // No pred: a PUT does not name one; the index has it from the request's lookup (link).
    this.index.put(key, { size: this.chunkBytes, tenant: 'bench', etag: '"0"', at });
  }

  evict(targetBytes: number): number {
    // The walk counts what it yields as gone; remove the victims once it is over.
    const victims: string[] = [];
    let bytes = this.index.bytes;
    for (const candidate of this.index.evictionOrder()) {
      if (bytes <= targetBytes) break;
      victims.push(candidate.chunk.key);
      bytes -= candidate.chunk.size;
      this.evicted[candidate.reason]++;
    }
    for (const key of victims) this.index.remove(key);
    return victims.length;
  }

  keys(): Iterable<string> {
    return [...this.index.values()].map((c) => c.key);
  }
}

/**
 * A recency or insertion list: a Map keeps insertion order, so re-inserting a key moves it to the
 * end and evicting takes from the front.
 */
abstract class OrderedPolicy implements EvictionPolicy {
  abstract readonly name: string;
  protected readonly order = new Map<string, true>();

  constructor(private readonly chunkBytes: number) {}

  get bytes(): number {
    return this.order.size * this.chunkBytes;
  }

  has(key: string): boolean {
    return this.order.has(key);
  }

  begin(): void {}

  abstract read(key: string, at: number): void;

  write(key: string): void {
    this.order.delete(key);
    this.order.set(key, true);
  }

  evict(targetBytes: number): number {
    let evicted = 0;
    for (const key of this.order.keys()) {
      if (this.bytes <= targetBytes) break;
      this.order.delete(key);
      evicted++;
    }
    return evicted;
  }

  keys(): Iterable<string> {
    return this.order.keys();
  }
}

/** Least recently read or written chunk first. */
export class LruPolicy extends OrderedPolicy {
  readonly name = 'lru';

  read(key: string): void {
    this.order.delete(key);
    this.order.set(key, true);
  }
}

/** Oldest written chunk first (an S3 lifecycle expiration rule held to a budget; FIFO alike). */
export class WriteAgePolicy extends OrderedPolicy {
  readonly name = 'write-age';

  read(): void {}
}

/** Farthest next use first among leaves; knows the whole trace. */
export class BeladyPolicy implements EvictionPolicy {
  readonly name = 'belady';
  /** For each key, the indices of the requests whose prompt holds it, ascending. */
  private readonly uses = new Map<string, number[]>();
  /** For each key, how far `uses` has been consumed. */
  private readonly cursor = new Map<string, number>();
  private readonly pred = new Map<string, string | undefined>();
  private readonly depthOf = new Map<string, number>();
  private readonly present = new Set<string>();
  /** For each present key, how many present keys follow it. */
  private readonly children = new Map<string, number>();
  private readonly chunkBytes: number;
  private now = -1;

  constructor(trace: Trace) {
    this.chunkBytes = trace.chunkBytes;
    trace.requests.forEach((request, at) => {
      request.keys.forEach((key, i) => {
        let list = this.uses.get(key);
        if (!list) {
          this.uses.set(key, (list = []));
          this.pred.set(key, i === 0 ? undefined : request.keys[i - 1]);
          this.depthOf.set(key, i);
        }
        list.push(at);
      });
    });
  }

  get bytes(): number {
    return this.present.size * this.chunkBytes;
  }

  has(key: string): boolean {
    return this.present.has(key);
  }

  begin(_request: TraceRequest, at: number): void {
    this.now = at;
  }

  read(): void {}

  write(key: string): void {
    if (this.present.has(key)) return;
    this.present.add(key);
    const pred = this.pred.get(key);
    if (pred !== undefined && this.present.has(pred)) this.children.set(pred, (this.children.get(pred) ?? 0) + 1);
  }

  /** The first request after the current one that holds the key; Infinity if none. */
  nextUse(key: string): number {
    const list = this.uses.get(key) ?? [];
    let i = this.cursor.get(key) ?? 0;
    while (i < list.length && (list[i] as number) <= this.now) i++;
    this.cursor.set(key, i);
    return list[i] ?? Infinity;
  }

  evict(targetBytes: number): number {
    const next = new Map<string, number>();
    const heap = new Heap<string>((a, b) => {
      const na = next.get(a) as number;
      const nb = next.get(b) as number;
      if (na !== nb) return na > nb;
      const da = this.depthOf.get(a) ?? 0;
      const db = this.depthOf.get(b) ?? 0;
      if (da !== db) return da > db;
      return a < b;
    });
    for (const key of this.present) {
      next.set(key, this.nextUse(key));
      if ((this.children.get(key) ?? 0) === 0) heap.push(key);
    }
    let evicted = 0;
    while (this.bytes > targetBytes) {
      const key = heap.pop();
      if (key === undefined) break;
      this.present.delete(key);
      this.children.delete(key);
      evicted++;
      const pred = this.pred.get(key);
      if (pred === undefined || !this.present.has(pred)) continue;
      const left = (this.children.get(pred) ?? 1) - 1;
      this.children.set(pred, left);
      if (left === 0) heap.push(pred);
    }
    return evicted;
  }

  keys(): Iterable<string> {
    return this.present;
  }
}

/** A binary heap; `before(a, b)` is true when a comes out first. */
export class Heap<T> {
  private readonly items: T[] = [];

  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  push(item: T): void {
    const items = this.items;
    items.push(item);
    for (let i = items.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (!this.before(items[i] as T, items[parent] as T)) break;
      [items[i], items[parent]] = [items[parent] as T, items[i] as T];
      i = parent;
    }
  }

  pop(): T | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last !== undefined) {
      items[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        let m = i;
        if (l < items.length && this.before(items[l] as T, items[m] as T)) m = l;
        if (l + 1 < items.length && this.before(items[l + 1] as T, items[m] as T)) m = l + 1;
        if (m === i) break;
        [items[i], items[m]] = [items[m] as T, items[i] as T];
        i = m;
      }
    }
    return top;
  }
}

export interface SimulationOptions {
  /** Bytes the bucket may hold; Infinity for no budget. */
  readonly budgetBytes: number;
  /** Eviction starts when the bucket holds more than budget x high... */
  readonly high: number;
  /** ...and stops once it holds at most budget x low. */
  readonly low: number;
  /** Requests before this index warm the bucket up and are not counted. */
  readonly measureFrom: number;
  /**
   * Engines with a prefix cache of their own in front of the bucket (HBM or DRAM; an LRU of
   * `chunks` chunks each); a conversation always goes to the same engine. The engine serves the
   * leading chunks it holds itself and asks the bucket only about the rest (as a tiered engine
   * cache does), so the bucket sees reads of tails without their heads. Absent: every request
   * looks its whole prompt up in the bucket.
   */
  readonly engines?: { readonly count: number; readonly chunks: number } | undefined;
}

export interface SimulationResult {
  readonly policy: string;
  readonly requests: number;
  /** Tokens of the measured requests' whole chunks. */
  readonly prefixTokens: number;
  readonly hitTokens: number;
  readonly hitRate: number;
  /** Of the hit tokens, those the bucket served (all of them without engine caches). */
  readonly bucketHitTokens: number;
  /** Bytes of the hit chunks read. */
  readonly bytesRead: number;
  readonly bytesWritten: number;
  readonly evictionRounds: number;
  readonly chunksEvicted: number;
  /**
   * Share of the bucket's bytes that no lookup can reach (a chunk before them is gone), averaged
   * over the eviction rounds: budget that holds nothing useful (with engine caches, nothing useful
   * to an engine that lacks the missing chunk).
   */
  readonly deadShare: number;
  readonly peakBytes: number;
}

/**
 * Replays the trace as an engine would: look the prompt up (the hit is the longest run of leading
 * chunks present), read the hit chunks, compute the rest and store the chunks that are missing.
 * The bucket is trimmed after each request once it holds more than the high watermark (the
 * capacity manager trims behind the writes; a request's own chunks are busy while it runs).
 */
export function simulate(trace: Trace, policy: EvictionPolicy, options: SimulationOptions): SimulationResult {
  const high = options.budgetBytes * options.high;
  const low = options.budgetBytes * options.low;
  const pred = new Map<string, string | undefined>();
  let prefixTokens = 0;
  let hitTokens = 0;
  let bytesRead = 0;
  let bytesWritten = 0;
  let rounds = 0;
  let evicted = 0;
  let deadSum = 0;
  let deadRounds = 0;
  let peakBytes = 0;
  const engines = Array.from({ length: options.engines?.count ?? 0 }, () => new Map<string, true>());
  let bucketHitTokens = 0;
  trace.requests.forEach((request, at) => {
    const measured = at >= options.measureFrom;
    const engine = engines.length === 0 ? undefined : engines[request.conversation % engines.length];
    let local = 0;
    if (engine) while (local < request.keys.length && engine.has(request.keys[local] as string)) local++;
    const keys = local === 0 ? request.keys : request.keys.slice(local);
    policy.begin(local === 0 ? request : { ...request, keys }, at);
    let hits = 0;
    while (hits < keys.length && policy.has(keys[hits] as string)) hits++;
    for (let i = 0; i < hits; i++) policy.read(keys[i] as string, at);
    if (engine) {
      // The whole prompt is in the engine's cache now, most recently used, its head most of all:
      // vLLM frees a finished request's blocks tail first so that its LRU evicts tails first.
      for (let i = request.keys.length - 1; i >= 0; i--) {
        const key = request.keys[i] as string;
        engine.delete(key);
        engine.set(key, true);
      }
      const limit = options.engines?.chunks ?? 0;
      for (const key of engine.keys()) {
        if (engine.size <= limit) break;
        engine.delete(key);
      }
    }
    for (let i = hits; i < keys.length; i++) {
      const key = keys[i] as string;
      if (policy.has(key)) continue;
      const before = local + i === 0 ? undefined : request.keys[local + i - 1];
      if (!pred.has(key)) pred.set(key, before);
      policy.write(key, before, at);
      if (measured) bytesWritten += trace.chunkBytes;
    }
    if (measured) {
      prefixTokens += request.keys.length * trace.chunkTokens;
      hitTokens += (local + hits) * trace.chunkTokens;
      bucketHitTokens += hits * trace.chunkTokens;
      bytesRead += hits * trace.chunkBytes;
    }
    peakBytes = Math.max(peakBytes, policy.bytes);
    if (policy.bytes > high) {
      if (measured) {
        deadSum += deadBytes(policy, pred, trace.chunkBytes) / policy.bytes;
        deadRounds++;
      }
      rounds++;
      evicted += policy.evict(low);
    }
  });
  return {
    policy: policy.name,
    requests: trace.requests.length - Math.min(options.measureFrom, trace.requests.length),
    prefixTokens,
    hitTokens,
    hitRate: prefixTokens === 0 ? 0 : hitTokens / prefixTokens,
    bucketHitTokens,
    bytesRead,
    bytesWritten,
    evictionRounds: rounds,
    chunksEvicted: evicted,
    deadShare: deadRounds === 0 ? 0 : deadSum / deadRounds,
    peakBytes,
  };
}

/** Bytes of held chunks one of whose predecessors is not held. */
export function deadBytes(policy: EvictionPolicy, pred: ReadonlyMap<string, string | undefined>, chunkBytes: number): number {
  const live = new Map<string, boolean>();
  const isLive = (key: string): boolean => {
    const path: string[] = [];
    let result = true;
    for (let k: string | undefined = key; k !== undefined; k = pred.get(k)) {
      const known = live.get(k);
      if (known !== undefined) {
        result = known;
        break;
      }
      if (!policy.has(k)) {
        result = false;
        break;
      }
      path.push(k);
    }
    for (const k of path) live.set(k, result);
    return result;
  };
  let dead = 0;
  for (const key of policy.keys()) if (!isLive(key)) dead += chunkBytes;
  return dead;
}
