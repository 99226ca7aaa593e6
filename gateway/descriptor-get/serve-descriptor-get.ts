/**
 * The descriptor GET (docs/layerwise-get.md; schemas/wire-format.md): a GET that carries a
 * descriptor, answered with one streamed response that delivers the matched prefix's KV in one of
 * two delivery modes, layerwise (LAYER frames, layer by layer) or chunkwise (CHUNK frames, chunk
 * by chunk), assembled by the read workers from range reads of every chunk. The feature is named
 * for its request (this directory, gateway/descriptor-get/); "layerwise" and "chunkwise" name the
 * modes. Settings and metrics named "layerwise" (--max-layerwise-requests,
 * objectcache_layerwise_*) count descriptor GETs of both modes, under the names users know.
 *
 * Flow: plan the layer groups and worker tasks; start the read-ahead; wait for the first unit
 * before answering, so a missing or short chunk (every chunk is touched by the first group) is an
 * ordinary S3 XML error; then pull frames from the frame source (which reads ahead within the
 * budgets) through the pacing stage into the response; an ERROR frame if a later read fails, the
 * END summary otherwise. Whatever way the stream ends, the read-ahead is closed: queued and
 * running tasks are cancelled and every budget byte is returned.
 *
 * A descriptor that names `codecs` asks for the chunks in their stored encoding (encoded chunks,
 * schemas/encoded-chunk.ts): their index is read first (chunk-index.ts, one HEAD per chunk), the
 * plan and the blocks follow each slice's stored length, the stream is version 2 (each frame with
 * its segment table), and every size the gateway decides by (the mode threshold, the scheduler's
 * bytes per layer) counts the encoded bytes. Such requests use grouped reads.
 */
import { setMaxListeners } from 'node:events';
import { SEGMENT_CHUNKS_HEADER, type Descriptor } from '../../schemas/descriptor.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { encodeEndPayload, encodeErrorPayload, FrameType, SEGMENTED_STREAM_CONTENT_TYPE, STREAM_CONTENT_TYPE, STREAM_VERSION, STREAM_VERSION_SEGMENTED } from '../../schemas/frames.js';
import { planChunkwise, planFromSegment, planLayerwise, planStreamed, planUnits, type PlanInput, type ReadPlan, type Unit } from './read-plan.js';
import type { Heads, Pack, ReadRest, Segments } from '../segments/segments.js';
import type { ReaderPool } from './read-pool/reader-pool.js';
import type { DescriptorGetConfig } from '../common/config.js';
import type { RequestContext } from '../s3/context.js';
import type { DescriptorGetObserver } from '../common/metrics.js';
import type { EpochScheduler, Grant } from './scheduler/epoch-scheduler.js';
import { Pacer } from './scheduler/pacer.js';
import type { FifoBudget } from '../common/fifo-budget.js';
import { FrameBuilder, jsonFrame, paced, responseEvent, send, unpaced, type Frame } from './frame-stream.js';
import { ReadAhead, type ChunkSource, type TaskRead, type UnitSource } from './read-ahead.js';
import type { EncodedChunks } from './encoded-chunks.js';
import { encodedPayloadBytes, largestSlice, readChunkIndex } from './chunk-index.js';
import type { Backend } from '../s3/backend.js';
import { StreamReadAhead, runChunksFor } from './stream-read-ahead.js';
import type { FirstLayerGate } from './first-layer-gate.js';

export type DeliveryMode = 'layerwise' | 'chunkwise';

/** Equation 2 of the paper (docs/references.md): chunkwise below the threshold Θ, layerwise at or above it, unless asked. */
export function chooseMode(descriptor: Descriptor, threshold: number, payloadBytes: number = descriptor.totalBytes): DeliveryMode {
  if (descriptor.mode === 'layerwise' || descriptor.mode === 'chunkwise') return descriptor.mode;
  return payloadBytes < threshold ? 'chunkwise' : 'layerwise';
}

