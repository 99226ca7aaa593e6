/**
 * Packed segments (docs/segments.md): a run of chunks the gateway keeps as one object in the
 * order a layerwise GET sends it (layer 0 of every chunk, then layer 1, ...), so that the next
 * read of the same prefix is a few large sequential reads of one object instead of a range read
 * per chunk per layer group.
 *
 * - Packing costs no extra read: a layerwise GET served from the chunks writes the segment from
 *   the frames it is sending (pack.ts Pack, fed by the descriptor GET through
 *   gateway/descriptor-get/packed-segments.ts), once the run has been read
 *   `--segment-after-reads` times, and never waits for the store: the layers whose frames went
 *   out while the store was `--segment-pack-queue-bytes` behind are read again from the chunks
 *   after the request (or 5 s after falling behind, if it lasts longer), at the store's pace.
 * - Segments outlive the gateway: a run that becomes due and is unknown here is first looked for
 *   in the store (discover: its manifest's name is the run's), so another gateway's segment, or
 *   this one's before a restart, is served instead of packed again.
 * - The manifest is written last, so a pack cut short (crash, error, a chunk rewritten meanwhile)
 *   leaves nothing usable: a data object no manifest names is never read.
 * - Encoded chunks (docs/compression.md) are packed as stored, each slice as long as its index
 *   says (the manifest's `sizes`); a request naming `codecs` has read its chunks' index with a
 *   HEAD per chunk already, so those ETags are its segment's check (find).
 * - Chunks stay the source of truth. A segment is used only while every chunk it covers still
 *   has the version (ETag) it was packed from: with `--segment-check heads` (the default) each
 *   read asks the store (one HEAD per covered chunk, sent while the first layer is read); a
 *   write or delete through this gateway drops the segments of its key at once, either way.
 * - A segment is served only as what its chunks' writers recorded: its manifest must carry the
 *   MAC of the gateways' state key (gateway/common/state-key.ts), and its slices' CRC32Cs must be those
 *   the chunks' writers recorded (`oc-layer-crc32c`, in the HEADs' answers; at pack time, in the
 *   reads'). One that differs is dropped and counted (`rejected`); where a writer recorded none,
 *   the stream's END says `verified: false`.
 * - Segments are derived data: capacity management counts them against their bucket's budget and
 *   evicts them in the chunks' order, each just before the least recently used chunk it copies (gateway/common/derived-data.ts).
 *
 * This file is the facade the server makes (Segments): which runs are due, looking for them in the
 * store, and starting packs. The rest is by concern: manifest.ts (the manifest, its signature and
 * checks), catalog.ts (what this gateway knows: lookup, checks, eviction), pack.ts (packing a run),
 * sweep.ts (the hourly sweep), request-segments.ts (one descriptor GET's view: its plan and pack).
 */
import type { Descriptor } from '../../schemas/descriptor.js';
import type { DerivedItem } from '../common/derived-data.js';
import type { EncodedChunks } from '../descriptor-get/encoded-chunks.js';
import type { PackedSegments, ReadRest, RequestSegments, SegmentRequest } from '../descriptor-get/packed-segments.js';
import type { Backend } from '../s3/backend.js';
import { codecOf, manifestKey, MAX_MANIFEST_BYTES, holdsVersions, recordedOf, runBytes, runName, sameRun, writerCheck, type Heads } from './manifest.js';
import { Catalog, MAX_KNOWN_SLICES, type CatalogOptions, type Found, type SegmentCheck } from './catalog.js';
import { Pack, type Packed } from './pack.js';
import { SWEEP_AGE_MS, Sweeper } from './sweep.js';
import { checkSignal, SegmentsOfRequest } from './request-segments.js';

/** The largest segment: what one S3 PutObject may store. */
const MAX_SEGMENT_BYTES = 5 * 1024 ** 3;
/** A run found to have no segment in the store is not looked for again for this long (discover). */
const DISCOVER_AGAIN_MS = 60_000;
/** Runs whose reads are counted (the least recently read are forgotten first). */
const TRACKED_RUNS = 10_000;

/** A run's segment looked for in the store: `written` once a chunk of it is written meanwhile. */
interface Lookup {
  readonly bucket: string;
  readonly keys: ReadonlySet<string>;
  written: boolean;
  done: Promise<void>;
}

