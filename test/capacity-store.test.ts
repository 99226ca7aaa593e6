/**
 * The store capacity and segments list through (gateway/capacity/store.ts), against MinIO: a
 * listing gives keys and ETags exactly as the store wrote them, so a listed ETag is the one a HEAD
 * gives and a conditional delete by it succeeds.
 */
import { CreateBucketCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openBackend, type Backend } from '../gateway/backend.js';
import { loadServeConfig } from '../gateway/config.js';
import { sdkClient, uniqueBucket } from './helpers/gateway.js';

const minio = inject('minio');

describe('the S3 capacity store', () => {
  let backend: Backend;
  const bucket = uniqueBucket('capstore');
  // A quote (MinIO lists it as &#34;), markup characters, a trailing space, control characters
  // XML cannot carry, a plus, a percent sign and characters beyond ASCII.
  const keys = ['plain', 'a "quoted" & <marked> key ', 'tab\there', 'bell\u0007 and \u001f', 'a+b %41 caf\u00e9 \u{1f600}'];

  beforeAll(async () => {
    const config = loadServeConfig(['--s3-endpoint', minio.endpoint], { OBJECTCACHE_ACCESS_KEY: 'k', OBJECTCACHE_SECRET_KEY: 'secret-secret', OBJECTCACHE_BACKEND_ACCESS_KEY: minio.accessKey, OBJECTCACHE_BACKEND_SECRET_KEY: minio.secretKey });
    backend = await openBackend(config.backend);
    const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    try {
      await direct.send(new CreateBucketCommand({ Bucket: bucket }));
      for (const [i, key] of keys.entries()) await direct.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: new Uint8Array(i + 1) }));
    } finally {
      direct.destroy();
    }
  });
  afterAll(async () => {
    await backend?.close();
  });

  it('lists keys and ETags as a HEAD gives them, and deletes by a listed ETag', async () => {
    const page = await backend.capacity.list(bucket, '', undefined);
    expect(page.objects.map((o) => o.key).sort()).toEqual([...keys].sort());
    for (const object of page.objects) {
      const head = await backend.capacity.head(bucket, object.key);
      expect(object.etag).toBe(head?.etag);
      expect(object.size).toBe(keys.indexOf(object.key) + 1);
    }
    const quoted = page.objects.find((o) => o.key === keys[1]);
    expect(await backend.capacity.deleteVersion(bucket, keys[1] as string, quoted?.etag as string)).toBe('deleted');
    expect(await backend.capacity.head(bucket, keys[1] as string)).toBeUndefined();
  });
});
