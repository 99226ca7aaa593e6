/**
 * CRC-32C of a byte range, continuing from `previous` (the CRC of the bytes before it; 0 to
 * start). The native module (native/crc32c.c: three interleaved hardware streams, about 3x
 * @node-rs/crc32 on x86-64) when it is built and the CPU has SSE4.2, else @node-rs/crc32. Both
 * give the same value; test/crc32c.test.ts checks one against the other.
 */
import { crc32c as libraryCrc32c } from '@node-rs/crc32';
import { loadNative } from './load.js';

type Crc32c = (bytes: Uint8Array, previous?: number) => number;

const native = loadNative<{ crc32c?: Crc32c }>('crc32c')?.crc32c;

/** Whether the native CRC-32C serves (for the tests and the benchmarks' reports). */
export const nativeCrc32c = native !== undefined;

export const crc32c: Crc32c =
  native ?? ((bytes, previous) => libraryCrc32c(Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), previous) >>> 0);
