/**
 * Read-ahead of one layerwise GET: dispatches the read plan's worker tasks in order, as far ahead
 * as the budgets allow, and hands their results to the frame source unit by unit (a unit is what
 * is sent together: the tasks of one layer group, or one task in chunkwise delivery).
 *
 * Budgets (docs/layerwise-get.md, Read-ahead): the request's own read-ahead window is taken task by task, so
 * the next group's first chunk runs are read while the current group is still being sent (a
 * group may fill the whole window and reads stay large); the gateway-wide budget is taken a whole
 * unit at a time, so two requests can never each hold part of a unit and wait for each other.
 * At most `tasksInFlight` of the request's tasks are in the pool at once.
 */
import { setMaxListeners } from 'node:events';
import type { ReadResult, ReadTask, SegmentRead } from '../threads/protocol.js';
import { fromWorkerFailure } from '../threads/read-errors.js';
import type { ObjectCacheError } from '../../schemas/errors.js';
import type { PlannedTask, ReadPlan, Unit } from './read-plan.js';
import { layoutOf } from '../threads/task-layout.js';
import type { Delivery } from '../../schemas/descriptor.js';
import type { Layout } from '../../schemas/layouts.js';
import type { SliceChecks } from '../common/config.js';
import type { DescriptorGetObserver } from '../common/metrics.js';
import { FifoBudget, type ByteBudget } from '../common/fifo-budget.js';
import { deferred, type Deferred } from './deferred.js';
import type { EncodedChunks } from './encoded-chunks.js';
import { SEGMENT_BROKEN, type SegmentSource } from './segment-source.js';

/** A completed task: its plan entry and what the worker read. */
export interface TaskRead {
  readonly task: PlannedTask;
  /** The task's bytes, slice after slice; handed back to the pool once sent. */
  readonly region: Uint8Array;
  readonly crcs: Uint32Array;
}

/** What every task of a request reads from: the chunks, as the descriptor names them. */
export interface ChunkSource {
  readonly requestId: string;
  readonly bucket: string;
  readonly keys: readonly string[];
  readonly layout: Layout;
  readonly layers: number;
  readonly layerBytes: number;
  /** The prefix's chunks are encoded (schemas/encoded-chunk.ts): their index, read before the plan. */
  readonly encoded?: EncodedChunks | undefined;
}

/**
 * What the read-ahead needs of the read-worker pool (gateway/descriptor-get/reader-pool.ts, ReaderPool):
 * to start tasks, and to take task blocks back.
 */
export interface TaskRunner {
  /**
   * Waits for room in the pool's queue, then starts `task` (a worker task all but its id) and
   * hands back its result (never rejecting: a failure is a result). The task is cancelled when
   * `signal` aborts; the wait for room rejects with its reason. `bytes`: the task block's size.
   */
  dispatch(task: Omit<ReadTask, 'id' | 'buffer' | 'arenaOffset'>, bytes: number, signal: AbortSignal): Promise<{ readonly result: Promise<ReadResult> }>;
  /** A task's block is no longer referenced: the pool may hand it out again. */
  recycle(region: Uint8Array): void;
}

export interface ReadAheadOptions {
  readonly pool: TaskRunner;
  readonly plan: ReadPlan;
  /** planUnits of the plan: what is sent together. */
  readonly units: readonly Unit[];
  readonly chunks: ChunkSource;
  /** The order of each task's slices: layer-major for LAYER frames, chunk-major for CHUNK frames. */
  readonly order: Delivery;
  /** This request's read-ahead window (bytes). */
  readonly windowBytes: number;
  /** The gateway-wide budget of read but unsent bytes. */
  readonly budget: ByteBudget;
  /** The request's tasks kept in the pool at once. */
  readonly tasksInFlight: number;
  /** Read nothing beyond unit 0 until it is complete (layer 0 gets every worker slot). */
  readonly firstUnitAlone: boolean;
  /** The client went away. */
  readonly signal: AbortSignal;
  readonly observer?: DescriptorGetObserver | undefined;
  /** Where the plan's `fromSegment` tasks read (planFromSegment). */
  readonly segment?: SegmentSource | undefined;
  /**
   * Called once when a read of `segment` fails in the segment itself (SEGMENT_BROKEN): that task and
   * any other such are read from the chunks instead, and the segment should be dropped.
   */
  readonly segmentFailed?: ((error: ObjectCacheError) => void) | undefined;
  /** The chunks' versions every read must find, by prefix position (the rest of a pack, read after its request: Pack.finish). */
  readonly versions?: readonly string[] | undefined;
  /** `client` where the client checks a request's own slices (config.ts sliceChecksFor; ChunkRun.sliceChecks); a pack's reads leave it out. */
  readonly sliceChecks?: SliceChecks | undefined;
}

