/**
 * The read-worker pool as the gateway's main thread sees it: every task's failure names the
 * request it read for (the id crosses the worker boundary in the task), whatever the failure.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ReaderPool } from '../gateway/descriptor-get/reader-pool.js';

describe('ReaderPool', () => {
  let dir: string;
  let pool: ReaderPool;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'oc-pool-'));
    pool = new ReaderPool({
      backend: { kind: 'local', dataDir: dir },
      workers: 1,
      maxQueue: 8,
      readConcurrency: 2,
      tasksPerWorker: 2,
      arenaBytes: 1 << 20,
      arenaBlockBytes: 1 << 16,
      maxChunkStreams: 0,
      streamReceiveBufferBytes: 1 << 16,
      streamTasksPerWorker: 0,
    });
  });

  afterAll(async () => {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("names the task's request in a failure the worker answers", async () => {
    const task = {
      requestId: 'req-7f3a',
      bucket: 'nobucket',
      keys: ['kv/absent'],
      chunkOffset: 5,
      layout: 'KV_L2TD',
      layers: 2,
      layerBytes: 1024,
      first: 0,
      end: 2,
      order: 'layer-major',
    } as const;
    const result = await pool.run({ ...task, id: pool.taskId() });
    expect(result).toMatchObject({ ok: false, requestId: 'req-7f3a', chunk: 5, key: 'kv/absent' });
    expect((result as { code: string }).code).toBe('OC_ERR_CHUNK_MISSING');
  });

  it("names the task's request in a cancellation", async () => {
    const id = pool.taskId();
    pool.cancel(id);
    const result = await pool.run({
      id,
      requestId: 'req-cancelled',
      bucket: 'nobucket',
      keys: ['kv/x'],
      chunkOffset: 0,
      layout: 'KV_L2TD',
      layers: 1,
      layerBytes: 1024,
      first: 0,
      end: 1,
      order: 'layer-major',
    });
    expect(result).toMatchObject({ ok: false, code: 'OC_ERR_CANCELLED', requestId: 'req-cancelled' });
  });
});
