// Over 600 lines: packed segments' behaviour end to end, sharing one gateway and seeding helpers.
/**
 * Packed segments (docs/segments.md; gateway/segments/segments.ts), on both backends: a
 * prefix read often enough is packed from the frames of a read of it, and later reads are served
 * from the one segment object, byte for byte what the chunks give, for the whole run, a shorter
 * prefix, a longer request, a layer range, chunkwise delivery and both stored layouts. A chunk
 * written or deleted after packing is never served from the old segment; a pack cut short leaves
 * nothing that is read.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { toStoredLayout } from '../client/kv-layout.js';
import { objectRelativePath } from '../gateway/stores/embedded/object-file.js';
import { startServe } from './helpers/cli.js';
import {
  CLIENT_KEY,
  CLIENT_SECRET,
  fastBudget,
  metricValue,
  sdkClient,
  segmentEvents,
  type SegmentEvent,
  startTestGateway,
  testClient,
  uniqueBucket,
  type BackendKind,
  type TestGateway,
} from './helpers/gateway.js';
import { FaultProxy } from './helpers/fault-proxy.js';
import { descriptorOf as descriptorOfPrefix, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';
import { waitFor } from './helpers/wait.js';

const minio = inject('minio');

/**
 * A descriptor whose reads the gateway checks (sliceChecks: gateway), so that a pack copies their
 * frames. The clients leave the checks to themselves by default, and the pack then reads its run
 * from the chunks after the request: integrity.test.ts covers that.
 */
const descriptorOf: typeof descriptorOfPrefix = (prefix, extra = {}) => descriptorOfPrefix(prefix, { sliceChecks: 'gateway', ...extra });
const L = 6;
const S = 8192;

/** A fetch delivered exactly `expected`. */
function expectBytes(got: { readonly target: Uint8Array }, expected: Uint8Array): void {
  expect(Buffer.from(got.target).equals(Buffer.from(expected))).toBe(true);
}

