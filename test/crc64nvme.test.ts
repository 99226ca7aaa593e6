// CRC-64/NVME (x-amz-checksum-crc64nvme): the native module (native/crc64nvme.c) against the
// standard check value and the AWS SDK's implementation it stands in for, at every length class
// and alignment of its eight-byte steps, continued across calls, and over shared memory.
import { randomBytes } from 'node:crypto';
import { arch, platform } from 'node:os';
import { describe, expect, it } from 'vitest';
import { createCrc64nvme, createJsCrc64nvme, crc64nvme, nativeCrc64nvme } from '../native/crc64nvme.js';

const bytes = randomBytes(3 * 8192 + 4099);

async function js(view: Uint8Array): Promise<string> {
  const crc = createJsCrc64nvme();
  crc.update(view);
  return Buffer.from(await crc.digest()).toString('hex');
}

async function ours(...views: Uint8Array[]): Promise<string> {
  const crc = createCrc64nvme();
  for (const view of views) crc.update(view);
  return Buffer.from(await crc.digest()).toString('hex');
}

describe('crc64nvme', () => {
  it('is the native module on Linux (the build compiled it)', () => {
    if (platform() === 'linux' && arch() === 'x64') expect(nativeCrc64nvme).toBe(true);
  });

  it('gives the standard check values (CRC-64/NVME catalogue: "123456789"; the empty string)', async () => {
    expect((await crc64nvme(Buffer.from('123456789'))).toString(16)).toBe('ae8b14860a799888');
    expect(await crc64nvme(new Uint8Array(0))).toBe(0n);
    // S3's documented example: the CRC64NVME of "Hello world" is "OOJZ0D8xKts=" (base64).
    const crc = createCrc64nvme();
    crc.update(Buffer.from('Hello world'));
    expect(Buffer.from(await crc.digest()).toString('base64')).toBe('OOJZ0D8xKts=');
  });

  it('matches the AWS SDK implementation at every length class and alignment', async () => {
    for (const start of [0, 1, 3, 7, 8]) {
      for (const length of [1, 7, 8, 9, 15, 16, 17, 63, 4096, 8191, bytes.length - 8]) {
        const view = bytes.subarray(start, start + length);
        expect(await ours(view), `start ${start} length ${length}`).toBe(await js(view));
      }
    }
  });

  it('continues across updates, and reads shared memory', async () => {
    for (const cut of [0, 5, 8, 8193, bytes.length]) expect(await ours(bytes.subarray(0, cut), bytes.subarray(cut))).toBe(await js(bytes));
    const shared = new Uint8Array(new SharedArrayBuffer(bytes.length));
    shared.set(bytes);
    expect(await ours(shared.subarray(3, 3 + 30000))).toBe(await js(bytes.subarray(3, 3 + 30000)));
  });
});
