/**
 * Packed segments (docs/segments.md): a run of chunks the gateway keeps as one object in the
 * order a layerwise GET sends it (layer 0 of every chunk, then layer 1, ...), so that the next
 * read of the same prefix is a few large sequential reads of one object instead of a range read
 * per chunk per layer group.
 *
 * - Packing costs no extra read: a layerwise GET served from the chunks writes the segment from
 *   the frames it is sending (Pack, fed by serve-descriptor-get.ts), once the run has been read
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
 *   evicts them before any chunk (gateway/capacity/capacity.ts, DerivedData).
 */
import { createHash, randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { PassThrough } from 'node:stream';
import type { Descriptor } from '../../schemas/descriptor.js';
import type { Layout } from '../../schemas/layouts.js';
import { unquoted, type CapacityStore, type ListedObject } from '../stores/capacity-store.js';
import type { Logger } from '../common/logger.js';
import { SEGMENT_SKIP_BYTES } from '../threads/protocol.js';
import { CODEC_NAME, RAW_CODEC } from '../../schemas/encoded-chunk.js';
import { decodeLayerCrcs, LAYER_CRC_META } from '../../schemas/integrity.js';
import type { StateKey } from '../common/state-key.js';
import type { TaskRead } from '../descriptor-get/read-ahead.js';
import type { EncodedChunks } from '../descriptor-get/encoded-chunks.js';
import type { SegmentSource } from '../descriptor-get/segment-source.js';
import { layoutOf, planFromSegment, type SegmentCover, type Slices } from '../descriptor-get/read-plan.js';
import type { PackedSegments, PackRequest, ReadRest, RequestSegments, SegmentPack, SegmentPlan, SegmentRequest } from '../descriptor-get/packed-segments.js';
import type { Backend } from '../s3/backend.js';
import type { SegmentConfig } from '../common/config.js';
import type { SegmentObserver } from '../common/observers.js';

/** The largest segment: what one S3 PutObject may store. */
const MAX_SEGMENT_BYTES = 5 * 1024 ** 3;
/** A store that takes nothing of a pack for this long has it abandoned. */
const PACK_STALL_MS = 30_000;
/** A pack that fell behind its read starts reading the rest from the chunks this long after, if the read lasts that long. */
const REST_AFTER_MS = 5_000;
/**
 * A data object no manifest names is deleted by a sweep once it is this old: a pack's upload
 * completes moments before its manifest is written, whichever gateway packs it.
 */
const SWEEP_AGE_MS = 60 * 60 * 1000;
/** Sweeps of the segment bucket: the first a minute after start, then this often. */
const SWEEP_EVERY_MS = 60 * 60 * 1000;
const FIRST_SWEEP_MS = 60 * 1000;
/**
 * Segments in the store that this gateway does not know, as a sweep found them, kept for eviction
 * (the oldest first); their bytes count whatever their number.
 */
const MAX_UNKNOWN_KEPT = 10_000;
/** How often a pack waiting for the store looks at what it has taken. */
const ROOM_POLL_MS = 50;
/** A run found to have no segment in the store is not looked for again for this long (discover). */
const DISCOVER_AGAIN_MS = 60_000;
/** Runs whose reads are counted (the least recently read are forgotten first). */
const TRACKED_RUNS = 10_000;
/**
 * Slices of all the segments a gateway keeps, together: each is a CRC32C held in memory (4 bytes)
 * and written in a manifest, and an encoded one its length too (it counts twice), so this bounds
 * both (64 MiB). A run with more is not packed. The chunks' keys and ETags count against it too,
 * in 4-byte units (#learn), so what the index of segments holds stays about 64 MiB.
 */
const MAX_KNOWN_SLICES = 16 * 1024 * 1024;
/**
 * The largest manifest read: a run the index can hold (MAX_KNOWN_SLICES 4-byte units of CRC32Cs,
 * slice lengths, keys and ETags) comes to under 200 MiB of JSON and base64; no gateway writes a
 * larger one, and a larger one is not read (nor used).
 */
const MAX_MANIFEST_BYTES = 256 * 1024 * 1024;
/** Chunks written and runs dropped a sweep keeps track of while it runs (#sinceSweep). */
const SWEEP_NOTED = 100_000;


/** What a manifest (`<bucket>/<run>.json` in the segment bucket) records; JSON on the store. */
export interface Manifest {
  readonly objectcache: 'segment';
  readonly version: 1;
  /** The bucket of the chunks. */
  readonly bucket: string;
  readonly keys: readonly string[];
  /** Each chunk's ETag (unquoted) when it was packed. */
  readonly etags: readonly string[];
  readonly layout: Layout;
  readonly layers: number;
  readonly layerBytes: number;
  /** Layers held, [first, end). */
  readonly first: number;
  readonly end: number;
  /**
   * `raw`: raw chunks, each slice `layerBytes` in KV_L2TD form. Otherwise the chunks' codec
   * (docs/compression.md): each slice is the encoded slice as stored, of the length `sizes` gives.
   */
  readonly codec: string;
  /** Encoded only: every slice's length in segment order (layer-major), little-endian uint32s in base64. */
  readonly sizes?: string;
  /** The data object's key in the segment bucket, its ETag (unquoted) and size. */
  readonly data: string;
  readonly dataEtag: string;
  readonly bytes: number;
  /** CRC32C of every slice in segment order (layer-major), little-endian uint32s in base64. */
  readonly crcs: string;
  readonly packedAt: string;
}

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
  /** Against MAX_KNOWN_SLICES (#learn): its slices' CRC32Cs and lengths, keys and ETags, in 4-byte units. */
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
interface Unknown {
  readonly run: string;
  /** Its chunks' bucket. */
  readonly bucket: string;
  readonly manifestEtag: string;
  /** When its manifest was written (ms since the epoch): the oldest go first. */
  readonly packedAt: number;
  readonly data: readonly string[];
  readonly bytes: number;
}

/** A run's segment looked for in the store: `written` once a chunk of it is written meanwhile. */
interface Lookup {
  readonly bucket: string;
  readonly keys: ReadonlySet<string>;
  written: boolean;
  done: Promise<void>;
}

/** The HEADs of chunks (the store's answers, in order, with their user metadata; undefined for a chunk that is gone). */
export type Heads = (keys: readonly string[]) => Promise<readonly ({ readonly etag: string | undefined; readonly meta: Readonly<Record<string, string>> } | undefined)[]>;

const slot = (bucket: string, key: string): string => `${bucket}\n${key}`;

/** Whether every chunk HEAD found is there with the ETag (unquoted) its segment was packed from. */
function pinned(heads: readonly ({ readonly etag: string | undefined } | undefined)[], etags: readonly string[]): boolean {
  return heads.every((head, i) => head?.etag !== undefined && unquoted(head.etag) === etags[i]);
}

/**
 * How a segment's CRC32Cs compare with those its first `chunks` chunks' writers recorded
 * (`recorded`: each chunk's `oc-layer-crc32c`, by prefix position): all recorded and equal, some
 * not recorded and the rest equal, or one different.
 */
function writerCheck(m: Manifest, crcs: Uint32Array, recorded: readonly (string | undefined)[], chunks: number): 'verified' | 'unverified' | 'mismatch' {
  let all = true;
  const n = m.keys.length;
  for (let c = 0; c < chunks; c++) {
    const expected = decodeLayerCrcs(recorded[c], m.layers);
    if (!expected) {
      all = false;
      continue;
    }
    for (let layer = m.first; layer < m.end; layer++) if (crcs[(layer - m.first) * n + c] !== expected[layer]) return 'mismatch';
  }
  return all ? 'verified' : 'unverified';
}

/** Each HEAD's recorded CRC32Cs (`oc-layer-crc32c`). */
function recordedOf(heads: Awaited<ReturnType<Heads>>): (string | undefined)[] {
  return heads.map((head) => head?.meta[LAYER_CRC_META]);
}

/** Whether a manifest is of exactly the run `run` describes (its chunks, layout, layers and codec). */
function sameRun(m: Manifest, run: Pick<Manifest, 'bucket' | 'keys' | 'layout' | 'layers' | 'layerBytes' | 'first' | 'end' | 'codec'>): boolean {
  return m.codec === run.codec && m.bucket === run.bucket && m.layout === run.layout && m.layers === run.layers && m.layerBytes === run.layerBytes && m.first === run.first && m.end === run.end && m.keys.length === run.keys.length && m.keys.every((key, i) => key === run.keys[i]);
}

/** Sets `key` as the most recent entry of `map`, forgetting the least recent past TRACKED_RUNS. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > TRACKED_RUNS) map.delete(map.keys().next().value as string);
}

/**
 * What a known segment holds in the index, in 4-byte units (against MAX_KNOWN_SLICES): a CRC32C
 * per slice, an encoded slice's length, and the chunks' keys (held twice: the manifest's, and the
 * index by key) and ETags, so long keys count too.
 */
function heldOf(manifest: Manifest, crcs: Uint32Array, sizes: Uint32Array | undefined): number {
  const keyBytes = manifest.keys.reduce((n, key, i) => n + 2 * key.length + (manifest.etags[i] as string).length, 0);
  return crcs.length + (sizes?.length ?? 0) + Math.ceil(keyBytes / 4);
}

/**
 * A run's name: the same chunks, layout and layers always give the same name, whichever gateway
 * packs it (so a second pack of a run finds the first one's manifest).
 */
function runName(bucket: string, d: Pick<Descriptor, 'keys' | 'layout' | 'layers' | 'layerBytes'>, first: number, end: number, codec: string): string {
  return createHash('sha256').update(JSON.stringify([bucket, d.layout, d.layers, d.layerBytes, first, end, codec, d.keys])).digest('hex');
}

/**
 * The codec a segment of a request's chunks holds: `raw` for raw chunks, whether the request names
 * `codecs` (its index says `none`) or not, since their slices are the same bytes; else the chunks'.
 */
function codecOf(encoded: EncodedChunks | undefined): string {
  return encoded === undefined || encoded.codec === RAW_CODEC ? 'raw' : encoded.codec;
}

/** Payload bytes of a request's delivered layers as a segment holds them (no segment tables). */
function runBytes(d: Descriptor, encoded: EncodedChunks | undefined): number {
  if (encoded === undefined) return (d.layerEnd - d.layerStart) * d.chunks * d.layerBytes;
  let bytes = 0;
  for (const sizes of encoded.sliceBytes) for (let layer = d.layerStart; layer < d.layerEnd; layer++) bytes += sizes[layer] as number;
  return bytes;
}

/**
 * Byte offset of (layer, chunk)'s slice in a segment: raw slices are all `layerBytes`; encoded
 * ones (`sizes`, in segment order) each its own length, so each layer's start is summed once.
 */
function offsets(m: Manifest, sizes: Uint32Array | undefined): (layer: number, chunk: number) => number {
  const n = m.keys.length;
  if (!sizes) return (layer, chunk) => ((layer - m.first) * n + chunk) * m.layerBytes;
  const starts = new Float64Array(m.end - m.first + 1);
  for (let l = 0; l < m.end - m.first; l++) {
    let bytes = 0;
    for (let c = 0; c < n; c++) bytes += sizes[l * n + c] as number;
    starts[l + 1] = (starts[l] as number) + bytes;
  }
  return (layer, chunk) => {
    const l = layer - m.first;
    let at = starts[l] as number;
    for (let c = 0; c < chunk; c++) at += sizes[l * n + c] as number;
    return at;
  };
}

/** Whether a segment's slice lengths are the index's, for chunks [0, chunks) and layers [first, end). */
function sameSizes(sizes: Uint32Array, m: Manifest, encoded: EncodedChunks, chunks: number, first: number, end: number): boolean {
  for (let layer = first; layer < end; layer++) {
    for (let c = 0; c < chunks; c++) if (sizes[(layer - m.first) * m.keys.length + c] !== (encoded.sliceBytes[c] as readonly number[])[layer]) return false;
  }
  return true;
}

/** A manifest's `crcs` or `sizes`: little-endian uint32s in base64. */
function encodeU32s(values: Uint32Array): string {
  const bytes = Buffer.alloc(values.length * 4);
  values.forEach((value, i) => bytes.writeUInt32LE(value, 4 * i));
  return bytes.toString('base64');
}

function decodeU32s(text: string, count: number): Uint32Array | undefined {
  const bytes = Buffer.from(text, 'base64');
  if (bytes.length !== count * 4) return undefined;
  const values = new Uint32Array(count);
  for (let i = 0; i < count; i++) values[i] = bytes.readUInt32LE(4 * i);
  return values;
}

/**
 * A manifest as stored: its JSON with one more field, `mac`, the state key's MAC of the JSON
 * without it (gateway/common/state-key.ts).
 */
function sealManifest(manifest: Manifest, key: StateKey): Buffer {
  const json = JSON.stringify(manifest);
  return Buffer.from(JSON.stringify({ ...manifest, mac: key.mac('segment-manifest', json) }));
}

/**
 * A manifest read from the store: `unsigned` unless its MAC is the state key's (no gateway with
 * this key wrote it); then checked field by field (a damaged or foreign one is not used).
 */
function parseManifest(body: Buffer, key: StateKey): { manifest: Manifest; crcs: Uint32Array; sizes: Uint32Array | undefined } | 'unsigned' | undefined {
  let m: Partial<Manifest>;
  try {
    const sealed = JSON.parse(body.toString('utf8')) as Partial<Manifest> & { mac?: unknown };
    if (sealed === null || typeof sealed !== 'object' || Array.isArray(sealed)) return undefined;
    const { mac, ...rest } = sealed;
    if (!key.verify('segment-manifest', JSON.stringify(rest), mac)) return 'unsigned';
    m = rest;
  } catch {
    return undefined;
  }
  const count = (m.end ?? 0) - (m.first ?? 0);
  const ok =
    m.objectcache === 'segment' &&
    m.version === 1 &&
    typeof m.bucket === 'string' &&
    Array.isArray(m.keys) &&
    m.keys.length > 0 &&
    m.keys.every((k) => typeof k === 'string') &&
    Array.isArray(m.etags) &&
    m.etags.length === m.keys.length &&
    m.etags.every((e) => typeof e === 'string') &&
    (m.layout === 'KV_L2TD' || m.layout === 'KV_2LTD') &&
    Number.isSafeInteger(m.layers) &&
    Number.isSafeInteger(m.layerBytes) &&
    Number.isSafeInteger(m.first) &&
    Number.isSafeInteger(m.end) &&
    (m.first as number) >= 0 &&
    count > 0 &&
    (m.end as number) <= (m.layers as number) &&
    typeof m.codec === 'string' &&
    (m.codec === 'raw' || (CODEC_NAME.test(m.codec) && m.codec !== RAW_CODEC)) &&
    typeof m.data === 'string' &&
    typeof m.dataEtag === 'string' &&
    Number.isSafeInteger(m.bytes) &&
    typeof m.crcs === 'string';
  if (!ok) return undefined;
  const slices = count * (m.keys as string[]).length;
  const crcs = decodeU32s(m.crcs as string, slices);
  if (!crcs) return undefined;
  if (m.codec === 'raw') return m.sizes === undefined && m.bytes === slices * (m.layerBytes as number) ? { manifest: m as Manifest, crcs, sizes: undefined } : undefined;
  // Encoded: a length per slice, none empty, adding up to the data object's size.
  const sizes = typeof m.sizes === 'string' ? decodeU32s(m.sizes, slices) : undefined;
  return sizes && !sizes.includes(0) && sizes.reduce((a, b) => a + b, 0) === m.bytes ? { manifest: m as Manifest, crcs, sizes } : undefined;
}

export interface SegmentsOptions {
  readonly config: SegmentConfig;
  /** What manifests are signed with, and must be signed with to be used. */
  readonly key: StateKey;
  readonly store: CapacityStore;
  /** The form the read workers' store reports ETags in (S3: quoted; the embedded store: not). */
  readonly workerEtag: (unquoted: string) => string;
  readonly logger: Pick<Logger, 'warn' | 'info'>;
  readonly observer?: SegmentObserver;
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
  readonly #segments = new Map<string, Segment>();
  /** Runs by their bucket and first chunk key: where a request's segment is looked for. */
  readonly #byFirst = new Map<string, Set<string>>();
  /** Runs by their bucket and any chunk key: what a write of the key makes stale. */
  readonly #byKey = new Map<string, Set<string>>();
  /** Reads per run (least recently read first). */
  readonly #reads = new Map<string, number>();
  readonly #packs = new Map<string, Pack>();
  /** Checks of a segment's chunks in flight, by run and chunks covered: requests that arrive meanwhile share them. */
  readonly #checks = new Map<string, Promise<SegmentCheck>>();
  /** Runs being looked for in the store (discover), and when a run was last found to have no segment there. */
  readonly #lookups = new Map<string, Lookup>();
  readonly #missing = new Map<string, number>();
  #bucketReady: Promise<void> | undefined;
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
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping: Promise<number> | undefined;
  #closed = false;

  constructor(options: SegmentsOptions) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
    const sweepSoon = (ms: number): void => {
      if (this.#closed) return;
      this.#sweepTimer = setTimeout(() => {
        void this.sweep()
          .catch((error: unknown) => this.#o.logger.warn({ error }, 'segments: could not sweep the segment bucket'))
          .finally(() => sweepSoon(SWEEP_EVERY_MS));
      }, ms);
      this.#sweepTimer.unref();
    };
    if (options.sweep !== false) sweepSoon(FIRST_SWEEP_MS);
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
    if (!this.#sweeping) {
      this.#sinceSweep = { written: new Set(), dropped: new Set(), full: false };
      this.#sweeping = this.#sweep(olderThanMs).finally(() => {
        this.#sweeping = undefined;
        this.#sinceSweep = undefined;
      });
    }
    return this.#sweeping;
  }

  /** Notes a chunk written or a run dropped while a sweep runs (#sinceSweep). */
  #noteForSweep(kind: 'written' | 'dropped', entry: string): void {
    const since = this.#sinceSweep;
    if (!since || since.full) return;
    if (since.written.size + since.dropped.size >= SWEEP_NOTED) since.full = true;
    else since[kind].add(entry);
  }

  async #sweep(olderThanMs: number): Promise<number> {
    const store = this.#o.store;
    const bucket = this.#o.config.bucket;
    const cutoff = this.#now() - olderThanMs;
    let deleted = 0;
    // Keys come in order: a run's manifest (<chunks' bucket>/<run>.json) just before its data
    // objects (<chunks' bucket>/<run>/<pack id>), so one run is looked at at a time.
    let group: { run: string; manifest: ListedObject | undefined; data: ListedObject[] } | undefined;
    let unknown: Unknown[] = [];
    /** Bytes of the unknown segments past the oldest MAX_UNKNOWN_KEPT, by chunks' bucket. */
    const unkept = new Map<string, number>();
    const settle = async (): Promise<void> => {
      if (!group || group.data.length === 0) return;
      const { run, manifest } = group;
      let data = group.data;
      // More than one data object (the usual case is a manifest and its one data object): those
      // the manifest does not name go once they are old enough.
      if (!manifest || data.length > 1) {
        let live: string | undefined;
        let named = true;
        if (manifest) {
          const found = await store.get(bucket, manifest.key, MAX_MANIFEST_BYTES);
          const parsed = found ? this.#open(found.body, run) : undefined;
          live = parsed?.manifest.data;
          // A manifest that cannot be read is left to the reads that find it (they drop it), and its data with it.
          if (found && live === undefined) return;
          // Gone since it was listed: its data objects are swept as unnamed once old enough, and nothing is counted.
          named = found !== undefined;
        }
        const kept: ListedObject[] = [];
        for (const object of data) {
          if (object.key === live || object.lastModified > cutoff) {
            kept.push(object);
            continue;
          }
          await store.delete(bucket, object.key);
          deleted++;
          this.#o.observer?.event('swept');
        }
        // What the segment is: the data object its manifest names (not a newer pack's, not yet named).
        data = named ? kept.filter((object) => object.key === live) : [];
      }
      const [chunksBucket, name] = run.split('/') as [string, string];
      if (!manifest || data.length === 0 || this.#segments.has(name)) return;
      const bytes = data.reduce((sum, object) => sum + object.size, 0);
      unknown.push({ run: name, bucket: chunksBucket, manifestEtag: manifest.etag, packedAt: manifest.lastModified, data: data.map((object) => object.key), bytes });
      if (unknown.length >= 2 * MAX_UNKNOWN_KEPT) unknown = keepOldest(unknown, unkept);
    };
    for (let after: string | undefined; ; ) {
      const page = await store.list(bucket, '', after);
      for (const object of page.objects) {
        const parts = object.key.split('/');
        const isManifest = parts.length === 2 && object.key.endsWith('.json');
        if (!isManifest && parts.length !== 3) continue;
        const run = isManifest ? object.key.slice(0, -'.json'.length) : `${parts[0]}/${parts[1]}`;
        if (group?.run !== run) {
          await settle();
          group = { run, manifest: undefined, data: [] };
        }
        if (isManifest) group.manifest = object;
        else group.data.push(object);
      }
      if (!page.truncated || page.objects.length === 0) break;
      after = page.objects.at(-1)?.key;
    }
    await settle();
    if (deleted > 0) this.#o.logger.info({ bucket, deleted }, 'segments: swept data objects no manifest names');
    unknown = keepOldest(unknown, unkept);
    // Segments learnt during the sweep are not unknown any more.
    this.#unknown = new Map(unknown.filter((u) => !this.#segments.has(u.run)).map((u) => [u.run, u]));
    this.#unkeptBytes = unkept;
    // All the segments in the store within --max-segment-bytes: the oldest unknown ones go (those
    // known here are held within it by #learn).
    let over = this.#bytes + this.#unknownBytes() - this.#o.config.maxBytes;
    let evicted = 0;
    for (const u of [...this.#unknown.values()]) {
      if (this.#closed || over <= 0) break;
      if (!(await this.#deleteUnknown(u))) continue;
      evicted++;
      over -= u.bytes;
    }
    if (evicted > 0) this.#o.logger.info({ bucket, evicted }, 'segments: the segments in the store passed --max-segment-bytes; deleted the oldest this gateway did not know');
    // Those left are learnt, newest first, while they fit: from then on this gateway serves them,
    // and shorter prefixes and longer requests of them, without first reading each packed run
    // (Found in the store). Only where every read checks its chunks (--segment-check heads):
    // writes made while this gateway did not run were never seen by it.
    if (this.#o.config.check === 'heads') {
      let learnt = 0;
      for (const u of [...this.#unknown.values()].reverse()) {
        if (this.#closed) break;
        if (this.#bytes + u.bytes <= this.#o.config.maxBytes && (await this.#learnUnknown(u))) learnt++;
      }
      if (learnt > 0) this.#o.logger.info({ bucket, learnt }, 'segments: learnt segments in the store this gateway did not know');
    }
    return deleted;
  }

  /**
   * Learns a segment the sweep found: its manifest as listed (the same ETag), of exactly the run
   * its name says, naming a data object listed with it, within --max-segment-bytes and the index's
   * bound (it never evicts one this gateway knows). Not a run dropped, nor one with a chunk
   * written, through this gateway since the sweep began (the next sweep tries again). Resolves to
   * whether it was learnt.
   */
  async #learnUnknown(u: Unknown): Promise<boolean> {
    let found: Awaited<ReturnType<CapacityStore['get']>>;
    try {
      found = await this.#o.store.get(this.#o.config.bucket, manifestKey(u.bucket, u.run), MAX_MANIFEST_BYTES);
    } catch (error) {
      this.#o.logger.warn({ run: u.run, error }, 'segments: could not read the manifest of a segment in the store');
      return false;
    }
    const parsed = found && found.etag === u.manifestEtag ? this.#open(found.body, u.run) : undefined;
    if (!found || !parsed) return false;
    const m = parsed.manifest;
    if (m.bucket !== u.bucket || runName(m.bucket, m, m.first, m.end, m.codec) !== u.run || !u.data.includes(m.data)) return false;
    if (this.#closed || this.#unknown.get(u.run) !== u || this.#segments.has(u.run) || this.#packs.has(u.run)) return false;
    const since = this.#sinceSweep;
    if (!since || since.full || since.dropped.has(u.run) || m.keys.some((key) => since.written.has(slot(m.bucket, key)))) return false;
    if (this.#bytes + m.bytes > this.#o.config.maxBytes || this.#slices + heldOf(m, parsed.crcs, parsed.sizes) > MAX_KNOWN_SLICES) return false;
    this.#missing.delete(u.run);
    // Learnt only where every read checks its chunks (heads), which checks their writers' CRC32Cs too.
    this.#learn(u.run, m, parsed.crcs, parsed.sizes, found.etag, false);
    this.#o.observer?.event('discovered');
    return true;
  }

  /**
   * A manifest read from the store (parseManifest), or undefined; one not signed with the state key
   * is counted (`rejected`) and logged: no gateway holding this key wrote it.
   */
  #open(body: Buffer, run: string): Exclude<ReturnType<typeof parseManifest>, 'unsigned'> {
    const parsed = parseManifest(body, this.#o.key);
    if (parsed !== 'unsigned') return parsed;
    this.#o.observer?.event('rejected');
    this.#o.logger.warn({ run }, 'segments: a manifest in the segment bucket is not signed with this gateway\u2019s state key; not used (is OBJECTCACHE_STATE_KEY the same on every gateway?)');
    return undefined;
  }

  /** A segment whose CRC32Cs are not those its chunks' writers recorded: dropped (while it is still `data`'s) and counted. */
  #reject(run: string, bucket: string, data?: string): void {
    this.#o.observer?.event('rejected');
    this.#o.logger.warn({ run, bucket }, 'segments: a packed segment\u2019s CRC32Cs are not those its chunks\u2019 writers recorded; dropped, and its chunks served instead');
    this.drop(run, 'its CRC32Cs are not those its chunks\u2019 writers recorded', data);
  }

  /** Bytes of the segments in the store this gateway does not know, of chunks in `bucket` (all buckets when absent). */
  #unknownBytes(bucket?: string): number {
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
  async #deleteUnknown(u: Unknown): Promise<boolean> {
    // Once only, and never once learnt (#learn forgets it) or taken stock of afresh.
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

  /** Bytes a pack may have copied and the store not yet taken (--segment-pack-queue-bytes). */
  get packQueueBytes(): number {
    return this.#o.config.packQueueBytes;
  }

  /** Bytes a GET served from a segment may have read but not sent (--segment-read-ahead-bytes). */
  get readAheadBytes(): number {
    return this.#o.config.readAheadBytes;
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
    return (this.#bucketBytes.get(bucket) ?? 0) + this.#unknownBytes(bucket);
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
    if (encoded && !pinned(encoded.etags.slice(0, chunks).map((etag) => ({ etag })), m.etags)) {
      if (heads) void this.#check(bucket, segment, chunks, heads).catch((error: unknown) => this.#o.logger.warn({ run: segment.run, error }, 'segments: could not check a segment\u2019s chunks'));
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
    segment.lastUsed = this.#now();
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
   * HEADs of a segment's first `chunks` chunks against its pins and its CRC32Cs; a stale segment
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
        if (!pinned(now, segment.manifest.etags)) {
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

  /** A descriptor GET was served (in part) from a segment. */
  served(): void {
    this.#o.observer?.event('served');
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
    void this.#delete(segment.manifest, run, segment.manifestEtag).catch((error: unknown) => this.#o.logger.warn({ run, why, error }, 'segments: could not delete a dropped segment'));
  }

  /** A client wrote or deleted `key` through this gateway: every segment holding it is stale, and so is any pack of it. */
  changed(bucket: string, key: string): void {
    this.#noteForSweep('written', slot(bucket, key));
    const runs = this.#byKey.get(slot(bucket, key));
    if (runs) for (const run of [...runs]) this.drop(run, `${key} was written or deleted`);
    for (const pack of this.#packs.values()) if (pack.bucket === bucket && pack.holds(key)) pack.abandon(`${key} was written or deleted while it was being packed`);
    for (const lookup of this.#lookups.values()) if (lookup.bucket === bucket && lookup.keys.has(key)) lookup.written = true;
  }

  /**
   * Evicts segments of chunks in `bucket`, least recently used first, until `bytes` are freed or
   * none is left (capacity management, before any chunk). Resolves to the bytes freed.
   */
  async evict(bucket: string, bytes: number): Promise<number> {
    const victims = [...this.#segments.values()].filter((s) => s.manifest.bucket === bucket).sort((a, b) => a.lastUsed - b.lastUsed);
    let freed = 0;
    for (const victim of victims) {
      if (freed >= bytes) break;
      if (!this.#forget(victim.run)) continue;
      this.#noteForSweep('dropped', victim.run);
      try {
        await this.#delete(victim.manifest, victim.run, victim.manifestEtag);
        freed += victim.manifest.bytes;
        // 'dropped' counts every removal (metrics.ts), as drop() does for the other reasons.
        this.#o.observer?.event('evicted');
        this.#o.observer?.event('dropped');
      } catch (error) {
        this.#o.logger.warn({ run: victim.run, error }, 'segments: could not delete a segment evicted for the budget');
      }
    }
    // Then those this gateway does not know (counted by the last sweep), the oldest first.
    for (const u of [...this.#unknown.values()].filter((u) => u.bucket === bucket)) {
      if (freed >= bytes || this.#closed) break;
      if (await this.#deleteUnknown(u)) freed += u.bytes;
    }
    return freed;
  }

  /**
   * Counts a layerwise GET (of encoded chunks: `encoded`, their index); the run's name once it has
   * been read `--segment-after-reads` times and is big enough and small enough to be packed (for
   * `discover` and `packFor`), else undefined.
   */
  counted(bucket: string, d: Descriptor, encoded?: EncodedChunks): string | undefined {
    const { afterReads, minBytes, maxBytes } = this.#o.config;
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
    if (this.#segments.has(run) || this.#packs.has(run)) return;
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
    const parsed = found ? this.#open(found.body, run) : undefined;
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
      const writers = pinned(now, parsed.manifest.etags) ? writerCheck(parsed.manifest, parsed.crcs, recordedOf(now), parsed.manifest.keys.length) : 'stale';
      if (writers === 'stale' || writers === 'mismatch') {
        this.#o.observer?.event(writers === 'stale' ? 'stale' : 'rejected');
        await this.#delete(parsed.manifest, run, found.etag);
        return;
      }
      writerVerified = writers === 'verified';
    }
    // A write through this gateway while the manifest was on its way: not learnt (a pack of it starts over).
    if (this.#segments.has(run) || this.#packs.has(run) || state.written) return;
    this.#missing.delete(run);
    this.#learn(run, parsed.manifest, parsed.crcs, parsed.sizes, found.etag, writerVerified);
    this.#o.observer?.event('discovered');
  }

  /**
   * Starts packing a due run (`counted`) unless a segment or pack of it exists, or
   * --max-segment-packs are being written. The caller feeds the pack its frames.
   */
  packFor(bucket: string, d: Descriptor, run: string, rest: ReadRest, pins: () => readonly (string | undefined)[], verified: () => boolean, encoded?: EncodedChunks): Pack | undefined {
    if (this.#segments.has(run) || this.#packs.has(run) || this.#packs.size >= this.#o.config.maxPacks) return undefined;
    const pack: Pack = new Pack({
      run,
      bucket,
      descriptor: d,
      encoded,
      bytes: runBytes(d, encoded),
      store: this.#o.store,
      segmentBucket: this.#o.config.bucket,
      ready: () => (this.#bucketReady ??= this.#o.store.ensureBucket(this.#o.config.bucket).catch((error: unknown) => {
        this.#bucketReady = undefined;
        throw error;
      })),
      done: (outcome): Promise<void> => this.#packed(pack, outcome),
      queueBytes: this.#o.config.packQueueBytes,
      copyFrames: this.#o.config.packFrom === 'frames',
      rest,
      reread: () => this.#o.observer?.event('reread'),
      pins,
      verified,
    });
    this.#packs.set(run, pack);
    return pack;
  }

  async #packed(pack: Pack, outcome: Packed | { abandoned: string }): Promise<void> {
    try {
      await this.#commit(pack, outcome);
    } finally {
      // Only now: a write of one of its chunks until here marks the pack stale (changed()).
      this.#packs.delete(pack.run);
    }
  }

  async #commit(pack: Pack, outcome: Packed | { abandoned: string }): Promise<void> {
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
        const parsed = existing ? this.#open(existing.body, pack.run) : undefined;
        const kept = parsed?.manifest;
        // The one there is kept only if it is of the same versions and holds what this pack read
        // (the same CRC32Cs): else it is replaced.
        if (existing && parsed && kept && sameRun(kept, manifest) && kept.etags.length === manifest.etags.length && kept.etags.every((e, i) => e === manifest.etags[i]) && sameValues(parsed.crcs, crcs)) {
          await store.delete(this.#o.config.bucket, manifest.data);
          // Kept, but a chunk written meanwhile makes it stale as it makes this pack's.
          if (pack.stale) await this.#delete(parsed.manifest, pack.run, existing.etag);
          else this.#learn(pack.run, parsed.manifest, parsed.crcs, parsed.sizes, existing.etag, writerVerified);
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
        await this.#delete(manifest, pack.run, written);
        return;
      }
      this.#learn(pack.run, manifest, crcs, sizes, written, writerVerified);
      this.#o.observer?.event('packed');
    } catch (error) {
      this.#o.logger.warn({ run: pack.run, error }, 'segments: could not write a packed segment\u2019s manifest');
      await store.delete(this.#o.config.bucket, manifest.data).catch(() => {});
    }
  }

  #learn(run: string, manifest: Manifest, crcs: Uint32Array, sizes: Uint32Array | undefined, manifestEtag: string, writerVerified: boolean): void {
    this.#forget(run);
    this.#unknown.delete(run);
    const held = heldOf(manifest, crcs, sizes);
    // Kept without its encoded checksums and lengths: they are held decoded.
    const { sizes: _, ...rest } = manifest;
    const kept: Manifest = { ...rest, crcs: '' };
    this.#segments.set(run, { run, manifest: kept, manifestEtag, crcs, offset: offsets(manifest, sizes), sizes, held, writerVerified, lastUsed: this.#now() });
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
  async #delete(manifest: Manifest, run: string, manifestEtag: string): Promise<void> {
    await this.#o.store.deleteVersion(this.#o.config.bucket, manifestKey(manifest.bucket, run), manifestEtag);
    await this.#o.store.delete(this.#o.config.bucket, manifest.data);
  }

  /** Ends every pack (the gateway is closing): none leaves a manifest. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#sweepTimer);
    for (const pack of this.#packs.values()) pack.abandon('the gateway is closing');
  }
}

/** One descriptor GET's view of the segments (RequestSegments): its due run, if any, and the HEADs its checks make. */
class SegmentsOfRequest implements RequestSegments {
  readonly #segments: Segments;
  readonly #r: SegmentRequest;
  /** The run's name once it is due for packing (Segments.counted). */
  readonly #due: string | undefined;
  readonly #heads: Heads;

  constructor(segments: Segments, r: SegmentRequest, due: string | undefined, heads: Heads) {
    this.#segments = segments;
    this.#r = r;
    this.#due = due;
    this.#heads = heads;
  }

  plan(p: Parameters<RequestSegments['plan']>[0]): SegmentPlan | undefined {
    const segments = this.#segments;
    const { bucket, descriptor, encoded, logger } = this.#r;
    const heads = this.#heads;
    const rangesPerChunk = descriptor.layout === 'KV_2LTD' ? 2 : 1;
    const found = segments.find(bucket, descriptor, (chunks) => p.chunkPlan.groups.length * chunks * rangesPerChunk, encoded, heads);
    if (!found) return undefined;
    // A segment's reads are few, large and sequential: a smaller window keeps the stream going (--segment-read-ahead-bytes).
    const windowBytes = Math.min(p.input.maxGroupBytes, segments.readAheadBytes);
    return {
      plan: planFromSegment({ ...p.input, maxGroupBytes: windowBytes }, p.layerwise, found.cover),
      windowBytes,
      chunks: found.cover.chunks,
      source: found.source,
      failed: (error) => {
        logger.info({ error }, 'a packed segment could not be read; its layers are read from the chunks');
        segments.drop(found.run, `a read of it failed: ${error.message}`, found.source.key);
      },
      first: async (read, signal) => {
        let opened: { reads: Awaited<typeof read>; verified: boolean };
        try {
          const [check, reads] = await Promise.all([segments.current(bucket, found, heads), read]);
          if (check === 'stale') return 'retry';
          opened = { reads, verified: check === 'verified' };
        } catch (error) {
          if (signal.aborted) throw error;
          // Served from the chunks, which decide (they are the source of truth). A failure of the
          // segment itself (gone, changed, damaged) never gets here: the read-ahead reads those
          // layers from the chunks and drops the segment (`failed`). A chunk beyond it that a
          // longer request names, or a check that could not be made, does not drop it.
          logger.info({ error }, 'a packed segment could not be read or checked; serving from the chunks');
          return 'retry';
        }
        segments.served();
        return opened;
      },
    };
  }

  pack(p: PackRequest): SegmentPack | undefined {
    const { bucket, descriptor, encoded } = this.#r;
    if (this.#due === undefined || p.reads !== 'grouped' || p.segment?.chunks === descriptor.chunks) return undefined;
    return this.#segments.packFor(bucket, descriptor, this.#due, p.rest, p.pins, p.verified, encoded);
  }
}

/** Bounds a check of a segment's chunks: not the client's signal, since requests that arrive meanwhile share the check (Segments.current). */
function checkSignal(timeoutMs: number): AbortSignal {
  const signal = AbortSignal.timeout(timeoutMs);
  setMaxListeners(0, signal); // a HEAD per covered chunk listens to it
  return signal;
}

/** The oldest MAX_UNKNOWN_KEPT, oldest first; the bytes of the others are added to `unkept`, by chunks' bucket. */
function keepOldest(unknown: Unknown[], unkept: Map<string, number>): Unknown[] {
  unknown.sort((a, b) => a.packedAt - b.packedAt);
  for (const u of unknown.slice(MAX_UNKNOWN_KEPT)) unkept.set(u.bucket, (unkept.get(u.bucket) ?? 0) + u.bytes);
  return unknown.slice(0, MAX_UNKNOWN_KEPT);
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

/** Where a run's manifest is, in the segment bucket. */
function manifestKey(bucket: string, run: string): string {
  return `${bucket}/${run}.json`;
}

/** A pack's outcome when its data object is stored: the manifest to write, and what it records decoded. */
interface Packed {
  readonly manifest: Manifest;
  readonly crcs: Uint32Array;
  readonly sizes: Uint32Array | undefined;
  /** Every read it was packed from was checked against CRC32Cs its chunk's writer recorded. */
  readonly writerVerified: boolean;
}

function sameValues(a: Uint32Array, b: Uint32Array): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}

interface PackOptions {
  readonly run: string;
  readonly bucket: string;
  readonly descriptor: Descriptor;
  /** The chunks' index, when the request names `codecs` (its slices are packed as stored). */
  readonly encoded: EncodedChunks | undefined;
  readonly bytes: number;
  readonly store: CapacityStore;
  readonly segmentBucket: string;
  readonly ready: () => Promise<void>;
  readonly done: (outcome: Packed | { abandoned: string }) => Promise<void>;
  /** Bytes the pack may have copied and the store not yet taken (--segment-pack-queue-bytes). */
  readonly queueBytes: number;
  /** Copy the request's frames (--segment-pack-from frames); otherwise read every layer after it. */
  readonly copyFrames: boolean;
  /** Reads the layers the pack fell behind on, from the chunks, after its request (ReadRest). */
  readonly rest: ReadRest;
  /** The pack fell behind and reads the rest (the `reread` event). */
  readonly reread: () => void;
  /** The chunk versions the request has read so far, by prefix position (all of them once its first layer is in). */
  readonly pins: () => readonly (string | undefined)[];
  /** Whether every read of the request so far was checked against CRC32Cs its chunk's writer recorded. */
  readonly verified: () => boolean;
}

/**
 * One segment being written from the frames of the layerwise GET that reads its run: each LAYER
 * frame's payload is copied into the body of one streamed PUT (the frames' buffers go back to
 * the pool as usual), each task's slice checksums into the manifest. The request never waits for
 * the store: once the copies the store has not taken would pass `queueBytes`, the pack stops
 * copying frames, and after the request has ended (or REST_AFTER_MS later, if it lasts that long)
 * it reads the layers it missed from the chunks itself (`rest`, pinned to the versions the
 * request read) at the store's pace. Abandoned when
 * the request fails, when a chunk of the run is written meanwhile, or when the store refuses it or
 * takes nothing for PACK_STALL_MS.
 */
export class Pack implements SegmentPack {
  readonly run: string;
  readonly bucket: string;
  readonly #o: PackOptions;
  readonly #keys: Set<string>;
  readonly #crcs: Uint32Array;
  /** How long the run's slices are (the request's, for its tasks' layouts). */
  readonly #slices: Slices;
  readonly #body = new PassThrough({ highWaterMark: 4 * 1024 * 1024 });
  readonly #abort = new AbortController();
  readonly #data: string;
  /** The data object's PUT, once started: at once when the pack copies frames, else with the rest read. */
  #stored: Promise<string> | undefined;
  #written = 0;
  /** LAYER frames of the request seen so far, and the first one not copied (the pack fell behind there). */
  #frames = 0;
  #behind: number | undefined;
  #abandoned: string | undefined;
  /** The read of the layers the pack fell behind on, once started, and the timer that starts it. */
  #rest: Promise<void> | undefined;
  /** Whether the rest's reads were all checked against their writers' CRC32Cs. */
  #restVerified = true;
  #restTimer: NodeJS.Timeout | undefined;
  /** The request ended complete, and the pack waits for the rest to be read (finish). */
  #completing = false;
  /** Resolved by ended(): the request's response is out, so the rest's reads do not compete with its last bytes. */
  readonly #requestEnded: Promise<void>;
  #endRequest!: () => void;
  /** finish() was called: the stream is complete. */
  #finishing = false;
  /** A chunk of the run was written after the data object was stored. */
  stale = false;

  constructor(options: PackOptions) {
    this.#o = options;
    this.run = options.run;
    this.bucket = options.bucket;
    const d = options.descriptor;
    this.#keys = new Set(d.keys);
    this.#crcs = new Uint32Array((d.layerEnd - d.layerStart) * d.chunks);
    this.#slices = { layerBytes: d.layerBytes, encoded: options.encoded };
    this.#data = `${options.bucket}/${options.run}/${randomBytes(8).toString('hex')}`;
    this.#requestEnded = new Promise((resolve) => (this.#endRequest = resolve));
    if (options.copyFrames) this.#put();
    // Destroying the body (abandon) emits its error, perhaps before the store reads it: the
    // failure is the PUT's to report, never an unhandled 'error' event.
    this.#body.on('error', () => {});
  }

  holds(key: string): boolean {
    return this.#keys.has(key);
  }

  /** Starts the data object's PUT (once), fed by the body. */
  #put(): Promise<string> {
    if (this.#stored) return this.#stored;
    const o = this.#o;
    const stored = o.ready().then(() => o.store.putStream(o.segmentBucket, this.#data, this.#body, o.bytes, this.#abort.signal));
    // A store that refuses the PUT (or its bucket) ends the pack at once: nothing reads the body
    // any more, and the request it feeds must not wait for it (room).
    stored.catch((error: unknown) => {
      if (!this.#finishing) this.abandon(`the store refused the segment: ${(error as Error).message}`);
    });
    this.#stored = stored;
    return stored;
  }

  /**
   * A LAYER frame's payload from the request, in stream order, copied without waiting: unless the
   * pack fell behind, when the copies the store has not taken and this frame would pass
   * `queueBytes` (the first frame of an empty queue is always taken). From then on the request's
   * frames are not copied; finish() reads those layers from the chunks. So a pack holds at most
   * `queueBytes`, or one LAYER frame when that is larger. A pack that copies no frames
   * (--segment-pack-from chunks) is behind from the first, and reads them all after the request.
   */
  frame(pieces: readonly Uint8Array[]): void {
    const layer = this.#frames++;
    if (this.#abandoned !== undefined || this.#behind !== undefined) return;
    if (!this.#o.copyFrames) {
      // No PUT is open meanwhile, so nothing can be cut off for idling: the rest waits for finish().
      this.#behind = layer;
      return;
    }
    const bytes = pieces.reduce((sum, piece) => sum + piece.byteLength, 0);
    const queued = this.#queued();
    if (queued > 0 && queued + bytes > this.#o.queueBytes) {
      this.#behind = layer;
      // Read after the request, or REST_AFTER_MS from now if the request lasts longer: a PUT whose
      // body pauses much longer may be cut off by the store (S3 ends an upload idle for ~20 s).
      this.#restTimer = setTimeout(() => this.#startRest(), REST_AFTER_MS);
      this.#restTimer.unref();
      return;
    }
    this.#copy(pieces);
  }

  #copy(pieces: readonly Uint8Array[]): void {
    for (const piece of pieces) {
      const copy = Buffer.allocUnsafeSlow(piece.byteLength);
      copy.set(piece);
      this.#body.write(copy);
      this.#written += piece.byteLength;
    }
  }

  /** Starts reading the layers the pack fell behind on from the chunks, pinned to the versions the request read (once). */
  #startRest(): void {
    if (this.#rest !== undefined || this.#abandoned !== undefined || this.#behind === undefined) return;
    clearTimeout(this.#restTimer);
    const pins = this.#pins();
    if (!pins) return;
    void this.#put();
    this.#o.reread();
    this.#rest = this.#o
      .rest({
        from: this.#o.descriptor.layerStart + this.#behind,
        pins,
        signal: this.#abort.signal,
        queueBytes: this.#o.queueBytes,
        take: async (reads, frames) => {
          this.checksums(reads);
          for (const pieces of frames) {
            for (const piece of pieces) {
              await this.#room();
              if (this.#abandoned !== undefined) return;
              this.#copy([piece]);
            }
          }
        },
      })
      .then(
        (verified) => void (this.#restVerified = verified),
        (error: unknown) => this.abandon(`reading the layers it fell behind on failed: ${(error as Error).message}`),
      );
  }

  /**
   * The chunk versions the request read (its first unit reads every chunk, and every later read
   * of a chunk is pinned to the first): the manifest's, and the rest's pins. Abandons the pack when
   * one is unknown.
   */
  #pins(): readonly string[] | undefined {
    const pins = this.#o.pins();
    if (pins.length >= this.#o.descriptor.chunks && pins.every((pin) => pin !== undefined)) return pins as readonly string[];
    this.abandon('a chunk\u2019s version is unknown');
    return undefined;
  }

  /** Bytes copied that the store has not taken yet. */
  #queued(): number {
    return this.#body.writableLength + this.#body.readableLength;
  }

  /**
   * Resolves once the store has taken the pack's copies down to `queueBytes` (the rest read after
   * the request goes at the store's pace). A store that takes nothing for PACK_STALL_MS has the
   * pack abandoned.
   */
  async #room(): Promise<void> {
    const body = this.#body;
    let lastProgress = performance.now();
    let low = this.#queued();
    while (this.#abandoned === undefined && this.#queued() > this.#o.queueBytes) {
      // 'drain' or 'close', or a look every ROOM_POLL_MS (a drain can come before anyone listens,
      // and a queue below the body's high-water mark emits none).
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          body.off('drain', done).off('close', done);
          resolve();
        };
        const timer = setTimeout(done, ROOM_POLL_MS);
        body.on('drain', done).on('close', done);
      });
      const queued = this.#queued();
      if (queued < low) {
        low = queued;
        lastProgress = performance.now();
      } else if (performance.now() - lastProgress >= PACK_STALL_MS) this.abandon(`the store took nothing of the segment for ${PACK_STALL_MS} ms`);
    }
  }

  /** The slice checksums of a unit's reads (layer-major task blocks), into the manifest's order. */
  checksums(reads: readonly TaskRead[]): void {
    const d = this.#o.descriptor;
    for (const { task, crcs } of reads) {
      const layout = layoutOf(task, 'layer-major', this.#slices);
      for (let layer = task.first; layer < task.end; layer++) {
        for (let c = 0; c < layout.chunks; c++) this.#crcs[(layer - d.layerStart) * d.chunks + task.chunkStart + c] = crcs[layout.slice(layer, c)] as number;
      }
    }
  }

  /** The request that feeds the pack ended: abandons it unless the stream was complete. */
  ended(): void {
    this.#endRequest();
    if (!this.#finishing && !this.#completing) this.abandon('the layerwise GET that fed it ended early');
  }

  abandon(reason: string): void {
    if (this.#abandoned !== undefined) return;
    if (this.#finishing) {
      // All of it is with the store already: only the manifest can still be kept from being used.
      this.stale = true;
      return;
    }
    this.#abandoned = reason;
    clearTimeout(this.#restTimer);
    this.#abort.abort();
    this.#body.destroy(new Error(reason));
    void this.#stored?.then(
      // Stored after all (the store had every byte): it is not named by a manifest, so removed.
      (etag) => (etag ? this.#o.store.delete(this.#o.segmentBucket, this.#data).catch(() => {}) : undefined),
      () => {},
    );
    void this.#o.done({ abandoned: reason });
  }

  /**
   * The request sent its last frame: the layers it fell behind on are read from the chunks once
   * its response is out (ended()), the data object is completed, then the manifest written (by
   * Segments).
   */
  async finish(): Promise<void> {
    if (this.#abandoned !== undefined || this.#finishing || this.#completing) return;
    const d = this.#o.descriptor;
    const etags = this.#pins();
    if (!etags) return;
    if (this.#behind !== undefined) {
      // Set before the first await: the request's end (ended()) must not abandon the pack now.
      this.#completing = true;
      try {
        // Once the response is out (unless REST_AFTER_MS started the rest already).
        if (this.#rest === undefined) await this.#requestEnded;
        this.#startRest();
        await this.#rest;
      } finally {
        this.#completing = false;
      }
      if (this.#abandoned !== undefined) return;
    }
    if (this.#written !== this.#o.bytes) {
      this.abandon(`the stream held ${this.#written} of ${this.#o.bytes} bytes`);
      return;
    }
    this.#finishing = true;
    this.#body.end();
    let dataEtag: string;
    try {
      dataEtag = await this.#put();
    } catch (error) {
      if (this.#abandoned === undefined) {
        this.#abandoned = `the store refused the segment: ${(error as Error).message}`;
        await this.#o.done({ abandoned: this.#abandoned });
      }
      return;
    }
    if (this.#abandoned !== undefined) return;
    const codec = codecOf(this.#o.encoded);
    let sizes: Uint32Array | undefined;
    if (codec !== 'raw') {
      const encoded = this.#o.encoded as EncodedChunks;
      sizes = new Uint32Array(this.#crcs.length);
      for (let layer = d.layerStart; layer < d.layerEnd; layer++) {
        for (let c = 0; c < d.chunks; c++) sizes[(layer - d.layerStart) * d.chunks + c] = (encoded.sliceBytes[c] as readonly number[])[layer] as number;
      }
    }
    const manifest: Manifest = {
      objectcache: 'segment',
      version: 1,
      bucket: this.bucket,
      keys: d.keys,
      etags: etags.map(unquoted),
      layout: d.layout,
      layers: d.layers,
      layerBytes: d.layerBytes,
      first: d.layerStart,
      end: d.layerEnd,
      codec,
      ...(sizes ? { sizes: encodeU32s(sizes) } : {}),
      data: this.#data,
      dataEtag: unquoted(dataEtag),
      bytes: this.#o.bytes,
      crcs: encodeU32s(this.#crcs),
      packedAt: new Date().toISOString(),
    };
    await this.#o.done({ manifest, crcs: this.#crcs, sizes, writerVerified: this.#o.verified() && this.#restVerified });
  }
}
