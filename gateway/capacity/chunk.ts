/**
 * A chunk as the capacity index knows it, and the eviction order's shapes
 * (gateway/capacity/chunk-index.ts keeps the chunks, gateway/capacity/standing-order.ts their order).
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
  /**
   * Its size is the store's: learnt from the store's own answer (a write's, a HEAD, a listing),
   * not only from another gateway's journal (gateway/capacity/capacity.ts checks those).
   */
  checked: boolean;
  /** The model its writer named (`objectcache-model`), once the KV events learnt it (gateway/kv-events/): a removal's topic names it too. */
  model?: string;
}

export type EvictionReason = 'dead' | 'lru';

export interface OrderOptions {
  /** False for what cannot go now (pinned, being read): it and, being no leaf, its prefix are skipped. */
  readonly evictable?: (chunk: Chunk) => boolean;
  /** Only this tenant's chunks (a chunk followed by another tenant's still counts as a leaf). */
  readonly tenant?: string;
  /**
   * A chunk with a missing predecessor is dead only when written before this (ms since the epoch);
   * one written since (its predecessor may be on its way) is placed among the leaves by its last access.
   */
  readonly deadIfWrittenBefore?: number;
}

export interface Candidate {
  readonly chunk: Chunk;
  readonly reason: EvictionReason;
}

/** A chain longer than this is cut when its depth is measured (1M tokens in 256-token chunks). */
export const MAX_DEPTH = 4096;

/** Where a walk may hand control back, and how often. */
export const PAUSE = Symbol('pause');
export const PAUSE_EVERY = 2048;

/** A leaf of the eviction order, with its depth (the tie-break among equally cold leaves). */
export interface Leaf {
  readonly chunk: Chunk;
  readonly depth: number;
}

/** Leaves by last access, then deepest first, then key (so the order is deterministic). */
export function before(a: { chunk: Chunk; depth: number }, b: { chunk: Chunk; depth: number }): boolean {
  if (a.chunk.lastAccess !== b.chunk.lastAccess) return a.chunk.lastAccess < b.chunk.lastAccess;
  if (a.depth !== b.depth) return a.depth > b.depth;
  return a.chunk.key < b.chunk.key;
}

/**
 * The depth of a chunk (how many present chunks come before it), memoised in `memo` (a chain's
 * depths cost one pass, not one pass each), cut past MAX_DEPTH (a loop would never end).
 */
export function depthIn(get: (key: string) => Chunk | undefined, memo: Map<string, number>): (chunk: Chunk) => number {
  return (chunk) => {
    const path: Chunk[] = [];
    let base = -1;
    for (let at: Chunk | undefined = chunk; at && path.length <= MAX_DEPTH; at = at.pred === undefined ? undefined : get(at.pred)) {
      const known = memo.get(at.key);
      if (known !== undefined) {
        base = known;
        break;
      }
      path.push(at);
    }
    for (let i = path.length - 1; i >= 0; i--) memo.set((path[i] as Chunk).key, ++base);
    return memo.get(chunk.key) ?? 0;
  };
}

/**
 * The first part of every eviction order: the dead chunks of `dead` (oldest access first), each
 * yielded unless it is gone already, `skip`ped or not evictable. Returns those kept back: a chunk
 * written since `deadIfWrittenBefore` whose predecessor is missing may be one of a prefix written
 * in parallel, its predecessor still on the way, so it is not dead yet; it is not kept ahead of
 * colder leaves either (chunks whose predecessor never comes would hold the budget), but placed
 * among them by its last access (KeptBack).
 */
export function* deadFirst(
  dead: Iterable<Chunk>,
  options: OrderOptions,
  gone: Set<string>,
  pause: () => boolean,
  skip: (chunk: Chunk) => boolean = () => false,
): Generator<Candidate | typeof PAUSE, Chunk[]> {
  const evictable = options.evictable ?? (() => true);
  const young: Chunk[] = [];
  for (const chunk of dead) {
    if (pause()) yield PAUSE;
    if (gone.has(chunk.key) || skip(chunk)) continue;
    if (options.deadIfWrittenBefore !== undefined && chunk.written >= options.deadIfWrittenBefore) {
      young.push(chunk);
      continue;
    }
    if (!evictable(chunk)) continue;
    gone.add(chunk.key);
    yield { chunk, reason: 'dead' };
  }
  return young.sort((a, b) => a.lastAccess - b.lastAccess);
}

/** The dead chunks deadFirst kept back, yielded among the leaves: each when a leaf read later than it comes up. */
export class KeptBack {
  readonly #chunks: readonly Chunk[];
  readonly #may: (chunk: Chunk) => boolean;
  readonly #gone: Set<string>;
  #next = 0;

  /** `may`: whether a chunk kept back may still go (evictable, and whatever the walk checks besides). */
  constructor(chunks: readonly Chunk[], may: (chunk: Chunk) => boolean, gone: Set<string>) {
    this.#chunks = chunks;
    this.#may = may;
    this.#gone = gone;
  }

  /** Those last read before `lastAccess` (all that are left, by default). */
  *until(lastAccess = Infinity): Generator<Candidate> {
    for (; this.#next < this.#chunks.length && (this.#chunks[this.#next] as Chunk).lastAccess < lastAccess; this.#next++) {
      const chunk = this.#chunks[this.#next] as Chunk;
      if (this.#gone.has(chunk.key) || !this.#may(chunk)) continue;
      this.#gone.add(chunk.key);
      yield { chunk, reason: 'dead' };
    }
  }
}
