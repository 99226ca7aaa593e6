/**
 * End-to-end integrity: chunks stored by the client library carry per-layer CRC32C values, and
 * every slice is checked against them, by the gateway (a flipped byte in a stored chunk is caught,
 * named by chunk and layer: an S3 error before streaming, an ERROR frame after) or by the client
 * where it asks to check them (the ObjectCache clients do: their frame check is the writer check).
 * Chunks without checksums are served and the END frame says they were not verified. Both backends.
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { objectRelativePath } from '../gateway/stores/embedded/local-store.js';
import { sdkClient, segmentEvents, startTestGateway, uniqueBucket, type BackendKind, type SegmentEvent, type TestGateway, testClient } from './helpers/gateway.js';
import { waitFor } from './helpers/wait.js';
import { descriptorOf, reference, seedPrefix } from './helpers/kv.js';

const minio = inject('minio');
const S = 4096;

/** Flips one byte of `key`'s object in the store itself (the gateway's data directory, or MinIO) at `offset`, keeping its metadata (the writer's CRC32Cs). */
async function corruptStored(backend: BackendKind, gw: TestGateway, bucket: string, key: string, offset: number): Promise<void> {
  if (backend === 'local') {
    const fh = await open(join(gw.dataDir as string, objectRelativePath(bucket, key)), 'r+');
    const byte = Buffer.alloc(1);
    await fh.read(byte, 0, 1, offset);
    byte[0] = (byte[0] as number) ^ 0x55;
    await fh.write(byte, 0, 1, offset);
    await fh.close();
    return;
  }
  const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
  const got = await direct.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  const bytes = Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
  bytes[offset] = (bytes[offset] as number) ^ 0x55;
  await direct.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: bytes, Metadata: got.Metadata ?? {} }));
  direct.destroy();
}

/** Fetches a 3-chunk prefix of each layout in each mode; each answer must be byte-exact and writer-verified, then `check`ed. */
async function fetchEveryLayoutAndMode(
  client: ObjectCacheClient,
  check: (result: Awaited<ReturnType<ObjectCacheClient['fetch']>>, layout: 'KV_L2TD' | 'KV_2LTD', mode: 'layerwise' | 'chunkwise') => void = () => {},
): Promise<void> {
  for (const layout of ['KV_L2TD', 'KV_2LTD'] as const) {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 4, layerBytes: S, layout });
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const result = await client.fetch(descriptorOf(prefix, { mode }));
      expect(result.summary.verified).toBe(true);
      expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
      check(result, layout, mode);
    }
  }
}

describe.each<BackendKind>(['local', 's3'])('end-to-end integrity checked by the gateway (--slice-checks gateway, %s backend)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;

  const corrupt = (key: string, offset: number): Promise<void> => corruptStored(backend, gw, client.bucket, key, offset);

  beforeAll(async () => {
    // One layer per read group, so layer 2 is read after the stream has begun. The client asks to
    // check the slices itself (its default); --slice-checks gateway checks them here all the same.
    gw = await startTestGateway({ backend, minio, args: ['--read-bytes', String(S), '--threshold', '0', '--slice-checks', 'gateway'] });
    client = testClient(gw, uniqueBucket('crc'));
    await client.ensureBucket();
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('verifies every slice of checksummed chunks, in both modes and layouts', async () => {
    await fetchEveryLayoutAndMode(client);
  });

  it('serves chunks without checksums and says they were not verified', async () => {
    const prefix = await seedPrefix(client, { chunks: 2, layers: 3, layerBytes: S, layout: 'KV_L2TD', checksums: false });
    const result = await client.fetch(descriptorOf(prefix));
    expect(result.summary.verified).toBe(false);
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });

  it('catches a flipped byte during streaming with an ERROR frame naming chunk and layer', async () => {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 4, layerBytes: S, layout: 'KV_L2TD' });
    await corrupt(prefix.keys[1] as string, 2 * S + 17);
    const failure = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(ObjectCacheError);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CHUNK_CORRUPT');
    expect((failure as ObjectCacheError).details).toMatchObject({ ChunkIndex: 1, Layer: 2, Key: prefix.keys[1] });
  });

  it('catches a flipped byte in the first layer before streaming, as a 502 S3 error', async () => {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 4, layerBytes: S, layout: 'KV_2LTD' });
    await corrupt(prefix.keys[2] as string, 3); // K half of layer 0 in the KV_2LTD object
    const failure = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }), { transport: 'post' }).catch((e: unknown) => e);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CHUNK_CORRUPT');
    expect((failure as ObjectCacheError).details['Status']).toBe(502);
    expect((failure as ObjectCacheError).message).toContain(prefix.keys[2]);
  });
});

/*
 * The client checks: the ObjectCache client asks for it (sliceChecks: client, its default) and the
 * gateway's --slice-checks is auto (the default), so the workers take the writer's recorded
 * CRC32Cs as the slices' checksums instead of a pass over the bytes; every frame carries its
 * writer's checksums and the client's frame check is the writer check. A flipped byte still never
 * reaches the caller as data.
 */
