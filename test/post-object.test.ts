/**
 * Browser-form POST uploads, with policies made by the AWS SDK's createPresignedPost (the same
 * form boto3's generate_presigned_post makes), through the gateway on both backends and against
 * MinIO direct as the reference: a valid form stores the file (${filename} in the key, metadata,
 * Content-Type, success_action_status 201); a file beyond content-length-range, a tampered
 * signature, a field the policy does not name and an expired policy are refused and store nothing;
 * fields sent as file parts (with a filename) are fields, as at S3 and MinIO.
 */
import { createPresignedPost } from '@aws-sdk/s3-presigned-post';
import { GetObjectCommand, HeadObjectCommand, S3ServiceException } from '@aws-sdk/client-s3';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { COMPAT_TARGETS, compatSuite } from './helpers/gateway.js';

describe.each(COMPAT_TARGETS)('form POST uploads (%s)', (target) => {
  const suite = compatSuite(target, 'post');
  const { bucket } = suite;

  async function presigned(expires = 300): Promise<{ url: string; fields: Record<string, string> }> {
    return createPresignedPost(suite.s3, {
      Bucket: bucket,
      Key: 'uploads/${filename}',
      Conditions: [
        ['content-length-range', 1, 64 * 1024],
        ['starts-with', '$Content-Type', 'application/'],
        ['starts-with', '$key', 'uploads/'],
      ],
      Fields: { 'Content-Type': 'application/x-kv', 'x-amz-meta-source': 'form', success_action_status: '201' },
      Expires: expires,
    });
  }

  async function post(url: string, fields: Record<string, string>, file: Buffer, filename: string): Promise<{ status: number; body: string }> {
    const form = new FormData();
    for (const [name, value] of Object.entries(fields)) form.append(name, value);
    form.append('file', new Blob([file]), filename);
    const res = await fetch(url, { method: 'POST', body: form });
    return { status: res.status, body: await res.text() };
  }

  const exists = async (key: string): Promise<boolean> =>
    suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key })).then(
      () => true,
      (e: S3ServiceException) => (e.$metadata.httpStatusCode === 404 ? false : Promise.reject(e)),
    );

  it('stores the file under the key with ${filename}, with its Content-Type and metadata', async () => {
    const { url, fields } = await presigned();
    const data = randomBytes(40_000);
    const answer = await post(url, fields, data, 'chunk-0.bin');
    expect(answer.status, answer.body).toBe(201);
    expect(answer.body).toContain('<Key>uploads/chunk-0.bin</Key>');
    const stored = await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'uploads/chunk-0.bin' }));
    expect(stored.ContentType).toBe('application/x-kv');
    expect(stored.Metadata).toEqual({ source: 'form' });
    expect(Buffer.from(await stored.Body!.transformToByteArray()).equals(data)).toBe(true);
  });

  it('takes parts other than "file" that carry a filename as ordinary fields (how Python requests sends files=)', async () => {
    const { url, fields } = await presigned();
    const form = new FormData();
    for (const [name, value] of Object.entries(fields)) form.append(name, new Blob([value]), name);
    const data = randomBytes(1000);
    form.append('file', new Blob([data]), 'as-files.bin');
    const res = await fetch(url, { method: 'POST', body: form });
    expect(res.status, await res.clone().text()).toBe(201);
    const stored = await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'uploads/as-files.bin' }));
    expect(stored.Metadata).toEqual({ source: 'form' });
    expect(Buffer.from(await stored.Body!.transformToByteArray()).equals(data)).toBe(true);
  });

  it('refuses a file beyond content-length-range, a tampered signature and a field the policy does not name, storing nothing', async () => {
    const { url, fields } = await presigned();
    const big = await post(url, fields, randomBytes(64 * 1024 + 1), 'too-big.bin');
    expect(big.status).toBe(400);
    expect(big.body).toContain('EntityTooLarge');
    expect(await exists('uploads/too-big.bin')).toBe(false);
    const signatureField = Object.keys(fields).find((name) => name.toLowerCase() === 'x-amz-signature') as string;
    const tampered = await post(
      url,
      { ...fields, [signatureField]: (fields[signatureField] as string).replace(/.$/, (c) => (c === '0' ? '1' : '0')) },
      Buffer.from('x'),
      'tampered.bin',
    );
    expect(tampered.status).toBe(403);
    expect(await exists('uploads/tampered.bin')).toBe(false);
    const extra = await post(url, { ...fields, 'x-amz-meta-unlisted': 'no' }, Buffer.from('x'), 'extra.bin');
    expect(extra.status).toBe(403);
    expect(await exists('uploads/extra.bin')).toBe(false);
  });

  it('refuses an expired policy', async () => {
    const { url, fields } = await presigned(1);
    await new Promise((resolve) => setTimeout(resolve, 2100));
    const late = await post(url, fields, Buffer.from('x'), 'late.bin');
    expect(late.status).toBe(403);
    expect(late.body).toContain('AccessDenied');
    expect(await exists('uploads/late.bin')).toBe(false);
  });
});
