/**
 * A packed segment's manifest (docs/segments.md, The manifest): what it records, how a run is
 * named, where each slice lies, its signature (the state key's MAC, gateway/common/state-key.ts),
 * the checks a manifest read from the store must pass, and the checks of its chunks against it
 * (their versions, and the CRC32Cs their writers recorded). Pure: functions of their inputs.
 */
import { createHash } from 'node:crypto';
import type { Descriptor } from '../../schemas/descriptor.js';
import type { Layout } from '../../schemas/layouts.js';
import { CODEC_NAME, RAW_CODEC } from '../../schemas/encoded-chunk.js';
import { decodeLayerCrcs, LAYER_CRC_META } from '../../schemas/integrity.js';
import { unquoted } from '../stores/capacity-store.js';
import type { StateKey } from '../common/state-key.js';
import type { EncodedChunks } from '../descriptor-get/encoded-chunks.js';

/**
 * The largest manifest read: a run the index can hold (catalog.ts MAX_KNOWN_SLICES 4-byte units of CRC32Cs,
 * slice lengths, keys and ETags) comes to under 200 MiB of JSON and base64; no gateway writes a
 * larger one, and a larger one is not read (nor used).
 */
export const MAX_MANIFEST_BYTES = 256 * 1024 * 1024;

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

/** The HEADs of chunks (the store's answers, in order, with their user metadata; undefined for a chunk that is gone). */
export type Heads = (keys: readonly string[]) => Promise<readonly ({ readonly etag: string | undefined; readonly meta: Readonly<Record<string, string>> } | undefined)[]>;

/** Whether every chunk HEAD found is there with the ETag (unquoted) its segment was packed from. */
export function holdsVersions(heads: readonly ({ readonly etag: string | undefined } | undefined)[], etags: readonly string[]): boolean {
  return heads.every((head, i) => head?.etag !== undefined && unquoted(head.etag) === etags[i]);
}

/**
 * How a segment's CRC32Cs compare with those its first `chunks` chunks' writers recorded
 * (`recorded`: each chunk's `oc-layer-crc32c`, by prefix position): all recorded and equal, some
 * not recorded and the rest equal, or one different.
 */
export function writerCheck(m: Manifest, crcs: Uint32Array, recorded: readonly (string | undefined)[], chunks: number): 'verified' | 'unverified' | 'mismatch' {
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
export function recordedOf(heads: Awaited<ReturnType<Heads>>): (string | undefined)[] {
  return heads.map((head) => head?.meta[LAYER_CRC_META]);
}

/** Whether a manifest is of exactly the run `run` describes (its chunks, layout, layers and codec). */
export function sameRun(m: Manifest, run: Pick<Manifest, 'bucket' | 'keys' | 'layout' | 'layers' | 'layerBytes' | 'first' | 'end' | 'codec'>): boolean {
  return (
    m.codec === run.codec &&
    m.bucket === run.bucket &&
    m.layout === run.layout &&
    m.layers === run.layers &&
    m.layerBytes === run.layerBytes &&
    m.first === run.first &&
    m.end === run.end &&
    m.keys.length === run.keys.length &&
    m.keys.every((key, i) => key === run.keys[i])
  );
}

/**
 * A run's name: the same chunks, layout and layers always give the same name, whichever gateway
 * packs it (so a second pack of a run finds the first one's manifest).
 */
export function runName(bucket: string, d: Pick<Descriptor, 'keys' | 'layout' | 'layers' | 'layerBytes'>, first: number, end: number, codec: string): string {
  return createHash('sha256')
    .update(JSON.stringify([bucket, d.layout, d.layers, d.layerBytes, first, end, codec, d.keys]))
    .digest('hex');
}

/**
 * The codec a segment of a request's chunks holds: `raw` for raw chunks, whether the request names
 * `codecs` (its index says `none`) or not, since their slices are the same bytes; else the chunks'.
 */
export function codecOf(encoded: EncodedChunks | undefined): string {
  return encoded === undefined || encoded.codec === RAW_CODEC ? 'raw' : encoded.codec;
}

/** Payload bytes of a request's delivered layers as a segment holds them (no segment tables). */
export function runBytes(d: Descriptor, encoded: EncodedChunks | undefined): number {
  if (encoded === undefined) return (d.layerEnd - d.layerStart) * d.chunks * d.layerBytes;
  let bytes = 0;
  for (const sizes of encoded.sliceBytes) for (let layer = d.layerStart; layer < d.layerEnd; layer++) bytes += sizes[layer] as number;
  return bytes;
}

/**
 * Byte offset of (layer, chunk)'s slice in a segment: raw slices are all `layerBytes`; encoded
 * ones (`sizes`, in segment order) each its own length, so each layer's start is summed once.
 */
export function offsets(m: Manifest, sizes: Uint32Array | undefined): (layer: number, chunk: number) => number {
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
export function sameSizes(sizes: Uint32Array, m: Manifest, encoded: EncodedChunks, chunks: number, first: number, end: number): boolean {
  for (let layer = first; layer < end; layer++) {
    for (let c = 0; c < chunks; c++) if (sizes[(layer - m.first) * m.keys.length + c] !== (encoded.sliceBytes[c] as readonly number[])[layer]) return false;
  }
  return true;
}

/** A manifest's `crcs` or `sizes`: little-endian uint32s in base64. */
export function encodeU32s(values: Uint32Array): string {
  const bytes = Buffer.alloc(values.length * 4);
  values.forEach((value, i) => bytes.writeUInt32LE(value, 4 * i));
  return bytes.toString('base64');
}

export function decodeU32s(text: string, count: number): Uint32Array | undefined {
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
export function sealManifest(manifest: Manifest, key: StateKey): Buffer {
  const json = JSON.stringify(manifest);
  return Buffer.from(JSON.stringify({ ...manifest, mac: key.mac('segment-manifest', json) }));
}

/**
 * A manifest read from the store: `unsigned` unless its MAC is the state key's (no gateway with
 * this key wrote it); then checked field by field (a damaged or foreign one is not used).
 */
export function parseManifest(body: Buffer, key: StateKey): { manifest: Manifest; crcs: Uint32Array; sizes: Uint32Array | undefined } | 'unsigned' | undefined {
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

/** Where a run's manifest is, in the segment bucket. */
export function manifestKey(bucket: string, run: string): string {
  return `${bucket}/${run}.json`;
}

export function sameValues(a: Uint32Array, b: Uint32Array): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}
