/**
 * The layerwise GET (DESIGN.md sections 5-7): one streamed response that delivers the matched
 * prefix's KV layer by layer (LAYER frames) or chunk by chunk (CHUNK frames), assembled by the
 * read workers from range reads of every chunk.
 *
 * Flow: plan the layer groups and worker tasks; dispatch tasks in order within the request's and
 * the gateway's read-ahead budgets; wait for the first group before answering, so a missing or
 * short chunk (every chunk is touched by the first group) is an ordinary S3 XML error; then
 * stream the frames in order, an ERROR frame if a later read fails, and the END summary. A client
 * that goes away cancels the queued and running tasks and returns the budget.
 */
import { setMaxListeners } from 'node:events';
import type { Descriptor } from '../../schemas/descriptor.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { FrameType, STREAM_CONTENT_TYPE, type EndSummary, type ErrorPayload } from '../../schemas/frames.js';
import type { ReadResult } from '../../storage-worker/protocol.js';
import { planChunkwise, planLayerwise, type PlannedTask, type ReadPlan } from '../../storage-worker/read-plan.js';
import type { ReaderPool } from '../../storage-worker/reader-pool.js';
import type { LayerwiseConfig } from '../config.js';
import type { LayerwiseObserver } from '../metrics.js';
import type { EpochScheduler, Grant } from '../scheduler/epoch-scheduler.js';
import { Pacer } from '../scheduler/pacer.js';
import type { RequestContext } from '../context.js';
import { ByteBudget } from './byte-budget.js';
import { FrameWriter } from './frame-writer.js';

export type DeliveryMode = 'layerwise' | 'chunkwise';

/** Paper equation 2: chunkwise below the threshold Θ, layerwise at or above it, unless asked. */
export function chooseMode(descriptor: Descriptor, threshold: number): DeliveryMode {
  if (descriptor.mode === 'layerwise' || descriptor.mode === 'chunkwise') return descriptor.mode;
  return descriptor.totalBytes < threshold ? 'chunkwise' : 'layerwise';
}

export interface LayerwiseDeps {
  readonly pool: ReaderPool;
  readonly config: LayerwiseConfig;
  /** Shared by every layerwise GET of the gateway. */
  readonly budget: ByteBudget;
  /** Shares the egress among layerwise (not chunkwise) GETs; absent when the cap is unlimited. */
  readonly scheduler?: EpochScheduler | undefined;
  readonly observer?: LayerwiseObserver;
}

interface Dispatched {
  readonly task: PlannedTask;
  readonly result: Promise<ReadResult>;
}

function toError(result: ReadResult & { ok: false }): ObjectCacheError {
  const details: Record<string, string | number> = {};
  if (result.key !== undefined) details['Key'] = result.key;
  if (result.chunk !== undefined) details['ChunkIndex'] = result.chunk;
  if (result.layer !== undefined) details['Layer'] = result.layer;
  const message = result.chunk !== undefined ? `chunk ${result.chunk}: ${result.message}` : result.message;
  return new ObjectCacheError(result.code, message, { details, retryable: result.retryable });
}

export async function serveLayerwise(ctx: RequestContext, descriptor: Descriptor, deps: LayerwiseDeps): Promise<void> {
  const started = ctx.startedAt;
  const { config, pool } = deps;
  const mode = chooseMode(descriptor, config.threshold);
  const planInput = {
    layout: descriptor.layout,
    layerStart: descriptor.layerStart,
    layerEnd: descriptor.layerEnd,
    layerBytes: descriptor.layerBytes,
    chunks: descriptor.chunks,
    readBytes: config.readBytes,
    taskBytes: config.taskBytes,
    maxGroupBytes: Math.floor(config.readAheadBytes / 2),
    firstGroupTasks: pool.tasksPerRequest,
  };
  const plan: ReadPlan = mode === 'layerwise' ? planLayerwise(planInput) : planChunkwise(planInput);
  const order = mode === 'layerwise' ? 'layer-major' : 'chunk-major';
  ctx.operation = mode === 'layerwise' ? 'LayerwiseGet' : 'ChunkwiseGet';

  if (pool.saturated()) throw new ObjectCacheError('OC_ERR_POOL_BUSY', 'The gateway is busy; retry shortly', { retryable: true });
  deps.observer?.mode(mode);
  const tenant = descriptor.tenant ?? ctx.auth.credential.tenant;

  // Layerwise GETs share the egress: wait for the epoch that admits this one, then keep its rate.
  let grant: Grant | undefined;
  if (deps.scheduler && mode === 'layerwise') {
    grant = await deps.scheduler.admit({ id: ctx.requestId, tenant, bytesPerLayer: descriptor.layerPayloadBytes, computeMsPerLayer: descriptor.computeMsPerLayer }, ctx.signal);
    deps.observer?.admissionWait(grant.waitedMs / 1000);
  }
  try {
    await stream(ctx, descriptor, deps, { mode, plan, order, tenant, grant, started });
  } finally {
    if (grant) deps.scheduler?.release(ctx.requestId);
  }
}

