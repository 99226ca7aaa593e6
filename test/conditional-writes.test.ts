/**
 * Conditional writes (If-Match / If-None-Match on PutObject and CompleteMultipartUpload) through
 * the gateway on both backends, with MinIO direct as the reference: a failed condition is
 * 412 PreconditionFailed and leaves the stored object exactly as it was.
 */
import { CompleteMultipartUploadCommand, CreateMultipartUploadCommand, GetObjectCommand, PutObjectCommand, S3ServiceException, UploadPartCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { COMPAT_TARGETS, compatSuite } from './helpers/gateway.js';

async function status(promise: Promise<unknown>): Promise<number> {
  try {
    await promise;
    return 200;
  } catch (error) {
    return (error as S3ServiceException).$metadata?.httpStatusCode ?? -1;
  }
}

describe.each(COMPAT_TARGETS)('conditional writes (%s)', (target) => {
  const suite = compatSuite(target, 'cond');
  const { bucket } = suite;

  const read = async (key: string): Promise<string> => (await (await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body?.transformToString()) ?? '';
  const put = (key: string, body: string, conditions: { IfMatch?: string; IfNoneMatch?: string } = {}): Promise<{ ETag?: string | undefined }> => suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ...conditions }));

  it('PUT If-Match: refused (412) unless the ETag matches, and the object stays as it was', async () => {
    const { ETag } = await put('im', 'first');
    expect(await status(put('im', 'second', { IfMatch: '"0123456789abcdef0123456789abcdef"' }))).toBe(412);
    expect(await read('im')).toBe('first');
    expect(await status(put('im', 'second', { IfMatch: ETag as string }))).toBe(200);
    expect(await read('im')).toBe('second');
    expect(await status(put('never-written', 'x', { IfMatch: ETag as string }))).not.toBe(200);
  });

  it('PUT If-None-Match: * refuses to overwrite; an ETag refuses only the matching version', async () => {
    const { ETag } = await put('inm', 'first');
    expect(await status(put('inm', 'second', { IfNoneMatch: '*' }))).toBe(412);
    expect(await status(put('inm', 'second', { IfNoneMatch: ETag as string }))).toBe(412);
    expect(await read('inm')).toBe('first');
    expect(await status(put('inm', 'third', { IfNoneMatch: '"0123456789abcdef0123456789abcdef"' }))).toBe(200);
    expect(await read('inm')).toBe('third');
    expect(await status(put('inm-new', 'new', { IfNoneMatch: '*' }))).toBe(200);
  });

  it('CompleteMultipartUpload honours If-Match and If-None-Match, leaving the object untouched on 412', async () => {
    await put('mp', 'original');
    const start = async (): Promise<{ UploadId: string; parts: { PartNumber: number; ETag: string }[] }> => {
      const { UploadId } = await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'mp' }));
      const part = await suite.s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'mp', UploadId, PartNumber: 1, Body: 'multipart body' }));
      return { UploadId: UploadId as string, parts: [{ PartNumber: 1, ETag: part.ETag as string }] };
    };
    const complete = (upload: { UploadId: string; parts: { PartNumber: number; ETag: string }[] }, conditions: { IfMatch?: string; IfNoneMatch?: string }) =>
      suite.s3.send(new CompleteMultipartUploadCommand({ Bucket: bucket, Key: 'mp', UploadId: upload.UploadId, MultipartUpload: { Parts: upload.parts }, ...conditions }));
    const upload = await start();
    expect(await status(complete(upload, { IfNoneMatch: '*' }))).toBe(412);
    expect(await status(complete(upload, { IfMatch: '"0123456789abcdef0123456789abcdef"' }))).toBe(412);
    expect(await read('mp')).toBe('original');
    expect(await status(complete(upload, {}))).toBe(200);
    expect(await read('mp')).toBe('multipart body');
  });
});
