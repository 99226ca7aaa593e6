/**
 * The framed response stream of a layerwise GET (schemas/wire-format.md section 4; written specification in
 * schemas/wire-format.md). All integers little-endian.
 *
 *   stream   := preamble frame* END-or-ERROR
 *   preamble := "OCKV" (4 bytes) | version u16 = 1 or 2 | reserved u16 = 0     (8 bytes)
 *   frame    := type u8 | flags u8 = 0 | reserved u16 = 0 | index u32 |
 *               length u64 | crc32c u32 (of the payload) | reserved u32 = 0    (24 bytes)
 *               payload (length bytes)
 */

import { siteOf, type FailureSite, type ObjectCacheError } from './errors.js';
export const STREAM_MAGIC = 'OCKV';
export const STREAM_VERSION = 1;
/**
 * Version 2, sent only to a descriptor that names `codecs`: every LAYER and CHUNK payload starts
 * with a slice-length table (one u32 LE length per slice) and its slices are in their stored encoding
 * (wire-format.md section 6). A client that asks for raw bytes never receives it.
 */
export const STREAM_VERSION_SEGMENTED = 2;
export const PREAMBLE_BYTES = 8;
export const FRAME_HEADER_BYTES = 24;
/** The most a reader takes of an ERROR or END frame's JSON (the gateway's are a few hundred bytes). */
export const MAX_JSON_FRAME_BYTES = 1024 * 1024;
/** Media type of the response body. */
export const STREAM_CONTENT_TYPE = 'application/vnd.objectcache.stream.v1';
export const SEGMENTED_STREAM_CONTENT_TYPE = 'application/vnd.objectcache.stream.v2';

export const FrameType = {
  /** One delivered layer: the matched chunks' slices of that layer in prefix order; index = layer. */
  LAYER: 1,
  /** One chunk's delivered layers in layer order (chunkwise delivery); index = chunk (prefix position). */
  CHUNK: 2,
  /** A failure after streaming began; payload is UTF-8 JSON {code, message, ...}; the stream ends. */
  ERROR: 3,
  /** The summary; payload is UTF-8 JSON; the stream ends. */
  END: 4,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export interface FrameHeader {
  readonly type: FrameType;
  readonly index: number;
  readonly length: number;
  readonly crc32c: number;
}

export function encodePreamble(version: number = STREAM_VERSION): Buffer {
  const out = Buffer.alloc(PREAMBLE_BYTES);
  out.write(STREAM_MAGIC, 0, 'latin1');
  out.writeUInt16LE(version, 4);
  return out;
}

/** The preamble of each stream version, made once (the gateway writes it first in every stream). */
export const PREAMBLES: Readonly<Record<typeof STREAM_VERSION | typeof STREAM_VERSION_SEGMENTED, Buffer>> = {
  [STREAM_VERSION]: encodePreamble(STREAM_VERSION),
  [STREAM_VERSION_SEGMENTED]: encodePreamble(STREAM_VERSION_SEGMENTED),
};

export function encodeFrameHeader(header: FrameHeader): Buffer {
  const out = Buffer.alloc(FRAME_HEADER_BYTES);
  out.writeUInt8(header.type, 0);
  out.writeUInt32LE(header.index, 4);
  out.writeBigUInt64LE(BigInt(header.length), 8);
  out.writeUInt32LE(header.crc32c >>> 0, 16);
  return out;
}

/** Decodes a frame header; returns a reason string when the bytes are not a valid header. */
export function decodeFrameHeader(bytes: Uint8Array): FrameHeader | string {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, FRAME_HEADER_BYTES);
  const type = view.readUInt8(0);
  if (type < FrameType.LAYER || type > FrameType.END) return `unknown frame type ${type}`;
  if (view.readUInt8(1) !== 0 || view.readUInt16LE(2) !== 0 || view.readUInt32LE(20) !== 0) return 'reserved frame header bytes are not zero';
  const length = view.readBigUInt64LE(8);
  if (length > BigInt(Number.MAX_SAFE_INTEGER)) return 'frame length exceeds 2^53';
  return { type: type as FrameType, index: view.readUInt32LE(4), length: Number(length), crc32c: view.readUInt32LE(16) };
}

/** Checks the 8-byte preamble (the version the reader asked for); returns a reason string when it is wrong. */
export function checkPreamble(bytes: Uint8Array, expected: number = STREAM_VERSION): string | undefined {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, PREAMBLE_BYTES);
  if (view.toString('latin1', 0, 4) !== STREAM_MAGIC) return 'the response does not start with the OCKV preamble';
  const version = view.readUInt16LE(4);
  if (version !== expected) return `unsupported stream version ${version} (expected ${expected})`;
  if (view.readUInt16LE(6) !== 0) return 'the preamble has a non-zero reserved field';
  return undefined;
}

/** The END frame's JSON payload. */
export interface EndSummary {
  readonly mode: 'layerwise' | 'chunkwise';
  readonly layers: readonly [number, number];
  readonly chunks: number;
  /** Payload bytes delivered (frames excluded). */
  readonly bytes: number;
  readonly backendReads: number;
  /** Layer groups of the read plan, as [first, end) pairs. */
  readonly plan: readonly (readonly [number, number])[];
  readonly rateBytesPerSec: number | null;
  readonly verified: boolean;
  /** Version 2 streams: the encoding of every slice (schemas/encoded-chunk.ts). */
  readonly codec?: string;
  /** Milliseconds from the request's arrival: first layer group read, first frame sent, END. */
  readonly timings: { readonly firstReadMs: number; readonly firstFrameMs: number; readonly totalMs: number };
}

/** The ERROR frame's JSON payload. */
export interface ErrorPayload extends FailureSite {
  readonly code: string;
  readonly message: string;
  /** Sending the GET again may succeed. Absent from older gateways: then the code's (schemas/errors.ts). */
  readonly retryable?: boolean;
}

/**
 * The ERROR frame's payload, UTF-8 JSON of the error that ends the stream (an ObjectCacheError,
 * schemas/errors.ts): {code, message, retryable, chunk?, key?, layer?} in that order, the site
 * taken from the error's details (siteOf).
 */
export function encodeErrorPayload(error: Pick<ObjectCacheError, 'code' | 'message' | 'retryable' | 'details'>): Buffer {
  const payload: ErrorPayload = { code: error.code, message: error.message, retryable: error.retryable, ...siteOf(error.details) };
  return Buffer.from(JSON.stringify(payload), 'utf8');
}

/** The END frame's payload, UTF-8 JSON of the summary with its fields in the order EndSummary lists them. */
export function encodeEndPayload(summary: EndSummary): Buffer {
  const { timings } = summary;
  const ordered: EndSummary = {
    mode: summary.mode,
    layers: summary.layers,
    chunks: summary.chunks,
    bytes: summary.bytes,
    backendReads: summary.backendReads,
    plan: summary.plan,
    rateBytesPerSec: summary.rateBytesPerSec,
    verified: summary.verified,
    ...(summary.codec !== undefined ? { codec: summary.codec } : {}),
    timings: { firstReadMs: timings.firstReadMs, firstFrameMs: timings.firstFrameMs, totalMs: timings.totalMs },
  };
  return Buffer.from(JSON.stringify(ordered), 'utf8');
}
