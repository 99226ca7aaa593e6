/**
 * The written wire format is the contract: its worked example is what the encoder produces, the
 * JSON Schema file is the schema the gateway validates with, the frame decoder rejects every
 * malformed stream with a stable code, and a Python reader written from the document alone reads
 * real gateway streams byte-exact.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32c } from '@node-rs/crc32';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { FrameDecoder } from '../client/frame-decoder.js';
import { DESCRIPTOR_SCHEMA } from '../schemas/descriptor-schema.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { encodeFrameHeader, encodePreamble, FrameType } from '../schemas/frames.js';
import { postDescriptor, signedHeaders } from './helpers/signing.js';
import { startTestGateway, uniqueBucket, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix } from './helpers/kv.js';

const doc = readFileSync(new URL('../schemas/wire-format.md', import.meta.url), 'utf8');
const l0 = Buffer.from([0x00, 0x01, 0x02, 0x03, 0x10, 0x11, 0x12, 0x13]);
const l1 = Buffer.from([0x04, 0x05, 0x06, 0x07, 0x14, 0x15, 0x16, 0x17]);

function exampleStream(): Buffer {
  const end = Buffer.from(
    JSON.stringify({
      mode: 'layerwise',
      layers: [0, 2],
      chunks: 2,
      bytes: 16,
      backendReads: 4,
      plan: [
        [0, 1],
        [1, 2],
      ],
      rateBytesPerSec: null,
      verified: false,
      timings: { firstFrameMs: 1.2, totalMs: 1.9 },
    }),
  );
  return Buffer.concat([
    encodePreamble(),
    encodeFrameHeader({ type: FrameType.LAYER, index: 0, length: 8, crc32c: crc32c(l0) }),
    l0,
    encodeFrameHeader({ type: FrameType.LAYER, index: 1, length: 8, crc32c: crc32c(l1) }),
    l1,
    encodeFrameHeader({ type: FrameType.END, index: 0, length: end.length, crc32c: crc32c(end) }),
    end,
  ]);
}

/** The bytes a worked example of the document shows, between its markers. */
function documented(marker: string): Buffer {
  const block = doc.split(`<!-- ${marker}:start -->`)[1]?.split(`<!-- ${marker}:end -->`)[0] ?? '';
  const lines = block.split('\n').filter((l) => /^[0-9a-f]{2}( |$)/.test(l) || l.startsWith('{'));
  return Buffer.concat(
    lines.map((line) => (line.startsWith('{') ? Buffer.from(line) : Buffer.from((line.match(/^((?:[0-9a-f]{2} ?)+)/)?.[1] ?? '').trim().split(' ').join(''), 'hex'))),
  );
}

/** Section 6's example: two encoded chunks of a codec named demo, a version 2 stream. */
function segmentedExample(): Buffer {
  const table = (lengths: number[]): Buffer => Buffer.concat(lengths.map((n) => Buffer.from(new Uint32Array([n]).buffer)));
  const l0 = Buffer.concat([table([3, 1]), Buffer.from('a0a1a2b0', 'hex')]);
  const l1 = Buffer.concat([table([1, 2]), Buffer.from('a3b1b2', 'hex')]);
  const end = Buffer.from(
    JSON.stringify({
      mode: 'layerwise',
      layers: [0, 2],
      chunks: 2,
      bytes: 23,
      backendReads: 4,
      plan: [
        [0, 1],
        [1, 2],
      ],
      rateBytesPerSec: null,
      verified: true,
      codec: 'demo',
      timings: { firstFrameMs: 1.4, totalMs: 2.1 },
    }),
  );
  return Buffer.concat([
    encodePreamble(2),
    encodeFrameHeader({ type: FrameType.LAYER, index: 0, length: l0.length, crc32c: crc32c(l0) }),
    l0,
    encodeFrameHeader({ type: FrameType.LAYER, index: 1, length: l1.length, crc32c: crc32c(l1) }),
    l1,
    encodeFrameHeader({ type: FrameType.END, index: 0, length: end.length, crc32c: crc32c(end) }),
    end,
  ]);
}

describe('the written wire format', () => {
  it('shows exactly the bytes the encoder produces in its worked example', () => {
    expect(documented('wire-example').toString('hex')).toBe(exampleStream().toString('hex'));
  });

  it('shows exactly the bytes of a version 2 stream in its encoded-chunk example', () => {
    expect(documented('wire-example-v2').toString('hex')).toBe(segmentedExample().toString('hex'));
    // Its index values are what section 6 says they are.
    expect(Buffer.from('AAAAAwAAAAE=', 'base64').equals(Buffer.from('0000000300000001', 'hex'))).toBe(true);
  });

  it('keeps descriptor.schema.json equal to the schema the gateway validates with', () => {
    const file = JSON.parse(readFileSync(new URL('../schemas/descriptor.schema.json', import.meta.url), 'utf8')) as unknown;
    expect(file).toEqual(JSON.parse(JSON.stringify(DESCRIPTOR_SCHEMA)));
  });
});

