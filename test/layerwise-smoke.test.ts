import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { startTestGateway, uniqueBucket, type BackendKind, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix } from './helpers/kv.js';

const minio = inject('minio');

describe.each<BackendKind>(['local', 's3'])('layerwise GET smoke (%s)', (backend) => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  beforeAll(async () => {
    gw = await startTestGateway({ backend, minio });
    client = testClient(gw, uniqueBucket('lw'));
    await client.ensureBucket();
  });
  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  for (const transport of ['get', 'post'] as const) {
    for (const mode of ['layerwise', 'chunkwise'] as const) {
      it(`delivers byte-exact layers (${transport}, ${mode})`, async () => {
        const prefix = await seedPrefix(client, { chunks: 5, layers: 6, layerBytes: 1024, layout: 'KV_L2TD' });
        const ready: number[] = [];
        const result = await client.fetch(descriptorOf(prefix, { mode }), { transport, onLayerReady: (l) => ready.push(l) });
        expect(ready).toEqual([0, 1, 2, 3, 4, 5]);
        expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
        expect(result.summary.mode).toBe(mode);
      });
    }
  }
});
