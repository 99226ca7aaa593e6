/**
 * Eviction policies of a budgeted bucket, and the engine loop that replays a trace against one.
 * Every policy holds whole chunks of one size and answers the same four questions (is a key here,
 * a read, a write, evict down to so many bytes); the loop is shared, so policies differ only in
 * what they evict.
 *
 * - prefix-aware: the gateway's own ChunkIndex (gateway/capacity/chunk-index.ts), fed as the
 *   gateway feeds it: link() with the keys each lookup names, touch() on each hit read, put() on
 *   each write with the key before the chunk as its `pred` (what `x-amz-meta-objectcache-after`
 *   carries: the clients' putChunks / put_chunks and the SGLang backend set it), and victims taken
 *   from evictionOrder(). The benchmark measures that code.
 * - prefix-aware-no-after: the same, but the PUTs carry no `pred` (a writer that stores chunk by
 *   chunk without naming the one before, as the LMCache backends do today): the index learns the
 *   chains from the lookups alone.
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
 *   (an EngineTier) it knows the bucket's own access stream: a chunk's next use is the next lookup
 *   at the bucket that names it (an engine names only the keys after its local hits), not the next
 *   prompt that holds it. That stream is the same under every bucket policy (an engine's cache
 *   does not depend on what the bucket held), so it is known in advance. A chunk's next use is
 *   then no longer bounded by its successor's (a head the engines serve themselves is named only
 *   by a cold engine), so the order is farthest next use first over every chunk, deepest first
 *   among equals; a pred named by the same lookup as its successor is named no later, so the
 *   order still never opens a hole that the next lookup of a chunk would meet, and without
 *   engine caches it is exactly the leaves-only order above.
 */
import { ChunkIndex } from '../../gateway/capacity/chunk-index.js';
import { LfuDaPolicy, S3FifoPolicy } from './alternatives.js';
import type { EvictionPolicy } from './eviction-policy.js';
import { prng, type Trace, type TraceRequest } from './workload.js';