/** Backend streams a streamed read of `descriptor` opens: one per chunk, two for KV_2LTD (K and V apart). */
export function chunkStreams(descriptor: Pick<Descriptor, 'chunks' | 'layout'>): number {
  return descriptor.chunks * (descriptor.layout === 'KV_2LTD' ? 2 : 1);
}

/** How a request's chunks are read (docs/layerwise-get.md, Streamed reads). */
export type ChunkReads = 'streamed' | 'grouped';

/**
 * Streamed when every condition holds: layerwise delivery of at least two layers, an S3 backend
 * whose connections' receive buffers can be bounded (the embedded store's positional reads cost
 * nothing per request), `--chunk-reads auto`, the request's chunk streams (one per chunk, two for
 * KV_2LTD) within `--max-chunk-streams`, and one chunk's slice of a layer within a buffer block
 * (`--task-bytes`). Grouped range reads otherwise. (At serve time the streams must also be free
 * at once: see stream().)
 */
export function chooseReads(descriptor: Descriptor, mode: DeliveryMode, config: DescriptorGetConfig, streamsChunks: boolean): ChunkReads {
  if (config.chunkReads === 'grouped' || mode !== 'layerwise' || !streamsChunks) return 'grouped';
  if (descriptor.codecs !== undefined) return 'grouped';
  if (descriptor.layerEnd - descriptor.layerStart < 2) return 'grouped';
  if (chunkStreams(descriptor) > config.maxChunkStreams) return 'grouped';
  if (descriptor.layerBytes > config.taskBytes) return 'grouped';
  return 'streamed';
}

export interface DescriptorGetDeps {
  readonly pool: ReaderPool;
  /** Backend timeout (connect, headers, between body bytes) for streamed reads. */
  readonly backendTimeoutMs: number;
  readonly config: DescriptorGetConfig;
  /** Shared by every layerwise GET of the gateway. */
  readonly budget: FifoBudget;
  /** Shares the egress among layerwise (not chunkwise) GETs; absent when the cap is unlimited. */
  readonly scheduler?: EpochScheduler | undefined;
  readonly observer?: DescriptorGetObserver;
  /** Shared by every layerwise GET of the gateway: streamed GETs yield to first layers. */
  readonly firstLayers?: FirstLayerGate;
  /** Where encoded chunks' indexes are read (descriptors that name `codecs`): within the requesting key's share of backend connections. */
  readonly backend: Pick<Backend, 'heads'>;
  /**
   * Where a segment's chunks are checked: the gateway's own HEADs, shared by every request of the
   * run that arrives meanwhile (Segments.current), so not held in one key's share (default: `backend`).
   */
  readonly checks?: Pick<Backend, 'heads'>;
  /** Packed segments (segments.ts): absent when --segments is off. */
  readonly segments?: Segments | undefined;
}

/** The read plan of a request in its delivery mode. */
export function planFor(descriptor: Descriptor, mode: DeliveryMode, config: DescriptorGetConfig, tasksInFlight: number, layerBytes: number = descriptor.layerBytes): ReadPlan {
  const input = planInput(descriptor, config, tasksInFlight, layerBytes);
  return mode === 'layerwise' ? planLayerwise(input) : planChunkwise(input);
}

function planInput(descriptor: Descriptor, config: DescriptorGetConfig, tasksInFlight: number, layerBytes: number, windowBytes = config.readAheadBytes): PlanInput {
  return {
    layout: descriptor.layout,
    layerStart: descriptor.layerStart,
    layerEnd: descriptor.layerEnd,
    layerBytes,
    chunks: descriptor.chunks,
    readBytes: config.readBytes,
    taskBytes: config.taskBytes,
    maxGroupBytes: windowBytes,
    firstGroupTasks: tasksInFlight,
  };
}

