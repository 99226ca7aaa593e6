/**
 * Incremental checksums for S3 flexible checksums (x-amz-checksum-*) and Content-MD5.
 * https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html
 */
import { createHash, type Hash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { crc32c } from '../../../native/crc32c.js';
import { createCrc64nvme, type Crc64Nvme64 } from '../../../native/crc64nvme.js';
import { ObjectCacheError } from '../../../schemas/errors.js';

export type ChecksumAlgorithm = 'crc32' | 'crc32c' | 'crc64nvme' | 'sha1' | 'sha256';

export const CHECKSUM_ALGORITHMS: readonly ChecksumAlgorithm[] = ['crc32', 'crc32c', 'crc64nvme', 'sha1', 'sha256'];

/** Digest length in bytes, to validate the base64 a client sent. */
const DIGEST_BYTES: Record<ChecksumAlgorithm, number> = { crc32: 4, crc32c: 4, crc64nvme: 8, sha1: 20, sha256: 32 };

/** Characters of the base64 value of a checksum (x-amz-checksum-* headers and trailers). */
export function checksumValueLength(algorithm: ChecksumAlgorithm): number {
  return Math.ceil(DIGEST_BYTES[algorithm] / 3) * 4;
}

export interface IncrementalChecksum {
  update(data: Uint8Array): void;
  /** Base64 of the big-endian digest, as S3 encodes x-amz-checksum-* values. */
  digestBase64(): Promise<string>;
}

class CrcChecksum implements IncrementalChecksum {
  #value = 0;
  readonly #fn: (data: Uint8Array, initial: number) => number;
  constructor(fn: (data: Uint8Array, initial: number) => number) {
    this.#fn = fn;
  }
  update(data: Uint8Array): void {
    this.#value = this.#fn(data, this.#value);
  }
  async digestBase64(): Promise<string> {
    const out = Buffer.alloc(4);
    out.writeUInt32BE(this.#value >>> 0);
    return out.toString('base64');
  }
}

/** CRC-64/NVME (native/crc64nvme.ts: the native module, else the AWS SDK's JS). */
class Crc64Checksum implements IncrementalChecksum {
  readonly #crc: Crc64Nvme64 = createCrc64nvme();
  update(data: Uint8Array): void {
    this.#crc.update(data);
  }
  async digestBase64(): Promise<string> {
    return Buffer.from(await this.#crc.digest()).toString('base64');
  }
}

class HashChecksum implements IncrementalChecksum {
  readonly #hash: Hash;
  constructor(algorithm: string) {
    this.#hash = createHash(algorithm);
  }
  update(data: Uint8Array): void {
    this.#hash.update(data);
  }
  async digestBase64(): Promise<string> {
    return this.#hash.digest('base64');
  }
}

export function createChecksum(algorithm: ChecksumAlgorithm | 'md5'): IncrementalChecksum {
  switch (algorithm) {
    case 'crc32':
      return new CrcChecksum((data, initial) => crc32(data, initial));
    case 'crc32c':
      return new CrcChecksum((data, initial) => crc32c(data, initial));
    case 'crc64nvme':
      return new Crc64Checksum();
    case 'sha1':
      return new HashChecksum('sha1');
    case 'sha256':
      return new HashChecksum('sha256');
    case 'md5':
      return new HashChecksum('md5');
  }
}

/** Maps `x-amz-checksum-crc32` (or `CRC32`) to its algorithm; unknown ones are a clear 400. */
export function checksumAlgorithmOf(name: string): ChecksumAlgorithm {
  const lower = name.toLowerCase().replace(/^x-amz-checksum-/, '');
  if ((CHECKSUM_ALGORITHMS as readonly string[]).includes(lower)) return lower as ChecksumAlgorithm;
  throw new ObjectCacheError(
    'OC_ERR_REQUEST_UNSUPPORTED_CHECKSUM',
    `The checksum algorithm ${JSON.stringify(name)} is not supported; use CRC32, CRC32C, CRC64NVME, SHA1 or SHA256`,
  );
}

/** Validates that `value` is base64 of the algorithm's digest length. */
export function assertChecksumValue(algorithm: ChecksumAlgorithm | 'md5', value: string, header: string): void {
  const bytes = algorithm === 'md5' ? 16 : DIGEST_BYTES[algorithm];
  const decoded = /^[A-Za-z0-9+/]+={0,2}$/.test(value) ? Buffer.from(value, 'base64') : Buffer.alloc(0);
  if (decoded.length !== bytes || decoded.toString('base64') !== value) {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_DIGEST', `${header} must be the base64 of a ${bytes}-byte digest`);
  }
}
