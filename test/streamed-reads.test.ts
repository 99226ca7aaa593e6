/**
 * Streamed chunk reads against the real MinIO behind a loopback fault proxy (docs/layerwise-get.md,
 * Streamed reads): each chunk is read with a range GET for its first layer and one for the
 * rest, consumed layer by layer through a ring of two layers; a response the store cuts off is
 * resumed from its next unread byte under the chunk's ETag, so an overwrite or a delete in
 * between ends the stream with a stable code, never with mixed bytes; a request with more
 * streams than the gateway allows, or whose streams another request holds, is served with
 * grouped range reads; a client that leaves gives every stream, buffer and task back.
 */
import { randomBytes } from 'node:crypto';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ObjectCacheClient } from '../client/client.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { FaultProxy } from './helpers/fault-proxy.js';
import { asIs, chunked, head, ReframingProxy } from './helpers/reframing-proxy.js';
import { metricValue, startTestGateway, testClient, uniqueBucket, type TestGateway } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix } from './helpers/kv.js';
import { postDescriptor } from './helpers/signing.js';
import { until } from './helpers/wait.js';

const minio = inject('minio');
const KiB = 1024;

describe('streamed chunk reads (s3 backend)', () => {
  let proxy: FaultProxy;
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let bucket: string;

  beforeAll(async () => {
    proxy = new FaultProxy(new URL(minio.endpoint));
    const endpoint = await proxy.listen();
    // Paced at 64 MB/s with a ring of two layers and 64 KiB receive buffers: the streams spend most
    // of a request paused, and a cut lands while most of every chunk is still unread (16 MiB
    // chunks: more than the store's send buffer and the proxy hold).
    gw = await startTestGateway({
      backend: 's3',
      minio: { ...minio, endpoint },
      args: [
        '--chunk-reads',
        'auto',
        '--threshold',
        '0',
        '--cap',
        '64MB/s',
        '--epoch-ms',
        '5',
        '--stream-window-bytes',
        '4096',
        '--stream-receive-buffer-bytes',
        '65536',
        '--max-chunk-streams',
        '8',
      ],
    });
    bucket = uniqueBucket('streamed');
    client = testClient(gw, bucket);
    await client.ensureBucket();
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
    await proxy?.close();
  });

  const idle = (): Promise<boolean> => until(() => gw.gateway.poolStats().running + gw.gateway.bufferedBytes() + gw.gateway.poolStats().arenaBlocksInUse === 0);

  it('reads each chunk with two GETs (its first layer, then the rest), byte-exact in both layouts', async () => {
    for (const layout of ['KV_L2TD', 'KV_2LTD'] as const) {
      const prefix = await seedPrefix(client, { chunks: 4, layers: 16, layerBytes: 16 * KiB, layout });
      const result = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
      expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
      // KV_2LTD keeps K and V of all layers apart: a stream per half.
      expect(result.summary.backendReads).toBe(4 * 2 * (layout === 'KV_2LTD' ? 2 : 1));
      expect(result.summary.plan).toHaveLength(16);
      expect(result.summary.verified).toBe(true);
    }
    await idle();
  });

  it('answers a missing or short chunk before the stream begins, as an S3 error', async () => {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 8, layerBytes: 4 * KiB, layout: 'KV_L2TD' });
    await client.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: prefix.keys[1] }));
    const missing = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' }).catch((e: unknown) => e);
    expect((missing as ObjectCacheError).code).toBe('OC_ERR_CHUNK_MISSING');
    expect((missing as ObjectCacheError).details['Status']).toBe(404);
    expect((missing as ObjectCacheError).message).toContain(prefix.keys[1]);
    await client.s3.send(new PutObjectCommand({ Bucket: bucket, Key: prefix.keys[1], Body: Buffer.alloc(8 * 4 * KiB - 1) }));
    const short = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' }).catch((e: unknown) => e);
    expect((short as ObjectCacheError).code).toBe('OC_ERR_CHUNK_SIZE');
    expect((short as ObjectCacheError).details['Status']).toBe(400);
    await idle();
  });

  it('resumes streams the store cut off, from their next unread byte, byte-exact', async () => {
    const prefix = await seedPrefix(client, { chunks: 2, layers: 64, layerBytes: 256 * KiB, layout: 'KV_L2TD' });
    const retriesBefore = await metricValue(gw.gateway.adminUrl, 'objectcache_backend_retries_total{kind="range"}');
    let cuts = 0;
    const result = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), {
      transport: 'post',
      onLayerReady: (layer) => {
        if (layer === 4 || layer === 40) {
          cuts++;
          proxy.resetNext(0);
        }
      },
    });
    expect(cuts).toBe(2);
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    // Two GETs per chunk, and at least one more for every stream cut while open.
    expect(result.summary.backendReads).toBeGreaterThan(2 * 2);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_backend_retries_total{kind="range"}')).toBeGreaterThan(retriesBefore);
    await idle();
  });

  it('ends with OC_ERR_CHUNK_CHANGED when a chunk overwritten mid-stream is read on after a cut, never with mixed bytes', async () => {
    const prefix = await seedPrefix(client, { chunks: 2, layers: 64, layerBytes: 256 * KiB, layout: 'KV_L2TD' });
    const victim = prefix.keys[1] as string;
    let overwrite: Promise<void> | undefined;
    const ready: number[] = [];
    const failure = await client
      .fetch(descriptorOf(prefix, { mode: 'layerwise' }), {
        transport: 'post',
        onLayerReady: (layer) => {
          ready.push(layer);
          if (layer === 1) {
            overwrite = client
              .putChunks([victim], [new Uint8Array(randomBytes(64 * 256 * KiB))], { layout: { layout: 'KV_L2TD', layers: 64, layerBytes: 256 * KiB } })
              .then(() => proxy.resetNext(0));
          }
        },
      })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    await overwrite;
    expect(failure).toBeInstanceOf(ObjectCacheError);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CHUNK_CHANGED');
    expect((failure as ObjectCacheError).details['Key']).toBe(victim);
    expect((failure as ObjectCacheError).details['ChunkIndex']).toBe(1);
    expect(ready.length).toBeLessThan(64);
    await idle();
  });

  it('ends with OC_ERR_CHUNK_MISSING naming the chunk when a chunk deleted mid-stream is read on after a cut', async () => {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 64, layerBytes: 256 * KiB, layout: 'KV_L2TD' });
    let removal: Promise<void> | undefined;
    const failure = await client
      .fetch(descriptorOf(prefix, { mode: 'layerwise' }), {
        transport: 'post',
        onLayerReady: (layer) => {
          if (layer === 1) removal = client.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: prefix.keys[2] })).then(() => proxy.resetNext(0));
        },
      })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    await removal;
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CHUNK_MISSING');
    expect((failure as ObjectCacheError).details['Key']).toBe(prefix.keys[2]);
    expect((failure as ObjectCacheError).details['ChunkIndex']).toBe(2);
    await idle();
  });

  it('reads a request with more chunk streams than --max-chunk-streams in groups', async () => {
    // --max-chunk-streams 8: 16 chunks need 16 streams.
    const prefix = await seedPrefix(client, { chunks: 16, layers: 32, layerBytes: 16 * KiB, layout: 'KV_L2TD' });
    const grouped = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
    expect(Buffer.from(grouped.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    // A range read per chunk per layer group, more than a stream's two.
    expect(grouped.summary.plan.length).toBeGreaterThan(2);
    expect(grouped.summary.backendReads).toBe(16 * grouped.summary.plan.length);
    await idle();
    // Within the limit, the same chunks stream.
    const streamed = await client.fetch(descriptorOf(prefix, { mode: 'layerwise', keys: prefix.keys.slice(0, 8) }), { transport: 'post' });
    expect(streamed.summary.backendReads).toBe(8 * 2);
  });

  it('gives every stream, buffer and task back when the client leaves mid-stream', async () => {
    const prefix = await seedPrefix(client, { chunks: 8, layers: 32, layerBytes: 64 * KiB, layout: 'KV_L2TD' });
    for await (const { layer } of client.layers(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' })) {
      expect(layer).toBe(0);
      break;
    }
    await idle();
    const again = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
    expect(Buffer.from(again.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(again.summary.backendReads).toBe(8 * 2);
  });
});

describe('streamed chunk reads when the streams are taken (s3 backend)', () => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let pool: Pool;
  let bucket: string;

  beforeAll(async () => {
    // No pacing: a request runs as fast as its reader reads. --max-chunk-streams 8: one 8-chunk request takes them all.
    gw = await startTestGateway({ backend: 's3', minio, args: ['--chunk-reads', 'auto', '--threshold', '0', '--max-chunk-streams', '8'] });
    bucket = uniqueBucket('taken');
    client = testClient(gw, bucket);
    await client.ensureBucket();
    pool = new Pool(gw.url);
  });

  afterAll(async () => {
    await pool?.close();
    await client?.close();
    await gw?.close();
  });

  it('serves a request whose streams are taken with grouped range reads at once, and streams again once they are free', async () => {
    // 128 MiB: far more than the sockets between the gateway and a reader that stopped can hold.
    const big = await seedPrefix(client, { chunks: 8, layers: 32, layerBytes: 512 * KiB, layout: 'KV_L2TD' });
    const prefix = await seedPrefix(client, { chunks: 8, layers: 32, layerBytes: 16 * KiB, layout: 'KV_L2TD' });
    const body = Buffer.from(JSON.stringify(descriptorOf(big, { mode: 'layerwise' })));
    const holder = await postDescriptor(pool, gw.url, bucket, body);
    expect(holder.statusCode).toBe(200);
    expect(holder.headers['x-objectcache-reads']).toBe('streamed');
    // The holder's reader has stopped: its request keeps its streams.
    const second = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
    expect(Buffer.from(second.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(second.summary.plan.length).toBeGreaterThan(2);
    expect(second.summary.backendReads).toBe(8 * second.summary.plan.length); // a read per chunk per group
    holder.body.destroy();
    await until(() => gw.gateway.poolStats().running + gw.gateway.bufferedBytes() + gw.gateway.poolStats().arenaBlocksInUse === 0);
    const again = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
    expect(again.summary.backendReads).toBe(8 * 2);
  });
});

describe('streamed chunk reads behind a proxy that answers chunked (s3 backend)', () => {
  let proxy: ReframingProxy;
  let seeding: TestGateway;
  let reading: TestGateway;
  const bucket = uniqueBucket('streamed-chunked');

  beforeAll(async () => {
    // Chunks are stored through a gateway in front of MinIO, and read through one in front of a
    // relay that re-frames every answer of MinIO's in chunked transfer coding (odd chunk sizes).
    proxy = new ReframingProxy(new URL(minio.endpoint));
    proxy.reframe = (answer) =>
      answer.body.length === 0
        ? asIs(answer)
        : { pieces: [head(answer.status, answer.reason, [...answer.headers, ['Transfer-Encoding', 'chunked']]), chunked(answer.body, { sizes: [1000, 7777, 65_536] })] };
    const endpoint = await proxy.listen();
    seeding = await startTestGateway({ backend: 's3', minio });
    reading = await startTestGateway({ backend: 's3', minio: { ...minio, endpoint: endpoint.origin }, args: ['--chunk-reads', 'auto', '--threshold', '0'] });
    await testClient(seeding, bucket).ensureBucket();
  });

  afterAll(async () => {
    await reading?.close();
    await seeding?.close();
    await proxy?.close();
  });

  it('reads each chunk with two GETs, byte-exact in both layouts', async () => {
    const writer = testClient(seeding, bucket);
    const reader = testClient(reading, bucket);
    try {
      for (const layout of ['KV_L2TD', 'KV_2LTD'] as const) {
        const prefix = await seedPrefix(writer, { chunks: 4, layers: 16, layerBytes: 16 * KiB, layout });
        const result = await reader.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
        expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
        expect(result.summary.backendReads).toBe(4 * 2 * (layout === 'KV_2LTD' ? 2 : 1));
        expect(result.summary.verified).toBe(true);
      }
    } finally {
      await writer.close();
      await reader.close();
    }
  });
});
