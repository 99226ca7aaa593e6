/**
 * What this gateway knows of the packed segments in the store (docs/segments.md): the segments it
 * learnt (packed here, discovered, or found by a sweep), indexed by run, first chunk and chunk;
 * the lookup of the segment that serves a request (find) and the checks of its chunks (current);
 * dropping the stale; eviction within --max-segment-bytes and MAX_KNOWN_SLICES, and for capacity
 * management (evict); and the segments a sweep found that it does not know (sweep.ts), counted
 * and evictable.
 */
import type { Descriptor } from '../../schemas/descriptor.js';
import type { DerivedItem } from '../common/derived-data.js';
import type { CapacityStore } from '../stores/capacity-store.js';
import type { Logger } from '../common/logger.js';
import { SEGMENT_SKIP_BYTES } from '../threads/protocol.js';
import type { StateKey } from '../common/state-key.js';
import type { EncodedChunks } from '../descriptor-get/encoded-chunks.js';
import type { SegmentSource } from '../descriptor-get/segment-source.js';
import type { SegmentCover } from '../descriptor-get/read-plan.js';
import type { SegmentConfig } from '../common/config.js';
import type { SegmentObserver } from '../common/observers.js';
import {
  codecOf,
  manifestKey,
  MAX_MANIFEST_BYTES,
  offsets,
  parseManifest,
  holdsVersions,
  recordedOf,
  runName,
  sameRun,
  sameSizes,
  sameValues,
  sealManifest,
  writerCheck,
  type Heads,
  type Manifest,
} from './manifest.js';
import type { Pack, Packed } from './pack.js';

/**
 * Slices of all the segments a gateway keeps, together: each is a CRC32C held in memory (4 bytes)
 * and written in a manifest, and an encoded one its length too (it counts twice), so this bounds
 * both (64 MiB). A run with more is not packed. The chunks' keys and ETags count against it too,
 * in 4-byte units (learn), so what the index of segments holds stays about 64 MiB.
 */
export const MAX_KNOWN_SLICES = 16 * 1024 * 1024;
/** Chunks written and runs dropped a sweep keeps track of while it runs (beginSweep). */
const SWEEP_NOTED = 100_000;

interface Segment {
  readonly run: string;
  readonly manifest: Manifest;
  /** The manifest object's ETag: a segment is deleted only while its manifest is this one. */
  readonly manifestEtag: string;
  readonly crcs: Uint32Array;
  /** Where each slice lies (from the manifest: `sizes` for encoded slices). */
  readonly offset: (layer: number, chunk: number) => number;
  /** Encoded: every slice's length, in segment order. */
  readonly sizes: Uint32Array | undefined;
  /** Against MAX_KNOWN_SLICES (learn): its slices' CRC32Cs and lengths, keys and ETags, in 4-byte units. */
  readonly held: number;
  /**
   * Its CRC32Cs were found to be those every chunk's writer recorded, when it was packed or
   * discovered (what a read without HEADs, --segment-check writes, can say of it).
   */
  readonly writerVerified: boolean;
  lastUsed: number;
}

/** A segment that covers the first `cover.chunks` chunks of a request. */
export interface Found {
  readonly run: string;
  readonly cover: SegmentCover;
  readonly source: SegmentSource;
  /**
   * Known current already: an encoded request's index was read with a HEAD per chunk just before,
   * and those ETags are the segment's (no check of its own is needed, `current`).
   */
  readonly checked: boolean;
  /**
   * Known at `find` (an encoded request's index, or --segment-check writes): whether its CRC32Cs
   * are those every covered chunk's writer recorded. Otherwise `current` says.
   */
  readonly verified?: boolean;
}

/**
 * What a check of a found segment's chunks says: `stale` (a chunk changed, or its writer recorded
 * other CRC32Cs: not to be used), else whether every covered chunk's writer recorded CRC32Cs, all
 * equal to the segment's (`verified`), or some recorded none (`unverified`).
 */
export type SegmentCheck = 'verified' | 'unverified' | 'stale';

