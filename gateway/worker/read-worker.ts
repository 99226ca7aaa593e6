/**
 * The piscina read worker: executes one ReadTask (a layer group of a run of chunks) with bounded
 * concurrent chunk reads through its own backend connection pool, writes every slice straight
 * into its place in the task's block of the shared arena (gateway/descriptor-get/reader-pool.ts BufferArena: nothing moves back,
 * the main thread sends from the same memory; a task given its own ArrayBuffer instead hands it
 * back by transfer), and checksums every slice once (checked against the CRC32C recorded at store
 * time when there is one; the main thread builds the frame checksums from these). Stream tasks
 * (chunk-streams.ts) run here too.
 */
import { setMaxListeners } from 'node:events';
import { BroadcastChannel, workerData } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { pino } from 'pino';
import { crc32c } from '../../native/crc32c.js';
import type { ChunkRun, ReadTask, SegmentRead, StreamResult, StreamTask, WorkerFailure, WorkerInit, WorkerResult, WorkerTasks } from '../threads/protocol.js';
import { createLogger } from '../common/logger.js';
import { ChunkStreams } from './chunk-streams.js';
import { SocketRangeClient } from '../../http-range/socket-range-get.js';
import { createRangeReader, type RangeReader } from './range-reader.js';
import { cancelled, ReadError } from '../../http-range/read-error.js';
import { corruptSlice, toWorkerFailure } from '../threads/read-errors.js';
import { decodeLayerCrcs } from '../../schemas/integrity.js';
import { TaskLayout, rangeTargets, segmentTargets } from '../threads/task-layout.js';
import { RAW_CODEC } from '../../schemas/encoded-chunk.js';

const init = workerData as WorkerInit;
let reader: RangeReader | undefined;
const cancelFlags = new Int32Array(init.cancelFlags);
const arena = new Uint8Array(init.arena);
/** The running tasks' controllers, by task id. */
const running = new Map<number, AbortController>();
const cancels = new BroadcastChannel(init.cancelChannel);
cancels.onmessage = (event: unknown) => running.get((event as { data: number }).data)?.abort();
cancels.unref();

function readerFor(): RangeReader {
  reader ??= createRangeReader(init.backend);
  return reader;
}

/** The connections of stream tasks: apart from the range reads' pool, sized for every open stream. */
let streamSockets: SocketRangeClient | undefined;

function streamClient(): SocketRangeClient {
  const backend = init.backend;
  if (backend.kind !== 's3') throw new ReadError('OC_ERR_INTERNAL', 'streamed reads need an S3 backend');
  streamSockets ??= new SocketRangeClient({
    ...backend,
    endpoint: new URL(backend.endpoint),
    connections: init.streamConnections,
    receiveBufferBytes: init.streamReceiveBufferBytes,
  });
  return streamSockets;
}

async function runStreamTask(task: StreamTask, signal: AbortSignal): Promise<StreamResult> {
  const started = performance.now();
  try {
    const streams = new ChunkStreams(task, streamClient(), signal);
    await streams.start();
    return { ok: true, reads: streams.reads, retries: streams.retries, readMs: performance.now() - started };
  } catch (error) {
    return failed(error, task);
  }
}

function isCancelled(id: number): boolean {
  return Atomics.load(cancelFlags, id % cancelFlags.length) === id;
}

