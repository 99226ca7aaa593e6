/**
 * Backend faults and client aborts with a real MinIO of the test's own (so it can be stopped
 * and restarted without disturbing other tests): an unreachable backend is 503 S3 XML and the
 * gateway recovers when MinIO returns; a client that goes away mid-response aborts the backend
 * request; a client that goes away mid-upload leaves no object behind, in either backend.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { CreateBucketCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3ServiceException, type S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { until } from './helpers/wait.js';
import { signedHeaders } from './helpers/signing.js';
import { sdkClient, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';
import { startMinio, type MinioServer } from './helpers/minio.js';

const shared = inject('minio');

/** Signs a PUT of `length` UNSIGNED-PAYLOAD bytes, or a GET, for raw-socket tests. */
function signedPutHeaders(url: URL, length: number): Promise<Record<string, string>> {
  return signedHeaders(url.origin, { method: 'PUT', path: url.pathname, headers: { 'content-length': String(length), 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' } });
}

function signedGetHeaders(url: URL): Promise<Record<string, string>> {
  return signedHeaders(url.origin, { method: 'GET', path: url.pathname, headers: { 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' } });
}

describe('backend outage', () => {
  let minio: MinioServer;
  let gw: TestGateway;
  let s3: S3Client;
  const bucket = uniqueBucket('outage');

  beforeAll(async () => {
    minio = await startMinio({ binary: shared.binary });
    gw = await startTestGateway({ backend: 's3', minio, args: ['--backend-timeout-ms', '3000'] });
    s3 = sdkClient(gw.url);
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'k', Body: 'before the outage' }));
  });

  afterAll(async () => {
    s3?.destroy();
    await gw?.close();
    await minio?.destroy();
  });

  it('answers 503 ServiceUnavailable while MinIO is down and serves again once it is back', async () => {
    expect((await fetch(`${gw.gateway.adminUrl}/readyz`)).status).toBe(200);
    await minio.stop();

    const down = await fetch(`${gw.url}/${bucket}/k`, { headers: await signedGetHeaders(new URL(`${gw.url}/${bucket}/k`)) });
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('1');
    const xml = await down.text();
    expect(xml).toContain('<Code>ServiceUnavailable</Code>');
    expect(xml).toContain(`<RequestId>${down.headers.get('x-amz-request-id')}</RequestId>`);
    const sdkError = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'k' })).catch((e: S3ServiceException) => e);
    expect((sdkError as S3ServiceException).$metadata.httpStatusCode).toBe(503);
    expect((await fetch(`${gw.gateway.adminUrl}/readyz`)).status).toBe(503);

    minio = await startMinio({ binary: shared.binary, port: minio.port, dataDir: minio.dataDir });
    await until(async () => (await fetch(`${gw.gateway.adminUrl}/readyz`)).status === 200);
    const back = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'k' }));
    expect(await back.Body?.transformToString()).toBe('before the outage');
  });
});

describe('client abort mid-download (s3 backend)', () => {
  let gw: TestGateway;
  let s3: S3Client;
  const bucket = uniqueBucket('abort');

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 's3', minio: shared });
    s3 = sdkClient(gw.url);
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'big', Body: randomBytes(64 * 1024 * 1024) }));
  });

  afterAll(async () => {
    s3?.destroy();
    await gw?.close();
  });

  it('aborts the backend request when the client goes away', async () => {
    const url = new URL(`${gw.url}/${bucket}/big`);
    const headers = await signedGetHeaders(url);
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(url, { headers }, (res) => {
        expect(res.statusCode).toBe(200);
        res.once('data', () => {
          expect(gw.gateway.backendStats()?.inflight).toBe(1);
          req.destroy();
          resolve();
        });
      });
      req.on('error', (error) => (req.destroyed ? undefined : reject(error)));
      req.end();
    });
    await until(() => gw.gateway.backendStats()?.inflight === 0);
    // The gateway keeps serving.
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'big' }));
    expect(head.ContentLength).toBe(64 * 1024 * 1024);
  });
});

describe.each<BackendKind>(['local', 's3'])('client abort mid-upload (%s backend)', (backend) => {
  let gw: TestGateway;
  let s3: S3Client;
  const bucket = uniqueBucket('upload-abort');

  beforeAll(async () => {
    gw = await startTestGateway({ backend, minio: shared });
    s3 = sdkClient(gw.url);
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  });

  afterAll(async () => {
    s3?.destroy();
    await gw?.close();
  });

  it('leaves no object (and no staged file) when the body stops halfway', async () => {
    const url = new URL(`${gw.url}/${bucket}/half-written`);
    const total = 8 * 1024 * 1024;
    const headers = await signedPutHeaders(url, total);
    await new Promise<void>((resolve) => {
      const req = httpRequest(url, { method: 'PUT', headers });
      req.on('error', () => resolve());
      req.write(randomBytes(total / 2), () =>
        setTimeout(() => {
          req.destroy();
          resolve();
        }, 100),
      );
    });
    await until(async () => {
      const error = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'half-written' })).catch((e: S3ServiceException) => e);
      return error instanceof S3ServiceException && error.$metadata.httpStatusCode === 404;
    });
    if (gw.dataDir) await until(() => readdirSync(join(gw.dataDir as string, '.tmp')).length === 0);
    // A complete upload of the same key afterwards succeeds.
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'half-written', Body: 'whole' }));
    expect(await (await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'half-written' }))).Body?.transformToString()).toBe('whole');
  });
});