/** A segment in the store that this gateway does not know (a sweep's listing): enough to count and delete it. */
export interface Unknown {
  readonly run: string;
  /** Its chunks' bucket. */
  readonly bucket: string;
  readonly manifestEtag: string;
  /** When its manifest was written (ms since the epoch): the oldest go first. */
  readonly packedAt: number;
  readonly data: readonly string[];
  readonly bytes: number;
}

const slot = (bucket: string, key: string): string => `${bucket}\n${key}`;

/**
 * What a known segment holds in the index, in 4-byte units (against MAX_KNOWN_SLICES): a CRC32C
 * per slice, an encoded slice's length, and the chunks' keys (held twice: the manifest's, and the
 * index by key) and ETags, so long keys count too.
 */
function heldOf(manifest: Manifest, crcs: Uint32Array, sizes: Uint32Array | undefined): number {
  const keyBytes = manifest.keys.reduce((n, key, i) => n + 2 * key.length + (manifest.etags[i] as string).length, 0);
  return crcs.length + (sizes?.length ?? 0) + Math.ceil(keyBytes / 4);
}

/** What the catalog works with; the segments' own options (segments.ts SegmentsOptions) and the sweep's (sweep.ts) are these and more. */
export interface CatalogOptions {
  readonly config: SegmentConfig;
  /** What manifests are signed with, and must be signed with to be used. */
  readonly key: StateKey;
  readonly store: CapacityStore;
  /** The form the read workers' store reports ETags in (S3: quoted; the embedded store: not). */
  readonly workerEtag: (unquoted: string) => string;
  readonly logger: Pick<Logger, 'warn' | 'info'>;
  readonly observer?: SegmentObserver | undefined;
  readonly now: () => number;
}

export class Catalog {
  readonly #o: CatalogOptions;
  readonly #segments = new Map<string, Segment>();
  /** Runs by their bucket and first chunk key: where a request's segment is looked for. */
  readonly #byFirst = new Map<string, Set<string>>();
  /** Runs by their bucket and any chunk key: what a write of the key makes stale. */
  readonly #byKey = new Map<string, Set<string>>();
  /** Checks of a segment's chunks in flight, by run and chunks covered: requests that arrive meanwhile share them. */
  readonly #checks = new Map<string, Promise<SegmentCheck>>();
  /** Bytes and slices of the known segments. */
  #bytes = 0;
  /** Bytes of the known segments by their chunks' bucket (capacity asks on every trimming pass). */
  readonly #bucketBytes = new Map<string, number>();
  #slices = 0;
  /** Segments the last sweep found in the store that this gateway does not know (the oldest MAX_UNKNOWN_KEPT, oldest first); deleted or learnt ones leave it. */
  #unknown = new Map<string, Unknown>();
  /** Bytes of the unknown segments the last sweep found past the MAX_UNKNOWN_KEPT it kept, by chunks' bucket (approximate until the next). */
  #unkeptBytes = new Map<string, number>();
  /**
   * While a sweep runs: the chunks written and the runs dropped through this gateway since it
   * began, which it learns nothing of (a dropped segment's delete may not have landed yet), up to
   * SWEEP_NOTED of them (past that, it learns nothing more).
   */
  #sinceSweep: { readonly written: Set<string>; readonly dropped: Set<string>; full: boolean } | undefined;
  /** The gateway is closing: evictions and sweeps stop early. */
  closed = false;

  constructor(options: CatalogOptions) {
    this.#o = options;
  }

  /** Whether this gateway knows a segment of `run`. */
  has(run: string): boolean {
    return this.#segments.has(run);
  }

  /** Segments known here and their bytes, for the metrics. */
  get count(): number {
    return this.#segments.size;
  }

  /** Bytes of the segments this gateway knows, all buckets together (the objectcache_segment_bytes gauge). */
  get knownBytes(): number {
    return this.#bytes;
  }