describe.each<BackendKind>(['local', 's3'])('packed segments (%s backend)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let s3: S3Client;
  const bucket = uniqueBucket('seg');
  const segmentBucket = uniqueBucket('segs');
  const events = (event: SegmentEvent): Promise<number> => segmentEvents(gw.gateway.adminUrl, event);

  beforeAll(async () => {
    // Small reads and tasks, so that a chunk-served GET of these prefixes is many reads. Packs
    // from the frames on both stores (auto takes the chunks on the embedded one: tested below).
    gw = await startTestGateway({
      backend,
      minio,
      args: [
        '--segment-pack-from',
        'frames',
        '--segments',
        'on',
        '--segment-min-bytes',
        '0',
        '--segment-after-reads',
        '2',
        '--segment-bucket',
        segmentBucket,
        '--read-bytes',
        String(2 * S),
        '--task-bytes',
        String(4 * S),
      ],
    });
    client = testClient(gw, bucket);
    await client.ensureBucket();
    s3 = sdkClient(gw.url);
  });
  afterAll(async () => {
    s3?.destroy();
    await client?.close();
    await gw?.close();
  });

  /** Reads a prefix twice (the second read packs it) and waits for the manifest. */
  async function packed(prefix: SeededPrefix): Promise<void> {
    const before = await events('packed');
    for (let i = 0; i < 2; i++) {
      const result = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
      expectBytes(result, reference(prefix));
    }
    await waitFor('the segment is packed', async () => (await events('packed')) > before);
  }

  const subset = (prefix: SeededPrefix, chunks: number): SeededPrefix => ({ ...prefix, keys: prefix.keys.slice(0, chunks), canonical: prefix.canonical.slice(0, chunks) });

  it('serves a packed prefix from its segment, byte-exact, with a few sequential reads', async () => {
    const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    const rereads = await events('reread');
    const first = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    await packed(prefix);
    // Packed from the read's frames, which the gateway checked: nothing read again for it.
    expect(await events('reread')).toBe(rereads);
    const served = await events('served');
    const again = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    expectBytes(again, reference(prefix));
    expect(await events('served')).toBe(served + 1);
    // The client says so (the answer's x-objectcache-segment-chunks header), over either transport.
    expect(first.segmentChunks).toBe(0);
    expect(again.segmentChunks).toBe(8);
    expect((await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' })).segmentChunks).toBe(8);
    // And where it reads the stream through the AWS SDK (get) and undici (post), as behind https:
    // an https endpoint in its list (never reached: the first one answers) turns its sockets off.
    const streams = new ObjectCacheClient({
      endpoint: [gw.url, 'https://127.0.0.1:9'],
      bucket,
      credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET },
      retries: 0,
    });
    try {
      for (const transport of ['get', 'post'] as const) {
        const streamed = await streams.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport });
        expectBytes(streamed, reference(prefix));
        expect(streamed.segmentChunks).toBe(8);
      }
    } finally {
      await streams.close();
    }
    // From the chunks: a read per chunk per layer group; from the segment: one per task.
    expect(again.summary.backendReads).toBeLessThan(first.summary.backendReads);
    expect(again.summary.verified).toBe(true);
    // Chunkwise delivery of the same prefix, from the same segment.
    const chunkwise = await client.fetch(descriptorOf(prefix, { mode: 'chunkwise' }));
    expectBytes(chunkwise, reference(prefix));
    expect(await events('served')).toBe(served + 5);
  });

  it('serves a shorter prefix, a layer range and a longer request from the segment and the chunks', async () => {
    const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    const served = await events('served');
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const shorter = subset(prefix, 5);
      const got = await client.fetch(descriptorOf(shorter, { mode }));
      expectBytes(got, reference(shorter));
      expect(got.segmentChunks).toBe(5);
      const ranged = await client.fetch(descriptorOf(prefix, { mode, layerRange: [2, 5] }));
      expectBytes(ranged, reference(prefix, 2, 5));
    }
    expect(await events('served')).toBe(served + 4);
    // Three more chunks after the packed eight: the segment, then the chunks.
    const more = Array.from({ length: 3 }, () => new Uint8Array(randomBytes(L * S)));
    const keys = more.map((_, i) => `${prefix.keys[0]}-more-${i}`);
    await client.putChunks(keys, more, { layout: { layout: 'KV_L2TD', layers: L, layerBytes: S } });
    const longer: SeededPrefix = { ...prefix, keys: [...prefix.keys, ...keys], canonical: [...prefix.canonical, ...more] };
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const got = await client.fetch(descriptorOf(longer, { mode }));
      expectBytes(got, reference(longer));
      expect(got.segmentChunks).toBe(8);
    }
    expect(await events('served')).toBe(served + 6);
  });

  it('keeps the K and V halves of KV_2LTD chunks in place', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_2LTD' });
    await packed(prefix);
    const served = await events('served');
    for (const p of [prefix, subset(prefix, 4)]) {
      const got = await client.fetch(descriptorOf(p, { mode: 'layerwise' }));
      expectBytes(got, reference(p));
    }
    expect(await events('served')).toBe(served + 2);
  });

  it('never serves a chunk rewritten or deleted through the gateway from the old segment', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    const dropped = await events('dropped');
    const stored = async (): Promise<number> => (await s3.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` }))).KeyCount ?? 0;
    const before = await stored();
    const fresh = new Uint8Array(randomBytes(L * S));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: prefix.keys[3], Body: fresh }));
    expect(await events('dropped')).toBe(dropped + 1);
    // Its manifest (deleted only while it is the one the gateway knows) and its data object are gone.
    await waitFor('the dropped segment is deleted', async () => (await stored()) === before - 2);
    const rewritten: SeededPrefix = { ...prefix, canonical: prefix.canonical.map((c, i) => (i === 3 ? fresh : c)) };
    const served = await events('served');
    const packs = await events('packed');
    const got = await client.fetch(descriptorOf(rewritten, { mode: 'layerwise' }));
    expectBytes(got, reference(rewritten));
    expect(await events('served')).toBe(served);
    // That read packed the run again (it was due already), from the new version; then one chunk
    // is deleted: the GET fails as without segments.
    await waitFor('the run is packed anew', async () => (await events('packed')) > packs);
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: prefix.keys[5] }));
    await expect(client.fetch(descriptorOf(rewritten, { mode: 'layerwise' }))).rejects.toMatchObject({ code: 'OC_ERR_CHUNK_MISSING' });
  });

  it('keeps the segment when a longer request fails on a chunk past it', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    const dropped = await events('dropped');
    const absent: SeededPrefix = { ...prefix, keys: [...prefix.keys, `${prefix.keys[0]}-absent`], canonical: [...prefix.canonical, new Uint8Array(L * S)] };
    await expect(client.fetch(descriptorOf(absent, { mode: 'layerwise' }))).rejects.toMatchObject({ code: 'OC_ERR_CHUNK_MISSING' });
    expect(await events('dropped')).toBe(dropped);
    const served = await events('served');
    expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
    expect(await events('served')).toBe(served + 1);
  });

  it('reads the layers of a segment damaged or replaced mid-read from the chunks, and drops it', async () => {
    const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    // The segment's data object, as its manifest names it (the test key may read the reserved bucket).
    const admin = sdkClient(gw.url);
    let data: { key: string; bytes: number } | undefined;
    try {
      const listed = await admin.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` }));
      for (const object of listed.Contents ?? []) {
        if (!(object.Key as string).endsWith('.json')) continue;
        const got = await admin.send(new GetObjectCommand({ Bucket: segmentBucket, Key: object.Key }));
        const manifest = JSON.parse(await (got.Body as { transformToString(): Promise<string> }).transformToString()) as { keys: string[]; data: string; bytes: number };
        if (manifest.keys[0] === prefix.keys[0]) data = { key: manifest.data, bytes: manifest.bytes };
      }
    } finally {
      admin.destroy();
    }
    if (!data) throw new Error('no manifest names the prefix');
    if (backend === 'local') {
      // One byte of the last layer flipped in place: its ETag stays, so only its CRC can tell,
      // once the first layers have gone out.
      const file = await open(join(gw.dataDir as string, objectRelativePath(segmentBucket, data.key)), 'r+');
      const at = Math.floor(data.bytes * 0.9);
      const byte = Buffer.alloc(1);
      await file.read(byte, 0, 1, at);
      byte[0] = (byte[0] as number) ^ 0x55;
      await file.write(byte, 0, 1, at);
      await file.close();
    } else {
      // Replaced straight in the store, as by another gateway or an operator: another ETag.
      const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
      try {
        await direct.send(new PutObjectCommand({ Bucket: segmentBucket, Key: data.key, Body: randomBytes(data.bytes) }));
      } finally {
        direct.destroy();
      }
    }
    const dropped = await events('dropped');
    const layers: number[] = [];
    // The stream goes on: the layers the segment cannot give come from the chunks.
    expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { onLayerReady: (layer) => layers.push(layer) }), reference(prefix));
    expect(layers).toEqual(Array.from({ length: L }, (_, i) => i));
    expect(await events('dropped')).toBe(dropped + 1);
    const served = await events('served');
    expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
    expect(await events('served')).toBe(served);
  });

  it.runIf(backend === 's3')('notices a chunk rewritten behind the gateway (straight into the store) by its HEADs', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    try {
      const fresh = new Uint8Array(randomBytes(L * S));
      await direct.send(new PutObjectCommand({ Bucket: bucket, Key: prefix.keys[2], Body: toStoredLayout(fresh, 'KV_L2TD', L, S) }));
      const stale = await events('stale');
      const rewritten: SeededPrefix = { ...prefix, canonical: prefix.canonical.map((c, i) => (i === 2 ? fresh : c)) };
      const got = await client.fetch(descriptorOf(rewritten, { mode: 'layerwise' }));
      expectBytes(got, reference(rewritten));
      expect(await events('stale')).toBe(stale + 1);
    } finally {
      direct.destroy();
    }
  });

  it('leaves nothing usable when the read that packs is cut short', async () => {
    // 48 MiB: far more than the sockets between gateway and client hold, so the stream (and the
    // pack) is still going when the client leaves after the first layer.
    const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: 1024 * 1024, layout: 'KV_L2TD' });
    await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    const abandoned = await events('abandoned');
    const controller = new AbortController();
    // The second read would pack: its client goes away after the first layer.
    await expect(client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { onLayerReady: () => controller.abort(), signal: controller.signal })).rejects.toThrow();
    await waitFor('the pack is abandoned', async () => (await events('abandoned')) > abandoned);
    const served = await events('served');
    const got = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    expectBytes(got, reference(prefix));
    expect(await events('served')).toBe(served);
    // No manifest names the run, and every data object left is named by a manifest (those of
    // the other tests' prefixes; a dropped segment's objects are deleted in the background).
    {
      // The test key is the gateway's administrator, which may read the reserved bucket.
      const admin = sdkClient(gw.url);
      try {
        await waitFor('no data object is left without its manifest', async () => {
          const listed = await admin.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` }));
          const names = (listed.Contents ?? []).map((o) => o.Key as string);
          const manifests = names.filter((n) => n.endsWith('.json')).map((n) => n.slice(0, -5));
          return names.every((n) => n.endsWith('.json') || manifests.some((m) => n.startsWith(`${m}/`)));
        });
      } finally {
        admin.destroy();
      }
    }
  });

  it('sweeps data objects no manifest names, and keeps every segment in use', async () => {
    const keysOf = async (): Promise<string[]> => {
      // The segment bucket is made by the first pack.
      const listed = await s3.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` })).catch((error: { name?: string }) => {
        if (error.name === 'NoSuchBucket') return { Contents: [] };
        throw error;
      });
      return (listed.Contents ?? []).map((o) => o.Key as string);
    };
    const before = new Set(await keysOf());
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    const manifest = (await keysOf()).find((key) => !before.has(key) && key.endsWith('.json')) as string;
    expect(manifest).toBeDefined();
    const run = manifest.slice(0, -'.json'.length);
    // What a crash between a pack's two writes leaves (no manifest), and a second data object of a run that has one.
    const orphans = [`${bucket}/${'0'.repeat(64)}/00000000000000aa`, `${run}/00000000000000bb`];
    for (const key of orphans) await s3.send(new PutObjectCommand({ Bucket: segmentBucket, Key: key, Body: new Uint8Array(16) }));
    const all = await keysOf();
    // Younger than an hour: kept.
    expect(await gw.gateway.segments?.sweep()).toBe(0);
    expect(await gw.gateway.segments?.sweep(0)).toBeGreaterThanOrEqual(2);
    const left = await keysOf();
    for (const key of orphans) expect(left).not.toContain(key);
    // Every manifest and every data object a manifest names is still there.
    for (const key of all.filter((k) => k.endsWith('.json'))) expect(left).toContain(key);
    expect(left.filter((k) => k.startsWith(`${run}/`))).toHaveLength(1);
    const served = await events('served');
    expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
    expect(await events('served')).toBe(served + 1);
  });

  it('reports the segments it knows', async () => {
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_segments')).toBeGreaterThan(0);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_segment_bytes')).toBeGreaterThan(0);
  });
});