/** Sets `key` as the most recent entry of `map`, forgetting the least recent past TRACKED_RUNS. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > TRACKED_RUNS) map.delete(map.keys().next().value as string);
}

export interface SegmentsOptions extends Omit<CatalogOptions, 'now'> {
  readonly now?: () => number;
  /** Sweep the segment bucket now and then (default true; `sweep()` can always be called). */
  readonly sweep?: boolean;
  /**
   * Where a descriptor GET's segment chunks are checked (HEADs): the gateway's own connections,
   * shared by every request of the run that arrives meanwhile (`current`), so not held in one
   * key's share.
   */
  readonly checks: Pick<Backend, 'heads'>;
  /** Bounds each such check (the backend timeout). */
  readonly checkTimeoutMs: number;
}

export class Segments implements PackedSegments {
  readonly #o: SegmentsOptions;
  readonly #now: () => number;
  readonly #catalog: Catalog;
  readonly #sweeper: Sweeper;
  /** Reads per run (least recently read first). */
  readonly #reads = new Map<string, number>();
  readonly #packs = new Map<string, Pack>();
  /** Runs being looked for in the store (discover), and when a run was last found to have no segment there. */
  readonly #lookups = new Map<string, Lookup>();
  readonly #missing = new Map<string, number>();
  #bucketReady: Promise<void> | undefined;

