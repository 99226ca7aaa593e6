/**
 * Admission control: beyond --max-layerwise-requests the gateway answers 503 SlowDown with
 * Retry-After at once, instead of slowing every request down, and admits again when a slot frees.
 */
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from './helpers/wait.js';
import { ObjectCacheClient } from '../client/client.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { postDescriptor } from './helpers/signing.js';
import { startTestGateway, uniqueBucket, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, seedPrefix, type SeededPrefix } from './helpers/kv.js';

describe('admission control', () => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let prefix: SeededPrefix;

  beforeAll(async () => {
    // Paced at 4 MB/s, a 4 MiB request holds its slot for about a second.
    gw = await startTestGateway({ backend: 'local', args: ['--max-layerwise-requests', '1', '--cap', '4MB/s', '--threshold', '0', '--epoch-ms', '10'] });
    client = testClient(gw, uniqueBucket('admit'));
    await client.ensureBucket();
    prefix = await seedPrefix(client, { chunks: 4, layers: 8, layerBytes: 128 * 1024, layout: 'KV_L2TD' });
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('answers 503 SlowDown with Retry-After while the limit is reached, then admits again', async () => {
    const first = client.fetch(descriptorOf(prefix));
    await until(async () => /objectcache_layerwise_active_requests 1/.test(await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text()), 5000);
    // POST: the AWS SDK would retry a SlowDown by itself (as S3 clients should).
    const refused = await client.fetch(descriptorOf(prefix, { layerRange: [0, 1] }), { transport: 'post' }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ObjectCacheError);
    expect((refused as ObjectCacheError).code).toBe('OC_ERR_ADMISSION_LIMIT');
    expect((refused as ObjectCacheError).details['Status']).toBe(503);
    expect((refused as ObjectCacheError).retryable).toBe(true);
    expect((refused as ObjectCacheError).details['RequestId']).toMatch(/^[0-9A-Za-z-]{8,}$/);

    // The raw answer: S3's SlowDown, with Retry-After.
    const body = Buffer.from(JSON.stringify(descriptorOf(prefix)));
    const pool = new Pool(gw.url);
    const raw = await postDescriptor(pool, gw.url, client.bucket, body);
    expect(raw.statusCode).toBe(503);
    expect(raw.headers['retry-after']).toBe('1');
    expect(raw.headers['x-objectcache-retryable']).toBe('true');
    expect(await raw.body.text()).toContain('<Code>SlowDown</Code>');
    await pool.close();

    await first;
    const after = await client.fetch(descriptorOf(prefix, { layerRange: [0, 1] }));
    expect(after.summary.layers).toEqual([0, 1]);
  });
});

describe('admission control on buffered bytes', () => {
  it('answers 503 SlowDown while every buffered byte is held, then admits again', async () => {
    // 4 KiB of read-ahead in total: one paced request holds all of it while it is sent.
    const gw = await startTestGateway({ backend: 'local', args: ['--max-buffered-bytes', '4096', '--cap', '4MB/s', '--threshold', '0', '--epoch-ms', '10'] });
    const client = testClient(gw, uniqueBucket('admitb'));
    try {
      await client.ensureBucket();
      const prefix = await seedPrefix(client, { chunks: 4, layers: 8, layerBytes: 128 * 1024, layout: 'KV_L2TD' });
      const first = client.fetch(descriptorOf(prefix));
      await until(() => gw.gateway.bufferedBytes() >= 4096, 5000);
      const refused = await client.fetch(descriptorOf(prefix, { layerRange: [0, 1] }), { transport: 'post' }).catch((e: unknown) => e);
      expect((refused as ObjectCacheError).code).toBe('OC_ERR_ADMISSION_LIMIT');
      expect((refused as ObjectCacheError).details['Status']).toBe(503);
      await first;
      expect(gw.gateway.bufferedBytes()).toBe(0);
      const after = await client.fetch(descriptorOf(prefix, { layerRange: [0, 1] }), { transport: 'post' });
      expect(after.summary.layers).toEqual([0, 1]);
    } finally {
      await client.close();
      await gw.close();
    }
  });
});
