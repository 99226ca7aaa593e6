/**
 * CopyObject (what `aws s3 mv`, boto3's copy_object and minio-js copyObject send) through the
 * gateway on both backends, with MinIO direct as the reference: bytes and metadata copied (COPY)
 * or replaced (REPLACE), x-amz-copy-source-if-* conditions (412), a copy onto itself that changes
 * nothing refused (400 InvalidRequest), a missing source 404; and UploadPartCopy with and without
 * x-amz-copy-source-range.
 */
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  UploadPartCopyCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { COMPAT_TARGETS, compatSuite, uniqueBucket } from './helpers/gateway.js';

async function failure(promise: Promise<unknown>): Promise<{ status: number; name: string }> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof S3ServiceException) return { status: error.$metadata.httpStatusCode ?? 0, name: error.name };
    throw error;
  }
  return { status: 200, name: 'OK' };
}

describe.each(COMPAT_TARGETS)('CopyObject (%s)', (target) => {
  const suite = compatSuite(target, 'copy', async (s3, bucket) => {
    await s3.send(new CreateBucketCommand({ Bucket: other }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'src key+1', Body: data, ContentType: 'application/x-kv', Metadata: { layers: '32' } }));
  });
  const { bucket } = suite;
  const other = uniqueBucket('copy-dest');
  const data = randomBytes(2 * 1024 * 1024 + 3);

  const bytes = async (b: string, k: string): Promise<Buffer> => Buffer.from(await (await suite.s3.send(new GetObjectCommand({ Bucket: b, Key: k }))).Body!.transformToByteArray());

  it('copies bytes and metadata to another bucket (COPY), or replaces the metadata (REPLACE)', async () => {
    const copied = await suite.s3.send(new CopyObjectCommand({ Bucket: other, Key: 'dest', CopySource: `${bucket}/${encodeURIComponent('src key+1')}` }));
    expect(copied.CopyObjectResult?.ETag).toMatch(/^"[0-9a-f]{32}"$/);
    expect((await bytes(other, 'dest')).equals(data)).toBe(true);
    const head = await suite.s3.send(new HeadObjectCommand({ Bucket: other, Key: 'dest' }));
    expect(head.ContentType).toBe('application/x-kv');
    expect(head.Metadata).toEqual({ layers: '32' });
    await suite.s3.send(
      new CopyObjectCommand({
        Bucket: other,
        Key: 'replaced',
        CopySource: `${bucket}/${encodeURIComponent('src key+1')}`,
        MetadataDirective: 'REPLACE',
        ContentType: 'text/plain',
        Metadata: { note: 'new' },
      }),
    );
    const replaced = await suite.s3.send(new HeadObjectCommand({ Bucket: other, Key: 'replaced' }));
    expect(replaced.ContentType).toBe('text/plain');
    expect(replaced.Metadata).toEqual({ note: 'new' });
    expect((await bytes(other, 'replaced')).equals(data)).toBe(true);
  });

  it('honours x-amz-copy-source-if-match / if-none-match, and refuses a copy onto itself that changes nothing', async () => {
    const source = `${bucket}/${encodeURIComponent('src key+1')}`;
    const { ETag } = await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'src key+1' }));
    expect(
      (await failure(suite.s3.send(new CopyObjectCommand({ Bucket: other, Key: 'cond', CopySource: source, CopySourceIfMatch: '"00000000000000000000000000000000"' })))).status,
    ).toBe(412);
    expect((await failure(suite.s3.send(new CopyObjectCommand({ Bucket: other, Key: 'cond', CopySource: source, CopySourceIfNoneMatch: ETag })))).status).toBe(412);
    expect((await failure(suite.s3.send(new HeadObjectCommand({ Bucket: other, Key: 'cond' })))).status).toBe(404);
    expect((await failure(suite.s3.send(new CopyObjectCommand({ Bucket: other, Key: 'cond', CopySource: source, CopySourceIfMatch: ETag })))).status).toBe(200);
    expect(await failure(suite.s3.send(new CopyObjectCommand({ Bucket: bucket, Key: 'src key+1', CopySource: source })))).toEqual({ status: 400, name: 'InvalidRequest' });
    await suite.s3.send(
      new CopyObjectCommand({
        Bucket: bucket,
        Key: 'src key+1',
        CopySource: source,
        MetadataDirective: 'REPLACE',
        ContentType: 'application/x-kv',
        Metadata: { layers: '32', touched: 'yes' },
      }),
    );
    expect((await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'src key+1' }))).Metadata).toEqual({ layers: '32', touched: 'yes' });
    expect((await bytes(bucket, 'src key+1')).equals(data)).toBe(true);
  });

  it('builds a multipart object from a range of another (UploadPartCopy)', async () => {
    const source = `${bucket}/${encodeURIComponent('src key+1')}`;
    const { UploadId } = await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: other, Key: 'assembled' }));
    const whole = await suite.s3.send(new UploadPartCopyCommand({ Bucket: other, Key: 'assembled', UploadId, PartNumber: 2, CopySource: source }));
    expect(whole.CopyPartResult?.ETag).toMatch(/^"[0-9a-f]{32}"$/);
    const ranged = await suite.s3.send(
      new UploadPartCopyCommand({ Bucket: other, Key: 'assembled', UploadId, PartNumber: 1, CopySource: source, CopySourceRange: `bytes=100-${data.length - 1}` }),
    );
    expect(
      (
        await failure(
          suite.s3.send(new UploadPartCopyCommand({ Bucket: other, Key: 'assembled', UploadId, PartNumber: 3, CopySource: source, CopySourceRange: `bytes=0-${data.length}` })),
        )
      ).status,
    ).not.toBe(200);
    // Parts under 5 MiB may only be last: complete with the ranged part alone.
    await suite.s3.send(
      new CompleteMultipartUploadCommand({ Bucket: other, Key: 'assembled', UploadId, MultipartUpload: { Parts: [{ PartNumber: 1, ETag: ranged.CopyPartResult?.ETag }] } }),
    );
    expect((await bytes(other, 'assembled')).equals(data.subarray(100))).toBe(true);
  });

  it('answers 404 NoSuchKey for a missing source', async () => {
    expect(await failure(suite.s3.send(new CopyObjectCommand({ Bucket: other, Key: 'x', CopySource: `${bucket}/never-written` })))).toEqual({ status: 404, name: 'NoSuchKey' });
  });
});