describe.each<BackendKind>(['local', 's3'])('packed segments and space (%s backend)', (backend) => {
  /** A gateway packing every prefix on its second read, with `args`; its client; stopped after `run`. */
  async function withGateway(bucket: string, args: readonly string[], run: (gw: TestGateway, client: ObjectCacheClient) => Promise<void>): Promise<void> {
    const gw = await startTestGateway({ backend, minio, args: ['--segments', 'on', '--segment-min-bytes', '0', '--segment-bucket', uniqueBucket('segs'), ...args] });
    const client = testClient(gw, bucket);
    try {
      await client.ensureBucket();
      await run(gw, client);
    } finally {
      await client.close();
      await gw.close();
    }
  }

  /** Reads a prefix twice, the second read packing it. */
  async function readTwice(client: ObjectCacheClient, prefix: SeededPrefix): Promise<void> {
    for (let i = 0; i < 2; i++) await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
  }

  it('counts a segment against its bucket and evicts it before any chunk', async () => {
    const bucket = uniqueBucket('segcap');
    // Six chunks of 48 KiB (288 KiB) fit under the high mark of a 400 KiB budget; their segment
    // (288 KiB more) does not, and evicting it alone brings the bucket under the low mark.
    const budget = fastBudget(bucket, 400 * 1024);
    await withGateway(bucket, budget, async (gw, client) => {
      const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await readTwice(client, prefix);
      await waitFor('the segment is evicted', async () => (await segmentEvents(gw.gateway.adminUrl, 'evicted')) === 1 && gw.gateway.capacity?.usage()[0]?.derivedBytes === 0);
      expect(await segmentEvents(gw.gateway.adminUrl, 'packed')).toBe(1);
      expect(await metricValue(gw.gateway.adminUrl, 'objectcache_segments')).toBe(0);
      // Every chunk is still there, and the prefix reads as before.
      const s3 = sdkClient(gw.url);
      try {
        for (const key of prefix.keys) await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
      } finally {
        s3.destroy();
      }
      expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
    });
  });

  it('packs by default the prefixes of budgeted buckets, and only those (--segments auto)', async () => {
    const bucket = uniqueBucket('segauto');
    const other = uniqueBucket('segnobudget');
    const gw = await startTestGateway({ backend, minio, args: [...fastBudget(bucket, 64 * 2 ** 20), '--segment-min-bytes', '0', '--segment-bucket', uniqueBucket('segs')] });
    const client = testClient(gw, bucket);
    const unbudgeted = testClient(gw, other);
    try {
      await client.ensureBucket();
      await unbudgeted.ensureBucket();
      const elsewhere = await seedPrefix(unbudgeted, { chunks: 4, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await readTwice(unbudgeted, elsewhere);
      const hot = await seedPrefix(client, { chunks: 4, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await readTwice(client, hot);
      await waitFor('the budgeted prefix is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) === 1);
      expect(gw.gateway.capacity?.usage()[0]?.derivedBytes).toBeGreaterThan(0);
      expectBytes(await client.fetch(descriptorOf(hot, { mode: 'layerwise' })), reference(hot));
      expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(1);
      expect(await segmentEvents(gw.gateway.adminUrl, 'packed')).toBe(1); // never the unbudgeted bucket's
      expectBytes(await unbudgeted.fetch(descriptorOf(elsewhere, { mode: 'layerwise' })), reference(elsewhere));
      expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(1); // read from its chunks
    } finally {
      await client.close();
      await unbudgeted.close();
      await gw.close();
    }
  });

  it("keeps a hot prefix's segment while colder chunks go: one least-recently-used order for both", async () => {
    const bucket = uniqueBucket('segcap');
    // A cold prefix (six chunks, never read) and a hot one read twice, so packed: 288 KiB each and
    // 288 KiB of segment, 864 KiB past the high mark of a 900 KiB budget (855); trimmed to 765.
    const budget = fastBudget(bucket, 900 * 1024);
    await withGateway(bucket, budget, async (gw, client) => {
      const cold = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await new Promise((resolve) => setTimeout(resolve, 5));
      const hot = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await readTwice(client, hot);
      await waitFor('the hot prefix is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) === 1);
      await waitFor('the bucket is trimmed', () => (gw.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 765 * 1024);
      // The cold prefix lost its tail, three chunks; the hot one kept its segment and every chunk.
      expect(await client.lookup(cold.keys)).toBe(3);
      expect(await client.lookup(hot.keys)).toBe(6);
      expect(await segmentEvents(gw.gateway.adminUrl, 'evicted')).toBe(0);
      expect(gw.gateway.capacity?.usage()[0]?.derivedBytes).toBeGreaterThan(0);
      const served = await segmentEvents(gw.gateway.adminUrl, 'served');
      expectBytes(await client.fetch(descriptorOf(hot, { mode: 'layerwise' })), reference(hot));
      expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(served + 1);
    });
  });

  it('keeps at most --max-segment-bytes of segments, the least recently used going first', async () => {
    const bucket = uniqueBucket('segmax');
    const one = 6 * L * S; // one prefix's segment
    await withGateway(bucket, ['--max-segment-bytes', String(one)], async (gw, client) => {
      const a = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      const b = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await readTwice(client, a);
      await waitFor('A is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) === 1);
      await readTwice(client, b);
      await waitFor('B is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) === 2);
      expect(await metricValue(gw.gateway.adminUrl, 'objectcache_segments')).toBe(1);
      expect(await metricValue(gw.gateway.adminUrl, 'objectcache_segment_bytes')).toBe(one);
      expect(await segmentEvents(gw.gateway.adminUrl, 'evicted')).toBe(1);
      // B is served from its segment; A, whose segment went, from its chunks, byte-exact.
      for (const [prefix, fromSegment] of [
        [b, 1],
        [a, 0],
      ] as const) {
        const before = await segmentEvents(gw.gateway.adminUrl, 'served');
        expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
        expect((await segmentEvents(gw.gateway.adminUrl, 'served')) - before).toBe(fromSegment);
      }
    });
  });

  it('counts the segments in the store it does not know, keeps them within --max-segment-bytes, the oldest going first, and learns the rest', async () => {
    const bucket = uniqueBucket('segstore');
    const segmentBucket = uniqueBucket('segs');
    const one = 6 * L * S; // one prefix's segment
    // Gateway A packs two prefixes; gateway B, in front of the same store and segment bucket,
    // knows neither until its sweep.
    const a = await startTestGateway({ backend, minio, args: ['--segments', 'on', '--segment-min-bytes', '0', '--segment-bucket', segmentBucket] });
    const clientA = testClient(a, bucket);
    let b: TestGateway | undefined;
    try {
      await clientA.ensureBucket();
      const older = await seedPrefix(clientA, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      const newer = await seedPrefix(clientA, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await readTwice(clientA, older);
      await waitFor('the older prefix is packed', async () => (await segmentEvents(a.gateway.adminUrl, 'packed')) === 1);
      await new Promise((r) => setTimeout(r, 1100)); // a later LastModified, to the second
      await readTwice(clientA, newer);
      await waitFor('the newer prefix is packed', async () => (await segmentEvents(a.gateway.adminUrl, 'packed')) === 2);
      b = await startTestGateway({
        backend,
        minio,
        ...(a.dataDir ? { dataDir: a.dataDir } : {}),
        args: ['--segments', 'on', '--segment-bucket', segmentBucket, '--max-segment-bytes', String(one)],
      });
      const segments = b.gateway.segments;
      if (!segments) throw new Error('gateway B has no segments');
      expect(segments.bytes(bucket)).toBe(0);
      await segments.sweep();
      // Both were found (2 x one, past the bound): the older one was deleted, the newer one counts.
      expect(await segmentEvents(b.gateway.adminUrl, 'evicted')).toBe(1);
      expect(segments.bytes(bucket)).toBe(one);
      const s3 = sdkClient(b.url);
      try {
        const listed = await s3.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` }));
        const names = (listed.Contents ?? []).map((o) => o.Key as string);
        expect(names.filter((n) => n.endsWith('.json'))).toHaveLength(1);
        expect(names).toHaveLength(2);
      } finally {
        s3.destroy();
      }
      // B learnt the newer one: it serves a shorter prefix of it from the segment at once, though
      // it never read the packed run (a lookup in the store would look for the shorter run's name).
      expect(await segmentEvents(b.gateway.adminUrl, 'discovered')).toBe(1);
      const clientB = testClient(b, bucket);
      try {
        const shorter = { ...newer, keys: newer.keys.slice(0, 4), canonical: newer.canonical.slice(0, 4) };
        expectBytes(await clientB.fetch(descriptorOf(shorter, { mode: 'layerwise' })), reference(shorter));
        expect(await segmentEvents(b.gateway.adminUrl, 'served')).toBe(1);
      } finally {
        await clientB.close();
      }
      // A still knows the deleted segment: its read goes to the chunks, byte-exact, and drops it.
      const dropped = await segmentEvents(a.gateway.adminUrl, 'dropped');
      expectBytes(await clientA.fetch(descriptorOf(older, { mode: 'layerwise' })), reference(older));
      expect(await segmentEvents(a.gateway.adminUrl, 'dropped')).toBe(dropped + 1);
      const served = await segmentEvents(a.gateway.adminUrl, 'served');
      expectBytes(await clientA.fetch(descriptorOf(newer, { mode: 'layerwise' })), reference(newer));
      expect(await segmentEvents(a.gateway.adminUrl, 'served')).toBe(served + 1);
    } finally {
      await b?.close();
      await clientA.close();
      await a.close();
    }
  });
});

/** The environment and store arguments of an `objectcache serve` process on `backend` (the local store in `dataDir`). */
function serveOn(backend: BackendKind, dataDir: string): { env: NodeJS.ProcessEnv; store: string[] } {
  return {
    env: {
      OBJECTCACHE_ACCESS_KEY: CLIENT_KEY,
      OBJECTCACHE_SECRET_KEY: CLIENT_SECRET,
      ...(backend === 's3' ? { OBJECTCACHE_BACKEND_ACCESS_KEY: minio.accessKey, OBJECTCACHE_BACKEND_SECRET_KEY: minio.secretKey } : {}),
    },
    store: backend === 's3' ? ['--s3-endpoint', minio.endpoint] : ['--data-dir', dataDir],
  };
}

describe.each<BackendKind>(['local', 's3'])('a gateway killed while it packs (%s backend)', (backend) => {
  it('leaves no segment, and a restarted gateway packs and serves the prefix anew', async () => {
    const bucket = uniqueBucket('segcrash');
    const segmentBucket = uniqueBucket('segs');
    const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-segcrash-'));
    const { env, store } = serveOn(backend, dataDir);
    const args = ['--segments', 'on', '--segment-min-bytes', '0', '--segment-bucket', segmentBucket, ...store];
    const clientOf = (url: string): ObjectCacheClient => testClient({ url }, bucket);
    let serve = await startServe(args, env);
    try {
      let client = clientOf(serve.url);
      await client.ensureBucket();
      // 48 MiB, so the stream is far from done when the first layer is in.
      const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: 1024 * 1024, layout: 'KV_L2TD' });
      await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
      // The second read packs; the gateway is killed once its first layer is in.
      const killed = serve;
      await expect(client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { onLayerReady: () => void killed.child.kill('SIGKILL') })).rejects.toThrow();
      await killed.stop();
      await client.close();
      serve = await startServe(args, env);
      client = clientOf(serve.url);
      try {
        // Nothing of the pack is in the segment bucket (the test key is the administrator's).
        const admin = sdkClient(serve.url);
        try {
          const listed = await admin.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` })).catch((error: { name?: string }) => {
            if (error.name === 'NoSuchBucket') return { Contents: [] };
            throw error;
          });
          expect(listed.Contents ?? []).toEqual([]);
        } finally {
          admin.destroy();
        }
        // The restarted gateway reads the prefix from its chunks, packs it on its second read, and serves the third from the segment.
        const events = (event: SegmentEvent): Promise<number> => segmentEvents(serve.adminUrl, event);
        for (let i = 0; i < 2; i++) expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
        await waitFor('the prefix is packed', async () => (await events('packed')) === 1);
        expect(await events('served')).toBe(0);
        expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
        expect(await events('served')).toBe(1);
      } finally {
        await client.close();
      }
    } finally {
      await serve.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe.each<BackendKind>(['local', 's3'])('a segment packed by another gateway, or before a restart (%s backend)', (backend) => {
  it('is found in the store and served at the run\u2019s first due read, and not when a chunk changed meanwhile', async () => {
    const bucket = uniqueBucket('segfound');
    const segmentBucket = uniqueBucket('segs');
    const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-segfound-'));
    const { env, store } = serveOn(backend, dataDir);
    const args = (...more: string[]): string[] => [
      '--segments',
      'on',
      '--segment-min-bytes',
      '0',
      '--segment-after-reads',
      '1',
      '--segment-bucket',
      segmentBucket,
      '--read-bytes',
      String(2 * S),
      '--task-bytes',
      String(4 * S),
      ...store,
      ...more,
    ];
    /** Runs `body` against a gateway started with `gatewayArgs`, then stops it (one at a time: the local store is one process's). */
    const withGateway = async (gatewayArgs: string[], body: (client: ObjectCacheClient, events: (event: SegmentEvent) => Promise<number>) => Promise<void>): Promise<void> => {
      const serve = await startServe(gatewayArgs, env);
      const client = testClient({ url: serve.url }, bucket);
      try {
        await body(client, (event) => segmentEvents(serve.adminUrl, event));
      } finally {
        await client.close();
        await serve.stop();
      }
    };
    try {
      let prefix: SeededPrefix | undefined;
      await withGateway(args(), async (client, events) => {
        await client.ensureBucket();
        prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
        expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
        await waitFor('the prefix is packed', async () => (await events('packed')) === 1);
      });
      const p = prefix as SeededPrefix;
      // A fresh gateway: its first read of the run finds the segment, and is served from it.
      await withGateway(args(), async (client, events) => {
        const first = await client.fetch(descriptorOf(p, { mode: 'layerwise' }));
        expectBytes(first, reference(p));
        expect(await events('discovered')).toBe(1);
        expect(await events('served')).toBe(1);
        expect(await events('packed')).toBe(0);
        // Known from then on: not looked for again.
        expectBytes(await client.fetch(descriptorOf(p, { mode: 'layerwise' })), reference(p));
        expect(await events('discovered')).toBe(1);
        expect(await events('served')).toBe(2);
      });
      // A chunk rewritten where no segment-keeping gateway sees it (a gateway with segments off).
      const fresh = new Uint8Array(randomBytes(L * S));
      await withGateway([...store, '--segments', 'off'], async (client) => {
        await client.putChunks([p.keys[2] as string], [fresh], { layout: { layout: 'KV_L2TD', layers: L, layerBytes: S } });
      });
      const rewritten: SeededPrefix = { ...p, canonical: p.canonical.map((c, i) => (i === 2 ? fresh : c)) };
      // Even trusting only its own writes (--segment-check writes), a gateway checks a segment it finds once.
      await withGateway(args('--segment-check', 'writes'), async (client, events) => {
        expectBytes(await client.fetch(descriptorOf(rewritten, { mode: 'layerwise' })), reference(rewritten));
        expect(await events('served')).toBe(0);
        expect(await events('discovered')).toBe(0);
        expect(await events('stale')).toBe(1);
        // That read packed the new version, which the next read is served from.
        await waitFor('the new version is packed', async () => (await events('packed')) === 1);
        expectBytes(await client.fetch(descriptorOf(rewritten, { mode: 'layerwise' })), reference(rewritten));
        expect(await events('served')).toBe(1);
      });
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe.each<BackendKind>(['local', 's3'])('a pack that falls behind its read (%s backend)', (backend) => {
  it('does not hold the read: the layers it missed are read from the chunks after it, and the segment is exact', async () => {
    // A queue of 4 KiB: a frame that finds the last one's copy not yet taken is not copied. In
    // front of MinIO a proxy takes none of the segment's upload while the read goes on, so the
    // pack falls behind at its second frame every time. The embedded store writes the copies
    // itself, as fast as this machine writes a file, so whether it has taken one when the next
    // frame comes is a race a faster machine loses: there the pack copies no frames
    // (--segment-pack-from chunks), behind from the first, and reads every layer after the read.
    const proxy = backend === 's3' ? new FaultProxy(new URL(minio.endpoint)) : undefined;
    const endpoint = proxy ? await proxy.listen() : undefined;
    const gw = await startTestGateway({
      backend,
      minio: endpoint ? { ...minio, endpoint } : minio,
      args: [
        ...['--segments', 'on', '--segment-min-bytes', '0', '--segment-after-reads', '1', '--segment-pack-queue-bytes', '4096', '--segment-bucket', uniqueBucket('segbehind')],
        ...(proxy ? [] : ['--segment-pack-from', 'chunks']),
      ],
    });
    const client = testClient(gw, uniqueBucket('segbehind'));
    try {
      await client.ensureBucket();
      for (const layout of ['KV_L2TD', 'KV_2LTD'] as const) {
        const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: 1024 * 1024, layout });
        const rereads = await segmentEvents(gw.gateway.adminUrl, 'reread');
        const packs = await segmentEvents(gw.gateway.adminUrl, 'packed');
        proxy?.holdUploads();
        try {
          expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
        } finally {
          proxy?.releaseUploads();
        }
        await waitFor('the segment is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) > packs);
        expect(await segmentEvents(gw.gateway.adminUrl, 'reread')).toBe(rereads + 1);
        // Every slice is checked against the manifest's CRC as it is read: a misplaced rest fails here.
        const served = await segmentEvents(gw.gateway.adminUrl, 'served');
        for (const mode of ['layerwise', 'chunkwise'] as const) expectBytes(await client.fetch(descriptorOf(prefix, { mode })), reference(prefix));
        expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(served + 2);
      }
      expect(await segmentEvents(gw.gateway.adminUrl, 'abandoned')).toBe(0);
    } finally {
      await client.close();
      await gw.close();
      await proxy?.close();
    }
  });
});

describe('a pack that falls behind a read that lasts (s3 backend)', () => {
  it('reads the rest from the chunks while the read goes on, and the segment is exact', async () => {
    // The store takes none of the segment's upload until released, so the pack falls behind at
    // the read's second frame; paced to 4 MiB/s, the 48 MiB read lasts about 12 s, and the rest
    // is read from 5 s after the pack fell behind: before the read ends.
    const proxy = new FaultProxy(new URL(minio.endpoint));
    const endpoint = await proxy.listen();
    const gw = await startTestGateway({
      backend: 's3',
      minio: { ...minio, endpoint },
      args: [
        '--segments',
        'on',
        '--segment-min-bytes',
        '0',
        '--segment-after-reads',
        '1',
        '--segment-pack-queue-bytes',
        '4096',
        '--segment-bucket',
        uniqueBucket('segslow'),
        '--cap',
        '4MiB/s',
      ],
    });
    const client = testClient(gw, uniqueBucket('segslow'));
    try {
      await client.ensureBucket();
      const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: 1024 * 1024, layout: 'KV_L2TD' });
      proxy.holdUploads();
      let settled = false;
      const read = client.fetch(descriptorOf(prefix, { mode: 'layerwise' })).finally(() => (settled = true));
      await waitFor('the rest is being read', async () => (await segmentEvents(gw.gateway.adminUrl, 'reread')) === 1, 20_000);
      expect(settled).toBe(false);
      expectBytes(await read, reference(prefix));
      proxy.releaseUploads();
      await waitFor('the segment is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) === 1, 30_000);
      expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
      expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(1);
      expect(await segmentEvents(gw.gateway.adminUrl, 'abandoned')).toBe(0);
    } finally {
      proxy.releaseUploads();
      await client.close();
      await gw.close();
      await proxy.close();
    }
  }, 60_000);
});

describe.each<BackendKind>(['local', 's3'])('--segment-pack-from chunks (%s backend)', (backend) => {
  it('writes nothing while the read that packs goes on, then packs the run from the chunks, exact', async () => {
    // In front of MinIO through a proxy that counts the PUTs the gateway begins; the read is paced
    // (24 MiB at 8 MiB/s, about 3 s), so a pack that wrote during it would be seen.
    const proxy = backend === 's3' ? new FaultProxy(new URL(minio.endpoint)) : undefined;
    const endpoint = await proxy?.listen();
    const gw = await startTestGateway({
      backend,
      minio: endpoint ? { ...minio, endpoint } : minio,
      args: [
        '--segments',
        'on',
        '--segment-min-bytes',
        '0',
        '--segment-after-reads',
        '1',
        '--segment-pack-from',
        'chunks',
        '--segment-bucket',
        uniqueBucket('segfrom'),
        '--cap',
        '8MiB/s',
      ],
    });
    const client = testClient(gw, uniqueBucket('segfrom'));
    try {
      await client.ensureBucket();
      for (const layout of ['KV_L2TD', 'KV_2LTD'] as const) {
        const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: 512 * 1024, layout });
        const packs = await segmentEvents(gw.gateway.adminUrl, 'packed');
        const rereads = await segmentEvents(gw.gateway.adminUrl, 'reread');
        const puts = proxy?.puts ?? 0;
        // Seen while the read goes on (a pack from frames has begun its PUT by its third layer).
        let putsMidway: number | undefined;
        expectBytes(
          await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { onLayerReady: (layer) => (putsMidway ??= layer === L / 2 ? proxy?.puts : undefined) }),
          reference(prefix),
        );
        if (proxy) expect(putsMidway).toBe(puts);
        await waitFor('the segment is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) > packs, 30_000);
        expect(await segmentEvents(gw.gateway.adminUrl, 'reread')).toBe(rereads + 1);
        if (proxy) expect(proxy.puts).toBeGreaterThan(puts);
        // Every slice is checked against the manifest's CRC as it is read.
        const served = await segmentEvents(gw.gateway.adminUrl, 'served');
        for (const mode of ['layerwise', 'chunkwise'] as const) expectBytes(await client.fetch(descriptorOf(prefix, { mode })), reference(prefix));
        expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(served + 2);
      }
      expect(await segmentEvents(gw.gateway.adminUrl, 'abandoned')).toBe(0);
    } finally {
      await client.close();
      await gw.close();
      await proxy?.close();
    }
  }, 90_000);
});

describe('a segment the store refuses (local backend)', () => {
  it('abandons the pack at once: the read that packs is not held for the stall timeout', async () => {
    const segmentBucket = uniqueBucket('segrefused');
    const gw = await startTestGateway({
      backend: 'local',
      args: ['--segments', 'on', '--segment-min-bytes', '0', '--segment-after-reads', '2', '--segment-bucket', segmentBucket],
    });
    const client = testClient(gw, uniqueBucket('segref'));
    try {
      await client.ensureBucket();
      // The segment bucket cannot be made: a file is where its folder would be.
      writeFileSync(join(gw.dataDir as string, 'buckets', segmentBucket), 'not a folder');
      // 96 MiB: more than a pack's queue (64 MiB), so the read would wait for the store.
      const prefix = await seedPrefix(client, { chunks: 8, layers: 6, layerBytes: 2 * 1024 * 1024, layout: 'KV_L2TD' });
      await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
      const abandoned = await segmentEvents(gw.gateway.adminUrl, 'abandoned');
      const started = performance.now();
      expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
      // Held for the pack, it would have waited PACK_STALL_MS (30 s) for a store that takes nothing.
      expect(performance.now() - started).toBeLessThan(15_000);
      await waitFor('the pack is abandoned', async () => (await segmentEvents(gw.gateway.adminUrl, 'abandoned')) > abandoned);
      expect(await segmentEvents(gw.gateway.adminUrl, 'packed')).toBe(0);
    } finally {
      await client.close();
      await gw.close();
    }
  }, 60_000);
});

describe('--segment-check writes: a write through the gateway is the only guard (local backend)', () => {
  it('never serves a chunk rewritten or deleted through the gateway from the old segment', async () => {
    const gw = await startTestGateway({
      backend: 'local',
      args: [
        '--segments',
        'on',
        '--segment-min-bytes',
        '0',
        '--segment-after-reads',
        '1',
        '--segment-check',
        'writes',
        '--segment-bucket',
        uniqueBucket('segw'),
        '--read-bytes',
        String(2 * S),
        '--task-bytes',
        String(4 * S),
      ],
    });
    const bucket = uniqueBucket('segwrites');
    const client = testClient(gw, bucket);
    const s3 = sdkClient(gw.url);
    try {
      await client.ensureBucket();
      const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      /** Reads `p` once (with --segment-after-reads 1, the read that packs it), waits for the pack, then reads it from the segment. */
      const packAndServe = async (p: SeededPrefix, packs: number): Promise<void> => {
        await waitFor('the segment is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) >= packs);
        const served = await segmentEvents(gw.gateway.adminUrl, 'served');
        expectBytes(await client.fetch(descriptorOf(p, { mode: 'layerwise' })), reference(p));
        expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(served + 1);
      };
      expectBytes(await client.fetch(descriptorOf(prefix, { mode: 'layerwise' })), reference(prefix));
      await packAndServe(prefix, 1);
      // Rewritten: no HEAD would notice here, only the write's own notice.
      const fresh = new Uint8Array(randomBytes(L * S));
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: prefix.keys[1], Body: fresh }));
      const rewritten: SeededPrefix = { ...prefix, canonical: prefix.canonical.map((c, i) => (i === 1 ? fresh : c)) };
      const served = await segmentEvents(gw.gateway.adminUrl, 'served');
      expectBytes(await client.fetch(descriptorOf(rewritten, { mode: 'layerwise' })), reference(rewritten));
      expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(served);
      // That read packed the new version; then a chunk deleted: the GET fails as without segments.
      await packAndServe(rewritten, 2);
      await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: prefix.keys[4] }));
      await expect(client.fetch(descriptorOf(rewritten, { mode: 'layerwise' }))).rejects.toMatchObject({ code: 'OC_ERR_CHUNK_MISSING' });
    } finally {
      s3.destroy();
      await client.close();
      await gw.close();
    }
  });
});
