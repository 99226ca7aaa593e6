/**
 * CRC-64/NVME (S3's x-amz-checksum-crc64nvme) of a byte range, continuing from `previous` (the CRC
 * of the bytes before it; 0n to start). The native module (native/crc64nvme.c, slice-by-8, about
 * 2.3 GB/s on one core here) when it is built, else the AWS SDK's pure-JS implementation
 * (@aws-sdk/crc64-nvme, about 0.6 GB/s), behind the same incremental interface. Both give the
 * same value; test/crc64nvme.test.ts checks one against the other and the standard check value.
 */
import { Crc64Nvme } from '@aws-sdk/crc64-nvme';
import { loadNative } from './load.js';

type Crc64 = (bytes: Uint8Array, previous?: bigint) => bigint;

const native = loadNative<{ crc64nvme?: Crc64 }>('crc64nvme')?.crc64nvme;

/** Whether the native CRC-64/NVME serves (for the tests). */
export const nativeCrc64nvme = native !== undefined;

/** An incremental CRC-64/NVME: feed bytes, then read the 8-byte big-endian digest. */
export interface Crc64Nvme64 {
  update(bytes: Uint8Array): void;
  digest(): Promise<Uint8Array>;
}

class NativeCrc64 implements Crc64Nvme64 {
  #value = 0n;
  constructor(readonly fn: Crc64) {}
  update(bytes: Uint8Array): void {
    this.#value = this.fn(bytes, this.#value);
  }
  async digest(): Promise<Uint8Array> {
    const out = Buffer.alloc(8);
    out.writeBigUInt64BE(this.#value);
    return out;
  }
}

/** A new incremental CRC-64/NVME (native when built, else the SDK's). */
export function createCrc64nvme(): Crc64Nvme64 {
  return native ? new NativeCrc64(native) : new Crc64Nvme();
}

/** The CRC-64/NVME of `bytes` in one call, as a bigint (tests and vectors). */
export async function crc64nvme(bytes: Uint8Array): Promise<bigint> {
  const crc = createCrc64nvme();
  crc.update(bytes);
  return Buffer.from(await crc.digest()).readBigUInt64BE();
}

/** The JS implementation alone, to check the native one against. */
export function createJsCrc64nvme(): Crc64Nvme64 {
  return new Crc64Nvme();
}
