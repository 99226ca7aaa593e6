// The native CRC-32C (native/crc32c.c) against @node-rs/crc32, the library it stands in for:
// lengths around its 3 x 8 KiB blocks, unaligned starts, continuation, shared memory.
import { randomBytes } from 'node:crypto';
import { arch, platform } from 'node:os';
import { crc32c as reference } from '@node-rs/crc32';
import { describe, expect, it } from 'vitest';
import { crc32c, nativeCrc32c } from '../native/crc32c.js';

const bytes = randomBytes(3 * 3 * 8192 + 4099);

describe('crc32c', () => {
  it('is the native module on x86-64 Linux (the build compiled it)', () => {
    if (platform() === 'linux' && arch() === 'x64') expect(nativeCrc32c).toBe(true);
  });

  it('gives the standard check value', () => {
    expect(crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(0))).toBe(0);
  });

  it('matches @node-rs/crc32 at every length class and alignment', () => {
    const lengths = [1, 7, 8, 9, 63, 4096, 8191, 8192, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 3 * 3 * 8192, bytes.length - 8];
    for (const start of [0, 1, 3, 5, 8]) {
      for (const length of lengths) {
        const view = bytes.subarray(start, start + length);
        expect(crc32c(view), `start ${start} length ${length}`).toBe(reference(view) >>> 0);
      }
    }
  });

  it('continues from a previous CRC as the library does', () => {
    for (const cut of [0, 5, 8192, 3 * 8192 + 3, bytes.length]) {
      const first = crc32c(bytes.subarray(0, cut));
      expect(crc32c(bytes.subarray(cut), first)).toBe(reference(bytes) >>> 0);
      expect(crc32c(bytes.subarray(cut), first)).toBe(reference(bytes.subarray(cut), reference(bytes.subarray(0, cut))) >>> 0);
    }
  });

  it('reads views of shared memory (the task buffers)', () => {
    const shared = new Uint8Array(new SharedArrayBuffer(bytes.length));
    shared.set(bytes);
    expect(crc32c(shared.subarray(3, 3 + 30000))).toBe(reference(bytes.subarray(3, 3 + 30000)) >>> 0);
  });
});