  /**
   * Bytes of the segments of chunks in `bucket` (capacity's DerivedData): those this gateway
   * knows, and those the last sweep found in the store that it does not.
   */
  bytes(bucket: string): number {
    return (this.#bucketBytes.get(bucket) ?? 0) + this.unknownBytes(bucket);
  }

  /**
   * The segment that serves the most of `d`'s first chunks (its chunks from the first on, its
   * layout, its layers within the segment's, its codec), when reading it costs fewer requests than
   * reading those chunks: `chunkReads(m)` is what the chunks' first m would cost. An encoded
   * request (`encoded`: its index, read with a HEAD per chunk) is checked here. A segment whose
   * chunks' ETags are not those its HEADs found is not used, and `heads` checks it afresh (the
   * index was read before the request was admitted, so the segment may be the newer): it is
   * dropped if stale. One whose slice lengths differ from the index at the same versions is dropped.
   */
  find(bucket: string, d: Descriptor, chunkReads: (chunks: number) => number, encoded?: EncodedChunks, heads?: Heads): Found | undefined {
    const runs = this.#byFirst.get(slot(bucket, d.keys[0] as string));
    if (!runs) return undefined;
    const codec = codecOf(encoded);
    let best: { segment: Segment; chunks: number } | undefined;
    for (const run of runs) {
      const segment = this.#segments.get(run) as Segment;
      const m = segment.manifest;
      if (m.codec !== codec || m.layout !== d.layout || m.layers !== d.layers || m.layerBytes !== d.layerBytes || m.first > d.layerStart || m.end < d.layerEnd) continue;
      let chunks = 0;
      while (chunks < m.keys.length && chunks < d.keys.length && m.keys[chunks] === d.keys[chunks]) chunks++;
      if (!best || chunks > best.chunks || (chunks === best.chunks && m.keys.length < best.segment.manifest.keys.length)) best = { segment, chunks };
    }
    if (!best) return undefined;
    const { segment, chunks } = best;
    const m = segment.manifest;
    if (
      encoded &&
      !holdsVersions(
        encoded.etags.slice(0, chunks).map((etag) => ({ etag })),
        m.etags,
      )
    ) {
      if (heads)
        void this.#check(bucket, segment, chunks, heads).catch((error: unknown) =>
          this.#o.logger.warn({ run: segment.run, error }, 'segments: could not check a segment\u2019s chunks'),
        );
      return undefined;
    }
    if (encoded && segment.sizes && !sameSizes(segment.sizes, m, encoded, chunks, d.layerStart, d.layerEnd)) {
      this.#o.observer?.event('stale');
      this.drop(segment.run, `the slice lengths of a chunk of ${bucket} differ from its manifest's`, m.data);
      return undefined;
    }
    // An encoded request's index HEADs carried the writers' CRC32Cs too: the segment's must be theirs.
    const writers = encoded ? writerCheck(m, segment.crcs, encoded.recorded, chunks) : undefined;
    if (writers === 'mismatch') {
      this.#reject(segment.run, bucket, m.data);
      return undefined;
    }
    // A shorter prefix of a segment reads one range per layer unless the rest is cheaper to skip.
    const perLayer = ((m.keys.length - chunks) * m.bytes) / m.keys.length / (m.end - m.first) > SEGMENT_SKIP_BYTES;
    if (perLayer && d.layerEnd - d.layerStart > chunkReads(chunks)) return undefined;
    segment.lastUsed = this.#o.now();
    const verified = writers !== undefined ? writers === 'verified' : this.#o.config.check === 'writes' ? segment.writerVerified : undefined;
    return {
      run: segment.run,
      cover: { chunks, segmentChunks: m.keys.length },
      checked: encoded !== undefined,
      ...(verified !== undefined ? { verified } : {}),
      source: {
        bucket: this.#o.config.bucket,
        key: m.data,
        etag: this.#o.workerEtag(m.dataEtag),
        bytes: m.bytes,
        first: m.first,
        end: m.end,
        chunks: m.keys.length,
        offset: segment.offset,
        crcs: segment.crcs,
        etags: m.etags.slice(0, chunks).map((e) => this.#o.workerEtag(e)),
      },
    };
  }

  /**
   * Whether the chunks a found segment covers still hold the versions it was packed from, and
   * whether their writers recorded its CRC32Cs, by the HEADs `heads` makes (`--segment-check
   * heads`); a stale segment is dropped, and one whose CRC32Cs are not the writers' rejected.
   */
  async current(bucket: string, found: Found, heads: Heads): Promise<SegmentCheck> {
    if (found.verified !== undefined) return found.verified ? 'verified' : 'unverified';
    const segment = this.#segments.get(found.run);
    if (!segment) return 'stale';
    return this.#check(bucket, segment, found.cover.chunks, heads);
  }

  /**
   * HEADs of a segment's first `chunks` chunks against its locked versions and its CRC32Cs; a stale segment
   * is dropped, a segment whose CRC32Cs differ from the writers' rejected.
   */
  #check(bucket: string, segment: Segment, chunks: number, heads: Heads): Promise<SegmentCheck> {
    // Requests of one prefix that arrive while a check of it is in flight share that check: its
    // answers are at most one round trip older than a check of their own would be, and a write
    // through this gateway drops the segment whatever a check in flight says.
    // Per segment object (its manifest's ETag): a run packed again since is checked afresh.
    const id = `${segment.run}\n${segment.manifestEtag}\n${chunks}`;
    let check = this.#checks.get(id);
    if (!check) {
      const keys = segment.manifest.keys.slice(0, chunks);
      check = heads(keys).then((now): SegmentCheck => {
        if (!holdsVersions(now, segment.manifest.etags)) {
          this.#o.observer?.event('stale');
          this.drop(segment.run, `a chunk of ${bucket} changed or went since it was packed`, segment.manifest.data);
          return 'stale';
        }
        const writers = writerCheck(segment.manifest, segment.crcs, recordedOf(now), chunks);
        if (writers === 'mismatch') {
          this.#reject(segment.run, bucket, segment.manifest.data);
          return 'stale';
        }
        return writers;
      });
      this.#checks.set(id, check);
      const forget = (): void => void this.#checks.delete(id);
      check.then(forget, forget);
    }
    return check;
  }

