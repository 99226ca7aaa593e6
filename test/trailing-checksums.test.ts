/**
 * Trailing checksums (aws-chunked with a trailer, what the AWS SDK v3 sends for stream bodies)
 * reach the store through the gateway exactly as with MinIO direct: a streamed PutObject with
 * CRC32C comes back with its ChecksumCRC32C on HEAD, and an UploadPart with a stream body into an
 * upload created with ChecksumAlgorithm CRC32 is accepted and completes.
 */
import { Readable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { createCrc64nvme } from '../native/crc64nvme.js';
import { crc32c } from '../native/crc32c.js';
import { describe, expect, it } from 'vitest';
import { COMPAT_TARGETS, compatSuite } from './helpers/gateway.js';

describe.each(COMPAT_TARGETS)('trailing checksums (%s)', (target) => {
  const suite = compatSuite(target, 'trailer');
  const { bucket } = suite;

  it('stores a streamed PutObject with its CRC32C and answers it on HEAD with checksum mode', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17); // several re-encoded chunks and a partial one
    const put = await suite.s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: 'streamed',
        Body: Readable.from([data.subarray(0, 1_000_000), data.subarray(1_000_000)]),
        ContentLength: data.length,
        ChecksumAlgorithm: 'CRC32C',
      }),
    );
    expect(put.ChecksumCRC32C).toBeDefined();
    const head = await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'streamed', ChecksumMode: 'ENABLED' }));
    expect(head.ChecksumCRC32C).toBe(put.ChecksumCRC32C);
    const body = Buffer.from(await (await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'streamed' }))).Body!.transformToByteArray());
    expect(body.equals(data)).toBe(true);
  });

  it('accepts a streamed UploadPart into an upload created with ChecksumAlgorithm CRC32, and completes it', async () => {
    const data = randomBytes(256 * 1024);
    const { UploadId } = await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'parts', ChecksumAlgorithm: 'CRC32' }));
    const part = await suite.s3.send(
      new UploadPartCommand({ Bucket: bucket, Key: 'parts', UploadId, PartNumber: 1, Body: Readable.from([data]), ContentLength: data.length, ChecksumAlgorithm: 'CRC32' }),
    );
    expect(part.ChecksumCRC32).toBeDefined();
    await suite.s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: 'parts',
        UploadId,
        MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag, ChecksumCRC32: part.ChecksumCRC32 }] },
      }),
    );
    const body = Buffer.from(await (await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'parts' }))).Body!.transformToByteArray());
    expect(body.equals(data)).toBe(true);
  });
});

/**
 * CRC64NVME, the default of aws-sdk-cpp (NIXL's OBJ plugin under vLLM's object tier) and of
 * current SDKs with the CRT: in a header and in an aws-chunked trailer, refused when wrong, and
 * answered with checksum mode, through the gateway exactly as by MinIO direct.
 */
describe.each(COMPAT_TARGETS)('CRC64NVME checksums (%s)', (target) => {
  const suite = compatSuite(target, 'crc64');
  const { bucket } = suite;

  it('stores a streamed PutObject with its CRC64NVME trailer and answers it on HEAD and GET with checksum mode', async () => {
    const data = randomBytes(2 * 1024 * 1024 + 5);
    const put = await suite.s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: 'trailer',
        Body: Readable.from([data.subarray(0, 700_000), data.subarray(700_000)]),
        ContentLength: data.length,
        ChecksumAlgorithm: 'CRC64NVME',
      }),
    );
    const crc = createCrc64nvme();
    crc.update(data);
    const expected = Buffer.from(await crc.digest()).toString('base64');
    expect(put.ChecksumCRC64NVME).toBe(expected);
    const head = await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'trailer', ChecksumMode: 'ENABLED' }));
    expect(head.ChecksumCRC64NVME).toBe(expected);
    const get = await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'trailer', ChecksumMode: 'ENABLED' }));
    expect(get.ChecksumCRC64NVME).toBe(expected);
    expect(Buffer.from(await get.Body!.transformToByteArray()).equals(data)).toBe(true);
  });

  it('checks a CRC64NVME sent in a header, and refuses a wrong one with BadDigest, storing nothing', async () => {
    const data = randomBytes(100_000);
    const crc = createCrc64nvme();
    crc.update(data);
    const value = Buffer.from(await crc.digest()).toString('base64');
    const put = await suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'header', Body: data, ChecksumCRC64NVME: value }));
    expect(put.ChecksumCRC64NVME).toBe(value);
    const wrong = Buffer.from(value, 'base64');
    wrong[0] = (wrong[0] as number) ^ 1;
    const refused = await suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'wrong', Body: data, ChecksumCRC64NVME: wrong.toString('base64') })).catch((e: unknown) => e);
    // AWS S3 and the gateway say BadDigest; MinIO says XAmzContentChecksumMismatch.
    expect((refused as S3ServiceException).$metadata.httpStatusCode).toBe(400);
    expect(target === 'minio-direct' ? 'XAmzContentChecksumMismatch' : 'BadDigest').toBe((refused as S3ServiceException).name);
    const missing = await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'wrong' })).catch((e: unknown) => e);
    expect((missing as S3ServiceException).$metadata.httpStatusCode).toBe(404);
  });
});

