/**
 * CRC32C of a concatenation from the CRCs of its parts, without touching the bytes again
 * (the GF(2) polynomial method of zlib's crc32_combine). The read workers checksum every slice
 * they read; the frame checksum of a layer (the slices of every chunk, in order) is built from
 * those, so each byte is checksummed once.
 */

/** CRC-32C (Castagnoli), reflected. */
const POLY = 0x82f63b78;

/** a(x) * b(x) mod p(x), in the reflected bit order of the CRC. */
function multModP(a: number, b: number): number {
  let m = 0x80000000;
  let p = 0;
  for (;;) {
    if ((a & m) !== 0) {
      p ^= b;
      if ((a & (m - 1)) === 0) break;
    }
    m >>>= 1;
    b = b & 1 ? (b >>> 1) ^ POLY : b >>> 1;
  }
  return p >>> 0;
}

/** x^(2^k) mod p(x) for k = 0..63 (lengths up to 2^60 bytes, no reliance on the cycle length). */
const X2N: number[] = (() => {
  const table: number[] = [];
  let p = 0x40000000; // x^1
  for (let k = 0; k < 64; k++) {
    table.push(p);
    p = multModP(p, p);
  }
  return table;
})();

/** x^(8 * bytes) mod p(x): the operator that shifts a CRC past `bytes` bytes. */
export function crc32cShift(bytes: number): number {
  let p = 0x80000000; // x^0
  let k = 3; // 8 * bytes = bytes * 2^3
  // `bytes` may exceed 2^32 (frames up to 2^53): walk its bits without 32-bit operators.
  for (let n = bytes; n > 0; n = Math.floor(n / 2), k++) {
    if (n % 2 === 1) p = multModP(X2N[k] as number, p);
  }
  return p;
}

/**
 * CRC32C of A || B from crc(A), crc(B) and `shift` = crc32cShift(length of B). With a shift made
 * once per slice length, combining N slices costs N small multiplications.
 */
export function crc32cCombine(crcA: number, crcB: number, shift: number): number {
  return (multModP(shift, crcA >>> 0) ^ crcB) >>> 0;
}