  constructor(options: SegmentsOptions) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
    const { config, key, store, workerEtag, logger, observer } = options;
    this.#catalog = new Catalog({ config, key, store, workerEtag, logger, observer, now: this.#now });
    this.#sweeper = new Sweeper({
      config,
      store,
      logger,
      observer,
      now: this.#now,
      catalog: this.#catalog,
      packing: (run) => this.#packs.has(run),
      learnt: (run) => void this.#missing.delete(run),
      timer: options.sweep !== false,
    });
  }

  /**
   * Deletes the data objects of the segment bucket that no manifest names and that are older
   * than `olderThanMs`: what a crash between a pack's two writes, or a delete that failed, leaves.
   * Lists the bucket (one page per 1,000 objects, holding one run's objects at a time) and GETs
   * the manifest of each run that has more than one data object; never deletes a data object a
   * manifest names. It also takes stock of the segments this gateway does not know (another
   * gateway's, or this one's before a restart): they count against their bucket's budget from
   * then on (`bytes`) and can be evicted for it (`evict`); and while all the segments in the
   * store pass `--max-segment-bytes`, the oldest of them are deleted. Resolves to the data
   * objects deleted as unnamed. One sweep at a time.
   */
  sweep(olderThanMs = SWEEP_AGE_MS): Promise<number> {
    return this.#sweeper.sweep(olderThanMs);
  }

  /**
   * A descriptor GET about to be admitted (PackedSegments): counts it (layerwise) and, once its
   * run is due, looks for the run's segment in the store.
   */
  async request(r: SegmentRequest): Promise<RequestSegments> {
    const { bucket, descriptor, encoded } = r;
    const due = r.layerwise ? this.counted(bucket, descriptor, encoded) : undefined;
    // The HEADs of a segment's chunks (discovery with --segment-check writes, and the checks of reads).
    const heads: Heads = (keys) => this.#o.checks.heads(bucket, keys, checkSignal(this.#o.checkTimeoutMs), false);
    if (due !== undefined) await this.discover(bucket, descriptor, due, heads, encoded);
    return new SegmentsOfRequest(this, r, due, heads);
  }

  /** Bytes a GET served from a segment may have read but not sent (--segment-read-ahead-bytes). */
  get readAheadBytes(): number {
    return this.#o.config.readAheadBytes;
  }

  /** Segments known here and their bytes, for the metrics. */
  get count(): number {
    return this.#catalog.count;
  }

  /** Bytes of the segments this gateway knows, all buckets together (the objectcache_segment_bytes gauge). */
  get knownBytes(): number {
    return this.#catalog.knownBytes;
  }

  /**
   * Bytes of the segments of chunks in `bucket` (capacity's DerivedData): those this gateway
   * knows, and those the last sweep found in the store that it does not.
   */
  bytes(bucket: string): number {
    return this.#catalog.bytes(bucket);
  }

  /** The segment that serves the most of `d`'s first chunks, when it costs fewer requests (Catalog.find). */
  find(bucket: string, d: Descriptor, chunkReads: (chunks: number) => number, encoded?: EncodedChunks, heads?: Heads): Found | undefined {
    return this.#catalog.find(bucket, d, chunkReads, encoded, heads);
  }

  /** Whether a found segment's chunks are still those it was packed from, and their writers' CRC32Cs its own (Catalog.current). */
  current(bucket: string, found: Found, heads: Heads): Promise<SegmentCheck> {
    return this.#catalog.current(bucket, found, heads);
  }

  /** A descriptor GET was served (in part) from a segment. */
  served(): void {
    this.#o.observer?.event('served');
  }

  /** Forgets a segment and deletes it (Catalog.drop). */
  drop(run: string, why: string, data?: string): void {
    this.#catalog.drop(run, why, data);
  }

  /** A client wrote or deleted `key` through this gateway: every segment holding it is stale, and so is any pack of it. */
  changed(bucket: string, key: string): void {
    this.#catalog.changed(bucket, key);
    for (const pack of this.#packs.values()) if (pack.bucket === bucket && pack.holds(key)) pack.abandon(`${key} was written or deleted while it was being packed`);
    for (const lookup of this.#lookups.values()) if (lookup.bucket === bucket && lookup.keys.has(key)) lookup.written = true;
  }

  /** The segments of chunks in `bucket`, for capacity management to order among the chunks (Catalog.items). */
  items(bucket: string): Iterable<DerivedItem> {
    return this.#catalog.items(bucket);
  }

  /** Evicts the segments of chunks in `bucket` named in `runs`, for capacity management (Catalog.evict). */
  evict(bucket: string, runs: ReadonlySet<string>): Promise<void> {
    return this.#catalog.evict(bucket, runs);
  }

  /**
   * Counts a layerwise GET (of encoded chunks: `encoded`, their index); the run's name once it has
   * been read `--segment-after-reads` times and is big enough and small enough to be packed (for
   * `discover` and `packFor`), else undefined.
   */
  counted(bucket: string, d: Descriptor, encoded?: EncodedChunks): string | undefined {
    const { afterReads, minBytes, maxBytes, buckets } = this.#o.config;
    if (buckets !== undefined && !buckets.has(bucket)) return undefined;
    const slices = (d.layerEnd - d.layerStart) * d.chunks * (codecOf(encoded) === 'raw' ? 1 : 2);
    // The cheap checks first: a run that can never be packed is not named (a hash of its keys) or counted.
    if (slices > MAX_KNOWN_SLICES) return undefined;
    const bytes = runBytes(d, encoded);
    if (bytes < minBytes || bytes > Math.min(MAX_SEGMENT_BYTES, maxBytes)) return undefined;
    const run = runName(bucket, d, d.layerStart, d.layerEnd, codecOf(encoded));
    const reads = (this.#reads.get(run) ?? 0) + 1;
    remember(this.#reads, run, reads);
    return reads >= afterReads ? run : undefined;
  }

  /**
   * Looks in the store for the segment of a due run this gateway does not know (packed by another
   * gateway in front of the same store, or by this one before a restart), and learns it when its
   * manifest is sound and names exactly this run: one GET of the manifest, at most once per
   * DISCOVER_AGAIN_MS for a run that has none. With `--segment-check writes` its chunks are checked
   * once (HEADs) before it is used, since writes before this gateway started were not seen; with
   * `heads` every read checks them anyway. Never fails: a lookup that goes wrong leaves the run to
   * be read from its chunks (and packed).
   */
  async discover(bucket: string, d: Descriptor, run: string, heads: Heads, encoded?: EncodedChunks): Promise<void> {
    if (this.#catalog.has(run) || this.#packs.has(run)) return;
    const missing = this.#missing.get(run);
    if (missing !== undefined && this.#now() - missing < DISCOVER_AGAIN_MS) return;
    let lookup = this.#lookups.get(run);
    if (!lookup) {
      const state: Lookup = { bucket, keys: new Set(d.keys), written: false, done: Promise.resolve() };
      state.done = this.#lookup(bucket, d, run, state, heads, codecOf(encoded))
        .catch((error: unknown) => this.#o.logger.warn({ run, error }, 'segments: could not look for a packed segment in the store'))
        .finally(() => this.#lookups.delete(run));
      this.#lookups.set(run, (lookup = state));
    }
    await lookup.done;
  }

  async #lookup(bucket: string, d: Descriptor, run: string, state: Lookup, heads: Heads, codec: string): Promise<void> {
    const found = await this.#o.store.get(this.#o.config.bucket, manifestKey(bucket, run), MAX_MANIFEST_BYTES);
    const parsed = found ? this.#catalog.open(found.body, run) : undefined;
    const m = parsed?.manifest;
    const same = m !== undefined && sameRun(m, { bucket, keys: d.keys, layout: d.layout, layers: d.layers, layerBytes: d.layerBytes, first: d.layerStart, end: d.layerEnd, codec });
    if (!found || !parsed || !same) {
      remember(this.#missing, run, this.#now());
      return;
    }
    // Without a HEAD at each read (writes), its chunks are checked once now: their versions, and
    // that their writers recorded its CRC32Cs (whether all did is what later reads say of it).
    let writerVerified = false;
    if (this.#o.config.check === 'writes') {
      const now = await heads(parsed.manifest.keys);
      const writers = holdsVersions(now, parsed.manifest.etags) ? writerCheck(parsed.manifest, parsed.crcs, recordedOf(now), parsed.manifest.keys.length) : 'stale';
      if (writers === 'stale' || writers === 'mismatch') {
        this.#o.observer?.event(writers === 'stale' ? 'stale' : 'rejected');
        await this.#catalog.deleteSegment(parsed.manifest, run, found.etag);
        return;
      }
      writerVerified = writers === 'verified';
    }
    // A write through this gateway while the manifest was on its way: not learnt (a pack of it starts over).
    if (this.#catalog.has(run) || this.#packs.has(run) || state.written) return;
    this.#missing.delete(run);
    this.#catalog.learn(run, parsed.manifest, parsed.crcs, parsed.sizes, found.etag, writerVerified);
    this.#o.observer?.event('discovered');
  }

  /**
   * Starts packing a due run (`counted`) unless a segment or pack of it exists, or
   * --max-segment-packs are being written. The caller feeds the pack its frames.
   */
  packFor(
    bucket: string,
    d: Descriptor,
    run: string,
    rest: ReadRest,
    versions: () => readonly (string | undefined)[],
    verified: () => boolean,
    framesChecked: boolean,
    encoded?: EncodedChunks,
  ): Pack | undefined {
    if (this.#catalog.has(run) || this.#packs.has(run) || this.#packs.size >= this.#o.config.maxPacks) return undefined;
    const pack: Pack = new Pack({
      run,
      bucket,
      descriptor: d,
      encoded,
      bytes: runBytes(d, encoded),
      store: this.#o.store,
      segmentBucket: this.#o.config.bucket,
      ready: () =>
        (this.#bucketReady ??= this.#o.store.ensureBucket(this.#o.config.bucket).catch((error: unknown) => {
          this.#bucketReady = undefined;
          throw error;
        })),
      done: (outcome): Promise<void> => this.#packed(pack, outcome),
      queueBytes: this.#o.config.packQueueBytes,
      copyFrames: this.#o.config.packFrom === 'frames' && framesChecked,
      rest,
      reread: () => this.#o.observer?.event('reread'),
      versions,
      verified,
    });
    this.#packs.set(run, pack);
    return pack;
  }

  async #packed(pack: Pack, outcome: Packed | { abandoned: string }): Promise<void> {
    try {
      await this.#catalog.settle(pack, outcome);
    } finally {
      // Only now: a write of one of its chunks until here marks the pack stale (changed()).
      this.#packs.delete(pack.run);
    }
  }

  /** Ends every pack (the gateway is closing): none leaves a manifest. */
  close(): void {
    this.#catalog.closed = true;
    this.#sweeper.close();
    for (const pack of this.#packs.values()) pack.abandon('the gateway is closing');
  }
}
