/**
 * Packed segments (docs/segments.md; gateway/descriptor-get/segments.ts), on both backends: a
 * prefix read often enough is packed from the frames of a read of it, and later reads are served
 * from the one segment object, byte for byte what the chunks give, for the whole run, a shorter
 * prefix, a longer request, a layer range, chunkwise delivery and both stored layouts. A chunk
 * written or deleted after packing is never served from the old segment; a pack cut short leaves
 * nothing that is read.
 */
import { randomBytes } from 'node:crypto';
import { DeleteObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ObjectCacheClient } from '../client/client.js';
import { toStoredLayout } from '../client/kv-layout.js';
import { metricValue, sdkClient, startTestGateway, testClient, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';

const minio = inject('minio');
const L = 6;
const S = 8192;

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.each<BackendKind>(['local', 's3'])('packed segments (%s backend)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let s3: S3Client;
  const bucket = uniqueBucket('seg');
  const segmentBucket = uniqueBucket('segs');
  const events = async (event: string): Promise<number> => {
    const text = await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`objectcache_segment_events_total{event="${event}"}`));
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
  };

  beforeAll(async () => {
    // Small reads and tasks, so that a chunk-served GET of these prefixes is many reads.
    gw = await startTestGateway({ backend, minio, args: ['--segments', 'on', '--segment-min-bytes', '0', '--segment-after-reads', '2', '--segment-bucket', segmentBucket, '--read-bytes', String(2 * S), '--task-bytes', String(4 * S)] });
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
      expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    }
    await until('the segment is packed', async () => (await events('packed')) > before);
  }

  const subset = (prefix: SeededPrefix, chunks: number): SeededPrefix => ({ ...prefix, keys: prefix.keys.slice(0, chunks), canonical: prefix.canonical.slice(0, chunks) });

  it('serves a packed prefix from its segment, byte-exact, with a few sequential reads', async () => {
    const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    const first = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    await packed(prefix);
    const served = await events('served');
    const again = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    expect(Buffer.from(again.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(await events('served')).toBe(served + 1);
    // From the chunks: a read per chunk per layer group; from the segment: one per task.
    expect(again.summary.backendReads).toBeLessThan(first.summary.backendReads);
    expect(again.summary.verified).toBe(true);
    // Chunkwise delivery of the same prefix, from the same segment.
    const chunkwise = await client.fetch(descriptorOf(prefix, { mode: 'chunkwise' }));
    expect(Buffer.from(chunkwise.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(await events('served')).toBe(served + 2);
  });

  it('serves a shorter prefix, a layer range and a longer request from the segment and the chunks', async () => {
    const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    const served = await events('served');
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const shorter = subset(prefix, 5);
      const got = await client.fetch(descriptorOf(shorter, { mode }));
      expect(Buffer.from(got.target).equals(Buffer.from(reference(shorter)))).toBe(true);
      const ranged = await client.fetch(descriptorOf(prefix, { mode, layerRange: [2, 5] }));
      expect(Buffer.from(ranged.target).equals(Buffer.from(reference(prefix, 2, 5)))).toBe(true);
    }
    expect(await events('served')).toBe(served + 4);
    // Three more chunks after the packed eight: the segment, then the chunks.
    const more = Array.from({ length: 3 }, () => new Uint8Array(randomBytes(L * S)));
    const keys = more.map((_, i) => `${prefix.keys[0]}-more-${i}`);
    await client.putChunks(keys, more, { layout: { layout: 'KV_L2TD', layers: L, layerBytes: S } });
    const longer: SeededPrefix = { ...prefix, keys: [...prefix.keys, ...keys], canonical: [...prefix.canonical, ...more] };
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const got = await client.fetch(descriptorOf(longer, { mode }));
      expect(Buffer.from(got.target).equals(Buffer.from(reference(longer)))).toBe(true);
    }
    expect(await events('served')).toBe(served + 6);
  });

  it('keeps the K and V halves of KV_2LTD chunks in place', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_2LTD' });
    await packed(prefix);
    const served = await events('served');
    for (const p of [prefix, subset(prefix, 4)]) {
      const got = await client.fetch(descriptorOf(p, { mode: 'layerwise' }));
      expect(Buffer.from(got.target).equals(Buffer.from(reference(p)))).toBe(true);
    }
    expect(await events('served')).toBe(served + 2);
  });

  it('never serves a chunk rewritten or deleted through the gateway from the old segment', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await packed(prefix);
    const dropped = await events('dropped');
    const fresh = new Uint8Array(randomBytes(L * S));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: prefix.keys[3], Body: fresh }));
    expect(await events('dropped')).toBe(dropped + 1);
    const rewritten: SeededPrefix = { ...prefix, canonical: prefix.canonical.map((c, i) => (i === 3 ? fresh : c)) };
    const served = await events('served');
    const got = await client.fetch(descriptorOf(rewritten, { mode: 'layerwise' }));
    expect(Buffer.from(got.target).equals(Buffer.from(reference(rewritten)))).toBe(true);
    expect(await events('served')).toBe(served);
    // Packed again from the new version (two more reads), then one chunk deleted: the GET fails as without segments.
    await packed(rewritten);
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: prefix.keys[5] }));
    await expect(client.fetch(descriptorOf(rewritten, { mode: 'layerwise' }))).rejects.toMatchObject({ code: 'OC_ERR_CHUNK_MISSING' });
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
      expect(Buffer.from(got.target).equals(Buffer.from(reference(rewritten)))).toBe(true);
      expect(await events('stale')).toBe(stale + 1);
    } finally {
      direct.destroy();
    }
  });

  it('leaves nothing usable when the read that packs is cut short', async () => {
    const prefix = await seedPrefix(client, { chunks: 8, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    const abandoned = await events('abandoned');
    const controller = new AbortController();
    // The second read would pack: its client goes away after the first layer.
    await expect(client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { onLayerReady: () => controller.abort(), signal: controller.signal })).rejects.toThrow();
    await until('the pack is abandoned', async () => (await events('abandoned')) > abandoned);
    const served = await events('served');
    const got = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    expect(Buffer.from(got.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(await events('served')).toBe(served);
    // No manifest names the run, and every data object left is named by a manifest (those of
    // the other tests' prefixes; a dropped segment's objects are deleted in the background).
    {
      // The test key is the gateway's administrator, which may read the reserved bucket.
      const admin = sdkClient(gw.url);
      try {
        await until('no data object is left without its manifest', async () => {
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

  it('reports the segments it knows', async () => {
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_segments')).toBeGreaterThan(0);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_segment_bytes')).toBeGreaterThan(0);
  });
});

describe.each<BackendKind>(['local', 's3'])('packed segments within a budget (%s backend)', (backend) => {
  it('counts a segment against its bucket and evicts it before any chunk', async () => {
    const bucket = uniqueBucket('segcap');
    // Six chunks of 48 KiB (288 KiB) fit under the high mark of a 400 KiB budget; their segment
    // (288 KiB more) does not, and evicting it alone brings the bucket under the low mark.
    const gw = await startTestGateway({
      backend,
      minio,
      args: ['--segments', 'on', '--segment-min-bytes', '0', '--segment-bucket', uniqueBucket('segs'), '--budget', `${bucket}=${400 * 1024}`, '--capacity-state-bucket', `${bucket}-state`, '--capacity-sync-ms', '100', '--capacity-lease-ms', '1000', '--evict-rate', '1000'],
    });
    const client = testClient(gw, bucket);
    const s3 = sdkClient(gw.url);
    try {
      await client.ensureBucket();
      const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      for (let i = 0; i < 2; i++) await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
      const events = async (): Promise<string> => (await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text()).split('\n').filter((l) => l.startsWith('objectcache_segment')).join('\n');
      await until('the segment is evicted', async () => /event="evicted"\} 1/.test(await events()) && gw.gateway.capacity?.usage()[0]?.derivedBytes === 0);
      const text = await events();
      expect(text).toMatch(/objectcache_segment_events_total\{event="packed"\} 1/);
      expect(text).toMatch(/objectcache_segments 0/);
      // Every chunk is still there, and the prefix reads as before.
      for (const key of prefix.keys) await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
      const got = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
      expect(Buffer.from(got.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    } finally {
      s3.destroy();
      await client.close();
      await gw.close();
    }
  });
});