  /**
   * Forgets a segment and deletes it (its manifest first: from then on nobody uses it); with
   * `data`, only while the run's segment is still that data object (not a newer pack of the run).
   */
  drop(run: string, why: string, data?: string): void {
    if (data !== undefined && this.#segments.get(run)?.manifest.data !== data) return;
    const segment = this.#forget(run);
    if (!segment) return;
    this.#noteForSweep('dropped', run);
    this.#o.observer?.event('dropped');
    void this.deleteSegment(segment.manifest, run, segment.manifestEtag).catch((error: unknown) =>
      this.#o.logger.warn({ run, why, error }, 'segments: could not delete a dropped segment'),
    );
  }

  /**
   * The segments of chunks in `bucket` (capacity management orders them among the chunks): those
   * this gateway knows, with their chunks and when last read, and those the last sweep found that
   * it does not, with when they were packed.
   */
  *items(bucket: string): Generator<DerivedItem> {
    for (const s of this.#segments.values()) if (s.manifest.bucket === bucket) yield { id: s.run, bytes: s.manifest.bytes, lastUsed: s.lastUsed, keys: s.manifest.keys };
    for (const u of this.#unknown.values()) if (u.bucket === bucket) yield { id: u.run, bytes: u.bytes, lastUsed: u.packedAt, keys: [] };
  }

  /**
   * Evicts the segments of chunks in `bucket` named in `runs` (capacity management chose them
   * among the chunks, from `items`): those this gateway knows, then those it does not.
   */
  async evict(bucket: string, runs: ReadonlySet<string>): Promise<void> {
    for (const victim of [...this.#segments.values()].filter((s) => s.manifest.bucket === bucket && runs.has(s.run))) {
      if (!this.#forget(victim.run)) continue;
      this.#noteForSweep('dropped', victim.run);
      try {
        await this.deleteSegment(victim.manifest, victim.run, victim.manifestEtag);
        // 'dropped' counts every removal (metrics.ts), as drop() does for the other reasons.
        this.#o.observer?.event('evicted');
        this.#o.observer?.event('dropped');
      } catch (error) {
        this.#o.logger.warn({ run: victim.run, error }, 'segments: could not delete a segment evicted for the budget');
      }
    }
    for (const u of [...this.#unknown.values()].filter((u) => u.bucket === bucket && runs.has(u.run))) {
      if (this.closed) break;
      await this.deleteUnknown(u);
    }
  }

  /** A client wrote or deleted `key` through this gateway: every segment holding it is stale. */
  changed(bucket: string, key: string): void {
    this.#noteForSweep('written', slot(bucket, key));
    const runs = this.#byKey.get(slot(bucket, key));
    if (runs) for (const run of [...runs]) this.drop(run, `${key} was written or deleted`);
  }

  async settle(pack: Pick<Pack, 'run' | 'bucket' | 'stale'>, outcome: Packed | { abandoned: string }): Promise<void> {
    if ('abandoned' in outcome) {
      this.#o.observer?.event('abandoned');
      this.#o.logger.info({ run: pack.run, bucket: pack.bucket, reason: outcome.abandoned }, 'segments: a pack was abandoned');
      return;
    }
    const { manifest, crcs, sizes, writerVerified } = outcome;
    const store = this.#o.store;
    const key = manifestKey(manifest.bucket, pack.run);
    const body = sealManifest(manifest, this.#o.key);
    try {
      let written = await store.put(this.#o.config.bucket, key, body, { ifNoneMatch: true });
      if (written === undefined) {
        // Packed before (another gateway, or before a restart): keep that one if it is current.
        const existing = await store.get(this.#o.config.bucket, key, MAX_MANIFEST_BYTES);
        const parsed = existing ? this.open(existing.body, pack.run) : undefined;
        const kept = parsed?.manifest;
        // The one there is kept only if it is of the same versions and holds what this pack read
        // (the same CRC32Cs): else it is replaced.
        if (
          existing &&
          parsed &&
          kept &&
          sameRun(kept, manifest) &&
          kept.etags.length === manifest.etags.length &&
          kept.etags.every((e, i) => e === manifest.etags[i]) &&
          sameValues(parsed.crcs, crcs)
        ) {
          await store.delete(this.#o.config.bucket, manifest.data);
          // Kept, but a chunk written meanwhile makes it stale as it makes this pack's.
          if (pack.stale) await this.deleteSegment(parsed.manifest, pack.run, existing.etag);
          else this.learn(pack.run, parsed.manifest, parsed.crcs, parsed.sizes, existing.etag, writerVerified);
          return;
        }
        written = existing ? await store.put(this.#o.config.bucket, key, body, { ifMatch: existing.etag }) : undefined;
        if (written === undefined) {
          await store.delete(this.#o.config.bucket, manifest.data);
          return;
        }
        if (parsed && parsed.manifest.data !== manifest.data) await store.delete(this.#o.config.bucket, parsed.manifest.data);
      }
      // A chunk written while the manifest was being written: the pack is stale already.
      if (pack.stale) {
        await this.deleteSegment(manifest, pack.run, written);
        return;
      }
      this.learn(pack.run, manifest, crcs, sizes, written, writerVerified);
      this.#o.observer?.event('packed');
    } catch (error) {
      this.#o.logger.warn({ run: pack.run, error }, 'segments: could not write a packed segment\u2019s manifest');
      await store.delete(this.#o.config.bucket, manifest.data).catch(() => {});
    }
  }

  learn(run: string, manifest: Manifest, crcs: Uint32Array, sizes: Uint32Array | undefined, manifestEtag: string, writerVerified: boolean): void {
    this.#forget(run);
    this.#unknown.delete(run);
    const held = heldOf(manifest, crcs, sizes);
    // Kept without its encoded checksums and lengths: they are held decoded.
    const { sizes: _, ...rest } = manifest;
    const kept: Manifest = { ...rest, crcs: '' };
    this.#segments.set(run, { run, manifest: kept, manifestEtag, crcs, offset: offsets(manifest, sizes), sizes, held, writerVerified, lastUsed: this.#o.now() });
    this.#bytes += manifest.bytes;
    this.#bucketBytes.set(manifest.bucket, (this.#bucketBytes.get(manifest.bucket) ?? 0) + manifest.bytes);
    this.#slices += held;
    add(this.#byFirst, slot(manifest.bucket, manifest.keys[0] as string), run);
    for (const key of manifest.keys) add(this.#byKey, slot(manifest.bucket, key), run);
    // Past --max-segment-bytes or MAX_KNOWN_SLICES, the least recently used others go (the map
    // keeps insertion order; use does not reorder it, so the oldest by lastUsed is looked for).
    while (this.#bytes > this.#o.config.maxBytes || this.#slices > MAX_KNOWN_SLICES) {
      let coldest: Segment | undefined;
      for (const s of this.#segments.values()) if (s.run !== run && (!coldest || s.lastUsed < coldest.lastUsed)) coldest = s;
      if (!coldest) break;
      this.#o.observer?.event('evicted');
      this.drop(coldest.run, 'past --max-segment-bytes');
    }
  }

  #forget(run: string): Segment | undefined {
    const segment = this.#segments.get(run);
    if (!segment) return undefined;
    this.#segments.delete(run);
    this.#bytes -= segment.manifest.bytes;
    const left = (this.#bucketBytes.get(segment.manifest.bucket) ?? 0) - segment.manifest.bytes;
    if (left > 0) this.#bucketBytes.set(segment.manifest.bucket, left);
    else this.#bucketBytes.delete(segment.manifest.bucket);
    this.#slices -= segment.held;
    const m = segment.manifest;
    remove(this.#byFirst, slot(m.bucket, m.keys[0] as string), run);
    for (const key of m.keys) remove(this.#byKey, slot(m.bucket, key), run);
    return segment;
  }

  /**
   * Deletes a segment: its manifest first (from then on nobody uses it) if it is still the one
   * with `manifestEtag` (another gateway may have packed the run again since, under the same
   * name), then its data object (named by no other manifest: each pack's name is its own).
   */
  async deleteSegment(manifest: Manifest, run: string, manifestEtag: string): Promise<void> {
    await this.#o.store.deleteVersion(this.#o.config.bucket, manifestKey(manifest.bucket, run), manifestEtag);
    await this.#o.store.delete(this.#o.config.bucket, manifest.data);
  }

  /**
   * A manifest read from the store (parseManifest), or undefined; one not signed with the state key
   * is counted (`rejected`) and logged: no gateway holding this key wrote it.
   */
  open(body: Buffer, run: string): Exclude<ReturnType<typeof parseManifest>, 'unsigned'> {
    const parsed = parseManifest(body, this.#o.key);
    if (parsed !== 'unsigned') return parsed;
    this.#o.observer?.event('rejected');
    this.#o.logger.warn(
      { run },
      'segments: a manifest in the segment bucket is not signed with this gateway\u2019s state key; not used (is OBJECTCACHE_STATE_KEY the same on every gateway?)',
    );
    return undefined;
  }

  /** A segment whose CRC32Cs are not those its chunks' writers recorded: dropped (while it is still `data`'s) and counted. */
  #reject(run: string, bucket: string, data?: string): void {
    this.#o.observer?.event('rejected');
    this.#o.logger.warn({ run, bucket }, 'segments: a packed segment\u2019s CRC32Cs are not those its chunks\u2019 writers recorded; dropped, and its chunks served instead');
    this.drop(run, 'its CRC32Cs are not those its chunks\u2019 writers recorded', data);
  }

  /** A sweep begins: from now on it notes the chunks written and the runs dropped (#sinceSweep). */
  beginSweep(): void {
    this.#sinceSweep = { written: new Set(), dropped: new Set(), full: false };
  }

  endSweep(): void {
    this.#sinceSweep = undefined;
  }

  /** Notes a chunk written or a run dropped while a sweep runs (#sinceSweep). */
  #noteForSweep(kind: 'written' | 'dropped', entry: string): void {
    const since = this.#sinceSweep;
    if (!since || since.full) return;
    if (since.written.size + since.dropped.size >= SWEEP_NOTED) since.full = true;
    else since[kind].add(entry);
  }

  /** What a sweep found in the store that this gateway does not know: the oldest kept (less any learnt meanwhile), and the others' bytes by chunks' bucket. */
  takeStock(unknown: readonly Unknown[], unkept: Map<string, number>): void {
    // Segments learnt during the sweep are not unknown any more.
    this.#unknown = new Map(unknown.filter((u) => !this.#segments.has(u.run)).map((u) => [u.run, u]));
    this.#unkeptBytes = unkept;
  }

  /** The segments the last sweep found that this gateway does not know, oldest first. */
  unknowns(): Unknown[] {
    return [...this.#unknown.values()];
  }

  /** Bytes of the segments in the store this gateway does not know, of chunks in `bucket` (all buckets when absent). */
  unknownBytes(bucket?: string): number {
    let total = 0;
    for (const [b, bytes] of this.#unkeptBytes) if (bucket === undefined || b === bucket) total += bytes;
    for (const u of this.#unknown.values()) if (bucket === undefined || u.bucket === bucket) total += u.bytes;
    return total;
  }

  /**
   * Deletes a segment this gateway does not know: its manifest only while it is the one listed
   * (not a newer pack of the run), then its data objects. A gateway reading it meanwhile reads
   * those layers from the chunks (read-ahead.ts) and drops it. Resolves to whether it was deleted.
   */
  async deleteUnknown(u: Unknown): Promise<boolean> {
    // Once only, and never once learnt (learn forgets it) or taken stock of afresh.
    if (this.#unknown.get(u.run) !== u) return false;
    this.#unknown.delete(u.run);
    const bucket = this.#o.config.bucket;
    try {
      const outcome = await this.#o.store.deleteVersion(bucket, manifestKey(u.bucket, u.run), u.manifestEtag);
      // Changed: a newer pack of the run. Gone: deleted meanwhile; the data objects listed may be a
      // newer pack's, not yet named, and are left to the sweep's age rule.
      if (outcome !== 'deleted') return false;
      for (const key of u.data) await this.#o.store.delete(bucket, key);
      this.#o.observer?.event('evicted');
      return true;
    } catch (error) {
      this.#o.logger.warn({ run: u.run, error }, 'segments: could not delete a segment this gateway did not know');
      return false;
    }
  }

  /**
   * Learns a segment the sweep found: its manifest as listed (the same ETag), of exactly the run
   * its name says, naming a data object listed with it, within --max-segment-bytes and the index's
   * bound (it never evicts one this gateway knows). Not a run dropped, nor one with a chunk
   * written, through this gateway since the sweep began (the next sweep tries again). Resolves to
   * whether it was learnt.
   */
  async learnUnknown(u: Unknown, packing: (run: string) => boolean): Promise<boolean> {
    let found: Awaited<ReturnType<CapacityStore['get']>>;
    try {
      found = await this.#o.store.get(this.#o.config.bucket, manifestKey(u.bucket, u.run), MAX_MANIFEST_BYTES);
    } catch (error) {
      this.#o.logger.warn({ run: u.run, error }, 'segments: could not read the manifest of a segment in the store');
      return false;
    }
    const parsed = found && found.etag === u.manifestEtag ? this.open(found.body, u.run) : undefined;
    if (!found || !parsed) return false;
    const m = parsed.manifest;
    if (m.bucket !== u.bucket || runName(m.bucket, m, m.first, m.end, m.codec) !== u.run || !u.data.includes(m.data)) return false;
    if (this.closed || this.#unknown.get(u.run) !== u || this.#segments.has(u.run) || packing(u.run)) return false;
    const since = this.#sinceSweep;
    if (!since || since.full || since.dropped.has(u.run) || m.keys.some((key) => since.written.has(slot(m.bucket, key)))) return false;
    if (this.#bytes + m.bytes > this.#o.config.maxBytes || this.#slices + heldOf(m, parsed.crcs, parsed.sizes) > MAX_KNOWN_SLICES) return false;
    // Learnt only where every read checks its chunks (heads), which checks their writers' CRC32Cs too.
    this.learn(u.run, m, parsed.crcs, parsed.sizes, found.etag, false);
    this.#o.observer?.event('discovered');
    return true;
  }
}

function add(map: Map<string, Set<string>>, key: string, run: string): void {
  let set = map.get(key);
  if (!set) map.set(key, (set = new Set()));
  set.add(run);
}

function remove(map: Map<string, Set<string>>, key: string, run: string): void {
  const set = map.get(key);
  if (!set) return;
  set.delete(run);
  if (set.size === 0) map.delete(key);
}
