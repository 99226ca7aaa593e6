/**
 * What a reader can make the segment lookup cost the store (gateway/segments/segments.ts,
 * Segments.discover): one GET of a run's manifest however many reads of the run arrive together,
 * and none again for a minute when the store has none. Against the real embedded store.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { embeddedCapacityStore, type CapacityStore } from '../gateway/stores/capacity-store.js';
import { Segments } from '../gateway/segments/segments.js';
import { StateKey } from '../gateway/common/state-key.js';
import { parseDescriptor } from '../schemas/descriptor.js';
import { LocalStore } from '../gateway/stores/embedded/local-store.js';

describe('looking for a segment in the store', () => {
  let dataDir: string | undefined;
  afterEach(() => {
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('asks once for reads that arrive together, and not again for a minute when there is none', async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'objectcache-discover-'));
    const capacity = embeddedCapacityStore(await LocalStore.open(dataDir));
    let gets = 0;
    const store: CapacityStore = { ...capacity, get: (bucket, key) => (gets++, capacity.get(bucket, key)) };
    let now = 1_000_000;
    const segments = new Segments({
      config: {
        bucket: 'objectcache-segments',
        afterReads: 1,
        minBytes: 0,
        maxPacks: 2,
        maxBytes: 2 ** 40,
        check: 'heads',
        readAheadBytes: 2 ** 27,
        packQueueBytes: 2 ** 26,
        packFrom: 'frames',
      },
      key: new StateKey(Buffer.from('a state key for this test'), 'setting'),
      store,
      workerEtag: (etag) => etag,
      logger: { warn: () => {}, info: () => {} },
      now: () => now,
      sweep: false,
      checks: { heads: () => Promise.reject(new Error('no HEADs in heads mode')) },
      checkTimeoutMs: 1_000,
    });
    const d = parseDescriptor({ version: 1, keys: ['kv/0', 'kv/1'], layers: 2, chunkTokens: 16, layerBytes: 4096, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' });
    const run = segments.counted('kv', d);
    expect(run).toBeDefined();
    const heads = (): never => {
      throw new Error('no HEADs in heads mode');
    };
    await Promise.all(Array.from({ length: 16 }, () => segments.discover('kv', d, run as string, heads)));
    expect(gets).toBe(1);
    for (let i = 0; i < 100; i++) await segments.discover('kv', d, run as string, heads);
    expect(gets).toBe(1);
    now += 60_000;
    await segments.discover('kv', d, run as string, heads);
    expect(gets).toBe(2);
    segments.close();
  });
});
