/**
 * Layerwise GET failures, against the real gateway in both backend modes: every invalid
 * descriptor is a 400 naming the field before any byte streams; an unsigned descriptor is 403;
 * a missing or short chunk is 404/400 XML before streaming and an ERROR frame naming the chunk
 * after; a client that goes away releases its worker tasks and buffers.
 */
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { until } from './helpers/wait.js';
import { ObjectCacheClient } from '../client/client.js';
import { FrameDecoder } from '../client/frame-decoder.js';
import { encodeDescriptorHeader } from '../schemas/descriptor.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { signedHeaders } from './helpers/signing.js';
import { startTestGateway, uniqueBucket, type BackendKind, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, seedPrefix } from './helpers/kv.js';

const minio = inject('minio');

interface Raw {
  status: number;
  code: string | undefined;
  body: string;
}

describe.each<BackendKind>(['local', 's3'])('layerwise GET failures (%s backend)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let pool: Pool;
  let bucket: string;

  async function send(
    method: 'GET' | 'POST',
    path: string,
    query: Record<string, string>,
    headers: Record<string, string>,
    body?: string,
    unsigned: string[] = [],
  ): Promise<{ status: number; headers: Record<string, unknown>; body: import('undici').Dispatcher.ResponseData['body'] }> {
    const payload = body === undefined ? undefined : Buffer.from(body);
    const signed = { headers: await signedHeaders(gw.url, { method, path, query, headers, ...(payload ? { body: payload } : {}), unsignable: new Set(unsigned) }) };
    const qs = Object.keys(query)
      .map((k) => `${k}=`)
      .join('&');
    const res = await pool.request({ method, path: qs ? `${path}?${qs}` : path, headers: signed.headers, body: payload ?? null });
    return { status: res.statusCode, headers: res.headers, body: res.body };
  }

  async function raw(method: 'GET' | 'POST', path: string, query: Record<string, string>, headers: Record<string, string>, body?: string, unsigned: string[] = []): Promise<Raw> {
    const res = await send(method, path, query, headers, body, unsigned);
    const text = await res.body.text();
    return { status: res.status, code: res.headers['x-objectcache-error-code'] as string | undefined, body: text };
  }

  const post = (descriptor: unknown): Promise<Raw> =>
    raw('POST', `/${bucket}`, { objectcache: '' }, { 'content-type': 'application/json' }, typeof descriptor === 'string' ? descriptor : JSON.stringify(descriptor));

  beforeAll(async () => {
    // Grouped range reads (streamed ones: test/streamed-reads.test.ts).
    gw = await startTestGateway({
      backend,
      minio,
      args: [
        '--max-descriptor-keys',
        '100',
        '--max-layers',
        '64',
        '--max-layer-bytes',
        '1048576',
        '--read-ahead-bytes',
        '4096',
        '--read-bytes',
        '262144',
        '--chunk-reads',
        'grouped',
      ],
    });
    bucket = uniqueBucket('lwfail');
    client = testClient(gw, bucket);
    await client.ensureBucket();
    pool = new Pool(gw.url);
  });

  afterAll(async () => {
    await pool?.close();
    await client?.close();
    await gw?.close();
  });

  it('names every wrong field in a 400 InvalidArgument before streaming', async () => {
    const good = { version: 1, keys: ['a/0', 'a/1'], layers: 4, chunkTokens: 16, layerBytes: 1024, layout: 'KV_L2TD', delivery: 'layer-major' };
    const cases: [unknown, string, string][] = [
      ['{not json', 'OC_ERR_DESCRIPTOR_ENCODING', 'JSON'],
      [[], 'OC_ERR_DESCRIPTOR_INVALID', '(descriptor)'],
      [{ ...good, version: 2 }, 'OC_ERR_DESCRIPTOR_INVALID', 'version'],
      [{ ...good, keys: [] }, 'OC_ERR_DESCRIPTOR_INVALID', 'keys'],
      [{ ...good, keys: ['a', 7] }, 'OC_ERR_DESCRIPTOR_INVALID', 'keys.1'],
      [{ ...good, layers: 0 }, 'OC_ERR_DESCRIPTOR_INVALID', 'layers'],
      [{ ...good, layers: 2.5 }, 'OC_ERR_DESCRIPTOR_INVALID', 'layers'],
      [{ ...good, layerBytes: -1 }, 'OC_ERR_DESCRIPTOR_INVALID', 'layerBytes'],
      [{ ...good, chunkTokens: 'sixteen' }, 'OC_ERR_DESCRIPTOR_INVALID', 'chunkTokens'],
      [{ ...good, layout: 'KV_LT2D' }, 'OC_ERR_DESCRIPTOR_INVALID', 'layout'],
      [{ ...good, delivery: 'random' }, 'OC_ERR_DESCRIPTOR_INVALID', 'delivery'],
      [{ ...good, layerRange: [3, 2] }, 'OC_ERR_DESCRIPTOR_INVALID', 'layerRange'],
      [{ ...good, layerRange: [0, 5] }, 'OC_ERR_DESCRIPTOR_INVALID', 'layerRange'],
      [{ ...good, computeMsPerLayer: 0 }, 'OC_ERR_DESCRIPTOR_INVALID', 'computeMsPerLayer'],
      [{ ...good, tenant: 'has space' }, 'OC_ERR_DESCRIPTOR_INVALID', 'tenant'],
      [{ ...good, mode: 'fast' }, 'OC_ERR_DESCRIPTOR_INVALID', 'mode'],
      [{ ...good, target: { length: 10, layerStride: 2048 } }, 'OC_ERR_DESCRIPTOR_INVALID', 'target.length'],
      [{ ...good, target: { length: 1 << 20, layerStride: 100 } }, 'OC_ERR_DESCRIPTOR_INVALID', 'target.layerStride'],
      [{ ...good, surprise: true }, 'OC_ERR_DESCRIPTOR_INVALID', 'surprise'],
      [{ ...good, keys: ['a/0', 'a/0'] }, 'OC_ERR_DESCRIPTOR_INVALID', 'keys[1]'],
      [{ ...good, keys: ['../other-bucket/x'] }, 'OC_ERR_DESCRIPTOR_INVALID', 'keys[0]'],
      [{ ...good, layout: 'KV_2LTD', layerBytes: 1023 }, 'OC_ERR_DESCRIPTOR_INVALID', 'even'],
      [{ ...good, keys: Array.from({ length: 101 }, (_, i) => `k${i}`) }, 'OC_ERR_DESCRIPTOR_LIMIT', 'keys'],
      [{ ...good, layers: 65 }, 'OC_ERR_DESCRIPTOR_LIMIT', 'layers'],
      [{ ...good, layerBytes: 2 * 1024 * 1024 }, 'OC_ERR_DESCRIPTOR_LIMIT', 'layerBytes'],
    ];
    for (const [descriptor, code, field] of cases) {
      const res = await post(descriptor);
      expect([res.status, res.code], JSON.stringify(descriptor).slice(0, 80)).toEqual([400, code]);
      expect(res.body).toContain('<Code>InvalidArgument</Code>');
      expect(res.body).toContain(field);
    }
    // Several wrong fields are reported together.
    const many = await post({ ...good, layers: 0, layout: 'X', extra: 1 });
    for (const field of ['layers', 'layout', 'extra']) expect(many.body).toContain(field);
  });

  it('requires the descriptor to be signed and to match the GET path', async () => {
    const d = { version: 1, keys: ['p/0', 'p/1'], layers: 1, chunkTokens: 16, layerBytes: 8, layout: 'KV_L2TD', delivery: 'layer-major' } as DescriptorInput;
    const header = encodeDescriptorHeader(d);
    const unsigned = await raw('GET', `/${bucket}/p/1`, {}, { 'x-objectcache-descriptor': header }, undefined, ['x-objectcache-descriptor']);
    expect([unsigned.status, unsigned.code]).toEqual([403, 'OC_ERR_DESCRIPTOR_UNSIGNED']);
    const mismatch = await raw('GET', `/${bucket}/p/0`, {}, { 'x-objectcache-descriptor': header });
    expect([mismatch.status, mismatch.code]).toEqual([400, 'OC_ERR_DESCRIPTOR_KEY_MISMATCH']);
    const badBase64 = await raw('GET', `/${bucket}/p/1`, {}, { 'x-objectcache-descriptor': '%%%not-base64%%%' });
    expect([badBase64.status, badBase64.code]).toEqual([400, 'OC_ERR_DESCRIPTOR_ENCODING']);
  });

  it('answers a missing chunk with 404 NoSuchKey and a short chunk with 400, naming the chunk, before streaming', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: 4, layerBytes: 1024, layout: 'KV_L2TD' });
    await client.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: prefix.keys[2] }));
    const missing = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(ObjectCacheError);
    expect((missing as ObjectCacheError).code).toBe('OC_ERR_CHUNK_MISSING');
    expect((missing as ObjectCacheError).details['Status']).toBe(404);
    expect((missing as ObjectCacheError).message).toContain(prefix.keys[2]);

    await client.s3.send(new PutObjectCommand({ Bucket: bucket, Key: prefix.keys[2], Body: Buffer.alloc(4 * 1024 - 1) }));
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const short = await client.fetch(descriptorOf(prefix, { mode }), { transport: 'post' }).catch((e: unknown) => e);
      expect((short as ObjectCacheError).code).toBe('OC_ERR_CHUNK_SIZE');
      expect((short as ObjectCacheError).details['Status']).toBe(400);
      expect((short as ObjectCacheError).message).toContain(prefix.keys[2]);
    }
  });

  it('ends the stream with an ERROR frame naming the chunk when a chunk disappears mid-stream', async () => {
    // 64 MiB in 6 layer groups; read-ahead is 4 KiB, so the gateway reads about one task ahead of the socket.
    const prefix = await seedPrefix(client, { chunks: 16, layers: 16, layerBytes: 256 * 1024, layout: 'KV_L2TD' });
    const res = await send('POST', `/${bucket}`, { objectcache: '' }, { 'content-type': 'application/json' }, JSON.stringify(descriptorOf(prefix, { mode: 'layerwise' })));
    expect(res.status).toBe(200);
    expect(res.headers['x-objectcache-mode']).toBe('layerwise');
    const decoder = new FrameDecoder({
      layerStart: 0,
      layerEnd: 16,
      chunks: 16,
      layerBytes: 256 * 1024,
      target: new Uint8Array(16 * 16 * 256 * 1024),
      layerStride: 16 * 256 * 1024,
    });
    const iterator = res.body[Symbol.asyncIterator]();
    decoder.push((await iterator.next()).value as Buffer);
    // The client has taken one network chunk and pauses; meanwhile the last chunk is deleted.
    await client.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: prefix.keys[15] }));
    let failure: unknown;
    try {
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) decoder.push(next.value as Buffer);
      decoder.finish();
    } catch (error) {
      failure = error;
    }
    expect(failure).toBeInstanceOf(ObjectCacheError);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CHUNK_MISSING');
    expect((failure as ObjectCacheError).details['Key']).toBe(prefix.keys[15]);
    expect((failure as ObjectCacheError).details['ChunkIndex']).toBe(15);
  });

  it('releases worker tasks and buffers when the client aborts mid-stream, and keeps serving', async () => {
    const prefix = await seedPrefix(client, { chunks: 16, layers: 16, layerBytes: 256 * 1024, layout: 'KV_L2TD' });
    const controller = new AbortController();
    const fetched = client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), {
      transport: 'post',
      signal: controller.signal,
      onLayerReady: (layer) => {
        if (layer === 0) controller.abort();
      },
    });
    await expect(fetched).rejects.toThrow();
    await until(() => {
      const stats = gw.gateway.poolStats();
      return stats.running === 0 && stats.queued === 0 && gw.gateway.bufferedBytes() === 0;
    });
    const again = await client.fetch(descriptorOf(prefix, { layerRange: [0, 2] }));
    expect(again.summary.layers).toEqual([0, 2]);
  });
});
