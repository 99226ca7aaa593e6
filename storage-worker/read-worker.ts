/**
 * The piscina read worker: executes one ReadTask (a layer group of a run of chunks) with bounded
 * concurrent range reads through its own backend connection pool, writes every slice straight
 * into its place in one buffer, and hands the buffer back by transfer, without a copy.
 */
import { setMaxListeners } from 'node:events';
import { workerData } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { ReadResult, ReadTask, WorkerInit } from './protocol.js';
import { createRangeReader, ReadError, type RangeReader } from './range-reader.js';
import { crc32c } from '@node-rs/crc32';
import { decodeLayerCrcs } from '../schemas/integrity.js';
import { rangeTargets, sliceOffset, taskBufferBytes } from './scatter.js';

const init = workerData as WorkerInit;
let reader: RangeReader | undefined;

function readerFor(): RangeReader {
  reader ??= createRangeReader(init.backend);
  return reader;
}

async function execute(task: ReadTask, signal: AbortSignal): Promise<ReadResult & { ok: true }> {
  const started = performance.now();
  const geometry = { layout: task.layout, layers: task.layers, layerBytes: task.layerBytes, first: task.first, end: task.end, chunks: task.keys.length, order: task.order };
  const needed = taskBufferBytes(geometry);
  const buffer = task.buffer && task.buffer.byteLength >= needed ? task.buffer : new ArrayBuffer(needed);
  const objectBytes = task.layers * task.layerBytes;
  /** Each chunk's recorded per-layer checksums, as its first read reports them. */
  const recorded = new Array<string | undefined>(task.keys.length);
  const jobs: (() => Promise<void>)[] = [];
  task.keys.forEach((key, chunk) => {
    for (const target of rangeTargets(geometry, buffer, chunk)) {
      jobs.push(async () => {
        try {
          const info = await readerFor().read({ bucket: task.bucket, key, target, objectBytes, signal });
          recorded[chunk] ??= info.layerCrcs;
        } catch (error) {
          if (error instanceof ReadError) Object.assign(error, { chunk: task.chunkOffset + chunk, key });
          throw error;
        }
      });
    }
  });
  let next = 0;
  let failure: unknown;
  const lane = async (): Promise<void> => {
    while (failure === undefined && !signal.aborted && next < jobs.length) {
      const job = jobs[next++] as () => Promise<void>;
      try {
        await job();
      } catch (error) {
        failure ??= error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(init.readConcurrency, jobs.length) }, lane));
  if (failure !== undefined) throw failure;
  if (signal.aborted) throw new ReadError('OC_ERR_INTERNAL', 'the task was cancelled');
  // End-to-end integrity: every slice against the CRC32C recorded when the chunk was stored.
  let verified = true;
  task.keys.forEach((key, chunk) => {
    const crcs = decodeLayerCrcs(recorded[chunk], task.layers);
    if (!crcs) {
      verified = false;
      return;
    }
    for (let layer = task.first; layer < task.end; layer++) {
      const at = sliceOffset(geometry, layer, chunk);
      const actual = crc32c(Buffer.from(buffer, at, task.layerBytes)) >>> 0;
      if (actual !== crcs[layer]) {
        throw Object.assign(new ReadError('OC_ERR_CHUNK_CORRUPT', `layer ${layer} of chunk ${key} does not match the CRC32C recorded when it was stored`), { chunk: task.chunkOffset + chunk, key, layer });
      }
    }
  });
  return { ok: true, buffer, reads: jobs.length, readMs: performance.now() - started, verified };
}

export default async function runReadTask(task: ReadTask): Promise<unknown> {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal); // every concurrent range read listens to it
  task.abort.once('message', () => controller.abort());
  try {
    const result = await execute(task, controller.signal);
    // Piscina's Transferable protocol: the result is the value, its buffer is transferred.
    const movable = { [Piscina.transferableSymbol]: [result.buffer], [Piscina.valueSymbol]: result };
    return Piscina.move(movable as unknown as Parameters<typeof Piscina.move>[0]);
  } catch (error) {
    const e = error as Partial<ReadError> & { chunk?: number; key?: string; layer?: number; message?: string };
    const failed: ReadResult = {
      ok: false,
      code: e instanceof ReadError && e.code ? e.code : 'OC_ERR_POOL_WORKER',
      message: e?.message ?? String(error),
      retryable: e?.retryable ?? false,
      ...(e.chunk !== undefined ? { chunk: e.chunk } : {}),
      ...(e.key !== undefined ? { key: e.key } : {}),
      ...(e.layer !== undefined ? { layer: e.layer } : {}),
    };
    return failed;
  } finally {
    task.abort.close();
  }
}