/** One unit's reads, as the frame source takes them. */
export interface UnitRead {
  /** The unit's task reads, in plan order. */
  readonly reads: TaskRead[];
  /** Its frames have been written: its bytes go back to the budgets. */
  readonly sent: () => void;
  /** The socket has taken its last frame: its blocks go back to the pool. */
  readonly flushed: () => void;
}

/**
 * What the frame source reads units from: grouped reads (ReadAhead) or streamed ones
 * (stream-read-ahead.ts StreamReadAhead). `serve` runs a sender over the units and closes the
 * source once the sender has settled, so nothing a request holds outlives its response.
 */
export interface UnitSource {
  /**
   * Runs `send` over the units in order (`units.next()` waits for the next unit's reads and
   * rejects with the first failure among them), then, once `send` has settled either way, ends
   * the reads: cancels what still runs and returns every block and budget byte. So `send` must
   * settle only once the response refers to none of the units' bytes.
   */
  serve<T>(send: (units: AsyncIterator<UnitRead, undefined>) => Promise<T>): Promise<T>;
  readonly backendReads: number;
  readonly verified: boolean;
}

/** A source's units by number, as both read-aheads keep them (UnitSource.serve is built on these). */
interface Units {
  readonly count: number;
  unit(u: number): Promise<TaskRead[]>;
  release(u: number): void;
  recycle(u: number): void;
  close(): Promise<void>;
}

/** UnitSource.serve for a source's units: `send` over them, then close. */
export async function serveUnits<T>(source: Units, send: (units: AsyncIterator<UnitRead, undefined>) => Promise<T>): Promise<T> {
  try {
    return await send(unitReads(source));
  } finally {
    await source.close();
  }
}

async function* unitReads(source: Units): AsyncGenerator<UnitRead, undefined> {
  for (let u = 0; u < source.count; u++) {
    const reads = await source.unit(u);
    yield { reads, sent: () => source.release(u), flushed: () => source.recycle(u) };
  }
  return undefined;
}

export class ReadAhead implements UnitSource, Units {
  readonly #o: ReadAheadOptions;
  readonly #cancel = new AbortController();
  readonly #window: FifoBudget;
  readonly #slots: FifoBudget;
  readonly #units: Deferred<TaskRead[]>[];
  /** Results by task index, as they are dispatched. */
  readonly #results: (Promise<ReadResult> | undefined)[];
  /** Window bytes and global bytes each unit holds (released once the unit is sent). */
  readonly #heldWindow: number[];
  readonly #heldGlobal: boolean[];
  readonly #pump: Promise<void>;
  /** Each unit's task bytes once read, until they go back to the pool (exactly once). */
  readonly #regions: (Uint8Array[] | undefined)[];
  /** Units whose bytes have gone back to the pool: a late completion must not record them again. */
  readonly #returned: boolean[];
  /**
   * Each chunk's ETag from its first read (by prefix position). Later reads of the chunk must
   * find the same version; the first unit reads every chunk and nothing is read beyond it until
   * it is complete (layerwise), so every later task carries the locked versions of its chunks.
   */
  readonly #versions: (string | undefined)[] = [];
  readonly #onClientGone = (): void => this.#cancel.abort();
  /** A read of the segment failed in the segment itself: reported once. */
  #segmentBroken = false;
  backendReads = 0;
  verified = true;