export async function serveDescriptorGet(ctx: RequestContext, descriptor: Descriptor, deps: DescriptorGetDeps): Promise<void> {
  // An encoded request's sizes are its stored bytes: they choose the mode and set its share.
  const encoded = descriptor.codecs ? await readChunkIndex(descriptor, ctx.target.bucket, deps.backend, ctx.signal) : undefined;
  const payloadBytes = encoded ? encodedPayloadBytes(descriptor, encoded) : descriptor.totalBytes;
  const mode = chooseMode(descriptor, deps.config.threshold, payloadBytes);
  ctx.mode = mode;
  deps.observer?.mode(mode);
  const tenant = ctx.tenant;
  // A run read often enough is packed from its frames (stream()); first, a segment of it another
  // gateway (or this one before a restart) packed is looked for in the store.
  const due = mode === 'layerwise' ? deps.segments?.counted(ctx.target.bucket, descriptor, encoded) : undefined;
  // The HEADs of a segment's chunks (discovery with --segment-check writes, and the checks of reads).
  const bucket = ctx.target.bucket;
  const heads = (keys: readonly string[]): ReturnType<Backend['heads']> => (deps.checks ?? deps.backend).heads(bucket, keys, checkSignal(deps.backendTimeoutMs), false);
  if (due !== undefined && deps.segments) await deps.segments.discover(bucket, descriptor, due, heads, encoded);

  // Layerwise GETs share the egress: wait for the epoch that admits this one, then keep its rate.
  let grant: Grant | undefined;
  if (deps.scheduler && mode === 'layerwise') {
    const bytesPerLayer = encoded ? Math.ceil(payloadBytes / (descriptor.layerEnd - descriptor.layerStart)) : descriptor.layerPayloadBytes;
    grant = await deps.scheduler.admit({ id: ctx.requestId, tenant, bytesPerLayer, computeMsPerLayer: descriptor.computeMsPerLayer }, ctx.signal);
    deps.observer?.admissionWait(grant.waitedMs / 1000);
  }
  try {
    // A segment that turns out stale, or fails before the first frame, is dropped and the request
    // served from the chunks: nothing has been sent yet.
    const fromSegment = await stream(ctx, descriptor, deps, mode, tenant, grant, encoded, payloadBytes, due, heads, true);
    if (fromSegment === 'retry') await stream(ctx, descriptor, deps, mode, tenant, grant, encoded, payloadBytes, due, heads, false);
  } finally {
    if (grant) deps.scheduler?.release(ctx.requestId);
  }
}

