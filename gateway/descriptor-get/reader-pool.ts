/**
 * The main thread's side of the read workers: a piscina pool with a bounded queue. Tasks are
 * cancelled cooperatively (the worker aborts its backend reads and answers) through one shared
 * flag table and one BroadcastChannel for the whole pool, so a task costs no channel of its own
 * and a client that goes away never costs a worker thread; a worker that dies fails only its own
 * tasks, and piscina replaces it.
 */
import { createRequire } from 'node:module';
import { setFlagsFromString } from 'node:v8';
import { BroadcastChannel, MessageChannel, type MessagePort, type Worker } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { ReadResult, ReadTask, StreamResult, StreamTask, WorkerBackend, WorkerInit, WorkerResult, WorkerTasks } from '../threads/protocol.js';
import { FifoBudget } from '../common/fifo-budget.js';
import { TaskLayout, type RingLayout } from '../threads/task-layout.js';
import { canBoundReceiveBuffers } from '../../native/socket-buffer.js';
import type { ReaderPoolStats } from '../common/observers.js';

export interface ReaderPoolOptions {
  readonly backend: WorkerBackend;
  readonly workers: number;
  /** Tasks waiting for a worker before new ones are refused (503 SlowDown). */
  readonly maxQueue: number;
  /** Range reads one task keeps in flight. */
  readonly readConcurrency: number;
  /** Tasks one worker runs at once (they wait on I/O, not CPU). */
  readonly tasksPerWorker: number;
  /** Bytes of shared memory reserved for task buffers (virtual until used), and its block size. */
  readonly arenaBytes: number;
  readonly arenaBlockBytes: number;
  /** Chunk streams open at once, in the whole gateway (streamed reads; one connection each). */
  readonly maxChunkStreams: number;
  /** SO_RCVBUF of each chunk stream's connection. */
  readonly streamReceiveBufferBytes: number;
  /** Stream tasks one worker runs at once, besides `tasksPerWorker` grouped ones. */
  readonly streamTasksPerWorker: number;
  /** Workers write a JSON line on stderr for an unexpected failure (default true; off when the gateway logs nothing). */
  readonly logErrors?: boolean;
}

/** A streamed read's ring of layer buffers (StreamTask's `ring` and `blocks`). */
export interface StreamRing {
  readonly ring: SharedArrayBuffer;
  readonly blocks: readonly (readonly number[])[];
}

/** A stream task in the pool: its id (for `cancel`), its port and how it ends. */
export interface RunningStream {
  readonly id: number;
  readonly port: MessagePort;
  readonly result: Promise<StreamResult>;
}

/**
 * What each worker thread runs: the named tasks of gateway/worker/read-worker.ts (gateway/threads/protocol.ts
 * WorkerTasks), one `read` or `stream` at a time per slot. piscina loads them through the CommonJS
 * entry (gateway/worker/read-worker-entry.cts: piscina's require() of the ES module itself can
 * abort the process on Node 20, see that file).
 */
/**
 * The compiled worker entry, named by the package's `#read-worker` import (package.json "imports"),
 * also when this module runs from TypeScript sources, in tests: a worker thread runs built code.
 */
function workerFilename(): string {
  return createRequire(import.meta.url).resolve('#read-worker');
}

/** Recycled task buffers kept at most (bytes); beyond it returned buffers are left to the GC. */
const MAX_POOLED_BYTES = 256 * 1024 * 1024;

/** Slots of the cancellation flag table (a task's slot is its id modulo this). */
const CANCEL_SLOTS = 1 << 16;
let poolSequence = 0;

/**
 * The read workers start with a 64 MiB old space instead of V8's few MiB. Every socket read hands
 * V8 a fresh 64 KiB ArrayBuffer; V8 counts those against the old-space limit, and with the limit
 * it derives from a 10 MiB heap it ran a full mark-compact every 30 MiB read (123 in two 1.75 GiB
 * loads): about 0.6 CPU-seconds per GiB on a 16K prefix at G=64 and 0.9 at G=256. With 64 MiB,
 * 8 (measured in one sweep of `bench:layerwise`: 128 and 256 MiB gain nothing more). The price is
 * up to 64 MiB of dead socket buffers per worker before a collection. Flags are read when an isolate
 * is created, so this reaches the workers started after it; a flag given to node wins.
 */
const WORKER_OLD_SPACE_MB = 64;
let workerHeapsSized = false;

function sizeWorkerHeaps(): void {
  if (workerHeapsSized) return;
  workerHeapsSized = true;
  // (Node refuses this flag in NODE_OPTIONS, so only the command line can carry it.)
  if (process.execArgv.some((arg) => /^--initial[-_]old[-_]space[-_]size/.test(arg))) return;
  setFlagsFromString(`--initial-old-space-size=${WORKER_OLD_SPACE_MB}`);
}