describe('FrameDecoder', () => {
  const geometry = { layerStart: 0, layerEnd: 2, chunks: 2, layerBytes: 4, layerStride: 8 };
  const decode = (bytes: Buffer, split = 3): unknown => {
    const decoder = new FrameDecoder({ ...geometry, target: new Uint8Array(16) });
    try {
      for (let i = 0; i < bytes.length; i += split) decoder.push(bytes.subarray(i, i + split));
      return decoder.finish();
    } catch (error) {
      return error;
    }
  };
  const codeOf = (value: unknown): string => (value instanceof ObjectCacheError ? value.code : 'OK');

  it('decodes the worked example at any split', () => {
    for (const split of [1, 2, 7, 24, 1000]) {
      const ready: number[] = [];
      const target = new Uint8Array(16);
      const decoder = new FrameDecoder({ ...geometry, target, onLayerReady: (l) => ready.push(l) });
      const bytes = exampleStream();
      for (let i = 0; i < bytes.length; i += split) decoder.push(bytes.subarray(i, i + split));
      expect(decoder.finish().bytes).toBe(16);
      expect(ready).toEqual([0, 1]);
      expect(Buffer.from(target).equals(Buffer.concat([l0, l1]))).toBe(true);
    }
  });

  it("takes an ERROR frame's retryable as sent, else the code's, and ignores fields it does not know", () => {
    const errorFrame = (payload: object): unknown => {
      const json = Buffer.from(JSON.stringify(payload));
      return decode(Buffer.concat([encodePreamble(), encodeFrameHeader({ type: FrameType.ERROR, index: 0, length: json.length, crc32c: crc32c(json) }), json]));
    };
    expect(errorFrame({ code: 'OC_ERR_CHUNK_CHANGED', message: 'm', retryable: false, since: 'a later version' })).toMatchObject({
      code: 'OC_ERR_CHUNK_CHANGED',
      retryable: false,
    });
    expect(errorFrame({ code: 'OC_ERR_CHUNK_CORRUPT', message: 'm', retryable: true })).toMatchObject({ code: 'OC_ERR_CHUNK_CORRUPT', retryable: true });
    expect(errorFrame({ code: 'OC_ERR_BACKEND_TIMEOUT', message: 'm' })).toMatchObject({ retryable: true });
    expect(errorFrame({ code: 'OC_ERR_NOT_A_CODE', message: 'm' })).toMatchObject({ code: 'OC_ERR_INTERNAL' });
  });

  it('decodes the shared stream vectors as the Python client and read_stream.py do (schemas/test-vectors/streams.json)', () => {
    execFileSync(process.execPath, [new URL('../scripts/stream-vectors.mjs', import.meta.url).pathname, '--check']);
    const file = JSON.parse(readFileSync(new URL('../schemas/test-vectors/streams.json', import.meta.url), 'utf8')) as {
      geometry: { chunks: number; layerBytes: number; first: number; end: number };
      vectors: {
        name: string;
        body: string;
        expect: { outcome: 'ok' | 'error'; layers?: string; mode?: string; code?: string; retryable?: boolean; details?: Record<string, unknown> };
      }[];
    };
    const g = file.geometry;
    const dir = mkdtempSync(join(tmpdir(), 'oc-vectors-'));
    try {
      for (const vector of file.vectors) {
        const body = Buffer.from(vector.body, 'hex');
        const { expect: want } = vector;
        for (const split of [1, 5, body.length]) {
          const target = new Uint8Array((g.end - g.first) * g.chunks * g.layerBytes);
          const decoder = new FrameDecoder({ layerStart: g.first, layerEnd: g.end, chunks: g.chunks, layerBytes: g.layerBytes, layerStride: g.chunks * g.layerBytes, target });
          let outcome: unknown;
          try {
            for (let i = 0; i < body.length; i += split) decoder.push(body.subarray(i, i + split));
            outcome = decoder.finish();
          } catch (error) {
            outcome = error;
          }
          if (want.outcome === 'ok') {
            expect(outcome, vector.name).toMatchObject({ mode: want.mode });
            expect(Buffer.from(target).toString('hex'), vector.name).toBe(want.layers);
          } else {
            expect(codeOf(outcome), `${vector.name} split ${split}`).toBe(want.code);
            if (want.retryable !== undefined) expect((outcome as ObjectCacheError).retryable, vector.name).toBe(want.retryable);
            if (want.details !== undefined) expect((outcome as ObjectCacheError).details, vector.name).toEqual(want.details);
          }
        }
        // The reader written from the document alone.
        const stream = join(dir, `${vector.name}.bin`);
        const out = join(dir, `${vector.name}.out`);
        writeFileSync(stream, body);
        const args = [new URL('../schemas/examples/read_stream.py', import.meta.url).pathname, stream, String(g.chunks), String(g.layerBytes), String(g.first), String(g.end), out];
        if (want.outcome === 'ok') {
          execFileSync('python3', args, { encoding: 'utf8' });
          expect(readFileSync(out).toString('hex'), vector.name).toBe(want.layers);
        } else {
          let stderr = '';
          try {
            execFileSync('python3', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
          } catch (error) {
            stderr = String((error as { stderr?: string }).stderr);
          }
          expect(stderr.split(':')[0], vector.name).toBe(want.code);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a target buffer too small for the delivery', () => {
    expect(() => new FrameDecoder({ ...geometry, target: new Uint8Array(15) })).toThrow(ObjectCacheError);
  });
});

describe('a Python reader written from the document', () => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let pool: Pool;
  const dir = mkdtempSync(join(tmpdir(), 'objectcache-pyreader-'));

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 's3', minio: inject('minio') });
    client = testClient(gw, uniqueBucket('py'));
    await client.ensureBucket();
    pool = new Pool(gw.url);
  });

  afterAll(async () => {
    await pool?.close();
    await client?.close();
    await gw?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads layerwise and chunkwise streams of KV_2LTD objects byte-exact', async () => {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 4, layerBytes: 64, layout: 'KV_2LTD' });
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const body = Buffer.from(JSON.stringify(descriptorOf(prefix, { mode, layerRange: [1, 4] })));
      const res = await postDescriptor(pool, gw.url, client.bucket, body);
      expect(res.statusCode).toBe(200);
      const stream = join(dir, `${mode}.bin`);
      writeFileSync(stream, Buffer.from(await res.body.arrayBuffer()));
      const out = join(dir, `${mode}.out`);
      const printed = execFileSync('python3', [new URL('../schemas/examples/read_stream.py', import.meta.url).pathname, stream, '3', '64', '1', '4', out], { encoding: 'utf8' });
      expect((JSON.parse(printed) as { mode: string }).mode).toBe(mode);
      expect(readFileSync(out).equals(Buffer.from(reference(prefix, 1, 4)))).toBe(true);
    }
  });

  it('verifies chunks a third party wrote with the per-layer checksums as the document specifies', async () => {
    // The document's example value, for chunk 0 of its worked example.
    const documented = /x-amz-meta-oc-layer-crc32c: ([A-Za-z0-9+/=]+)`/.exec(doc)?.[1];
    const perLayer = (chunk: Buffer, layers: number, S: number): string => {
      const out = Buffer.alloc(layers * 4); // big-endian u32 per layer, in layer order
      for (let l = 0; l < layers; l++) out.writeUInt32BE(crc32c(chunk.subarray(l * S, (l + 1) * S)) >>> 0, l * 4);
      return out.toString('base64');
    };
    expect(documented).toBe(perLayer(Buffer.from([0, 1, 2, 3, 4, 5, 6, 7]), 2, 4));
    // Written with plain signed PUTs (no client library), then fetched: every slice verified.
    const layers = 3;
    const S = 256;
    const chunks = [0, 1].map((c) => Buffer.alloc(layers * S, c * 16 + 1).fill(c + 7, 10, 50));
    const keys = chunks.map((_, c) => `third-party/${Date.now()}/${c}`);
    for (const [c, chunk] of chunks.entries()) {
      const path = `/${client.bucket}/${keys[c]}`;
      const headers = { 'x-amz-meta-oc-layer-crc32c': perLayer(chunk, layers, S), 'content-length': String(chunk.length) };
      const res = await pool.request({ method: 'PUT', path, headers: await signedHeaders(gw.url, { method: 'PUT', path, headers, body: chunk }), body: chunk });
      await res.body.dump();
      expect(res.statusCode).toBe(200);
    }
    const result = await client.fetch({ version: 1, keys, layers, chunkTokens: 1, layerBytes: S, layout: 'KV_L2TD', delivery: 'layer-major' });
    expect(result.summary.verified).toBe(true);
  });
});
