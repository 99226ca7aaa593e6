/**
 * Streamed reads, the main thread's side (docs/layerwise-get.md, Streamed reads): one stream
 * task (gateway/worker/chunk-streams.ts) holds a GET per chunk open and fills a ring of layer
 * buffers; this hands each layer to the frame source as a unit, and hands each layer's buffers
 * back to the worker once the socket has taken them, so the ring's next layer can be read.
 *
 * What the request holds, from start to end: one stream task slot and its chunk streams (the
 * gateway's `--max-chunk-streams`; reserved before, with ReaderPool.tryStreams, or the request is
 * served with grouped reads), and its ring (`slots` layers, waited for in the gateway-wide byte
 * budget, FIFO).
 */
import { once, setMaxListeners } from 'node:events';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { ChunkRun, StreamLayer } from '../threads/protocol.js';
import { fromWorkerFailure } from '../threads/read-errors.js';
import type { ReaderPool, RunningStream, StreamRing } from './reader-pool.js';
import type { DescriptorGetObserver } from '../common/metrics.js';
import type { ByteBudget } from '../common/fifo-budget.js';
import type { SliceChecks } from '../common/config.js';
import { serveUnits, type ChunkSource, type TaskRead, type UnitRead, type UnitSource } from './read-ahead.js';
import { deferred, type Deferred } from './deferred.js';
import type { PlannedTask, ReadPlan } from './read-plan.js';
import { RingLayout } from '../threads/task-layout.js';
import type { FirstLayers } from './first-layer-gate.js';

/** What is read: the request's chunks (read-ahead.ts ChunkSource), layers [first, end). */
export type StreamGeometry = ChunkSource & Pick<ChunkRun, 'first' | 'end'>;

/** Layers in a streamed request's ring: as many as `windowBytes` holds, at least two, at most all. */
export function ringSlots(windowBytes: number, layerPayloadBytes: number, layers: number): number {
  return Math.max(1, Math.min(layers, Math.max(2, Math.floor(windowBytes / layerPayloadBytes))));
}

export interface StreamReadAheadOptions {
  readonly pool: ReaderPool;
  readonly geometry: StreamGeometry;
  /** planStreamed's plan (a unit per layer, a task per run of chunks). */
  readonly plan: ReadPlan;
  readonly runChunks: number;
  /** The chunk streams it opens, reserved by the caller (ReaderPool.tryStreams) and given back by close(). */
  readonly streams: number;
  readonly windowBytes: number;
  readonly budget: ByteBudget;
  /** Backend timeout (connect, headers, between body bytes). */
  readonly timeoutMs: number;
  readonly signal: AbortSignal;
  readonly observer?: DescriptorGetObserver | undefined;
  /** Layer buffers go back to the worker only while no GET waits for its first layer group. */
  readonly firstLayers?: FirstLayers | undefined;
  /** Who checks the request's slices (config.ts sliceChecksFor; ChunkRun.sliceChecks). */
  readonly sliceChecks?: SliceChecks | undefined;
}

export class StreamReadAhead implements UnitSource {
  readonly #o: StreamReadAheadOptions;
  readonly #cancel = new AbortController();
  readonly #units: Deferred<TaskRead[]>[];
  /** The ring's slots, runs and blocks (gateway/threads/task-layout.ts): what is budgeted is what is taken. */
  readonly #layout: RingLayout;
  /** The stream task slot and chunk streams (reserved by the caller) and the ring's budget bytes. */
  #held = { streams: true, budget: false };
  #ring: StreamRing | undefined;
  #running: RunningStream | undefined;
  /** Layers handed back to the worker (index: layer - first). */
  readonly #freed: boolean[];
  /** Layers the worker has delivered. */
  readonly #received: boolean[];
  #receivedCount = 0;
  readonly #allReceived = deferred<void>();
  readonly #pump: Promise<void>;
  readonly #onClientGone = (): void => this.#cancel.abort();
  backendReads = 0;
  verified = true;