interface StreamPlan {
  readonly mode: DeliveryMode;
  readonly plan: ReadPlan;
  readonly order: 'layer-major' | 'chunk-major';
  readonly tenant: string;
  readonly grant: Grant | undefined;
  readonly started: number;
}

async function stream(ctx: RequestContext, descriptor: Descriptor, deps: LayerwiseDeps, s: StreamPlan): Promise<void> {
  const { config, pool } = deps;
  const { mode, plan, order, started } = s;

  // Units of delivery: the tasks of one layer group (layerwise) or of one task (chunkwise). A
  // unit is sent only when all of it has been read, so budgets are taken a whole unit at a time:
  // a unit larger than a budget is admitted alone, and can never wait on itself.
  const units: [number, number][] = [];
  for (let i = 0; i < plan.tasks.length; ) {
    let j = i + 1;
    if (mode === 'layerwise') while (j < plan.tasks.length && plan.tasks[j]?.group === plan.tasks[i]?.group) j++;
    units.push([i, j]);
    i = j;
  }
  const taskBytes = (task: PlannedTask): number => (task.end - task.first) * (task.chunkEnd - task.chunkStart) * descriptor.layerBytes;
  const unitBytes = units.map(([from, to]) => plan.tasks.slice(from, to).reduce((sum, task) => sum + taskBytes(task), 0));

  // Cancels queued and running tasks when the client goes away or the stream fails.
  const cancel = new AbortController();
  setMaxListeners(0, cancel.signal); // one listener per task in flight
  const onClientGone = (): void => cancel.abort();
  ctx.signal.addEventListener('abort', onClientGone, { once: true });
  const window = new ByteBudget(config.readAheadBytes);
  const dispatched: Dispatched[] = [];
  const held = new Set<number>();
  let backendReads = 0;
  let verified = true;

  const releaseUnit = (unit: number): void => {
    if (!held.delete(unit)) return;
    window.release(unitBytes[unit] as number);
    deps.budget.release(unitBytes[unit] as number);
  };

  // The consumer waits here for the producer to dispatch the next task (or for cancellation).
  let wake: (() => void) | undefined;
  cancel.signal.addEventListener('abort', () => wake?.(), { once: true });

  // The producer: takes the budgets for one unit, then dispatches its tasks in order, keeping at
  // most `tasksPerRequest` of this request's tasks in the pool and waiting for queue room.
  const slots = new ByteBudget(pool.tasksPerRequest);
  const producer = (async () => {
    for (const [unit, [from, to]] of units.entries()) {
      const bytes = unitBytes[unit] as number;
      await window.acquire(bytes, cancel.signal);
      try {
        await deps.budget.acquire(bytes, cancel.signal);
      } catch (error) {
        window.release(bytes);
        throw error;
      }
      held.add(unit);
      for (const task of plan.tasks.slice(from, to)) {
        await slots.acquire(1, cancel.signal);
        await pool.room(cancel.signal);
        const entry: Dispatched = {
          task,
          result: pool
            .run(
              {
                bucket: ctx.target.bucket,
                keys: descriptor.keys.slice(task.chunkStart, task.chunkEnd),
                chunkOffset: task.chunkStart,
                layout: descriptor.layout,
                layers: descriptor.layers,
                layerBytes: descriptor.layerBytes,
                first: task.first,
                end: task.end,
                order,
              },
              cancel.signal,
            )
            .finally(() => slots.release(1)),
        };
        dispatched.push(entry);
        wake?.();
      }
      // Read-ahead starts once the first group is in: until then every read serves layer 0.
      if (unit === 0 && mode === 'layerwise') await Promise.all(dispatched.map((entry) => entry.result));
    }
  })();
  // A producer failure cancels the request, so the consumer stops waiting and answers.
  producer.catch((error: unknown) => cancel.abort(error));

  const nextDispatched = async (index: number): Promise<Dispatched> => {
    while (dispatched.length <= index) {
      if (cancel.signal.aborted) throw cancel.signal.reason ?? new Error('cancelled');
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
    return dispatched[index] as Dispatched;
  };

  /** Results of the tasks of one group (or of the next chunk run), in order. */
  const awaitTasks = async (from: number, to: number): Promise<{ entry: Dispatched; buffer: ArrayBuffer }[]> => {
    const out: { entry: Dispatched; buffer: ArrayBuffer }[] = [];
    for (let i = from; i < to; i++) {
      const entry = await nextDispatched(i);
      const result = await entry.result;
      if (!result.ok) {
        deps.observer?.taskFailed(result.code);
        throw toError(result);
      }
      backendReads += result.reads;
      verified &&= result.verified;
      deps.observer?.taskDone(result.reads, result.readMs / 1000);
      out.push({ entry, buffer: result.buffer });
    }
    return out;
  };


  const writer = new FrameWriter(ctx.res, (bytes) => deps.observer?.delivered(s.tenant, bytes), config.clientStallTimeoutMs);
  if (s.grant) writer.pacer = new Pacer(s.grant.rateBytesPerSec);
  let payloadBytes = 0;
  let firstFrameMs = 0;
  try {
    let unitIndex = 0;
    let ready = await awaitTasks(...(units[0] as [number, number]));
    const firstReadMs = performance.now() - started;
    // Everything before this point is answered as S3 XML; from here on the stream has begun.
    ctx.res.writeHead(200, {
      'content-type': STREAM_CONTENT_TYPE,
      'cache-control': 'no-store',
      'x-objectcache-mode': mode,
      'x-objectcache-chunks': String(descriptor.chunks),
      'x-objectcache-layers': `${descriptor.layerStart}-${descriptor.layerEnd}`,
      'x-objectcache-payload-bytes': String(descriptor.totalBytes),
      'x-objectcache-plan-reads': String(plan.reads),
      ...(s.grant ? { 'x-objectcache-rate': String(Math.floor(s.grant.rateBytesPerSec)) } : {}),
    });
    await writer.preamble();
    try {
      for (;;) {
        const first = ready[0]?.entry.task as PlannedTask;
        // Once the socket has taken the unit's last frame, its buffers go back to the pool.
        const buffers = ready.map(({ buffer }) => buffer);
        const recycle = (): void => buffers.forEach((buffer) => pool.recycle(buffer));
        if (mode === 'layerwise') {
          for (let layer = first.first; layer < first.end; layer++) {
            const pieces = ready.map(({ entry, buffer }) => {
              const chunks = entry.task.chunkEnd - entry.task.chunkStart;
              const bytes = chunks * descriptor.layerBytes;
              return new Uint8Array(buffer, (layer - entry.task.first) * bytes, bytes);
            });
            await writer.frame(FrameType.LAYER, layer, pieces, layer === first.end - 1 ? recycle : undefined);
            if (firstFrameMs === 0) firstFrameMs = performance.now() - started;
            deps.observer?.layerReady((performance.now() - started) / 1000);
            payloadBytes += descriptor.layerPayloadBytes;
          }
        } else {
          for (const [t, { entry, buffer }] of ready.entries()) {
            const perChunk = (entry.task.end - entry.task.first) * descriptor.layerBytes;
            for (let c = entry.task.chunkStart; c < entry.task.chunkEnd; c++) {
              const last = t === ready.length - 1 && c === entry.task.chunkEnd - 1;
              await writer.frame(FrameType.CHUNK, c, [new Uint8Array(buffer, (c - entry.task.chunkStart) * perChunk, perChunk)], last ? recycle : undefined);
              if (firstFrameMs === 0) firstFrameMs = performance.now() - started;
              payloadBytes += perChunk;
            }
          }
        }
        releaseUnit(unitIndex);
        if (ctx.signal.aborted) return;
        unitIndex++;
        if (unitIndex >= units.length) break;
        ready = await awaitTasks(...(units[unitIndex] as [number, number]));
      }
      const summary: EndSummary = {
        mode,
        layers: [descriptor.layerStart, descriptor.layerEnd],
        chunks: descriptor.chunks,
        bytes: payloadBytes,
        backendReads,
        plan: plan.groups,
        rateBytesPerSec: s.grant ? Math.floor(s.grant.rateBytesPerSec) : null,
        verified,
        timings: { firstReadMs: Math.round(firstReadMs * 10) / 10, firstFrameMs: Math.round(firstFrameMs * 10) / 10, totalMs: Math.round((performance.now() - started) * 10) / 10 },
      };
      await writer.json(FrameType.END, summary);
      ctx.res.end();
    } catch (error) {
      if (ctx.signal.aborted) return;
      // After headers: the ERROR frame is the answer, then the stream ends (STYLE.md, rule 6).
      const e = error instanceof ObjectCacheError ? error : new ObjectCacheError('OC_ERR_INTERNAL', 'The layerwise GET failed', { cause: error });
      const payload: ErrorPayload = {
        code: e.code,
        message: e.message,
        ...(e.details['ChunkIndex'] !== undefined ? { chunk: Number(e.details['ChunkIndex']) } : {}),
        ...(e.details['Key'] !== undefined ? { key: String(e.details['Key']) } : {}),
        ...(e.details['Layer'] !== undefined ? { layer: Number(e.details['Layer']) } : {}),
      };
      ctx.logger.warn('layerwise stream failed after headers', { requestId: ctx.requestId, error: e });
      await writer.json(FrameType.ERROR, payload);
      ctx.res.end();
    }
  } finally {
    cancel.abort();
    ctx.signal.removeEventListener('abort', onClientGone);
    await producer.catch(() => {});
    // Wait for cancelled tasks to come back before returning their bytes to the budgets.
    await Promise.all(dispatched.map((entry) => entry.result));
    for (const unit of [...held]) releaseUnit(unit);
  }
}
