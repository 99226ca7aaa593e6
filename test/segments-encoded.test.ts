/**
 * Packed segments of encoded chunks (docs/segments.md, Encoded chunks; docs/compression.md), on
 * both backends: a prefix stored encoded and read with `codecs` often enough is packed from the
 * slices its frames carry, each as long as it is stored, and later reads are served from the one
 * segment object. The version 2 stream is exactly what the chunks give (segment tables, segments,
 * CRCs), for the whole run, layerwise and chunkwise, a shorter prefix, a layer range and a longer
 * request. A chunk rewritten after packing (through the gateway, or straight in the store behind
 * it) is never served from the old segment. Raw chunks make one segment whether a request names
 * `codecs` or not.
 */
import { randomBytes } from 'node:crypto';
import { CreateBucketCommand, GetObjectCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { FrameType } from '../schemas/frames.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { sdkClient, segmentEvents, type SegmentEvent, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';
import { postDescriptor } from './helpers/signing.js';
import { FaultProxy } from './helpers/fault-proxy.js';
import { frameSegments, parseStream, storeEncoded, type Frame } from './helpers/stream.js';
import { until } from './helpers/wait.js';

const minio = inject('minio');
const L = 6;
const S = 8192;

interface Response {
  readonly status: number;
  readonly headers: Record<string, unknown>;
  readonly body: Buffer;
}

/** The END frame's summary. */
function summary(frames: readonly Frame[]): { verified: boolean; backendReads: number; codec?: string } {
  const end = frames.at(-1) as Frame;
  expect(end.type).toBe(FrameType.END);
  return JSON.parse(end.payload.toString('utf8')) as { verified: boolean; backendReads: number; codec?: string };
}

/**
 * A response is the version 2 stream of `stored` (each chunk's slices, by layer), layers
 * [first, end): LAYER frames (a segment per chunk) or CHUNK frames (a segment per layer), every
 * segment byte-exact and every slice verified against its writer's CRC32C (`verified`: false for
 * chunks whose writer recorded none). Resolves to its END summary.
 */
function expectStream(res: Response, stored: readonly (readonly Buffer[])[], mode: 'layerwise' | 'chunkwise', first = 0, end = L, verified = true): ReturnType<typeof summary> {
  expect(res.status).toBe(200);
  const { version, frames } = parseStream(res.body);
  expect(version).toBe(2);
  const data = frames.filter((f) => f.type === FrameType.LAYER || f.type === FrameType.CHUNK);
  if (mode === 'layerwise') {
    expect(data.map((f) => [f.type, f.index])).toEqual(Array.from({ length: end - first }, (_, i) => [FrameType.LAYER, first + i]));
    for (const frame of data) frameSegments(frame.payload, stored.length).forEach((segment, c) => expect(segment.equals(stored[c]?.[frame.index] as Buffer)).toBe(true));
  } else {
    expect(data.map((f) => [f.type, f.index])).toEqual(stored.map((_, c) => [FrameType.CHUNK, c]));
    for (const frame of data) frameSegments(frame.payload, end - first).forEach((segment, i) => expect(segment.equals(stored[frame.index]?.[first + i] as Buffer)).toBe(true));
  }
  const done = summary(frames);
  expect(done.verified).toBe(verified);
  return done;
}

function encodedDescriptor(keys: readonly string[], layerBytes: number, extra: Partial<DescriptorInput> = {}): DescriptorInput {
  return { version: 1, keys: [...keys], layers: L, chunkTokens: 16, layerBytes, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise', codecs: ['test-codec'], ...extra };
}

async function getStream(pool: Pool, gw: TestGateway, bucket: string, d: DescriptorInput): Promise<Response> {
  const res = await postDescriptor(pool, gw.url, bucket, Buffer.from(JSON.stringify(d)));
  return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) };
}