describe.each<BackendKind>(['local', 's3'])('integrity checked by the client (the default, %s backend)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;

  beforeAll(async () => {
    // One layer per read group; on the S3 store, layerwise GETs of at most 6 chunk streams are
    // streamed (--chunk-reads auto), and those of the 7-chunk prefixes that pack segments grouped.
    gw = await startTestGateway({
      backend,
      minio,
      args: [
        ...['--read-bytes', String(S), '--threshold', '0', '--chunk-reads', 'auto', '--max-chunk-streams', '6'],
        ...['--segments', 'on', '--segment-min-bytes', '0', '--segment-after-reads', '1', '--segment-bucket', uniqueBucket('crc-segs')],
      ],
    });
    client = testClient(gw, uniqueBucket('crc-client'));
    await client.ensureBucket();
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('delivers every slice byte-exact with its writer-recorded checksums, in both modes and layouts, grouped and streamed', async () => {
    await fetchEveryLayoutAndMode(client, (result, layout, mode) => {
      // Streamed (two reads a chunk per half: the first layer, then the rest) only for layerwise
      // GETs from the S3 store; grouped reads make one a chunk per half for each layer group.
      const halves = layout === 'KV_2LTD' ? 2 : 1;
      const streamed = backend === 's3' && mode === 'layerwise';
      expect(result.summary.backendReads).toBe(streamed ? 3 * 2 * halves : result.summary.plan.length * 3 * halves);
    });
  });

  it('still checksums chunks without recorded CRC32Cs', async () => {
    const prefix = await seedPrefix(client, { chunks: 2, layers: 3, layerBytes: S, layout: 'KV_L2TD', checksums: false });
    const result = await client.fetch(descriptorOf(prefix));
    expect(result.summary.verified).toBe(false);
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });

  it('leaves a flipped byte to the client: OC_ERR_CLIENT_CRC naming the layer, the bytes never delivered as data', async () => {
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const prefix = await seedPrefix(client, { chunks: 3, layers: 4, layerBytes: S, layout: 'KV_L2TD' });
      await corruptStored(backend, gw, client.bucket, prefix.keys[1] as string, 2 * S + 17);
      const ready: number[] = [];
      const failure = await client.fetch(descriptorOf(prefix, { mode }), { onLayerReady: (layer) => ready.push(layer) }).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(ObjectCacheError);
      expect((failure as ObjectCacheError).code).toBe('OC_ERR_CLIENT_CRC');
      expect((failure as ObjectCacheError).message).toContain(mode === 'layerwise' ? 'layer 2' : 'chunk 1');
      // Layers 0 and 1 arrived whole before it; layer 2 was never announced.
      if (mode === 'layerwise') expect(ready).toEqual([0, 1]);
    }
  });

  it('checks the slices itself for a descriptor that asks the gateway to (sliceChecks: gateway), naming chunk and layer', async () => {
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      const prefix = await seedPrefix(client, { chunks: 3, layers: 4, layerBytes: S, layout: 'KV_L2TD' });
      await corruptStored(backend, gw, client.bucket, prefix.keys[1] as string, 2 * S + 17);
      const failure = await client.fetch(descriptorOf(prefix, { mode, sliceChecks: 'gateway' })).catch((e: unknown) => e);
      expect((failure as ObjectCacheError).code).toBe('OC_ERR_CHUNK_CORRUPT');
      expect((failure as ObjectCacheError).message).toContain(`layer 2 of chunk ${prefix.keys[1] as string}`);
    }
  });

  it('packs a segment only from reads the workers checked: never a corrupt chunk, whatever the request was sent', async () => {
    const events = (event: SegmentEvent): Promise<number> => segmentEvents(gw.gateway.adminUrl, event);
    // Sound chunks: the read that packs is sent as usual, the pack reads the run from the chunks
    // after it (never its frames), and the next read is served from the segment, byte-exact.
    const sound = await seedPrefix(client, { chunks: 7, layers: 4, layerBytes: S, layout: 'KV_L2TD' });
    const [packedBefore, rereadBefore] = [await events('packed'), await events('reread')];
    await client.fetch(descriptorOf(sound, { mode: 'layerwise' }), { transport: 'post' });
    await waitFor('the segment is packed', async () => (await events('packed')) > packedBefore);
    expect(await events('reread')).toBeGreaterThan(rereadBefore);
    const fromSegment = await client.fetch(descriptorOf(sound, { mode: 'layerwise' }), { transport: 'post' });
    expect(fromSegment.segmentChunks).toBe(7);
    expect(Buffer.from(fromSegment.target).equals(Buffer.from(reference(sound)))).toBe(true);
    // A corrupt chunk: the client's check fails the request, and the pack's own reads refuse the chunk.
    const corrupt = await seedPrefix(client, { chunks: 7, layers: 4, layerBytes: S, layout: 'KV_L2TD' });
    await corruptStored(backend, gw, client.bucket, corrupt.keys[3] as string, S + 5);
    const [packed, abandoned] = [await events('packed'), await events('abandoned')];
    const failure = await client.fetch(descriptorOf(corrupt, { mode: 'layerwise' }), { transport: 'post' }).catch((e: unknown) => e);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CLIENT_CRC');
    await waitFor('the pack is abandoned', async () => (await events('abandoned')) > abandoned);
    expect(await events('packed')).toBe(packed);
  });
});
