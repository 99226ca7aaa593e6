/**
 * A chunk overwritten while a layerwise GET streams it is never delivered torn (part old, part
 * new version): each chunk is pinned at its first read (its ETag; every later range response's
 * ETag is compared at MinIO, the footer's ETag on the embedded store), and a change ends the stream with an
 * ERROR frame OC_ERR_CHUNK_CHANGED. The stream is paced (--cap) and reads one layer group at a
 * time, so the overwrite lands while most layers are still to be read.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { startTestGateway, uniqueBucket, type BackendKind, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix } from './helpers/kv.js';

const minio = inject('minio');

describe.each<BackendKind>(['local', 's3'])('chunks pinned for the whole stream (%s backend)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;

  beforeAll(async () => {
    // Grouped range reads (streamed ones: test/streamed-reads.test.ts).
    gw = await startTestGateway({
      backend,
      minio,
      args: ['--read-bytes', '65536', '--read-ahead-bytes', '4096', '--threshold', '0', '--cap', '8MB/s', '--epoch-ms', '5', '--chunk-reads', 'grouped'],
    });
    client = testClient(gw, uniqueBucket('pin'));
    await client.ensureBucket();
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('ends the stream with OC_ERR_CHUNK_CHANGED when a chunk is overwritten mid-stream, never with mixed bytes', async () => {
    // 4 chunks x 32 layers x 64 KiB: 8 MiB at 8 MB/s, about a second; one layer per group.
    const prefix = await seedPrefix(client, { chunks: 4, layers: 32, layerBytes: 64 * 1024, layout: 'KV_L2TD' });
    const victim = prefix.keys[2] as string;
    let overwrite: Promise<void> | undefined;
    const ready: number[] = [];
    const failure = await client
      .fetch(descriptorOf(prefix, { mode: 'layerwise' }), {
        transport: 'post',
        onLayerReady: (layer) => {
          ready.push(layer);
          if (layer === 0) {
            overwrite = client.putChunks([victim], [new Uint8Array(randomBytes(32 * 64 * 1024))], { layout: { layout: 'KV_L2TD', layers: 32, layerBytes: 64 * 1024 } });
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
    // Retry the GET, the ERROR frame says (and the client reads it from the frame).
    expect((failure as ObjectCacheError).retryable).toBe(true);
    expect((failure as ObjectCacheError).details['RequestId']).toMatch(/^[0-9A-Za-z-]{8,}$/);
    expect(ready.length).toBeLessThan(32);
  });

  it('serves the chunk again, whole and of the new version, once the overwrite is done', async () => {
    const prefix = await seedPrefix(client, { chunks: 3, layers: 8, layerBytes: 4096, layout: 'KV_L2TD' });
    const fresh = new Uint8Array(randomBytes(8 * 4096));
    await client.putChunks([prefix.keys[1] as string], [fresh], { layout: { layout: 'KV_L2TD', layers: 8, layerBytes: 4096 } });
    prefix.canonical[1] = fresh;
    const result = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });
});