export class ReaderPool {
  readonly #pool: Piscina<ReadTask | StreamTask, WorkerResult | StreamResult>;
  /** Task buffers by size, handed back after their bytes were sent (no allocation, no zeroing). */
  readonly #free = new Map<number, ArrayBuffer[]>();
  #pooledBytes = 0;
  readonly #options: ReaderPoolOptions;
  /** Tasks handed to piscina and not yet answered (queued or running). */
  #inflight = 0;
  #roomWaiters: (() => void)[] = [];
  #nextTaskId = 1;
  readonly #cancelFlags = new Int32Array(new SharedArrayBuffer(CANCEL_SLOTS * 4));
  readonly #cancels: BroadcastChannel;
  readonly #arena: BufferArena;
  /** Chunk streams open in the gateway (streamed reads take theirs before they start). */
  readonly #streams: FifoBudget;
  /** Stream tasks running in the gateway. */
  readonly #streamTasks: FifoBudget;

  constructor(options: ReaderPoolOptions) {
    this.#options = options;
    sizeWorkerHeaps();
    const cancelChannel = `objectcache-read-cancel-${process.pid}-${++poolSequence}`;
    this.#cancels = new BroadcastChannel(cancelChannel);
    this.#cancels.unref();
    this.#arena = new BufferArena(options.arenaBytes, options.arenaBlockBytes);
    this.#streams = new FifoBudget(options.maxChunkStreams);
    this.#streamTasks = new FifoBudget(options.workers * options.streamTasksPerWorker);
    const workerData: WorkerInit = {
      backend: options.backend,
      readConcurrency: options.readConcurrency,
      cancelChannel,
      cancelFlags: this.#cancelFlags.buffer,
      arena: this.#arena.buffer,
      streamConnections: options.maxChunkStreams,
      streamReceiveBufferBytes: options.streamReceiveBufferBytes,
      logErrors: options.logErrors ?? true,
    };
    this.#pool = new Piscina({
      filename: workerFilename(),
      minThreads: options.workers,
      maxThreads: options.workers,
      maxQueue: options.maxQueue,
      // Stream tasks last as long as their request; they have slots of their own (`streamTasks`
      // admits at most that many), so grouped tasks always find one.
      concurrentTasksPerWorker: options.tasksPerWorker + options.streamTasksPerWorker,
      idleTimeout: 60_000,
      // Workers keep keep-alive sockets and timers alive between tasks: no Atomics.wait.
      atomics: 'disabled',
      workerData,
    });
  }

  stats(): ReaderPoolStats {
    return {
      workers: this.#pool.threads.length,
      queued: this.#pool.queueSize,
      running: Math.max(0, this.#inflight - this.#pool.queueSize),
      completed: this.#pool.completed,
      utilization: this.#pool.utilization,
      arenaBlocksInUse: this.#arena.blocks - this.#arena.freeBlocks,
    };
  }

  /** The worker threads (diagnostics; the fault tests terminate one mid-task). */
  get threads(): readonly Worker[] {
    return this.#pool.threads;
  }

  /** True when a new task would be refused. */
  saturated(): boolean {
    return this.#pool.queueSize >= this.#options.maxQueue;
  }

  /** Tasks one request should keep dispatched: enough to keep every worker busy, no more. */
  get tasksPerRequest(): number {
    return this.#options.workers * this.#options.tasksPerWorker * 2;
  }

  /** Resolves when the queue has room for another task (or at once if it has). */
  async room(signal?: AbortSignal): Promise<void> {
    while (this.saturated()) {
      if (signal?.aborted) throw signal.reason;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal?.removeEventListener('abort', done);
          resolve();
        };
        this.#roomWaiters.push(done);
        signal?.addEventListener('abort', done, { once: true });
      });
    }
  }

  /** Returns a task's bytes (ReadResult.region) once nothing refers to them any more. */
  recycle(region: Uint8Array): void {
    if (region.buffer === this.#arena.buffer) {
      this.#arena.give(region.byteOffset);
      return;
    }
    const buffer = region.buffer as ArrayBuffer;
    if (buffer.byteLength === 0 || this.#pooledBytes + buffer.byteLength > MAX_POOLED_BYTES) return;
    const list = this.#free.get(buffer.byteLength) ?? [];
    list.push(buffer);
    this.#free.set(buffer.byteLength, list);
    this.#pooledBytes += buffer.byteLength;
  }

  /** Runs the worker's task `name` (its answer typed by WorkerTasks), moving `transfer` to the worker. */
  #run<K extends keyof WorkerTasks>(name: K, task: Parameters<WorkerTasks[K]>[0], transfer?: (ArrayBuffer | MessagePort)[]): ReturnType<WorkerTasks[K]> {
    return this.#pool.run(task, { name, ...(transfer ? { transferList: transfer } : {}) }) as ReturnType<WorkerTasks[K]>;
  }

  #take(bytes: number): ArrayBuffer | undefined {
    const list = this.#free.get(bytes);
    const buffer = list?.pop();
    if (list?.length === 0) this.#free.delete(bytes);
    if (buffer) this.#pooledBytes -= buffer.byteLength;
    return buffer;
  }

  /** A new task id (the handle `cancel` takes). */
  taskId(): number {
    const id = this.#nextTaskId;
    this.#nextTaskId = id >= 0x7fffffff ? 1 : id + 1;
    return id;
  }

  /** Cancels a task, queued or running: it answers with a failure soon after. */
  cancel(id: number): void {
    Atomics.store(this.#cancelFlags, id % CANCEL_SLOTS, id);
    this.#cancels.postMessage(id);
  }

  /**
   * Waits for room in the queue (rejecting with `signal`'s reason if it aborts first), then starts
   * `task` under a new id and hands back its result; the task is cancelled if `signal` aborts
   * before it answers. What a request's read-ahead calls (read-ahead.ts TaskRunner).
   */
  async dispatch(task: Omit<ReadTask, 'id' | 'buffer' | 'arenaOffset'>, blockBytes: number, signal: AbortSignal): Promise<{ readonly result: Promise<ReadResult> }> {
    // Every waiter wakes when a task ends: whoever finds room still free takes it, in this same
    // synchronous step (run() queues the task before it first awaits); the others wait again.
    do {
      await this.room(signal);
      if (signal.aborted) throw signal.reason;
    } while (this.saturated());
    const id = this.taskId();
    const cancel = (): void => this.cancel(id);
    signal.addEventListener('abort', cancel, { once: true });
    const result = this.run({ ...task, id }, blockBytes);
    void result.then(() => signal.removeEventListener('abort', cancel));
    return { result };
  }

  /** Runs a task; never rejects: failures (queue full, a dead worker) come back as results. */
  async run(task: Omit<ReadTask, 'buffer' | 'arenaOffset'>, blockBytes?: number): Promise<ReadResult> {
    if (this.saturated()) {
      return { ok: false, code: 'OC_ERR_POOL_BUSY', message: 'the read-worker queue is full', readAgain: true };
    }
    // The caller knows the block's size from the task's layout (task-layout.ts layoutOf); it is
    // worked out here only for callers that do not say.
    const bytes = blockBytes ?? TaskLayout.of(task.order, task, task.keys.length, task.layerBytes, task.encoded?.sliceBytes).bytes;
    const arenaOffset = this.#arena.take(bytes);
    try {
      this.#inflight++;
      let result: WorkerResult;
      if (arenaOffset !== undefined) {
        result = await this.#run('read', { ...task, arenaOffset });
      } else {
        const buffer = this.#take(bytes);
        result = await this.#run('read', buffer ? { ...task, buffer } : task, buffer ? [buffer] : undefined);
      }
      if (!result.ok) {
        if (arenaOffset !== undefined) this.#arena.give(arenaOffset);
        return result;
      }
      const { buffer, ...rest } = result;
      const region = buffer ? new Uint8Array(buffer, 0, bytes) : new Uint8Array(this.#arena.buffer, arenaOffset, bytes);
      return { ...rest, region };
    } catch (error) {
      // Refused by the queue, or the worker died (piscina answers once the thread has exited).
      if (arenaOffset !== undefined) this.#arena.give(arenaOffset);
      const message = (error as Error).message;
      if (/queue is at limit/i.test(message)) return { ok: false, code: 'OC_ERR_POOL_BUSY', message: 'the read-worker queue is full', readAgain: true };
      return { ok: false, code: 'OC_ERR_POOL_WORKER', message: `a read worker failed: ${message}`, readAgain: true, requestId: task.requestId };
    } finally {
      this.#inflight--;
      const waiters = this.#roomWaiters;
      this.#roomWaiters = [];
      for (const wake of waiters) wake();
    }
  }

  /**
   * Whether streamed reads are possible: an S3 backend (the embedded store reads files) over
   * plain HTTP (the socket range reader, socket-range-get.ts, reads the streams) and connections
   * whose receive buffer can be bounded (native/socket-buffer.ts).
   */
  get streamsChunks(): boolean {
    const backend = this.#options.backend;
    return backend.kind === 's3' && new URL(backend.endpoint).protocol === 'http:' && canBoundReceiveBuffers();
  }

  get arenaBlockBytes(): number {
    return this.#arena.blockBytes;
  }

  /**
   * A ring of `slots` x `runs` blocks of `blockBytes` for a streamed read: blocks of the shared
   * arena when enough are free, else a SharedArrayBuffer of its own (the byte budget, not the
   * arena, bounds memory). Hand it back with `giveRing`.
   */
  takeRing(layout: RingLayout): StreamRing {
    const { slots, runs, blockBytes } = layout;
    const offsets: number[] = [];
    if (blockBytes <= this.#arena.blockBytes && this.#arena.freeBlocks >= slots * runs) {
      for (let i = 0; i < slots * runs; i++) offsets.push(this.#arena.take(blockBytes) as number);
      return { ring: this.#arena.buffer, blocks: Array.from({ length: slots }, (_, s) => offsets.slice(s * runs, (s + 1) * runs)) };
    }
    return {
      ring: new SharedArrayBuffer(slots * runs * blockBytes),
      blocks: Array.from({ length: slots }, (_, s) => Array.from({ length: runs }, (_, r) => (s * runs + r) * blockBytes)),
    };
  }

  giveRing(ring: StreamRing): void {
    if (ring.ring !== this.#arena.buffer) return;
    for (const run of ring.blocks) for (const offset of run) this.#arena.give(offset);
  }

  /**
   * Reserves a stream task slot and `streams` chunk streams if both are free now (never waits);
   * give them back with `releaseStreams`.
   */
  tryStreams(streams: number): boolean {
    if (!this.#streamTasks.tryAcquire(1)) return false;
    if (this.#streams.tryAcquire(streams)) return true;
    this.#streamTasks.release(1);
    return false;
  }

  releaseStreams(streams: number): void {
    this.#streams.release(streams);
    this.#streamTasks.release(1);
  }

  /** Starts a stream task (reserved by the caller with `tryStreams`). */
  runStream(task: Omit<StreamTask, 'id' | 'port'>): RunningStream {
    const id = this.taskId();
    const channel = new MessageChannel();
    const full: StreamTask = { ...task, id, port: channel.port2 };
    this.#inflight++;
    const result = this.#run('stream', full, [channel.port2])
      .catch((error: unknown): StreamResult => {
        channel.port1.close();
        return { ok: false, code: 'OC_ERR_POOL_WORKER', message: `a read worker failed: ${(error as Error).message}`, readAgain: true, requestId: task.requestId };
      })
      .finally(() => {
        this.#inflight--;
      });
    return { id, port: channel.port1, result };
  }

  async close(): Promise<void> {
    this.#cancels.close();
    await this.#pool.close({ force: true });
  }
}

/*
 * Task buffers in shared memory. One SharedArrayBuffer, reserved once and shared with every read
 * worker at start-up, is cut into equal blocks; a task is given a block, the worker writes its
 * slices there and the main thread sends them from there, then the block is free again. Nothing
 * is allocated, zeroed, transferred or garbage-collected per task (transferred ArrayBuffers cost
 * the main thread a major GC every few hundred MiB as external memory, and fresh ones cost page
 * faults). Free blocks are reused last-freed first, so only as many blocks as are in use at once
 * are ever touched: the reservation is virtual until then.
 *
 * A task larger than a block, or one that finds no free block, gets its own ArrayBuffer
 * (transferred, as before); the arena is an optimisation, never a limit.
 */

export class BufferArena {
  readonly buffer: SharedArrayBuffer;
  readonly blockBytes: number;
  /** Free block indexes; the last one freed is taken first. */
  readonly #free: number[] = [];
  readonly blocks: number;

  constructor(totalBytes: number, blockBytes: number) {
    const blocks = Math.max(0, Math.floor(totalBytes / blockBytes));
    this.blockBytes = blockBytes;
    this.blocks = blocks;
    this.buffer = new SharedArrayBuffer(blocks * blockBytes);
    for (let i = blocks - 1; i >= 0; i--) this.#free.push(i);
  }

  get freeBlocks(): number {
    return this.#free.length;
  }

  /** The byte offset of a free block for `bytes`, or undefined (too large, or none free). */
  take(bytes: number): number | undefined {
    if (bytes > this.blockBytes) return undefined;
    const block = this.#free.pop();
    return block === undefined ? undefined : block * this.blockBytes;
  }

  give(offset: number): void {
    this.#free.push(offset / this.blockBytes);
  }
}