async function stream(ctx: RequestContext, descriptor: Descriptor, deps: DescriptorGetDeps, mode: DeliveryMode, tenant: string, grant: Grant | undefined, encoded: EncodedChunks | undefined, payloadBytes: number, due: string | undefined, heads: Heads, segmentsAllowed: boolean): Promise<'retry' | void> {
  const { config, pool } = deps;
  const started = ctx.startedAt;
  const tasksInFlight = pool.tasksPerRequest;
  // Streamed only if the streams are free now: a request never waits for another's streams (it
  // is served with grouped reads instead), so the kernel memory streams hold stays bounded.
  const streams = chunkStreams(descriptor);
  const reads = chooseReads(descriptor, mode, config, pool.streamsChunks) === 'streamed' && pool.tryStreams(streams) ? 'streamed' : 'grouped';
  const order = mode === 'layerwise' ? 'layer-major' : 'chunk-major';
  // Worked out only for streamed reads (grouped reads plan by layer groups, not runs of chunks).
  const runChunks = reads === 'streamed' ? runChunksFor(descriptor.layerBytes, pool.arenaBlockBytes) : 0;
  // Encoded slices differ in length: groups and tasks are sized by the largest.
  const sliceBytes = encoded ? largestSlice(descriptor, encoded) : descriptor.layerBytes;
  let plan = reads === 'streamed' ? planStreamed(descriptor, runChunks) : planFor(descriptor, mode, config, tasksInFlight, sliceBytes);
  const rangesPerChunk = descriptor.layout === 'KV_2LTD' ? 2 : 1;
  const bucket = ctx.target.bucket;
  const found = segmentsAllowed && reads === 'grouped' ? deps.segments?.find(bucket, descriptor, (chunks) => plan.groups.length * chunks * rangesPerChunk, encoded, heads) : undefined;
  // A segment's reads are few, large and sequential: a smaller window keeps the stream going (--segment-read-ahead-bytes).
  const windowBytes = found && deps.segments ? Math.min(config.readAheadBytes, deps.segments.readAheadBytes) : config.readAheadBytes;
  if (found) plan = planFromSegment(planInput(descriptor, config, tasksInFlight, sliceBytes, windowBytes), mode === 'layerwise', found.cover);
  const chunks = { requestId: ctx.requestId, bucket: ctx.target.bucket, keys: descriptor.keys, layout: descriptor.layout, layers: descriptor.layers, layerBytes: descriptor.layerBytes, encoded };
  const units = planUnits(plan, mode === 'layerwise', order, chunks);
  let readAhead: UnitSource;
  if (reads === 'streamed') {
    const geometry = { ...chunks, first: descriptor.layerStart, end: descriptor.layerEnd };
    readAhead = new StreamReadAhead({ pool, geometry, plan, runChunks, streams, windowBytes: config.streamWindowBytes, budget: deps.budget, timeoutMs: deps.backendTimeoutMs, signal: ctx.signal, observer: deps.observer, firstLayers: deps.firstLayers });
  } else {
    readAhead = new ReadAhead({
      pool,
      plan,
      units,
      chunks,
      order,
      windowBytes,
      budget: deps.budget,
      tasksInFlight,
      firstUnitAlone: mode === 'layerwise',
      signal: ctx.signal,
      observer: deps.observer,
      segment: found?.source,
      // Read from the chunks instead, at the segment's versions: the stream goes on.
      segmentFailed: found ? (error) => {
        ctx.logger.info({ error }, 'a packed segment could not be read; its layers are read from the chunks');
        deps.segments?.drop(found.run, `a read of it failed: ${error.message}`, found.source.key);
      } : undefined,
    });
  }
  let pack: Pack | undefined;
  /** Whether the segment's CRC32Cs are those every covered chunk's writer recorded (Segments.current). */
  let segmentVerified = true;
  try {
    // Everything before the first unit is in is answered as S3 XML; after it, the stream has begun.
    const firstIn = deps.firstLayers?.begin();
    let first: TaskRead[];
    try {
      if (found && deps.segments) {
        // The covered chunks are checked (HEADs) while the first layer is read from the segment.
        const segments = deps.segments;
        const current = segments.current(bucket, found, heads);
        const read = readAhead.unit(0);
        try {
          const [check, reads] = await Promise.all([current, read]);
          if (check === 'stale') return 'retry';
          segmentVerified = check === 'verified';
          first = reads;
        } catch (error) {
          if (ctx.signal.aborted) throw error;
          // Served from the chunks, which decide (they are the source of truth). A failure of the
          // segment itself (gone, changed, damaged) never gets here: the read-ahead reads those
          // layers from the chunks and drops the segment (segmentFailed above). A chunk beyond it
          // that a longer request names, or a check that could not be made, does not drop it.
          ctx.logger.info({ error }, 'a packed segment could not be read or checked; serving from the chunks');
          return 'retry';
        }
        segments.served();
      } else first = await readAhead.unit(0);
    } finally {
      firstIn?.();
    }
    // A run read often enough is packed from these frames (not one served whole from a segment).
    if (due !== undefined && reads === 'grouped' && found?.cover.chunks !== descriptor.chunks) {
      const pins = (): readonly (string | undefined)[] => (readAhead instanceof ReadAhead ? readAhead.pins : []);
      const verified = (): boolean => readAhead.verified && segmentVerified;
      pack = deps.segments?.packFor(ctx.target.bucket, descriptor, due, (from, pinned, signal, take) => readRest({ descriptor, deps, chunks, from, pins: pinned, signal, take }), pins, verified, encoded);
    }
    const firstReadMs = performance.now() - started;
    ctx.res.writeHead(200, {
      'content-type': encoded ? SEGMENTED_STREAM_CONTENT_TYPE : STREAM_CONTENT_TYPE,
      'cache-control': 'no-store',
      'x-objectcache-mode': mode,
      'x-objectcache-chunks': String(descriptor.chunks),
      'x-objectcache-layers': `${descriptor.layerStart}-${descriptor.layerEnd}`,
      'x-objectcache-payload-bytes': String(payloadBytes),
      ...(encoded ? { 'x-objectcache-codec': encoded.codec } : {}),
      'x-objectcache-plan-reads': String(plan.reads),
      'x-objectcache-reads': reads,
      ...(grant ? { 'x-objectcache-rate': String(Math.floor(grant.rateBytesPerSec)) } : {}),
      ...(found ? { [SEGMENT_CHUNKS_HEADER]: String(found.cover.chunks) } : {}),
    });
    const source = frames({ ctx, descriptor, deps, mode, plan, units, readAhead, first, firstReadMs, grant, encoded, pack, segmentVerified });
    const version = encoded ? STREAM_VERSION_SEGMENTED : STREAM_VERSION;
    const writes = grant ? paced(source, new Pacer(grant.rateBytesPerSec), version) : unpaced(source, version);
    try {
      await send(ctx.res, writes, { stallTimeoutMs: config.clientStallTimeoutMs, onBytes: (bytes) => deps.observer?.delivered(tenant, bytes) });
    } catch (error) {
      // The client stalled (its response is destroyed) or went away: nobody to answer.
      if (!ctx.res.destroyed) throw error;
    }
    // The task buffers are reused once the response refers to none of their bytes.
    await responseDone(ctx.res, config.clientStallTimeoutMs);
  } finally {
    pack?.ended();
    await readAhead.close();
  }
}