  constructor(options: StreamReadAheadOptions) {
    this.#o = options;
    const g = options.geometry;
    const layers = g.end - g.first;
    const layerPayload = g.keys.length * g.layerBytes;
    this.#layout = new RingLayout(ringSlots(options.windowBytes, layerPayload, layers), g.keys.length, options.runChunks, g.layerBytes);
    this.#units = Array.from({ length: layers }, () => deferred<TaskRead[]>());
    this.#freed = new Array<boolean>(layers).fill(false);
    this.#received = new Array<boolean>(layers).fill(false);
    setMaxListeners(0, this.#cancel.signal);
    if (options.signal.aborted) this.#cancel.abort();
    else options.signal.addEventListener('abort', this.#onClientGone, { once: true });
    this.#pump = this.#run().catch((error: unknown) => this.#fail(error));
  }

  serve<T>(send: (units: AsyncIterator<UnitRead, undefined>) => Promise<T>): Promise<T> {
    return serveUnits(this, send);
  }

  get count(): number {
    return this.#units.length;
  }

  unit(u: number): Promise<TaskRead[]> {
    return (this.#units[u] as Deferred<TaskRead[]>).promise;
  }

  /** The ring is held for the whole request: nothing to return per unit. */
  release(_u: number): void {}

  /** Layer `u` has been sent: its buffers go back to the worker for the layer a ring later. */
  recycle(u: number): void {
    const running = this.#running;
    if (this.#freed[u] || !running) return;
    this.#freed[u] = true;
    const free = (): void => {
      if (!this.#cancel.signal.aborted) running.port.postMessage({ layer: this.#o.geometry.first + u });
    };
    if (this.#o.firstLayers) this.#o.firstLayers.whenClear(free);
    else free();
  }

  #fail(error: unknown): void {
    this.#cancel.abort(error);
    for (const unit of this.#units) unit.reject(error);
  }

  async #run(): Promise<void> {
    const { pool, budget, geometry: g, runChunks } = this.#o;
    const signal = this.#cancel.signal;
    await budget.acquire(this.#layout.bytes, signal);
    this.#held.budget = true;
    if (signal.aborted) throw signal.reason;
    this.#ring = pool.takeRing(this.#layout);
    const running = pool.runStream({
      requestId: g.requestId,
      bucket: g.bucket,
      keys: g.keys,
      chunkOffset: 0,
      layout: g.layout,
      layers: g.layers,
      layerBytes: g.layerBytes,
      first: g.first,
      end: g.end,
      runChunks,
      ring: this.#ring.ring,
      blocks: this.#ring.blocks,
      timeoutMs: this.#o.timeoutMs,
      ...(this.#o.sliceChecks === 'client' ? { sliceChecks: 'client' as const } : {}),
    });
    this.#running = running;
    const closed = once(running.port, 'close');
    running.port.on('message', (message: StreamLayer) => this.#layer(message));
    const stop = (): void => pool.cancel(running.id);
    signal.addEventListener('abort', stop, { once: true });
    const result = await running.result;
    signal.removeEventListener('abort', stop);
    if (result.ok) {
      // The worker posted every layer before it answered; the messages come on their own channel.
      // It closes its end after the last one, so either all of them arrive or the port closes.
      await Promise.race([this.#allReceived.promise, closed]);
      running.port.close();
      if (this.#receivedCount < this.#units.length) throw new ObjectCacheError('OC_ERR_INTERNAL', 'the stream task ended before every layer was read');
      this.backendReads = result.reads;
      this.#o.observer?.taskDone(result.reads, result.readMs / 1000, result.retries);
      return;
    }
    running.port.close();
    if (signal.aborted) return this.#fail(signal.reason);
    this.#o.observer?.taskFailed(result.code);
    this.#fail(fromWorkerFailure(result));
  }

  #layer(message: StreamLayer): void {
    const { geometry: g, plan } = this.#o;
    const u = message.layer - g.first;
    const ring = this.#ring as StreamRing;
    const layout = this.#layout;
    const blocks = ring.blocks[layout.slotOf(u)] as readonly number[];
    const reads: TaskRead[] = [];
    for (let r = 0; r < layout.runs; r++) {
      const task = plan.tasks[u * layout.runs + r] as PlannedTask;
      // A run's block holds one layer of its chunks: a one-layer, layer-major task block.
      const bytes = layout.runLength(r) * g.layerBytes;
      reads.push({ task, region: new Uint8Array(ring.ring, blocks[r], bytes), crcs: message.crcs.subarray(task.chunkStart, task.chunkEnd) });
    }
    this.backendReads = message.reads;
    this.verified = message.verified;
    if (!this.#received[u]) {
      this.#received[u] = true;
      if (++this.#receivedCount === this.#units.length) this.#allReceived.resolve();
    }
    (this.#units[u] as Deferred<TaskRead[]>).resolve(reads);
  }

  /**
   * Ends the read: cancels the stream task, waits for it to answer (the worker writes into the
   * ring until then), and returns the ring, the streams and the task slot. Call it once the
   * response refers to no frame any more.
   */
  async close(): Promise<void> {
    this.#o.signal.removeEventListener('abort', this.#onClientGone);
    this.#cancel.abort();
    // Closing the port cancels the stream task too, should the cancellation message be lost.
    this.#running?.port.close();
    await this.#pump;
    if (this.#ring) this.#o.pool.giveRing(this.#ring);
    this.#ring = undefined;
    if (this.#held.budget) this.#o.budget.release(this.#layout.bytes);
    if (this.#held.streams) this.#o.pool.releaseStreams(this.#o.streams);
    this.#held = { streams: false, budget: false };
  }
}
