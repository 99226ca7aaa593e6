/**
 * The store capacity and segments list through (gateway/stores/capacity-store.ts), against MinIO: a
 * listing gives keys and ETags exactly as the store wrote them, so a listed ETag is the one a HEAD
 * gives and a conditional delete by it succeeds.
 */
import { CreateBucketCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openBackend, type Backend } from '../gateway/s3/backend.js';
import { loadServeConfig } from '../gateway/common/config.js';
import { embeddedCapacityStore } from '../gateway/stores/capacity-store.js';
import { LocalStore } from '../gateway/stores/embedded/local-store.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sdkClient, uniqueBucket } from './helpers/gateway.js';

const minio = inject('minio');

describe('the S3 capacity store', () => {
  let backend: Backend;
  const bucket = uniqueBucket('capstore');
  // A quote (MinIO lists it as &#34;), markup characters, a trailing space, control characters
  // XML cannot carry, a plus, a percent sign and characters beyond ASCII.
  const keys = ['plain', 'a "quoted" & <marked> key ', 'tab\there', 'bell\u0007 and \u001f', 'a+b %41 caf\u00e9 \u{1f600}'];

  beforeAll(async () => {
    const config = loadServeConfig(['--s3-endpoint', minio.endpoint], {
      OBJECTCACHE_ACCESS_KEY: 'k',
      OBJECTCACHE_SECRET_KEY: 'secret-secret',
      OBJECTCACHE_BACKEND_ACCESS_KEY: minio.accessKey,
      OBJECTCACHE_BACKEND_SECRET_KEY: minio.secretKey,
    });
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

  it('reads no more than it is asked to of an object: past the bound, an empty body and tooLarge', async () => {
    // 'a+b ...' holds 5 bytes (keys[4]).
    const whole = await backend.capacity.get(bucket, keys[4] as string, 5);
    expect(whole?.body.length).toBe(5);
    expect(whole?.tooLarge).toBeUndefined();
    const bounded = await backend.capacity.get(bucket, keys[4] as string, 4);
    expect(bounded).toMatchObject({ tooLarge: true });
    expect(bounded?.body.length).toBe(0);
    expect(bounded?.etag).toBe(whole?.etag);
  });
});

describe('the embedded capacity store', () => {
  it('reads no more than it is asked to of an object', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-capstore-'));
    try {
      const store = embeddedCapacityStore(await LocalStore.open(dataDir));
      await store.ensureBucket('b');
      await store.put('b', 'k', Buffer.from('twelve bytes'), { ifNoneMatch: true });
      expect((await store.get('b', 'k', 12))?.body.toString()).toBe('twelve bytes');
      expect(await store.get('b', 'k', 11)).toMatchObject({ tooLarge: true, body: Buffer.alloc(0) });
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