  constructor(options: ReadAheadOptions) {
    this.#o = options;
    this.#window = new FifoBudget(options.windowBytes);
    this.#slots = new FifoBudget(options.tasksInFlight);
    setMaxListeners(0, this.#cancel.signal); // every budget wait listens to it
    this.#units = options.units.map(() => deferred<TaskRead[]>());
    this.#results = new Array<Promise<ReadResult> | undefined>(options.plan.tasks.length);
    this.#heldWindow = options.units.map(() => 0);
    this.#heldGlobal = options.units.map(() => false);
    this.#regions = options.units.map(() => undefined);
    this.#returned = options.units.map(() => false);
    // The rest of a pack is read at the versions its request read (and its manifest will pin).
    if (options.versions) this.#versions.push(...options.versions);
    // An encoded prefix's plan was cut from its index: the first reads must find those versions.
    else if (options.chunks.encoded) this.#versions.push(...options.chunks.encoded.etags);
    // A segment was packed from these versions, and its manifest says so: the versions it locks.
    else if (options.segment) this.#versions.push(...options.segment.etags);
    if (options.signal.aborted) this.#cancel.abort();
    else options.signal.addEventListener('abort', this.#onClientGone, { once: true });
    this.#pump = this.#dispatchAll().catch((error: unknown) => this.#fail(error));
  }

  serve<T>(send: (units: AsyncIterator<UnitRead, undefined>) => Promise<T>): Promise<T> {
    return serveUnits(this, send);
  }

  get count(): number {
    return this.#o.units.length;
  }

  /** The results of unit `u`, in plan order; rejects with the first failure among them. */
  unit(u: number): Promise<TaskRead[]> {
    return (this.#units[u] as Deferred<TaskRead[]>).promise;
  }

  /** Unit `u` has been sent: its bytes go back to the budgets. */
  release(u: number): void {
    this.#window.release(this.#heldWindow[u] as number);
    this.#heldWindow[u] = 0;
    if (this.#heldGlobal[u]) {
      this.#heldGlobal[u] = false;
      this.#o.budget.release((this.#o.units[u] as Unit).bytes);
    }
  }

  #fail(error: unknown): void {
    this.#cancel.abort(error);
    for (const unit of this.#units) unit.reject(error);
  }

  async #dispatchAll(): Promise<void> {
    const { units, pool, budget } = this.#o;
    const { tasks } = this.#o.plan;
    const signal = this.#cancel.signal;
    for (const [u, unit] of units.entries()) {
      await budget.acquire(unit.bytes, signal);
      this.#heldGlobal[u] = true;
      const pending: Promise<ReadResult>[] = [];
      // A unit larger than the window (one layer can be) is admitted alone, whole: taken task
      // by task it would wait on its own first tasks.
      const whole = unit.bytes > this.#window.capacity;
      if (whole) {
        await this.#window.acquire(unit.bytes, signal);
        this.#heldWindow[u] = unit.bytes;
      }
      for (let t = unit.from; t < unit.to; t++) {
        const task = tasks[t] as PlannedTask;
        const bytes = layoutOf(task, this.#o.order, this.#o.chunks).bytes;
        if (!whole) {
          await this.#window.acquire(bytes, signal);
          this.#heldWindow[u] = (this.#heldWindow[u] as number) + bytes;
        }
        await this.#slots.acquire(1, signal);
        const versions = this.#versions.slice(task.chunkStart, task.chunkEnd);
        const readTask = { ...this.#readTask(task), ...(versions.some((version) => version !== undefined) ? { etags: versions } : {}) };
        let { result } = await pool.dispatch(readTask, bytes, signal);
        if (readTask.segment) result = result.then((answer) => this.#fromChunksIf(answer, readTask, bytes));
        this.#results[t] = result;
        const done = (): void => this.#slots.release(1);
        void result.then(done, done);
        pending.push(result);
      }
      // A unit that cannot complete fails the stream (the consumer waits on #units), never the
      // process: no rejection is left unhandled.
      const settled = Promise.all(pending).then(
        (results) => this.#complete(u, results),
        (error: unknown) => this.#fail(error),
      );
      if (u === 0 && this.#o.firstUnitAlone) await settled;
      else settled.catch((error: unknown) => this.#fail(error));
    }
  }

  /** The worker task of a planned task (all but its id): its chunks' layers, into a block in the request's order. */
  #readTask(task: PlannedTask): Omit<ReadTask, 'id' | 'buffer' | 'arenaOffset'> {
    const c = this.#o.chunks;
    const encoded = c.encoded ? { encoded: { codec: c.encoded.codec, sliceBytes: c.encoded.sliceBytes.slice(task.chunkStart, task.chunkEnd) } } : {};
    const segment = task.fromSegment && this.#o.segment ? { segment: this.#segmentRead(task, this.#o.segment) } : {};
    return {
      requestId: c.requestId,
      bucket: c.bucket,
      keys: c.keys.slice(task.chunkStart, task.chunkEnd),
      chunkOffset: task.chunkStart,
      layout: c.layout,
      layers: c.layers,
      layerBytes: c.layerBytes,
      first: task.first,
      end: task.end,
      order: this.#o.order,
      ...(this.#o.sliceChecks === 'client' ? { sliceChecks: 'client' as const } : {}),
      ...encoded,
      ...segment,
    };
  }

  /**
   * A task of a segment that turned out gone, changed or damaged (another gateway evicted it, an
   * operator deleted it) is read again from its chunks, locked to the versions the segment was
   * packed from, into a block of its own: so the stream goes on with the same bytes, or fails with
   * OC_ERR_CHUNK_CHANGED if a chunk changed too. The segment is reported once (`segmentFailed`).
   */
  async #fromChunksIf(answer: ReadResult, task: Omit<ReadTask, 'id' | 'buffer' | 'arenaOffset'>, bytes: number): Promise<ReadResult> {
    const segment = task.segment as SegmentRead;
    if (answer.ok || this.#cancel.signal.aborted || answer.key !== segment.key || !SEGMENT_BROKEN.has(answer.code)) return answer;
    if (!this.#segmentBroken) {
      this.#segmentBroken = true;
      try {
        this.#o.segmentFailed?.(fromWorkerFailure(answer));
      } catch {
        // A task's result never rejects: what the caller does with the news is its own affair.
      }
    }
    const { segment: _, ...fromChunks } = task;
    try {
      return await (
        await this.#o.pool.dispatch(fromChunks, bytes, this.#cancel.signal)
      ).result;
    } catch {
      return answer; // cancelled meanwhile: the failure stands (the stream is over anyway)
    }
  }

  /** Where a segment task's slices lie in the segment, and the CRC32C each must have, in the task's slice order. */
  #segmentRead(task: PlannedTask, segment: SegmentSource): SegmentRead {
    const layout = layoutOf(task, this.#o.order, this.#o.chunks);
    const crcs = new Uint32Array(layout.layers * layout.chunks);
    const offsets: number[] = [];
    for (let layer = task.first; layer < task.end; layer++) {
      offsets.push(segment.offset(layer, task.chunkStart));
      for (let c = 0; c < layout.chunks; c++) crcs[layout.slice(layer, c)] = segment.crcs[(layer - segment.first) * segment.chunks + task.chunkStart + c] as number;
    }
    const { bucket, key, etag, bytes } = segment;
    return { bucket, key, etag, bytes, offsets, crcs };
  }

  /** Each chunk's ETag as read (by prefix position), for a segment packed from this request. */
  get versions(): readonly (string | undefined)[] {
    return this.#versions;
  }

  /**
   * Unit `u`'s bytes are no longer referenced (the socket took its last frame, or the stream is
   * over): they go back to the pool. Idempotent, so a block is never handed out twice.
   */
  recycle(u: number): void {
    const regions = this.#regions[u];
    if (!regions) return;
    this.#regions[u] = undefined;
    this.#returned[u] = true;
    for (const region of regions) this.#o.pool.recycle(region);
  }

  #complete(u: number, results: ReadResult[]): void {
    // close() already gave these blocks back (the request ended while this unit was reading).
    if (this.#returned[u]) return;
    const unit = this.#o.units[u] as Unit;
    const reads: TaskRead[] = [];
    this.#regions[u] = results.flatMap((result) => (result.ok ? [result.region] : []));
    for (const [i, result] of results.entries()) {
      if (!result.ok) {
        // A cancelled task's failure is not the stream's: the cancellation's cause is.
        if (this.#cancel.signal.aborted) return this.#fail(this.#cancel.signal.reason);
        this.#o.observer?.taskFailed(result.code);
        return this.#fail(fromWorkerFailure(result));
      }
      const task = this.#o.plan.tasks[unit.from + i] as PlannedTask;
      result.etags.forEach((etag, c) => (this.#versions[task.chunkStart + c] ??= etag));
      this.backendReads += result.reads;
      this.verified &&= result.verified;
      this.#o.observer?.taskDone(result.reads, result.readMs / 1000, result.retries);
      reads.push({ task, region: result.region, crcs: result.crcs });
    }
    (this.#units[u] as Deferred<TaskRead[]>).resolve(reads);
  }

  /**
   * Ends the read-ahead: cancels queued and running tasks, waits for every dispatched task to
   * answer (their buffers are owned by the workers until then), returns every buffer not yet
   * recycled to the pool and every held byte to the budgets. Call it only once the response no
   * longer refers to any frame (finished or destroyed).
   */
  async close(): Promise<void> {
    this.#o.signal.removeEventListener('abort', this.#onClientGone);
    this.#cancel.abort(); // the pool cancels every task still queued or running
    await this.#pump;
    const answers = await Promise.all(this.#results.map((result) => result ?? Promise.resolve(undefined)));
    for (const [u, unit] of this.#o.units.entries()) {
      this.release(u);
      if (this.#regions[u]) this.recycle(u);
      else if (!this.#returned[u]) {
        // Never completed (the request ended while its tasks were being dispatched or read):
        // the blocks of those of its tasks that answered are still out, owned by no unit.
        this.#returned[u] = true;
        for (const answer of answers.slice(unit.from, unit.to)) if (answer?.ok) this.#o.pool.recycle(answer.region);
      }
    }
  }
}
