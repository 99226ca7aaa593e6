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
