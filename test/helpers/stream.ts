/**
 * Encoded chunks stored, and a descriptor GET's response body read back (schemas/wire-format.md):
 * its preamble's version and its frames, each frame's CRC32C checked; and a version 2 frame's
 * segments (section 6).
 */
import { randomBytes } from 'node:crypto';
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { expect } from 'vitest';
import { crc32c } from '../../native/crc32c.js';
import { encodeSliceBytes } from '../../schemas/encoded-chunk.js';
import { decodeFrameHeader, FRAME_HEADER_BYTES, PREAMBLE_BYTES } from '../../schemas/frames.js';
import { encodeLayerCrcs } from '../../schemas/integrity.js';

/**
 * Stores an encoded chunk (schemas/encoded-chunk.ts) through `client`: random slices of the given
 * lengths, back to back, with its index and CRCs in its metadata (`meta` adds or overrides).
 * The gateway never looks inside a slice, so the codec is any name.
 */
export async function storeEncoded(
  client: S3Client,
  bucket: string,
  key: string,
  lengths: readonly number[],
  codec = 'test-codec',
  meta: Record<string, string> = {},
): Promise<Buffer[]> {
  const slices = lengths.map((n) => randomBytes(n));
  const Metadata = { 'oc-codec': codec, 'oc-slice-bytes': encodeSliceBytes(lengths), 'oc-layer-crc32c': encodeLayerCrcs(slices.map((slice) => crc32c(slice))), ...meta };
  await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: Buffer.concat(slices), Metadata }));
  return slices;
}

export interface Frame {
  readonly type: number;
  readonly index: number;
  readonly payload: Buffer;
}

/** A whole response body as its preamble version and frames, each frame's CRC checked. */
export function parseStream(body: Buffer): { version: number; frames: Frame[] } {
  expect(body.toString('latin1', 0, 4)).toBe('OCKV');
  const version = body.readUInt16LE(4);
  const frames: Frame[] = [];
  for (let at = PREAMBLE_BYTES; at < body.length;) {
    const header = decodeFrameHeader(body.subarray(at, at + FRAME_HEADER_BYTES));
    if (typeof header === 'string') throw new Error(header);
    const payload = body.subarray(at + FRAME_HEADER_BYTES, at + FRAME_HEADER_BYTES + header.length);
    expect(crc32c(payload)).toBe(header.crc32c);
    frames.push({ type: header.type, index: header.index, payload });
    at += FRAME_HEADER_BYTES + header.length;
  }
  return { version, frames };
}

/** A frame payload of a version 2 stream: its slice-length table of `count` lengths, then the slices. */
export function frameSegments(payload: Buffer, count: number): Buffer[] {
  const out: Buffer[] = [];
  let at = 4 * count;
  for (let i = 0; i < count; i++) {
    const length = payload.readUInt32LE(4 * i);
    out.push(payload.subarray(at, at + length));
    at += length;
  }
  expect(at).toBe(payload.length);
  return out;
}
