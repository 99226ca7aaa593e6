/**
 * The frame checksum is combined from the read workers' slice checksums: it must equal the
 * CRC32C of the concatenated bytes for any split, any slice length and any number of slices.
 */
import { crc32c } from '@node-rs/crc32';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32cCombine, crc32cShift } from '../schemas/crc32c-combine.js';

describe('crc32cCombine', () => {
  it('equals the CRC32C of the concatenation for arbitrary parts', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 3000 }), fc.uint8Array({ minLength: 0, maxLength: 3000 }), (a, b) => {
        const whole = crc32c(Buffer.concat([a, b]));
        expect(crc32cCombine(crc32c(Buffer.from(a)), crc32c(Buffer.from(b)), crc32cShift(b.byteLength))).toBe(whole);
      }),
    );
  });

  it('combines many equal-length slices with one shift, as a layer frame does', () => {
    const slice = 65_536;
    const slices = Array.from({ length: 37 }, (_, i) => Buffer.alloc(slice, (i * 31 + 7) & 0xff).fill(i, i * 100, i * 100 + 50));
    const shift = crc32cShift(slice);
    let crc = crc32c(slices[0] as Buffer);
    for (const s of slices.slice(1)) crc = crc32cCombine(crc, crc32c(s), shift);
    expect(crc).toBe(crc32c(Buffer.concat(slices)));
  });

  it('handles slice lengths beyond 2^32 bytes without 32-bit overflow', () => {
    // A shift by 2^32 bytes is four shifts by 2^30 (a length 32-bit arithmetic still holds), so a
    // shift computed with 32-bit operators (2^32 read as 0, the identity) cannot pass.
    const a = crc32c(Buffer.from('layer'));
    const by = (crc: number, bytes: number, times = 1): number => {
      for (let i = 0; i < times; i++) crc = crc32cCombine(crc, 0, crc32cShift(bytes));
      return crc;
    };
    expect(by(a, 2 ** 32)).not.toBe(a);
    expect(by(a, 2 ** 32)).toBe(by(a, 2 ** 30, 4));
    expect(by(a, 2 ** 33)).toBe(by(a, 2 ** 30, 8));
    expect(by(a, 2 ** 32 + 5)).toBe(by(by(a, 2 ** 30, 4), 5));
    expect(by(a, 3 * 2 ** 40 + 12_345)).toBe(by(by(by(a, 2 ** 30, 3 * 1024), 12_000), 345));
    // And shifting by zero bytes changes nothing.
    expect(by(a, 0)).toBe(a);
  });
});
