/**
 * Faults during layerwise GETs, with a real MinIO of the test's own and the real gateway: MinIO
 * paused (SIGSTOP) and resumed, MinIO killed and restarted mid-stream, a read worker dying inside a
 * task, and slow readers next to a normal one. The affected request fails cleanly (an S3 error or
 * an ERROR frame) within the configured timeout, the others are unaffected, buffers and worker
 * tasks are released, and the gateway serves normally afterwards without a restart.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { until } from './helpers/wait.js';
import { ObjectCacheClient } from '../client/client.js';
import { FrameDecoder } from '../client/frame-decoder.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { startMinio, type MinioServer } from './helpers/minio.js';
import { postDescriptor } from './helpers/signing.js';
import { startTestGateway, uniqueBucket, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';

const shared = inject('minio');
const TIMEOUT_MS = 1500;

describe('backend faults mid-stream', () => {
  let minio: MinioServer;
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let prefix: SeededPrefix;

  const idle = (): boolean => {
    const stats = gw.gateway.poolStats();
    return stats.running === 0 && stats.queued === 0 && gw.gateway.bufferedBytes() === 0;
  };

  beforeAll(async () => {
    minio = await startMinio({ binary: shared.binary });
    // Small reads and a small read-ahead: the stream needs MinIO all along.
    gw = await startTestGateway({
      backend: 's3',
      minio,
      args: ['--backend-timeout-ms', String(TIMEOUT_MS), '--read-bytes', '65536', '--read-ahead-bytes', '4096', '--threshold', '0'],
    });
    client = testClient(gw, uniqueBucket('faults'));
    await client.ensureBucket();
    prefix = await seedPrefix(client, { chunks: 8, layers: 32, layerBytes: 64 * 1024, layout: 'KV_L2TD' }); // 16 MiB, 32 groups
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
    await minio?.destroy();
  });

  it('ends a stream with an ERROR frame within the backend timeout while MinIO is paused, and serves once it resumes', async () => {
    const started = performance.now();
    let pausedAt = 0;
    const failure = await client
      .fetch(descriptorOf(prefix), {
        transport: 'post',
        onLayerReady: (layer) => {
          if (layer === 0) {
            minio.process.kill('SIGSTOP');
            pausedAt = performance.now();
          }
        },
      })
      .catch((e: unknown) => e);
    const failedAfter = performance.now() - pausedAt;
    minio.process.kill('SIGCONT');
    expect(failure).toBeInstanceOf(ObjectCacheError);
    expect(['OC_ERR_BACKEND_TIMEOUT', 'OC_ERR_BACKEND_UNAVAILABLE']).toContain((failure as ObjectCacheError).code);
    expect(failedAfter).toBeLessThan(TIMEOUT_MS * 3 + 1000);
    console.log(
      `paused MinIO: the stream failed ${failedAfter.toFixed(0)} ms after the pause (timeout ${TIMEOUT_MS} ms), ${((performance.now() - started) / 1000).toFixed(2)} s in all`,
    );
    await until(idle);
    const again = await client.fetch(descriptorOf(prefix));
    expect(Buffer.from(again.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });

  it('answers 503 before streaming while MinIO is paused', async () => {
    minio.process.kill('SIGSTOP');
    try {
      const started = performance.now();
      const failure = await client.fetch(descriptorOf(prefix, { layerRange: [0, 2] }), { transport: 'post' }).catch((e: unknown) => e);
      expect((failure as ObjectCacheError).details['Status']).toBe(503);
      expect(performance.now() - started).toBeLessThan(TIMEOUT_MS * 3 + 1000);
    } finally {
      minio.process.kill('SIGCONT');
    }
    await until(idle);
  });

  it('ends a stream cleanly when MinIO is killed mid-stream, and serves again after it restarts', async () => {
    let killed: Promise<void> | undefined;
    const failure = await client
      .fetch(descriptorOf(prefix), {
        transport: 'post',
        onLayerReady: (layer) => {
          if (layer === 0) {
            const exited = new Promise<void>((r) => minio.process.once('exit', () => r()));
            minio.process.kill('SIGKILL');
            killed = exited;
          }
        },
      })
      .catch((e: unknown) => e);
    await killed;
    // A clean failure: an ERROR frame with a backend code (refused connection, reset, timeout).
    expect(failure).toBeInstanceOf(ObjectCacheError);
    console.log(`killed MinIO: the stream ended with ${(failure as ObjectCacheError).code}`);
    expect((failure as ObjectCacheError).code).toMatch(/^OC_ERR_BACKEND_/);
    await until(idle);
    minio = await startMinio({ binary: shared.binary, port: minio.port, dataDir: minio.dataDir });
    const again = await client.fetch(descriptorOf(prefix));
    expect(Buffer.from(again.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });
});

describe('a read worker dying inside a task', () => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let prefix: SeededPrefix;

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 's3', minio: shared, args: ['--workers', '2', '--read-bytes', '65536', '--read-ahead-bytes', '4096', '--threshold', '0'] });
    client = testClient(gw, uniqueBucket('crash'));
    await client.ensureBucket();
    prefix = await seedPrefix(client, { chunks: 8, layers: 32, layerBytes: 64 * 1024, layout: 'KV_L2TD' });
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('fails only the request whose task died; the pool replaces the worker and serves on', async () => {
    let terminated = false;
    const doomed = client
      .fetch(descriptorOf(prefix), {
        transport: 'post',
        onLayerReady: (layer) => {
          if (layer === 1 && !terminated) {
            terminated = true;
            for (const worker of gw.gateway.readerPool.threads) void worker.terminate();
          }
        },
      })
      .catch((e: unknown) => e);
    const failure = await doomed;
    expect(terminated).toBe(true);
    expect(failure).toBeInstanceOf(ObjectCacheError);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_POOL_WORKER');
    await until(() => gw.gateway.poolStats().running === 0 && gw.gateway.bufferedBytes() === 0);
    const again = await client.fetch(descriptorOf(prefix));
    expect(Buffer.from(again.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });
});

describe('slow readers', () => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let prefix: SeededPrefix;

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 'local', args: ['--client-stall-timeout-ms', '1000', '--threshold', '0', '--read-bytes', '65536'] });
    client = testClient(gw, uniqueBucket('slow'));
    await client.ensureBucket();
    // 48 MiB: more than a loopback connection's socket buffers hold (about 36 MiB here), so a
    // client that reads slowly really stalls the gateway's writes.
    prefix = await seedPrefix(client, { chunks: 12, layers: 32, layerBytes: 128 * 1024, layout: 'KV_L2TD' });
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('serves a normal client next to twenty clients reading at 10 KiB/s, and holds no buffers for them', async () => {
    const { Pool } = await import('undici');
    const body = Buffer.from(JSON.stringify(descriptorOf(prefix)));
    const pool = new Pool(gw.url, { connections: 25 });
    const slowReader = async (): Promise<string> => {
      const res = await postDescriptor(pool, gw.url, client.bucket, body, { highWaterMark: 1024 });
      const decoder = new FrameDecoder({
        layerStart: 0,
        layerEnd: 32,
        chunks: 12,
        layerBytes: 128 * 1024,
        target: new Uint8Array(32 * 12 * 128 * 1024),
        layerStride: 12 * 128 * 1024,
      });
      try {
        for await (const chunk of res.body) {
          decoder.push(chunk as Buffer);
          await new Promise((r) => setTimeout(r, ((chunk as Buffer).length / 10240) * 1000)); // 10 KiB/s
        }
        decoder.finish();
        return 'completed';
      } catch (error) {
        return (error as { code?: string }).code ?? 'cut off';
      }
    };
    const slow = Array.from({ length: 20 }, slowReader);
    await new Promise((r) => setTimeout(r, 300));
    const started = performance.now();
    const normal = await client.fetch(descriptorOf(prefix));
    console.log(`a normal client fetched 48 MiB in ${(performance.now() - started).toFixed(0)} ms next to 20 slow readers`);
    expect(Buffer.from(normal.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    // Every slow stream ends (loopback socket buffers here absorb tens of MiB per connection, so
    // the gateway may finish writing them) and the gateway's own buffers are released.
    await until(async () => {
      const metrics = await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text();
      return /objectcache_layerwise_active_requests 0/.test(metrics) && gw.gateway.bufferedBytes() === 0 && gw.gateway.poolStats().running === 0;
    }, 20_000);
    await pool.destroy();
    await Promise.allSettled(slow);
  }, 60_000);
});