export const POLICY_NAMES = ['prefix-aware', 'prefix-aware-no-after', 'lru', 'write-age', 's3-fifo', 'lfu-da', 'belady'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/**
 * `budgetBytes`: the bucket's budget (S3-FIFO's ghost queue holds as many keys as it holds chunks).
 * `tier`: the engine caches in front of the bucket, whose lookups the offline reference foresees.
 */
export function makePolicy(name: PolicyName, trace: Trace, budgetBytes: number, tier?: EngineTier): EvictionPolicy {
  switch (name) {
    case 'prefix-aware':
      return new PrefixAwarePolicy(trace.chunkBytes);
    case 'prefix-aware-no-after':
      return new PrefixAwarePolicy(trace.chunkBytes, { putPred: false });
    case 'lru':
      return new LruPolicy(trace.chunkBytes);
    case 'write-age':
      return new WriteAgePolicy(trace.chunkBytes);
    case 's3-fifo':
      return new S3FifoPolicy(trace.chunkBytes, budgetBytes / trace.chunkBytes);
    case 'lfu-da':
      return new LfuDaPolicy(trace.chunkBytes);
    case 'belady':
      return new BeladyPolicy(trace, tier);
  }
}

/** The gateway's ChunkIndex and its eviction order. */
export class PrefixAwarePolicy implements EvictionPolicy {
  readonly name: string;
  readonly index = new ChunkIndex();
  /** Victims by reason, for the report. */
  readonly evicted = { dead: 0, lru: 0 };
  private readonly putPred: boolean;

  /** `putPred` (default true): each PUT names the key before the chunk, as putChunks does. */
  constructor(
    private readonly chunkBytes: number,
    options: { putPred?: boolean } = {},
  ) {
    this.putPred = options.putPred ?? true;
    this.name = this.putPred ? 'prefix-aware' : 'prefix-aware-no-after';
  }

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

  write(key: string, pred: string | undefined, at: number): void {
    // With putPred the PUT names the chunk before it (x-amz-meta-objectcache-after); without, the
    // index has the link only if a lookup named both keys.
    this.index.put(key, { size: this.chunkBytes, tenant: 'bench', etag: '"0"', at, pred: this.putPred ? pred : undefined });
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

/**
 * Farthest next use first, deepest first among equals; knows the whole trace, and with engine
 * caches in front the keys each lookup at the bucket will name.
 */
export class BeladyPolicy implements EvictionPolicy {
  readonly name = 'belady';
  /** For each key, the indices of the requests whose lookup at the bucket names it, ascending. */
  private readonly uses = new Map<string, number[]>();
  /** For each key, how far `uses` has been consumed. */
  private readonly cursor = new Map<string, number>();
  /** For each key, its place in its prompt. */
  private readonly depthOf = new Map<string, number>();
  private readonly present = new Set<string>();
  private readonly chunkBytes: number;
  private now = -1;

  constructor(trace: Trace, tier?: EngineTier) {
    this.chunkBytes = trace.chunkBytes;
    trace.requests.forEach((request, at) => {
      const from = tier?.local[at] ?? 0;
      request.keys.forEach((key, i) => {
        if (!this.depthOf.has(key)) this.depthOf.set(key, i);
        if (i < from) return;
        let list = this.uses.get(key);
        if (!list) this.uses.set(key, (list = []));
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
    this.present.add(key);
  }

  /** The first request after the current one whose lookup names the key; Infinity if none. */
  nextUse(key: string): number {
    const list = this.uses.get(key) ?? [];
    let i = this.cursor.get(key) ?? 0;
    while (i < list.length && (list[i] as number) <= this.now) i++;
    this.cursor.set(key, i);
    return list[i] ?? Infinity;
  }

  evict(targetBytes: number): number {
    // Without engine caches a chunk's next use is never later than its successor's, so the first
    // of this order is always a leaf: the same order as taking leaves only.
    const victims: { key: string; next: number; depth: number }[] = [];
    for (const key of this.present) victims.push({ key, next: this.nextUse(key), depth: this.depthOf.get(key) ?? 0 });
    victims.sort((a, b) => (a.next !== b.next ? b.next - a.next : a.depth !== b.depth ? b.depth - a.depth : a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    let evicted = 0;
    for (const { key } of victims) {
      if (this.bytes <= targetBytes) break;
      this.present.delete(key);
      evicted++;
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
    for (let i = items.length - 1; i > 0;) {
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
      for (let i = 0; ;) {
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

/** How requests reach engines, and how often an engine loses its cache. */
export interface EngineTierOptions {
  readonly count: number;
  /** Chunks each engine's own prefix cache holds (host memory: LMCache's local CPU tier, HiCache's L2). */
  readonly chunks: number;
  /**
   * 'affinity': a conversation's turns go to the engine that served its previous turn (session
   * affinity, what a prefix- or session-aware router achieves; a conversation starts on the next
   * engine in turn); 'random': any engine.
   */
  readonly routing: 'affinity' | 'random';
  /** Every so many requests one engine (each in turn) restarts with an empty cache; 0: never. */
  readonly restartEvery: number;
  readonly seed: number;
}

/**
 * What the engines in front of the bucket did with a trace. An engine's cache holds what it read
 * or computed whatever the bucket held (it keeps the whole prompt either way), so this is the same
 * under every bucket policy and is worked out once.
 */
export interface EngineTier {
  readonly options: EngineTierOptions;
  /** For each request, the engine that served it. */
  readonly engine: Int32Array;
  /** For each request, the leading chunks its engine held: the lookup at the bucket names the rest. */
  readonly local: Int32Array;
  readonly restarts: number;
}

/**
 * Runs the engines' own caches over the trace. Each is an LRU of chunks; a request's prompt is
 * put in tail first so that its head is the most recent (vLLM frees a finished request's blocks
 * tail first and SGLang's radix cache evicts leaves first: both trim a prefix from its end).
 */
export function planEngineTier(trace: Trace, options: EngineTierOptions): EngineTier {
  if (!(options.count > 0) || !(options.chunks > 0)) throw new Error('an engine tier needs engines and chunks');
  const caches = Array.from({ length: options.count }, () => new Map<string, true>());
  const random = prng(options.seed ^ 0x5bd1e995);
  const home = new Map<number, number>();
  let nextHome = 0;
  let restarts = 0;
  const n = trace.requests.length;
  const engine = new Int32Array(n);
  const local = new Int32Array(n);
  trace.requests.forEach((request, at) => {
    if (options.restartEvery > 0 && at > 0 && at % options.restartEvery === 0) {
      const which = restarts++ % options.count;
      caches[which]!.clear();
    }
    let e: number;
    if (options.routing === 'random') e = Math.floor(random() * options.count);
    else {
      const known = home.get(request.conversation);
      e = known ?? nextHome++ % options.count;
      if (known === undefined) home.set(request.conversation, e);
    }
    const cache = caches[e]!;
    let held = 0;
    while (held < request.keys.length && cache.has(request.keys[held] as string)) held++;
    engine[at] = e;
    local[at] = held;
    for (let i = request.keys.length - 1; i >= 0; i--) {
      const key = request.keys[i] as string;
      cache.delete(key);
      cache.set(key, true);
    }
    for (const key of cache.keys()) {
      if (cache.size <= options.chunks) break;
      cache.delete(key);
    }
  });
  return { options, engine, local, restarts };
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
   * Engines with a prefix cache of their own in front of the bucket (planEngineTier): each serves
   * the leading chunks it holds itself and asks the bucket only about the rest (LMCache's storage
   * manager asks the remote tier only for the keys after its local hits), loads what the bucket
   * has, computes the rest and stores the missing chunks, each naming the key before it. Absent:
   * every request looks its whole prompt up in the bucket.
   */
  readonly tier?: EngineTier | undefined;
}

export interface SimulationResult {
  readonly policy: string;
  readonly requests: number;
  /** Tokens of the measured requests' whole chunks. */
  readonly prefixTokens: number;
  /** Tokens not computed: served by the engine's cache or the bucket. */
  readonly hitTokens: number;
  readonly hitRate: number;
  /** Of the hit tokens, those the bucket served (all of them without engine caches). */
  readonly bucketHitTokens: number;
  /** Tokens the lookups at the bucket named (the whole-chunk tokens after the engines' own hits). */
  readonly askedTokens: number;
  /**
   * Prefix tokens of the requests whose engine held none of their prompt (a restarted or new
   * engine, a conversation on another system prompt): their lookup names the prompt from chunk 0.
   * All of them without engine caches.
   */
  readonly coldPrefixTokens: number;
  /** Of those, the tokens the bucket served. */
  readonly coldHitTokens: number;
  /** Bytes of the hit chunks read from the bucket. */
  readonly bytesRead: number;
  readonly bytesWritten: number;
  readonly evictionRounds: number;
  readonly chunksEvicted: number;
  /**
   * Share of the bucket's bytes that a lookup from chunk 0 cannot reach (a chunk before them is
   * gone), averaged over the eviction rounds: budget that holds nothing useful without engine
   * caches, and nothing useful to an engine that lacks the missing chunk with them.
   */
  readonly deadShare: number;
  readonly peakBytes: number;
}

/**
 * Replays the trace as an engine would: look the prompt up (the hit is the longest run of leading
 * chunks present), read the hit chunks, compute the rest and store the chunks that are missing,
 * each with the key before it. The bucket is trimmed after each request once it holds more than
 * the high watermark (the capacity manager trims behind the writes; a request's own chunks are
 * busy while it runs).
 */
export function simulate(trace: Trace, policy: EvictionPolicy, options: SimulationOptions): SimulationResult {
  const high = options.budgetBytes * options.high;
  const low = options.budgetBytes * options.low;
  const pred = new Map<string, string | undefined>();
  const tier = options.tier;
  if (tier && tier.local.length !== trace.requests.length) throw new Error('the engine tier was planned for another trace');
  let prefixTokens = 0;
  let hitTokens = 0;
  let bucketHitTokens = 0;
  let askedTokens = 0;
  let coldPrefixTokens = 0;
  let coldHitTokens = 0;
  let bytesRead = 0;
  let bytesWritten = 0;
  let rounds = 0;
  let evicted = 0;
  let deadSum = 0;
  let deadRounds = 0;
  let peakBytes = 0;
  trace.requests.forEach((request, at) => {
    const measured = at >= options.measureFrom;
    const local = tier ? (tier.local[at] as number) : 0;
    const keys = local === 0 ? request.keys : request.keys.slice(local);
    policy.begin(local === 0 ? request : { ...request, keys }, at);
    let hits = 0;
    while (hits < keys.length && policy.has(keys[hits] as string)) hits++;
    for (let i = 0; i < hits; i++) policy.read(keys[i] as string, at);
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
      askedTokens += keys.length * trace.chunkTokens;
      if (local === 0) {
        coldPrefixTokens += request.keys.length * trace.chunkTokens;
        coldHitTokens += hits * trace.chunkTokens;
      }
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
    askedTokens,
    coldPrefixTokens,
    coldHitTokens,
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
