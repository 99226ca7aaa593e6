/**
 * Trailing checksums (aws-chunked with a trailer, what the AWS SDK v3 sends for stream bodies)
 * reach the store through the gateway exactly as with MinIO direct: a streamed PutObject with
 * CRC32C comes back with its ChecksumCRC32C on HEAD, and an UploadPart with a stream body into an
 * upload created with ChecksumAlgorithm CRC32 is accepted and completes.
 */
import { Readable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { CompleteMultipartUploadCommand, CreateMultipartUploadCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, UploadPartCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { COMPAT_TARGETS, compatSuite } from './helpers/gateway.js';

describe.each(COMPAT_TARGETS)('trailing checksums (%s)', (target) => {
  const suite = compatSuite(target, 'trailer');
  const { bucket } = suite;

  it('stores a streamed PutObject with its CRC32C and answers it on HEAD with checksum mode', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17); // several re-encoded chunks and a partial one
    const put = await suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'streamed', Body: Readable.from([data.subarray(0, 1_000_000), data.subarray(1_000_000)]), ContentLength: data.length, ChecksumAlgorithm: 'CRC32C' }));
    expect(put.ChecksumCRC32C).toBeDefined();
    const head = await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'streamed', ChecksumMode: 'ENABLED' }));
    expect(head.ChecksumCRC32C).toBe(put.ChecksumCRC32C);
    const body = Buffer.from(await (await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'streamed' }))).Body!.transformToByteArray());
    expect(body.equals(data)).toBe(true);
  });

  it('accepts a streamed UploadPart into an upload created with ChecksumAlgorithm CRC32, and completes it', async () => {
    const data = randomBytes(256 * 1024);
    const { UploadId } = await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'parts', ChecksumAlgorithm: 'CRC32' }));
    const part = await suite.s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'parts', UploadId, PartNumber: 1, Body: Readable.from([data]), ContentLength: data.length, ChecksumAlgorithm: 'CRC32' }));
    expect(part.ChecksumCRC32).toBeDefined();
    await suite.s3.send(new CompleteMultipartUploadCommand({ Bucket: bucket, Key: 'parts', UploadId, MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag, ChecksumCRC32: part.ChecksumCRC32 }] } }));
    const body = Buffer.from(await (await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'parts' }))).Body!.transformToByteArray());
    expect(body.equals(data)).toBe(true);
  });
});
