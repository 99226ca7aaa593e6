/**
 * The layerwise GET end to end, through the real gateway and read workers, against the embedded
 * store and a real MinIO: byte-exact delivery for random layouts (property tests), up to 4096
 * chunks, both transports, layer subsets, KV_2LTD and MLA objects, and the prefix lookup.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { until } from './helpers/wait.js';
import { ObjectCacheClient } from '../client/client.js';
import type { Layout } from '../schemas/layouts.js';
import { metricValue, startTestGateway, uniqueBucket, type BackendKind, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix } from './helpers/kv.js';

const minio = inject('minio');

describe.each<BackendKind>(['local', 's3'])('layerwise GET (%s backend)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;

  beforeAll(async () => {
    // Small reads and tasks so even small test prefixes use several groups and tasks.
    // Streamed chunk reads where they apply (from MinIO), so every case below covers them too.
    gw = await startTestGateway({ backend, minio, args: ['--read-bytes', '8192', '--task-bytes', '16384', '--threshold', '65536', '--chunk-reads', 'auto'] });
    client = testClient(gw, uniqueBucket('lw'));
    await client.ensureBucket();
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('delivers exactly the locally assembled layer-major bytes for random layouts, layer ranges, modes and strides', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          chunks: fc.integer({ min: 1, max: 24 }),
          layers: fc.integer({ min: 1, max: 10 }),
          halfS: fc.integer({ min: 1, max: 3000 }),
          layout: fc.constantFrom<Layout>('KV_L2TD', 'KV_2LTD', 'MLA'),
          mode: fc.constantFrom('auto', 'layerwise', 'chunkwise'),
          transport: fc.constantFrom('get', 'post'),
          padding: fc.integer({ min: 0, max: 64 }),
          range: fc.tuple(fc.nat(), fc.nat()),
        }),
        async ({ chunks, layers, halfS, layout, mode, transport, padding, range }) => {
          const layerBytes = halfS * 2;
          const prefix = await seedPrefix(client, { chunks, layers, layerBytes, layout });
          const a = range[0] % layers;
          const b = a + 1 + (range[1] % (layers - a));
          const ready: number[] = [];
          const stride = chunks * layerBytes + padding;
          const result = await client.fetch(descriptorOf(prefix, { layerRange: [a, b], mode: mode as 'auto' }), {
            transport: transport as 'get',
            layerStride: stride,
            onLayerReady: (l) => ready.push(l),
          });
          expect(ready).toEqual(Array.from({ length: b - a }, (_, i) => a + i));
          const expected = reference(prefix, a, b);
          const per = chunks * layerBytes;
          for (let l = 0; l < b - a; l++) {
            const got = Buffer.from(result.target.subarray(l * stride, l * stride + per));
            expect(got.equals(Buffer.from(expected.subarray(l * per, (l + 1) * per)))).toBe(true);
          }
          const expectedMode = mode === 'auto' ? (chunks * (b - a) * layerBytes < 65536 ? 'chunkwise' : 'layerwise') : mode;
          expect(result.summary.mode).toBe(expectedMode);
          expect(result.summary.bytes).toBe(chunks * (b - a) * layerBytes);
        },
      ),
      { numRuns: 25 },
    );
  });

  it('serves 4096 chunks in one request (POST form), with far fewer backend reads than chunks x layers', async () => {
    const prefix = await seedPrefix(client, { chunks: 4096, layers: 8, layerBytes: 512, layout: 'KV_L2TD' });
    const result = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' });
    expect(result.transport).toBe('post');
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(result.summary.backendReads).toBeLessThan(4096 * 8);
    expect(result.summary.backendReads).toBe(4096 * result.summary.plan.length);
    // The compact form: a shared key prefix once, then the hashes.
    const base = prefix.keys[0]?.slice(0, prefix.keys[0].lastIndexOf('/') + 1) ?? '';
    const compact = await client.fetch(descriptorOf(prefix, { keyPrefix: base, keys: prefix.keys.map((k) => k.slice(base.length)), layerRange: [3, 5] }));
    expect(Buffer.from(compact.target).equals(Buffer.from(reference(prefix, 3, 5)))).toBe(true);
  }, 180_000); // seeds 4,096 objects: give a loaded machine room

  it('keeps concurrent streams apart in the shared buffer arena, and gives every block back', async () => {
    // Eight requests at once, each with its own bytes, some cancelled mid-stream: a block handed
    // out twice would mix their bytes; a block not given back would stay in use afterwards.
    const prefixes = await Promise.all(Array.from({ length: 8 }, () => seedPrefix(client, { chunks: 6, layers: 12, layerBytes: 8192, layout: 'KV_L2TD' })));
    const results = await Promise.all(
      prefixes.map(async (prefix, i) => {
        const abort = new AbortController();
        const fetched = client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), {
          signal: abort.signal,
          onLayerReady: (layer) => (i % 3 === 2 && layer === 2 ? abort.abort() : undefined),
        });
        return i % 3 === 2
          ? fetched.then(
              () => 'not cancelled',
              () => 'cancelled',
            )
          : fetched;
      }),
    );
    results.forEach((result, i) => {
      if (i % 3 === 2) return expect(result).toBe('cancelled');
      expect(Buffer.from((result as Awaited<ReturnType<typeof client.fetch>>).target).equals(Buffer.from(reference(prefixes[i] as (typeof prefixes)[number])))).toBe(true);
    });
    await vi.waitFor(() => expect(gw.gateway.poolStats()).toMatchObject({ arenaBlocksInUse: 0, running: 0, queued: 0 }), { timeout: 10_000 });
    expect(gw.gateway.bufferedBytes()).toBe(0);
  });

  it('serves KV_2LTD objects (LMCache layout) as if they were stored KV_L2TD', async () => {
    const prefix = await seedPrefix(client, { chunks: 7, layers: 32, layerBytes: 4096, layout: 'KV_2LTD' });
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const result = await client.fetch(descriptorOf(prefix, { mode }));
      expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    }
  });

  it('answers the prefix lookup with the number of leading chunks that exist', async () => {
    const prefix = await seedPrefix(client, { chunks: 40, layers: 2, layerBytes: 64, layout: 'KV_L2TD' });
    expect(await client.lookup(prefix.keys)).toBe(40);
    const missing = `${prefix.keys[0]}-never-written`;
    expect(await client.lookup([...prefix.keys.slice(0, 33), missing, ...prefix.keys.slice(34)])).toBe(33);
    expect(await client.lookup([missing, ...prefix.keys])).toBe(0);
  });

  it('does not count a chunk of the wrong size as matched when the lookup names the geometry', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: 4, layerBytes: 128, layout: 'KV_L2TD' });
    // Chunk 3 rewritten one layer short: it exists, but a fetch would refuse it (OC_ERR_CHUNK_SIZE).
    await client.putChunks([prefix.keys[3] as string], [new Uint8Array(3 * 128)]);
    expect(await client.lookup(prefix.keys)).toBe(6);
    expect(await client.lookup(prefix.keys, '', { layers: 4, layerBytes: 128 })).toBe(3);
    expect(await client.lookup(prefix.keys, '', { layers: 2, layerBytes: 256 })).toBe(3); // same size, other split: a match by size
    const failure = await client.fetch(descriptorOf(prefix)).catch((e: unknown) => e);
    expect((failure as { code?: string }).code).toBe('OC_ERR_CHUNK_SIZE');
    const refusal = await client.lookup(prefix.keys, '', { layers: 4 } as never).catch((e: unknown) => e);
    expect((refusal as { code?: string }).code).toBe('OC_ERR_DESCRIPTOR_INVALID');
  });

  it('iterates ready layers with the async iterator', async () => {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 5, layerBytes: 256, layout: 'MLA' });
    const seen: number[] = [];
    const expected = reference(prefix);
    for await (const { layer, view } of client.layers(descriptorOf(prefix, { mode: 'layerwise' }))) {
      seen.push(layer);
      expect(Buffer.from(view).equals(Buffer.from(expected.subarray(layer * 768, (layer + 1) * 768)))).toBe(true);
    }
    expect(seen).toEqual([0, 1, 2, 3, 4]);
  });

  it('cancels the download when the caller leaves the iterator early', async () => {
    // 64 MiB: far more than socket buffers on both sides can hold, so only a cancelled stream stops short of it.
    const prefix = await seedPrefix(client, { chunks: 8, layers: 32, layerBytes: 256 * 1024, layout: 'KV_L2TD' });
    const total = 8 * 32 * 256 * 1024;
    const readsBefore = await metricValue(gw.gateway.adminUrl, 'objectcache_backend_reads_total');
    for await (const { layer } of client.layers(descriptorOf(prefix, { mode: 'layerwise', tenant: 'leaves-early' }), { transport: 'post' })) {
      expect(layer).toBe(0);
      break;
    }
    await until(() => gw.gateway.poolStats().running + gw.gateway.bufferedBytes() === 0);
    const delivered = await metricValue(gw.gateway.adminUrl, 'objectcache_delivered_bytes_total{tenant="leaves-early"}');
    expect(delivered).toBeGreaterThan(0);
    expect(delivered).toBeLessThan(total / 2);
    // The reads stopped too: a whole fetch at 8 KiB reads would issue total / 8 KiB of them.
    expect((await metricValue(gw.gateway.adminUrl, 'objectcache_backend_reads_total')) - readsBefore).toBeLessThan(total / 8192 / 2);
    const again = await client.fetch(descriptorOf(prefix, { layerRange: [0, 1] }));
    expect(again.summary.layers).toEqual([0, 1]);
  });

  it('ends with a summary of the plan, reads, bytes and timings', async () => {
    const prefix = await seedPrefix(client, { chunks: 4, layers: 4, layerBytes: 8192, layout: 'KV_L2TD' });
    const result = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    expect(result.summary.plan).toEqual([
      [0, 1],
      [1, 2],
      [2, 3],
      [3, 4],
    ]);
    expect(result.summary.layers).toEqual([0, 4]);
    expect(result.summary.chunks).toBe(4);
    expect(result.summary.timings.firstFrameMs).toBeGreaterThan(0);
    expect(result.summary.timings.firstReadMs).toBeLessThanOrEqual(result.summary.timings.firstFrameMs);
    expect(result.summary.timings.totalMs).toBeGreaterThanOrEqual(result.summary.timings.firstFrameMs);
    // Grouped range reads on the embedded store: one per chunk per layer group; streamed ones from
    // MinIO: per chunk, one for the first layer and one for the rest.
    expect(result.summary.backendReads).toBe(backend === 'local' ? 4 * 4 : 4 * 2);
    expect(result.summary.bytes).toBe(4 * 4 * 8192);
  });
});
