/**
 * Encoded chunks served layer by layer (schemas/wire-format.md section 6): chunks whose layer
 * slices were each encoded to their own length, with the index in user metadata. A descriptor
 * naming `codecs` gets a version 2 stream whose frames carry segment tables, byte-exact segments
 * and valid checksums; a descriptor without it is never sent encoded bytes; mixed, unaccepted
 * and broken chunks are refused with their stable codes. Both backends (the gateway's HEADs and
 * range reads differ). The gateway never looks inside a segment, so the codec here is a made-up
 * name over random bytes.
 */
import { randomBytes } from 'node:crypto';
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { crc32c } from '../native/crc32c.js';
import { encodeLayerCrcs } from '../schemas/integrity.js';
import { chunkIndex, encodeSliceBytes } from '../schemas/encoded-chunk.js';
import { checkRangeAnswer } from '../gateway/worker/range-reader.js';
import { FrameType } from '../schemas/frames.js';
import { parseStream as parse, frameSegments as segments, storeEncoded, type Frame } from './helpers/stream.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { CLIENT_KEY, CLIENT_SECRET, sdkClient, startTestGateway, testClient, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { postDescriptor } from './helpers/signing.js';
import { CreateBucketCommand } from '@aws-sdk/client-s3';

const minio = inject('minio');
const L = 6;
const S = 4096;

