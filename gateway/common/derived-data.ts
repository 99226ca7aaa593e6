/**
 * What capacity management (gateway/capacity/capacity.ts) needs of data derived from a budgeted
 * bucket's chunks and kept elsewhere in the store: the packed segments (gateway/segments/), which
 * implement it.
 */

/** One object of derived data: what it takes, when it was last used, and the chunks it copies. */
export interface DerivedItem {
  readonly id: string;
  readonly bytes: number;
  /** ms since the epoch (for one found in the store and not known here, when it was written). */
  readonly lastUsed: number;
  readonly keys: readonly string[];
}

/**
 * Data derived from a bucket's chunks and kept elsewhere in the store (packed segments,
 * gateway/segments/segments.ts): counted against the bucket's budget, and evicted in the same
 * least-recently-used order as the chunks, each just before the least recently used of the chunks
 * it copies (dropping it loses nothing its chunks do not hold, and it is useless without them).
 */
export interface DerivedData {
  bytes(bucket: string): number;
  items(bucket: string): Iterable<DerivedItem>;
  /** Deletes the derived objects of `bucket` named in `ids` (chosen from `items`). */
  evict(bucket: string, ids: ReadonlySet<string>): Promise<void>;
}