/**
 * Multipart checksums as MinIO keeps them (x-amz-checksum-type): FULL_OBJECT is the CRC of the
 * whole object, COMPOSITE the checksum of the parts' checksums followed by `-<parts>`; CRC64NVME is
 * always FULL_OBJECT. The values are computed here independently and must be what the store
 * answers on Complete, on HEAD and on GetObjectAttributes; a whole-object checksum claimed at
 * Complete that the parts do not make stores nothing.
 */
describe.each(COMPAT_TARGETS)('multipart checksums (%s)', (target) => {
  const suite = compatSuite(target, 'mpcrc');
  const { bucket } = suite;
  const first = randomBytes(5 * 1024 * 1024);
  const second = randomBytes(1000);

  async function digest(algorithm: 'CRC64NVME' | 'CRC32C', ...views: Uint8Array[]): Promise<string> {
    if (algorithm === 'CRC64NVME') {
      const crc = createCrc64nvme();
      for (const view of views) crc.update(view);
      return Buffer.from(await crc.digest()).toString('base64');
    }
    let value = 0;
    for (const view of views) value = crc32c(view, value);
    const out = Buffer.alloc(4);
    out.writeUInt32BE(value >>> 0);
    return out.toString('base64');
  }

  it.each([
    ['CRC64NVME', 'FULL_OBJECT', 'FULL_OBJECT'],
    ['CRC64NVME', 'COMPOSITE', 'FULL_OBJECT'],
    ['CRC32C', 'FULL_OBJECT', 'FULL_OBJECT'],
    ['CRC32C', 'COMPOSITE', 'COMPOSITE'],
  ] as const)('%s asked as %s is kept as %s, with the value computed here', async (algorithm, asked, kept) => {
    const Key = `mp-${algorithm}-${asked}`;
    const field = `Checksum${algorithm}` as const;
    const created = await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key, ChecksumAlgorithm: algorithm, ChecksumType: asked }));
    expect(created.ChecksumType).toBe(kept);
    const parts = [];
    for (const [i, data] of [first, second].entries()) {
      const part = await suite.s3.send(new UploadPartCommand({ Bucket: bucket, Key, UploadId: created.UploadId, PartNumber: i + 1, Body: data, ChecksumAlgorithm: algorithm }));
      expect(part[field]).toBe(await digest(algorithm, data));
      parts.push({ PartNumber: i + 1, ETag: part.ETag, [field]: part[field] });
    }
    const done = await suite.s3.send(new CompleteMultipartUploadCommand({ Bucket: bucket, Key, UploadId: created.UploadId, MultipartUpload: { Parts: parts } }));
    const expected =
      kept === 'FULL_OBJECT' ? await digest(algorithm, first, second) : `${await digest(algorithm, ...parts.map((p) => Buffer.from(p[field] as string, 'base64')))}-2`;
    expect(done[field]).toBe(expected);
    const head = await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key, ChecksumMode: 'ENABLED' }));
    expect(head[field]).toBe(expected);
    expect(head.ChecksumType).toBe(kept);
    const body = Buffer.from(await (await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key }))).Body!.transformToByteArray());
    expect(body.equals(Buffer.concat([first, second]))).toBe(true);
  });
  it('refuses a whole-object CRC64NVME claimed at Complete that the parts do not make, storing nothing', async () => {
    const Key = 'mp-claim';
    const created = await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key, ChecksumAlgorithm: 'CRC64NVME', ChecksumType: 'FULL_OBJECT' }));
    const part = await suite.s3.send(new UploadPartCommand({ Bucket: bucket, Key, UploadId: created.UploadId, PartNumber: 1, Body: second, ChecksumAlgorithm: 'CRC64NVME' }));
    const wrong = Buffer.from(await digest('CRC64NVME', first));
    const refused = await suite.s3
      .send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key,
          UploadId: created.UploadId,
          ChecksumCRC64NVME: wrong.toString(),
          ChecksumType: 'FULL_OBJECT',
          MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag, ChecksumCRC64NVME: part.ChecksumCRC64NVME }] },
        }),
      )
      .catch((e: unknown) => e);
    expect((refused as S3ServiceException).$metadata?.httpStatusCode).toBe(400);
    const missing = await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key })).catch((e: unknown) => e);
    expect((missing as S3ServiceException).$metadata.httpStatusCode).toBe(404);
  });
});