describe.each<BackendKind>(['local', 's3'])('encoded chunks (%s backend)', (backend) => {
  let gw: TestGateway;
  let s3: S3Client;
  let pool: Pool;
  const bucket = uniqueBucket('enc');

  /** Stores an encoded chunk: slices of the given lengths, back to back, with its index (and CRCs unless told not to). */
  const putEncoded = (key: string, lengths: readonly number[], codec = 'test-codec', meta: Record<string, string> = {}): Promise<Buffer[]> =>
    storeEncoded(s3, bucket, key, lengths, codec, meta);

  function lengthsOf(chunk: number): number[] {
    return Array.from({ length: L }, (_, l) => 100 + ((chunk * 977 + l * 1543) % 3000));
  }

  function descriptor(keys: readonly string[], extra: Partial<DescriptorInput> = {}): DescriptorInput {
    return {
      version: 1,
      keys: [...keys],
      layers: L,
      chunkTokens: 16,
      layerBytes: S,
      layout: 'KV_L2TD',
      delivery: 'layer-major',
      mode: 'layerwise',
      codecs: ['test-codec'],
      ...extra,
    };
  }

  async function get(d: DescriptorInput): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
    const res = await postDescriptor(pool, gw.url, bucket, Buffer.from(JSON.stringify(d)));
    return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) };
  }

  beforeAll(async () => {
    // Small reads and one worker task per chunk: several layer groups and tasks per group.
    gw = await startTestGateway({ backend, minio, args: ['--read-bytes', String(2 * S), '--task-bytes', String(3 * S)] });
    s3 = sdkClient(gw.url, { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET });
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    pool = new Pool(gw.url, { connections: 2 });
  });

  afterAll(async () => {
    await pool?.close();
    s3?.destroy();
    await gw?.close();
  });

  it('streams every layer as one segment per chunk, byte-exact, in a version 2 stream', async () => {
    const keys = ['p1/c0', 'p1/c1', 'p1/c2'];
    const stored = await Promise.all(keys.map((key, c) => putEncoded(key, lengthsOf(c))));
    const res = await get(descriptor(keys));
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('application/vnd.objectcache.stream.v2');
    expect(res.headers['x-objectcache-codec']).toBe('test-codec');
    const encodedBytes = stored.flat().reduce((n, slice) => n + slice.length, 0);
    expect(Number(res.headers['x-objectcache-payload-bytes'])).toBe(encodedBytes + 4 * keys.length * L);
    const { version, frames } = parse(res.body);
    expect(version).toBe(2);
    const layers = frames.filter((f) => f.type === FrameType.LAYER);
    expect(layers.map((f) => f.index)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const frame of layers) {
      const got = segments(frame.payload, keys.length);
      got.forEach((segment, c) => expect(segment.equals(stored[c]?.[frame.index] as Buffer)).toBe(true));
    }
    const end = JSON.parse((frames.at(-1) as Frame).payload.toString('utf8')) as { codec: string; verified: boolean; bytes: number; plan: number[][] };
    expect((frames.at(-1) as Frame).type).toBe(FrameType.END);
    expect(end).toMatchObject({ codec: 'test-codec', verified: true, bytes: encodedBytes + 4 * keys.length * L });
    expect(end.plan.length).toBeGreaterThan(1);
  });

  it('serves a layer range chunkwise, each CHUNK frame with its layers as segments', async () => {
    const keys = ['p2/c0', 'p2/c1'];
    const stored = await Promise.all(keys.map((key, c) => putEncoded(key, lengthsOf(c + 5))));
    const res = await get(descriptor(keys, { mode: 'chunkwise', layerRange: [2, 5] }));
    expect(res.status).toBe(200);
    const { version, frames } = parse(res.body);
    expect(version).toBe(2);
    const chunks = frames.filter((f) => f.type === FrameType.CHUNK);
    expect(chunks.map((f) => f.index)).toEqual([0, 1]);
    for (const frame of chunks) {
      const got = segments(frame.payload, 3);
      got.forEach((segment, i) => expect(segment.equals(stored[frame.index]?.[2 + i] as Buffer)).toBe(true));
    }
  });

  it('sends raw chunks to a descriptor that accepts "none" as segments of layerBytes', async () => {
    const keys = ['p3/c0', 'p3/c1'];
    const objects = keys.map(() => randomBytes(L * S));
    await Promise.all(keys.map((key, c) => s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: objects[c] as Buffer }))));
    const res = await get(descriptor(keys, { codecs: ['test-codec', 'none'] }));
    expect(res.status).toBe(200);
    expect(res.headers['x-objectcache-codec']).toBe('none');
    const { frames } = parse(res.body);
    for (const frame of frames.filter((f) => f.type === FrameType.LAYER)) {
      segments(frame.payload, 2).forEach((segment, c) => expect(segment.equals((objects[c] as Buffer).subarray(frame.index * S, (frame.index + 1) * S))).toBe(true));
    }
  });

  it('never sends encoded bytes to a descriptor that asks for raw ones', async () => {
    const keys = ['p4/c0', 'p4/c1'];
    await Promise.all(keys.map((key, c) => putEncoded(key, lengthsOf(c))));
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const { codecs: _, ...raw } = descriptor(keys, { mode });
      const res = await get(raw);
      expect(res.status).toBe(406);
      expect(res.headers['x-objectcache-error-code']).toBe('OC_ERR_CODEC_UNACCEPTED');
      expect(res.body.toString('utf8')).toMatch(/p4\/c[01]/); // whichever chunk's read answered first
    }
  });

  it('refuses a codec the descriptor does not name, and a prefix of mixed encodings', async () => {
    await putEncoded('p5/c0', lengthsOf(0));
    await putEncoded('p5/c1', lengthsOf(1), 'other-codec');
    const unaccepted = await get(descriptor(['p5/c1']));
    expect(unaccepted.status).toBe(406);
    expect(unaccepted.headers['x-objectcache-error-code']).toBe('OC_ERR_CODEC_UNACCEPTED');
    const mixed = await get(descriptor(['p5/c0', 'p5/c1'], { codecs: ['test-codec', 'other-codec'] }));
    expect(mixed.status).toBe(409);
    expect(mixed.headers['x-objectcache-error-code']).toBe('OC_ERR_CODEC_MIXED');
    expect(mixed.body.toString('utf8')).toContain('<ChunkIndex>1</ChunkIndex>');
  });

  it('refuses a chunk whose index does not describe it', async () => {
    const lengths = lengthsOf(2);
    await putEncoded('p6/c0', lengths, 'test-codec', { 'oc-slice-bytes': encodeSliceBytes(lengths.map((n, l) => (l === 0 ? n + 1 : n))) });
    await putEncoded('p6/c1', lengths.slice(0, L - 1));
    await putEncoded('p6/c2', lengths, 'test-codec', { 'oc-slice-bytes': '***' });
    for (const key of ['p6/c0', 'p6/c1', 'p6/c2']) {
      const res = await get(descriptor([key]));
      expect(res.status).toBe(400);
      expect(res.headers['x-objectcache-error-code']).toBe('OC_ERR_CHUNK_INDEX');
    }
    const missing = await get(descriptor(['p6/none']));
    expect(missing.headers['x-objectcache-error-code']).toBe('OC_ERR_CHUNK_MISSING');
  });

  it('catches an encoded slice that does not match its recorded CRC32C', async () => {
    const lengths = lengthsOf(3);
    const slices = lengths.map((n) => randomBytes(n));
    const crcs = slices.map((slice) => crc32c(slice));
    const flipped = slices[4] as Buffer;
    flipped[7] = (flipped[7] as number) ^ 0x5a;
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: 'p7/c0',
        Body: Buffer.concat(slices),
        Metadata: { 'oc-codec': 'test-codec', 'oc-slice-bytes': encodeSliceBytes(lengths), 'oc-layer-crc32c': encodeLayerCrcs(crcs) },
      }),
    );
    const res = await get(descriptor(['p7/c0']));
    const { frames } = parse(res.body);
    const last = frames.at(-1) as Frame;
    expect(last.type).toBe(FrameType.ERROR);
    expect(JSON.parse(last.payload.toString('utf8'))).toMatchObject({ code: 'OC_ERR_CHUNK_CORRUPT', chunk: 0, layer: 4 });
  });

  it('has the TypeScript client refuse codecs with a usage error before any request', async () => {
    const client = testClient(gw, bucket);
    try {
      const failure = await client.fetch(descriptor(['p1/c0'])).catch((e: unknown) => e);
      expect((failure as ObjectCacheError).code).toBe('OC_ERR_CLIENT_USAGE');
    } finally {
      await client.close();
    }
  });

  it('counts encoded chunks as matches in a lookup that names their codec', async () => {
    await Promise.all(['p8/c0', 'p8/c1'].map((key, c) => putEncoded(key, lengthsOf(c))));
    const lookup = async (body: unknown): Promise<unknown> => {
      const bytes = Buffer.from(JSON.stringify(body));
      const { signedHeaders } = await import('./helpers/signing.js');
      const headers = await signedHeaders(gw.url, { method: 'POST', path: `/${bucket}`, query: { 'objectcache-lookup': '' }, body: bytes });
      const res = await pool.request({ method: 'POST', path: `/${bucket}?objectcache-lookup=`, headers, body: bytes });
      return res.body.json();
    };
    const keys = ['p8/c0', 'p8/c1', 'p8/c2'];
    expect(await lookup({ keys, layers: L, layerBytes: S, codecs: ['test-codec'] })).toEqual({ matched: 2, keys: 3 });
    expect(await lookup({ keys, layers: L, layerBytes: S })).toEqual({ matched: 0, keys: 3 });
    expect(await lookup({ keys, layers: L - 1, layerBytes: S, codecs: ['test-codec'] })).toEqual({ matched: 0, keys: 3 });
  });
});

