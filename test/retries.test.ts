/**
 * The gateway's retry policy against the real MinIO behind a loopback TCP proxy that resets
 * connections on demand (the fault a store server going away causes): range reads of layerwise
 * GETs and passthrough GETs are repeated and succeed byte-exact, counted in
 * objectcache_backend_retries_total; a PUT is never repeated; when every attempt fails the
 * layerwise GET ends with a stable code, never with wrong bytes.
 */
import { GetObjectCommand, PutObjectCommand, S3ServiceException } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { metricValue, sdkClient, startTestGateway, testClient, uniqueBucket, type TestGateway } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix } from './helpers/kv.js';
import { FaultProxy } from './helpers/fault-proxy.js';

describe('retries of idempotent backend requests', () => {
  const minio = inject('minio');
  let proxy: FaultProxy;
  let gw: TestGateway;

  beforeAll(async () => {
    proxy = new FaultProxy(new URL(minio.endpoint));
    const endpoint = await proxy.listen();
    gw = await startTestGateway({ backend: 's3', minio: { ...minio, endpoint }, args: ['--threshold', '0', '--read-concurrency', '1'] });
  });

  afterAll(async () => {
    await gw?.close();
    await proxy?.close();
  });

  const retries = (kind: string): Promise<number> => metricValue(gw.gateway.adminUrl, `objectcache_backend_retries_total{kind="${kind}"}`);

  it('repeats a failed range read and delivers byte-exact', async () => {
    const client = testClient(gw, uniqueBucket('retry'));
    try {
      await client.ensureBucket();
      const prefix = await seedPrefix(client, { chunks: 4, layers: 4, layerBytes: 16 * 1024, layout: 'KV_L2TD' });
      const before = await retries('range');
      proxy.resetNext(2);
      const result = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
      expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
      expect(proxy.resets).toBeGreaterThanOrEqual(1);
      expect(await retries('range')).toBeGreaterThan(before);

      // Every attempt fails: the stream ends with a stable code, no bytes are passed off as data.
      proxy.resetNext(1000);
      const failed = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' }).catch((e: unknown) => e);
      expect((failed as { code?: string }).code).toBe('OC_ERR_BACKEND_UNAVAILABLE');
      proxy.resetNext(0);
    } finally {
      await client.close();
    }
  });

  it('repeats a passthrough GET, never a PUT', async () => {
    const s3 = sdkClient(gw.url); // maxAttempts 1: any repeat is the gateway's
    const bucket = uniqueBucket('retryget');
    try {
      const client = testClient(gw, bucket);
      await client.ensureBucket();
      await client.close();
      const body = Buffer.alloc(256 * 1024, 7);
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'object', Body: body }));
      const before = await retries('passthrough');
      proxy.resetNext(2);
      const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'object' }));
      expect(Buffer.from(await (got.Body?.transformToByteArray() as Promise<Uint8Array>)).equals(body)).toBe(true);
      expect(await retries('passthrough')).toBe(before + 2);

      proxy.resetNext(1);
      const put = await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'other', Body: 'x' })).catch((e: unknown) => e);
      expect((put as S3ServiceException).$metadata.httpStatusCode).toBe(503);
      expect(await retries('passthrough')).toBe(before + 2);
    } finally {
      proxy.resetNext(0);
      s3.destroy();
    }
  });
});