/** Reads every chunk of the task, `readConcurrency` chunks at a time. */
async function readChunks(
  task: ReadTask,
  layout: TaskLayout,
  region: Uint8Array,
  signal: AbortSignal,
): Promise<{ reads: number; retries: number; recorded: (string | undefined)[]; etags: (string | undefined)[] }> {
  const rawBytes = task.layers * task.layerBytes;
  const codec = task.encoded?.codec ?? RAW_CODEC;
  const recorded = new Array<string | undefined>(task.keys.length);
  const etags = new Array<string | undefined>(task.keys.length);
  let reads = 0;
  let retries = 0;
  let next = 0;
  /** The first failure of any lane; the others stop at their next chunk. */
  let failure: { readonly error: unknown } | undefined;
  const lane = async (): Promise<void> => {
    while (failure === undefined && !signal.aborted && next < task.keys.length) {
      const chunk = next++;
      const key = task.keys[chunk] as string;
      try {
        const sizes = layout.sizes?.[chunk];
        const objectBytes = sizes ? sizes.reduce((a, b) => a + b, 0) : rawBytes;
        const info = await readerFor().read({
          bucket: task.bucket,
          key,
          targets: rangeTargets(task, layout, region, chunk),
          objectBytes,
          codec,
          etag: task.etags?.[chunk],
          signal,
        });
        recorded[chunk] = info.layerCrcs;
        etags[chunk] = info.etag;
        reads += info.reads;
        retries += info.retries ?? 0;
      } catch (error) {
        if (error instanceof ReadError) {
          error.chunk = task.chunkOffset + chunk;
          error.key = key;
        }
        failure ??= { error };
      }
    }
  };
  const lanes: Promise<void>[] = [];
  for (let i = 0; i < Math.min(init.readConcurrency, task.keys.length); i++) lanes.push(lane());
  await Promise.all(lanes);
  if (failure !== undefined) throw failure.error;
  if (signal.aborted) throw cancelled();
  return { reads, retries, recorded, etags };
}

/** The CRC32C of every slice of the task's block, in buffer order (one pass, while the bytes are in cache). */
function sliceCrcs(task: ReadTask, layout: TaskLayout, region: Uint8Array): Uint32Array {
  const crcs = new Uint32Array(task.keys.length * layout.layers);
  for (let slice = 0; slice < crcs.length; slice++) crcs[slice] = crc32c(region.subarray(layout.offsetOf(slice), layout.offsetOf(slice + 1)));
  return crcs;
}

/**
 * The CRC32C of every slice, in buffer order; each checked against the checksum recorded when its
 * chunk was stored, when there is one (end-to-end integrity). Where the client checks (`client`) a
 * recorded checksum is taken as its slice's without a pass over the bytes: the frames carry it,
 * and the client's frame check is the writer check (docs/layerwise-get.md, Integrity).
 */
function checksumSlices(task: ReadTask, layout: TaskLayout, region: Uint8Array, recorded: readonly (string | undefined)[]): { crcs: Uint32Array; verified: boolean } {
  const chunks = task.keys.length;
  const expected = recorded.map((value) => decodeLayerCrcs(value, task.layers));
  const verified = expected.every((crcs) => crcs !== undefined);
  if (task.sliceChecks === 'client' && verified) {
    const crcs = new Uint32Array(chunks * layout.layers);
    for (let chunk = 0; chunk < chunks; chunk++) {
      const writer = expected[chunk] as number[];
      for (let layer = task.first; layer < task.end; layer++) crcs[layout.slice(layer, chunk)] = writer[layer] as number;
    }
    return { crcs, verified };
  }
  const crcs = sliceCrcs(task, layout, region);
  for (let chunk = 0; chunk < chunks; chunk++) {
    const writer = expected[chunk];
    if (!writer) continue;
    for (let layer = task.first; layer < task.end; layer++) {
      if (crcs[layout.slice(layer, chunk)] !== writer[layer]) throw corruptSlice(task.keys[chunk] as string, task.chunkOffset + chunk, layer);
    }
  }
  return { crcs, verified };
}

/**
 * A task served from a packed segment: its slices' ranges of the one segment object (locked to
 * the manifest's ETag), each slice checked against the manifest's CRC32C. The chunks' own ETags
 * are the manifest's, given as the task's.
 */
async function readSegment(task: ReadTask, segment: SegmentRead, layout: TaskLayout, region: Uint8Array, signal: AbortSignal): Promise<WorkerResult & { ok: true }> {
  const started = performance.now();
  let info;
  try {
    info = await readerFor().read({
      bucket: segment.bucket,
      key: segment.key,
      targets: segmentTargets(segment, layout, region),
      objectBytes: segment.bytes,
      codec: RAW_CODEC,
      etag: segment.etag,
      signal,
    });
  } catch (error) {
    if (error instanceof ReadError) error.key = segment.key;
    throw error;
  }
  const crcs = sliceCrcs(task, layout, region);
  const bad = crcs.findIndex((crc, slice) => crc !== segment.crcs[slice]);
  if (bad >= 0)
    throw Object.assign(new ReadError('OC_ERR_CHUNK_CORRUPT', `packed segment ${segment.key} does not match the CRC32C its manifest records (slice ${bad} of the task)`), {
      key: segment.key,
    });
  return { ok: true, crcs, etags: task.etags ?? [], reads: info.reads, retries: info.retries ?? 0, readMs: performance.now() - started, verified: true };
}