describe('encoded chunk checks (pure)', () => {
  it('reads an index only when it describes the object exactly', () => {
    const meta = (lengths: number[], codec = 'c1'): Record<string, string> => ({ 'oc-codec': codec, 'oc-slice-bytes': encodeSliceBytes(lengths) });
    expect(chunkIndex(30, meta([10, 20]), 2, 16, '"e"')).toEqual({ codec: 'c1', sliceBytes: [10, 20], etag: '"e"' });
    expect(chunkIndex(32, {}, 2, 16, undefined)).toMatchObject({ codec: 'none', sliceBytes: [16, 16] });
    expect(typeof chunkIndex(31, {}, 2, 16, undefined)).toBe('string'); // raw, wrong size
    expect(typeof chunkIndex(31, meta([10, 20]), 2, 16, undefined)).toBe('string'); // lengths do not add up
    expect(typeof chunkIndex(30, meta([30]), 2, 16, undefined)).toBe('string'); // a table for 1 layer
    expect(typeof chunkIndex(30, meta([30, 0]), 2, 16, undefined)).toBe('string'); // an empty slice
    expect(typeof chunkIndex(30, meta([10, 20], 'none'), 2, 16, undefined)).toBe('string'); // "none" is not stored
    expect(typeof chunkIndex(30, meta([10, 20], 'Bad Name'), 2, 16, undefined)).toBe('string');
    expect(typeof chunkIndex(4200, meta([4100, 100]), 2, 1, undefined)).toBe('string'); // over 2 * S + 4096
  });

  it('takes a rewritten chunk for a change before anything else about it', () => {
    const expected = { objectBytes: 100, codec: 'c1', etag: '"v1"' };
    const answer = (status: number, headers: Record<string, string>): unknown => {
      const got = checkRangeAnswer(status, headers, 'k', 0, 10, expected);
      return typeof got === 'object' && 'code' in got ? got.code : got;
    };
    // A new version of another size and codec: a change (retryable), not a size or codec error.
    expect(answer(206, { etag: '"v2"', 'content-range': 'bytes 0-9/55', 'x-amz-meta-oc-codec': 'c2' })).toBe('OC_ERR_CHUNK_CHANGED');
    expect(answer(416, {})).toBe('OC_ERR_CHUNK_CHANGED');
    expect(answer(206, { etag: '"v1"', 'content-range': 'bytes 0-9/100', 'x-amz-meta-oc-codec': 'c1' })).toMatchObject({ etag: '"v1"' });
    // Unpinned raw reads of an encoded object are refused as such.
    expect(typeof checkRangeAnswer(206, { 'content-range': 'bytes 0-9/55', 'x-amz-meta-oc-codec': 'c2' }, 'k', 0, 10, { objectBytes: 100, codec: 'none' })).toBe('object');
    expect(
      (checkRangeAnswer(206, { 'content-range': 'bytes 0-9/55', 'x-amz-meta-oc-codec': 'c2' }, 'k', 0, 10, { objectBytes: 100, codec: 'none' }) as { code: string }).code,
    ).toBe('OC_ERR_CODEC_UNACCEPTED');
  });
});
