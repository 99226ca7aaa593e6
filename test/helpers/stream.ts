/**
 * A descriptor GET's response body read back (schemas/wire-format.md): its preamble's version and
 * its frames, each frame's CRC32C checked; and a version 2 frame's segments (section 6).
 */
import { expect } from 'vitest';
import { crc32c } from '../../native/crc32c.js';
import { decodeFrameHeader, FRAME_HEADER_BYTES, PREAMBLE_BYTES } from '../../schemas/frames.js';

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
  for (let at = PREAMBLE_BYTES; at < body.length; ) {
    const header = decodeFrameHeader(body.subarray(at, at + FRAME_HEADER_BYTES));
    if (typeof header === 'string') throw new Error(header);
    const payload = body.subarray(at + FRAME_HEADER_BYTES, at + FRAME_HEADER_BYTES + header.length);
    expect(crc32c(payload)).toBe(header.crc32c);
    frames.push({ type: header.type, index: header.index, payload });
    at += FRAME_HEADER_BYTES + header.length;
  }
  return { version, frames };
}

/** A frame payload of a version 2 stream: its segment table of `count` lengths, then the segments. */
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