async function execute(task: ReadTask, signal: AbortSignal): Promise<WorkerResult & { ok: true }> {
  const started = performance.now();
  const layout = TaskLayout.of(task.order, task, task.keys.length, task.layerBytes, task.encoded?.sliceBytes);
  const needed = layout.bytes;
  // The task's bytes go to its block of the shared arena, or else to a buffer of its own.
  const own = task.arenaOffset === undefined ? (task.buffer && task.buffer.byteLength >= needed ? task.buffer : new ArrayBuffer(needed)) : undefined;
  const region = own ? new Uint8Array(own, 0, needed) : arena.subarray(task.arenaOffset, (task.arenaOffset as number) + needed);
  if (task.segment) return { ...(await readSegment(task, task.segment, layout, region, signal)), ...(own ? { buffer: own } : {}) };
  const { reads, retries, recorded, etags } = await readChunks(task, layout, region, signal);
  const { crcs, verified } = checksumSlices(task, layout, region, recorded);
  return { ok: true, ...(own ? { buffer: own } : {}), crcs, etags, reads, retries, readMs: performance.now() - started, verified };
}

/** A task's failure as its answer (toWorkerFailure, read-errors.ts), naming the task's request. */
function failed(error: unknown, task: ReadTask | StreamTask): WorkerFailure {
  // Anything but a read's own failure is a defect: worth a log line that names the request.
  if (!(error instanceof ReadError)) logLine('read task failed unexpectedly', task, error);
  return toWorkerFailure(error, task.requestId);
}

/**
 * The worker's log: the gateway's (gateway/common/logger.ts), on stderr, one line per defect. Its
 * buffer is bounded as the gateway's own log is (16 MiB): a stderr nobody reads drops lines.
 */
const log = createLogger(init.logErrors ? 'error' : 'silent', pino.destination({ dest: 2, sync: false, maxLength: 16 * 1024 * 1024 }));

/** An error line naming the task's request. */
function logLine(msg: string, task: ChunkRun, error: unknown): void {
  log.error({ requestId: task.requestId, taskId: task.id, bucket: task.bucket, error }, msg);
}

/** The task's abort controller, registered for cancellation (undefined: cancelled before it started). */
function register(task: ChunkRun): AbortController | undefined {
  if (isCancelled(task.id)) return undefined;
  const controller = new AbortController();
  setMaxListeners(0, controller.signal); // every read in flight listens to it
  running.set(task.id, controller);
  // A cancellation posted before the task was registered is still in the flags.
  if (isCancelled(task.id)) controller.abort();
  return controller;
}

/** The `read` task (gateway/threads/protocol.ts WorkerTasks). */
export const read: WorkerTasks['read'] = async (task) => {
  const controller = register(task);
  if (!controller) return failed(cancelled(), task);
  try {
    const result = await execute(task, controller.signal);
    if (!result.buffer) return result;
    // Piscina's Transferable protocol: the result is the value, its buffer is transferred; the
    // main thread receives the value (a WorkerResult).
    const movable = { [Piscina.transferableSymbol]: [result.buffer], [Piscina.valueSymbol]: result };
    return Piscina.move(movable as unknown as Parameters<typeof Piscina.move>[0]) as unknown as WorkerResult;
  } catch (error) {
    return failed(error, task);
  } finally {
    running.delete(task.id);
  }
};

/** The `stream` task (gateway/threads/protocol.ts WorkerTasks). */
export const stream: WorkerTasks['stream'] = async (task) => {
  const controller = register(task);
  if (!controller) {
    task.port.close();
    return failed(cancelled(), task);
  }
  try {
    return await runStreamTask(task, controller.signal);
  } finally {
    running.delete(task.id);
  }
};