/**
 * The layers [from, end) of a pack's run, read from the chunks after its request (Pack.finish):
 * layer groups within the pack's own queue, pinned to the versions the request read, each unit's
 * LAYER frames handed to `take` and its buffers given back once `take` has copied them. It uses
 * the gateway-wide budget and worker slots like a request, and at most --max-segment-packs run at
 * once.
 */
async function readRest(r: { descriptor: Descriptor; deps: DescriptorGetDeps; chunks: ChunkSource; from: number; pins: readonly string[]; signal: AbortSignal; take: Parameters<ReadRest>[3] }): Promise<boolean> {
  const { descriptor, deps } = r;
  const windowBytes = Math.min(deps.config.readAheadBytes, deps.segments?.packQueueBytes ?? deps.config.readAheadBytes);
  const tasksInFlight = deps.pool.tasksPerRequest;
  const { encoded } = r.chunks;
  const plan = planLayerwise({ ...planInput(descriptor, deps.config, tasksInFlight, encoded ? largestSlice(descriptor, encoded) : descriptor.layerBytes, windowBytes), layerStart: r.from, firstGroupTasks: 1 });
  const units = planUnits(plan, true, 'layer-major', r.chunks);
  // An encoded prefix's reads are pinned to its index's versions, which the request read too.
  const readAhead = new ReadAhead({ pool: deps.pool, plan, units, chunks: r.chunks, order: 'layer-major', windowBytes, budget: deps.budget, tasksInFlight, firstUnitAlone: false, signal: r.signal, pins: r.pins });
  const build = new FrameBuilder({ layerBytes: descriptor.layerBytes, encoded });
  try {
    for (let u = 0; u < units.length; u++) {
      const reads = await readAhead.unit(u);
      await r.take(reads, build.layerFrames(reads).map((frame) => slicesOf(frame, encoded)));
      readAhead.recycle(u);
      readAhead.release(u);
    }
    return readAhead.verified;
  } finally {
    await readAhead.close();
  }
}

/** A data frame's slices, as a segment holds them: without an encoded frame's segment table (its first piece, FrameBuilder). */
function slicesOf(frame: Frame, encoded: EncodedChunks | undefined): readonly Uint8Array[] {
  return encoded ? frame.pieces.slice(1) : frame.pieces;
}

/** Bounds a check of a segment's chunks: not the client's signal, since requests that arrive meanwhile share the check (Segments.current). */
function checkSignal(timeoutMs: number): AbortSignal {
  const signal = AbortSignal.timeout(timeoutMs);
  setMaxListeners(0, signal); // a HEAD per covered chunk listens to it
  return signal;
}

