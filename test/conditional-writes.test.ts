/**
 * Conditional writes (If-Match / If-None-Match on PutObject and CompleteMultipartUpload) through
 * the gateway on both backends, with MinIO direct as the reference: a failed condition is
 * 412 PreconditionFailed and leaves the stored object exactly as it was, and of concurrent
 * writers under one condition exactly one wins.
 */
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  PutObjectCommand,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMPAT_TARGETS, compatSuite, sdkClient, startTestGateway, type TestGateway } from './helpers/gateway.js';

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
  const put = (key: string, body: string, conditions: { IfMatch?: string; IfNoneMatch?: string } = {}): Promise<{ ETag?: string | undefined }> =>
    suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ...conditions }));

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

/** Concurrent writers under one condition, and trials of them. */
const WRITERS = 8;
const TRIALS = 5;

/** A distinct body per writer (equal bodies would share an ETag and could all match If-Match). */
const bodyOf = (trial: number, writer: number): string => `trial ${trial} writer ${writer} `.repeat(4096);

/** The index of the one writer whose request answered 200; fails unless exactly one did and the rest are 412. */
function oneWinner(statuses: number[]): number {
  expect(statuses.filter((s) => s === 200)).toHaveLength(1);
  expect(statuses.filter((s) => s !== 200)).toEqual(new Array(WRITERS - 1).fill(412));
  return statuses.indexOf(200);
}

describe.each(COMPAT_TARGETS)('concurrent conditional writes (%s)', (target) => {
  const suite = compatSuite(target, 'race');
  const { bucket } = suite;
  const read = async (key: string): Promise<string> => (await (await suite.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body?.transformToString()) ?? '';

  it(`PUT If-None-Match: * from ${WRITERS} writers at once: exactly one creates the object, with its bytes`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      const key = `inm-${trial}`;
      const statuses = await Promise.all(
        Array.from({ length: WRITERS }, (_, w) => status(suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: bodyOf(trial, w), IfNoneMatch: '*' })))),
      );
      expect(await read(key)).toBe(bodyOf(trial, oneWinner(statuses)));
    }
  });

  it(`PUT If-Match: <etag> from ${WRITERS} writers at once: exactly one replaces that version, with its bytes`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      const key = `im-${trial}`;
      const { ETag } = await suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'original' }));
      const statuses = await Promise.all(
        Array.from({ length: WRITERS }, (_, w) => status(suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: bodyOf(trial, w), IfMatch: ETag })))),
      );
      expect(await read(key)).toBe(bodyOf(trial, oneWinner(statuses)));
    }
  });

  it(`CompleteMultipartUpload If-None-Match: * from ${WRITERS} uploads at once: exactly one completes`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      const key = `mp-${trial}`;
      const uploads = await Promise.all(
        Array.from({ length: WRITERS }, async (_, w) => {
          const { UploadId } = await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
          const part = await suite.s3.send(new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: 1, Body: bodyOf(trial, w) }));
          return { UploadId: UploadId as string, ETag: part.ETag as string };
        }),
      );
      const statuses = await Promise.all(
        uploads.map(({ UploadId, ETag }) =>
          status(
            suite.s3.send(new CompleteMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId, MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] }, IfNoneMatch: '*' })),
          ),
        ),
      );
      expect(await read(key)).toBe(bodyOf(trial, oneWinner(statuses)));
    }
  });
});

/**
 * CopyObject with a condition on its destination, and the staged files of losing writers: the
 * embedded store only (MinIO takes no If-None-Match on CopyObject, and its files are its own).
 */
describe('concurrent conditional writes on the embedded store', () => {
  let gw: TestGateway;
  let s3: ReturnType<typeof sdkClient>;
  const bucket = 'race';
  beforeAll(async () => {
    gw = await startTestGateway({ backend: 'local' });
    s3 = sdkClient(gw.url);
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await Promise.all(Array.from({ length: WRITERS }, (_, w) => s3.send(new PutObjectCommand({ Bucket: bucket, Key: `source-${w}`, Body: bodyOf(-1, w) }))));
  });
  afterAll(async () => {
    s3?.destroy();
    await gw?.close();
  });

  it(`CopyObject If-None-Match: * from ${WRITERS} writers at once: exactly one copy lands, and no loser leaves a staged file`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      const key = `copy-${trial}`;
      const statuses = await Promise.all(
        Array.from({ length: WRITERS }, (_, w) => status(s3.send(new CopyObjectCommand({ Bucket: bucket, Key: key, CopySource: `${bucket}/source-${w}`, IfNoneMatch: '*' })))),
      );
      const winner = oneWinner(statuses);
      expect(await (await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body?.transformToString()).toBe(bodyOf(-1, winner));
    }
    expect(readdirSync(join(gw.dataDir as string, '.tmp'))).toEqual([]);
  });
});