describe.each<BackendKind>(['local', 's3'])('packed segments of encoded chunks (%s backend)', (backend) => {
  let gw: TestGateway;
  let s3: S3Client;
  let pool: Pool;
  const bucket = uniqueBucket('sege');
  const segmentBucket = uniqueBucket('segse');
  const events = (event: SegmentEvent): Promise<number> => segmentEvents(gw.gateway.adminUrl, event);

  beforeAll(async () => {
    // Small reads and tasks: a read from the chunks is several layer groups of several tasks.
    gw = await startTestGateway({
      backend,
      minio,
      args: [
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
        String(3 * S),
      ],
    });
    s3 = sdkClient(gw.url);
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    pool = new Pool(gw.url, { connections: 2 });
  });

  afterAll(async () => {
    await pool?.close();
    s3?.destroy();
    await gw?.close();
  });

  const putEncoded = (key: string, lengths: readonly number[], client: S3Client = s3): Promise<Buffer[]> => storeEncoded(client, bucket, key, lengths);

  /** Slice lengths that differ by chunk and layer (`salt` makes a rewrite differ too). */
  function lengthsOf(chunk: number, salt = 0): number[] {
    return Array.from({ length: L }, (_, l) => 100 + ((chunk * 977 + l * 1543 + salt * 331) % 3000));
  }

  async function seed(prefix: string, chunks: number): Promise<{ keys: string[]; stored: Buffer[][] }> {
    const keys = Array.from({ length: chunks }, (_, c) => `${prefix}/c${c}`);
    return { keys, stored: await Promise.all(keys.map((key, c) => putEncoded(key, lengthsOf(c)))) };
  }

  const descriptor = (keys: readonly string[], extra: Partial<DescriptorInput> = {}): DescriptorInput => encodedDescriptor(keys, S, extra);
  const get = (d: DescriptorInput): Promise<Response> => getStream(pool, gw, bucket, d);

  /** Reads a prefix until it is packed (the second read packs it), each read checked; resolves to the first read's summary. */
  async function packed(keys: readonly string[], stored: readonly (readonly Buffer[])[]): Promise<ReturnType<typeof summary>> {
    const before = await events('packed');
    const first = expectStream(await get(descriptor(keys)), stored, 'layerwise');
    expectStream(await get(descriptor(keys)), stored, 'layerwise');
    await until(async () => (await events('packed')) > before);
    return first;
  }

  it('packs the stored slices and serves the prefix from the segment, layerwise and chunkwise', async () => {
    const { keys, stored } = await seed('whole', 6);
    const fromChunks = await packed(keys, stored);
    const served = await events('served');
    const res = await get(descriptor(keys));
    expect(res.headers['x-objectcache-segment-chunks']).toBe('6');
    expect(res.headers['x-objectcache-codec']).toBe('test-codec');
    const fromSegment = expectStream(res, stored, 'layerwise');
    expect(fromSegment.codec).toBe('test-codec');
    expect(fromSegment.backendReads).toBeLessThan(fromChunks.backendReads);
    expectStream(await get(descriptor(keys, { mode: 'chunkwise' })), stored, 'chunkwise');
    expect(await events('served')).toBe(served + 2);

    // The manifest names the codec and every slice's stored length, layer-major; the data object is the slices in that order.
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` }));
    const manifests = (listed.Contents ?? []).filter((o) => o.Key?.endsWith('.json'));
    expect(manifests).toHaveLength(1);
    const body = async (key: string): Promise<Buffer> =>
      Buffer.from(
        await ((await s3.send(new GetObjectCommand({ Bucket: segmentBucket, Key: key }))).Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray(),
      );
    const manifest = JSON.parse((await body(manifests[0]?.Key as string)).toString('utf8')) as { codec: string; sizes: string; bytes: number; data: string };
    const layerMajor = Array.from({ length: L }, (_, l) => stored.map((slices) => slices[l] as Buffer)).flat();
    expect(manifest.codec).toBe('test-codec');
    const sizes = Buffer.from(manifest.sizes, 'base64');
    expect(Array.from({ length: sizes.length / 4 }, (_, i) => sizes.readUInt32LE(4 * i))).toEqual(layerMajor.map((slice) => slice.length));
    expect((await body(manifest.data)).equals(Buffer.concat(layerMajor))).toBe(true);
    expect(manifest.bytes).toBe(Buffer.concat(layerMajor).length);
  });

  it('serves a shorter prefix, a layer range and a longer request from the segment and the chunks', async () => {
    const { keys, stored } = await seed('parts', 6);
    await packed(keys, stored);
    const served = await events('served');
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const shorter = await get(descriptor(keys.slice(0, 4), { mode }));
      expect(shorter.headers['x-objectcache-segment-chunks']).toBe('4');
      expectStream(shorter, stored.slice(0, 4), mode);
      expectStream(await get(descriptor(keys, { mode, layerRange: [2, 5] })), stored, mode, 2, 5);
    }
    const more = ['parts/m0', 'parts/m1'];
    const moreStored = await Promise.all(more.map((key, i) => putEncoded(key, lengthsOf(10 + i))));
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const longer = await get(descriptor([...keys, ...more], { mode }));
      expect(longer.headers['x-objectcache-segment-chunks']).toBe('6');
      expectStream(longer, [...stored, ...moreStored], mode);
    }
    expect(await events('served')).toBe(served + 6);
  });

  it('never serves a chunk rewritten after packing from the old segment', async () => {
    const { keys, stored } = await seed('rewrite', 5);
    await packed(keys, stored);
    // Through the gateway: the segment is dropped at once.
    const dropped = await events('dropped');
    const packs = await events('packed');
    stored[2] = await putEncoded(keys[2] as string, lengthsOf(2, 1));
    expect(await events('dropped')).toBe(dropped + 1);
    const served = await events('served');
    expectStream(await get(descriptor(keys)), stored, 'layerwise');
    expect(await events('served')).toBe(served);
    // Packed anew (the run was due already): from the new version.
    await until(async () => (await events('packed')) > packs);
    expectStream(await get(descriptor(keys)), stored, 'layerwise');
    expect(await events('served')).toBe(served + 1);
    if (backend !== 's3') return;
    // Rewritten straight in the store, behind the gateway: the HEADs that read the index find the new version.
    const stale = await events('stale');
    const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    try {
      stored[4] = await putEncoded(keys[4] as string, lengthsOf(4, 2), direct);
    } finally {
      direct.destroy();
    }
    const res = await get(descriptor(keys));
    expect(res.headers['x-objectcache-segment-chunks']).toBeUndefined();
    expectStream(res, stored, 'layerwise');
    // Checked afresh (the index might have been older than the segment), found stale, dropped.
    await until(async () => (await events('stale')) === stale + 1);
    expect(await events('served')).toBe(served + 1);
  });

  it('keeps one segment of raw chunks, whether a request names codecs or not', async () => {
    const keys = ['raw/c0', 'raw/c1', 'raw/c2'];
    const objects = keys.map(() => randomBytes(L * S));
    await Promise.all(keys.map((key, c) => s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: objects[c] as Buffer }))));
    const slices = objects.map((object) => Array.from({ length: L }, (_, l) => object.subarray(l * S, (l + 1) * S)));
    const { codecs: _, ...raw } = descriptor(keys);
    const packedBefore = await events('packed');
    for (let i = 0; i < 2; i++) expect((await get(raw)).status).toBe(200);
    await until(async () => (await events('packed')) > packedBefore);
    // Packed from a raw (version 1) stream, served to a request that accepts `none`: the same slices, as segments.
    const served = await events('served');
    const res = await get(descriptor(keys, { codecs: ['test-codec', 'none'] }));
    expect(res.headers['x-objectcache-codec']).toBe('none');
    expect(res.headers['x-objectcache-segment-chunks']).toBe('3');
    // Written by a plain PUT, with no CRC32Cs recorded: served, but not writer-verified.
    expectStream(res, slices, 'layerwise', 0, L, false);
    expect(await events('served')).toBe(served + 1);
    // No second segment: the requests' reads counted towards the same run.
    expect(await events('packed')).toBe(packedBefore + 1);
  });
});

describe.each<BackendKind>(['local', 's3'])('a pack of encoded chunks that falls behind its read (%s backend)', (backend) => {
  it('reads the layers it missed from the chunks, as stored, and the segment is exact', async () => {
    // A queue of 4 KiB: a frame that finds the last one's copy not yet taken is not copied. In
    // front of MinIO a proxy takes none of the segment's upload while the read goes on, so the
    // pack falls behind after its first layer, every time. The embedded store takes a copy as
    // fast as this machine writes a file, so whether it falls behind there is a race a faster
    // machine loses: there the pack copies no frames (--segment-pack-from chunks), behind from
    // the first, and reads every layer from the chunks after the request.
    const proxy = backend === 's3' ? new FaultProxy(new URL(minio.endpoint)) : undefined;
    const endpoint = proxy ? await proxy.listen() : undefined;
    const gw = await startTestGateway({
      backend,
      minio: endpoint ? { ...minio, endpoint } : minio,
      args: [
        ...['--segments', 'on', '--segment-min-bytes', '0', '--segment-after-reads', '1', '--segment-pack-queue-bytes', '4096', '--segment-bucket', uniqueBucket('segebehind')],
        ...(proxy ? [] : ['--segment-pack-from', 'chunks']),
      ],
    });
    const bucket = uniqueBucket('segebehind');
    const s3 = sdkClient(gw.url);
    const pool = new Pool(gw.url, { connections: 2 });
    const layerBytes = 1024 * 1024;
    try {
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
      const keys = Array.from({ length: 8 }, (_, c) => `behind/c${c}`);
      const stored = await Promise.all(
        keys.map((key, c) =>
          storeEncoded(
            s3,
            bucket,
            key,
            Array.from({ length: L }, (_, l) => layerBytes / 2 + ((c * 7919 + l * 104_729) % (layerBytes / 2))),
          ),
        ),
      );
      const rereads = await segmentEvents(gw.gateway.adminUrl, 'reread');
      const packs = await segmentEvents(gw.gateway.adminUrl, 'packed');
      proxy?.holdUploads();
      try {
        expectStream(await getStream(pool, gw, bucket, encodedDescriptor(keys, layerBytes)), stored, 'layerwise');
      } finally {
        proxy?.releaseUploads();
      }
      await until(async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) > packs, 30_000);
      expect(await segmentEvents(gw.gateway.adminUrl, 'reread')).toBe(rereads + 1);
      // Every slice is checked against the manifest's CRC as it is read: a misplaced rest fails here.
      const served = await segmentEvents(gw.gateway.adminUrl, 'served');
      for (const mode of ['layerwise', 'chunkwise'] as const) {
        const res = await getStream(pool, gw, bucket, encodedDescriptor(keys, layerBytes, { mode }));
        expect(res.headers['x-objectcache-segment-chunks']).toBe('8');
        expectStream(res, stored, mode);
      }
      expect(await segmentEvents(gw.gateway.adminUrl, 'served')).toBe(served + 2);
      expect(await segmentEvents(gw.gateway.adminUrl, 'abandoned')).toBe(0);
    } finally {
      await pool.close();
      s3.destroy();
      await gw.close();
      await proxy?.close();
    }
  });
});