/** Resolves once the response has flushed everything or is destroyed; a client that stops reading the last bytes is cut off after the stall timeout. */
async function responseDone(res: RequestContext['res'], stallTimeoutMs: number): Promise<void> {
  if (res.writableFinished || res.destroyed) return;
  await responseEvent(res, ['finish', 'close'], stallTimeoutMs);
}

interface SourceInput {
  readonly ctx: RequestContext;
  readonly descriptor: Descriptor;
  readonly deps: DescriptorGetDeps;
  readonly mode: DeliveryMode;
  readonly plan: ReadPlan;
  readonly units: readonly Unit[];
  readonly readAhead: UnitSource;
  readonly first: TaskRead[];
  readonly firstReadMs: number;
  readonly grant: Grant | undefined;
  readonly encoded: EncodedChunks | undefined;
  /** A segment being packed from this stream's LAYER frames. */
  readonly pack: Pack | undefined;
  /** The segment read from (if any) holds CRC32Cs that every covered chunk's writer recorded. */
  readonly segmentVerified: boolean;
}

/**
 * The frames of the stream, in order: each unit's LAYER (or CHUNK) frames once its reads are
 * in, then END; or an ERROR frame for the first failure after the stream began.
 */
async function* frames(s: SourceInput): AsyncGenerator<Frame> {
  const { descriptor, readAhead, deps } = s;
  const started = s.ctx.startedAt;
  const build = new FrameBuilder({ layerBytes: descriptor.layerBytes, encoded: s.encoded });
  let payloadBytes = 0;
  let firstFrameMs = 0;
  try {
    for (let u = 0; u < s.units.length; u++) {
      const reads = u === 0 ? s.first : await readAhead.unit(u);
      // Once the socket has taken the unit's last frame, its buffers go back to the pool.
      const recycle = (): void => readAhead.recycle(u);
      const unitFrames = s.mode === 'layerwise' ? build.layerFrames(reads) : build.chunkFrames(reads);
      s.pack?.checksums(reads);
      for (let i = 0; i < unitFrames.length; i++) {
        const frame = unitFrames[i] as Frame;
        s.pack?.frame(slicesOf(frame, s.encoded));
        yield i === unitFrames.length - 1 ? { ...frame, onFlushed: recycle } : frame;
        if (firstFrameMs === 0) firstFrameMs = performance.now() - started;
        if (s.mode === 'layerwise') deps.observer?.layerReady((performance.now() - started) / 1000);
        payloadBytes += frame.length;
      }
      readAhead.release(u);
    }
  } catch (error) {
    s.pack?.abandon('the layerwise GET that fed it failed');
    if (s.ctx.signal.aborted) return;
    // After headers: the ERROR frame is the answer, then the stream ends (the headers-sent rule of gateway/s3/respond.ts).
    const e = error instanceof ObjectCacheError ? error : new ObjectCacheError('OC_ERR_INTERNAL', 'The layerwise GET failed', { cause: error });
    s.ctx.logger.warn({ error: e }, 'layerwise stream failed after headers');
    yield jsonFrame(FrameType.ERROR, encodeErrorPayload(e));
    return;
  }
  const summary = encodeEndPayload({
    mode: s.mode,
    layers: [descriptor.layerStart, descriptor.layerEnd],
    chunks: descriptor.chunks,
    bytes: payloadBytes,
    backendReads: readAhead.backendReads,
    plan: s.plan.groups,
    rateBytesPerSec: s.grant ? Math.floor(s.grant.rateBytesPerSec) : null,
    // Writer-verified: every slice was checked against the CRC32C its chunk's writer recorded.
    verified: readAhead.verified && s.segmentVerified,
    ...(s.encoded ? { codec: s.encoded.codec } : {}),
    timings: { firstReadMs: round(s.firstReadMs), firstFrameMs: round(firstFrameMs), totalMs: round(performance.now() - started) },
  });
  if (s.pack) void s.pack.finish();
  yield jsonFrame(FrameType.END, summary);
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
