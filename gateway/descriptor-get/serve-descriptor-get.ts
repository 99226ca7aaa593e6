/**
 * The descriptor GET (docs/layerwise-get.md; schemas/wire-format.md): a GET that carries a
 * descriptor, answered with one streamed response that delivers the matched prefix's KV in one of
 * two delivery modes, layerwise (LAYER frames, layer by layer) or chunkwise (CHUNK frames, chunk
 * by chunk), assembled by the read workers from range reads of every chunk. The feature is named
 * for its request (this directory, gateway/descriptor-get/); "layerwise" and "chunkwise" name the
 * modes. The metrics named "layerwise" (objectcache_layerwise_*) count descriptor GETs of both
 * modes, under the names dashboards know (docs/architecture.md, Glossary).
 *
 * Flow (the descriptor parsed and the request authorized by gateway/pipeline/routes.ts): plan
 * (the delivery mode, read-plan.ts chooseMode; packed segments asked once, packed-segments.ts);
 * schedule (the egress scheduler, layerwise GETs); stream: plan the reads in one call
 * (read-plan.ts planReads) and start the read-ahead (startReads, below), then serve the response
 * from it (UnitSource.serve): wait for the first unit before answering, so a missing or short
 * chunk (every chunk is touched by the first group) is an ordinary S3 XML error; then write the
 * head and send the frames (frame-stream.ts sendStream: each unit's frames as the read-ahead has
 * it in, through the pacing stage into the response; an ERROR frame if a later read fails, the
 * END summary otherwise). However the sending ends, `serve` then closes the read-ahead: queued
 * and running tasks are cancelled and every block and budget byte is returned.
 *
 * A descriptor that names `codecs` asks for the chunks in their stored encoding (encoded chunks,
 * schemas/encoded-chunk.ts): their index is read first (encoded-index.ts, one HEAD per chunk), the
 * plan and the blocks follow each slice's stored length, the stream is version 2 (each frame with
 * its slice-length table), and every size the gateway decides by (the mode threshold, the scheduler's
 * bytes per layer) counts the encoded bytes. Such requests use grouped reads.
 */
import { SEGMENT_CHUNKS_HEADER, type Descriptor } from '../../schemas/descriptor.js';
import { SEGMENTED_STREAM_CONTENT_TYPE, STREAM_CONTENT_TYPE } from '../../schemas/frames.js';
import { chooseMode, planReads, type DeliveryMode, type PlannedReads } from './read-plan.js';
import type { RequestContext } from '../s3/context.js';
import type { Grant, Scheduling } from './scheduler/epoch-scheduler.js';
import { sendStream } from './frame-stream.js';
import { ReadAhead, type ChunkSource, type UnitRead, type UnitSource } from './read-ahead.js';
import { StreamReadAhead } from './stream-read-ahead.js';
import type { EncodedChunks } from './encoded-chunks.js';
import { encodedPayloadBytes, largestSlice, readEncodedIndex } from './encoded-index.js';
import type { Backend } from '../s3/backend.js';
import type { PackedSegments, RequestSegments, SegmentPack, SegmentPlan } from './packed-segments.js';
import { sliceChecksFor, type DescriptorGetConfig, type SliceChecks } from '../common/config.js';
import type { ByteBudget } from '../common/fifo-budget.js';
import type { DescriptorGetObserver } from '../common/metrics.js';
import type { FirstLayers } from './first-layer-gate.js';
import type { ReaderPool } from './reader-pool.js';
import { restReader } from './read-rest.js';

export interface DescriptorGetDeps extends ReadDeps {
  /** Shares the egress among layerwise (not chunkwise) GETs; absent when the cap is unlimited. */
  readonly scheduler?: Scheduling | undefined;
  /** Where encoded chunks' indexes are read (descriptors that name `codecs`): within the requesting key's share of backend connections. */
  readonly backend: Pick<Backend, 'heads'>;
  /** Packed segments (packed-segments.ts; gateway/segments/segments.ts): absent when --segments is off. */
  readonly segments?: PackedSegments | undefined;
}

/**
 * Serves one descriptor GET, parsed and authorized (gateway/pipeline/routes.ts): plan (the mode,
 * and what packed segments have for it), schedule (the egress scheduler), stream.
 */
export async function serveDescriptorGet(ctx: RequestContext, descriptor: Descriptor, deps: DescriptorGetDeps): Promise<void> {
  // Plan: an encoded request's sizes are its stored bytes: they choose the mode and set its share.
  const encoded = descriptor.codecs ? await readEncodedIndex(descriptor, ctx.target.bucket, deps.backend, ctx.signal) : undefined;
  const payloadBytes = encoded ? encodedPayloadBytes(descriptor, encoded) : descriptor.totalBytes;
  const mode = chooseMode(descriptor, deps.config.threshold, payloadBytes);
  ctx.mode = mode;
  deps.observer?.mode(mode);
  // A run read often enough is packed from its frames (stream()); first, a segment of it another
  // gateway (or this one before a restart) packed is looked for in the store.
  const segments = await deps.segments?.request({ bucket: ctx.target.bucket, descriptor, layerwise: mode === 'layerwise', encoded, logger: ctx.logger });

  // Schedule: layerwise GETs share the egress: wait for the epoch that schedules this one, then keep its rate.
  let grant: Grant | undefined;
  if (deps.scheduler && mode === 'layerwise') {
    const bytesPerLayer = encoded ? Math.ceil(payloadBytes / (descriptor.layerEnd - descriptor.layerStart)) : descriptor.layerPayloadBytes;
    grant = await deps.scheduler.schedule({ id: ctx.requestId, tenant: ctx.tenant, bytesPerLayer, computeMsPerLayer: descriptor.computeMsPerLayer }, ctx.signal);
    deps.observer?.admissionWait(grant.waitedMs / 1000);
  }
  try {
    // Stream. A segment that turns out stale, or fails before the first frame, is dropped and the
    // request served from the chunks: nothing has been sent yet.
    const request: StreamRequest = { ctx, descriptor, deps, mode, grant, encoded, payloadBytes, segments, readSegment: true };
    if ((await stream(request)) === 'retry') await stream({ ...request, readSegment: false });
  } finally {
    if (grant) deps.scheduler?.release(ctx.requestId);
  }
}

/** A scheduled descriptor GET, as stream() serves it. */
interface StreamRequest {
  readonly ctx: RequestContext;
  readonly descriptor: Descriptor;
  readonly deps: DescriptorGetDeps;
  readonly mode: DeliveryMode;
  /** The scheduler's admission (layerwise GETs, with an egress cap). */
  readonly grant: Grant | undefined;
  /** The chunks' index (a descriptor that names `codecs`). */
  readonly encoded: EncodedChunks | undefined;
  /** The delivered payload: stored bytes for encoded chunks. */
  readonly payloadBytes: number;
  /** Packed segments, when --segments is on. */
  readonly segments: RequestSegments | undefined;
  /** Whether a packed segment may be read: not once one failed before the first frame. */
  readonly readSegment: boolean;
}

/**
 * Starts the reads, waits for the first unit (everything before it is answered as S3 XML), then
 * sends the stream. 'retry': a packed segment turned out stale or failed before the first frame.
 */
async function stream(r: StreamRequest): Promise<'retry' | void> {
  const { ctx, descriptor, deps, mode, grant, encoded } = r;
  const { config } = deps;
  const { planned, chunks, segment, readAhead, sliceChecks } = startReads({
    requestId: ctx.requestId,
    bucket: ctx.target.bucket,
    signal: ctx.signal,
    descriptor,
    mode,
    encoded,
    segments: r.readSegment ? r.segments : undefined,
    deps,
  });
  let pack: SegmentPack | undefined;
  // The read-ahead is closed (its reads cancelled, its blocks and budget bytes returned) once the
  // response refers to none of its bytes: sendStream resolves only then.
  return readAhead.serve(async (units) => {
    try {
      // Everything before the first unit is in is answered as S3 XML; after it, the stream has begun.
      const firstIn = deps.firstLayers?.begin();
      let first: UnitRead;
      /** Whether the segment's CRC32Cs are those every covered chunk's writer recorded (SegmentPlan.first). */
      let segmentVerified = true;
      try {
        const next = units.next().then((n) => n.value as UnitRead); // a request has at least one unit
        next.catch(() => {}); // awaited below (or by the segment's check): never an unhandled rejection
        if (segment) {
          // The covered chunks are checked while the first layer is read from the segment.
          const opened = await segment.first(next, ctx.signal);
          if (opened === 'retry') return 'retry';
          first = opened.reads;
          segmentVerified = opened.verified;
        } else first = await next;
      } finally {
        firstIn?.();
      }
      // A run read often enough is packed from these frames (not one served whole from a segment).
      pack = r.segments?.pack({
        reads: planned.reads,
        segment,
        versions: () => (readAhead instanceof ReadAhead ? readAhead.versions : []),
        verified: () => readAhead.verified && segmentVerified,
        // Where the client checks the slices no one here checked the frames' bytes: the pack reads
        // its run from the chunks after the request, through reads the workers check.
        framesChecked: sliceChecks === 'gateway',
        rest: restReader({ descriptor, chunks, config, pool: deps.pool, budget: deps.budget }),
      });
      const firstReadMs = performance.now() - ctx.startedAt;
      ctx.res.writeHead(200, {
        'content-type': encoded ? SEGMENTED_STREAM_CONTENT_TYPE : STREAM_CONTENT_TYPE,
        'cache-control': 'no-store',
        'x-objectcache-mode': mode,
        'x-objectcache-chunks': String(descriptor.chunks),
        'x-objectcache-layers': `${descriptor.layerStart}-${descriptor.layerEnd}`,
        'x-objectcache-payload-bytes': String(r.payloadBytes),
        ...(encoded ? { 'x-objectcache-codec': encoded.codec } : {}),
        'x-objectcache-plan-reads': String(planned.plan.reads),
        'x-objectcache-reads': planned.reads,
        ...(grant ? { 'x-objectcache-rate': String(Math.floor(grant.rateBytesPerSec)) } : {}),
        ...(segment ? { [SEGMENT_CHUNKS_HEADER]: String(segment.chunks) } : {}),
      });
      await sendStream({
        ctx,
        descriptor,
        mode,
        plan: planned.plan,
        first,
        units,
        source: readAhead,
        firstReadMs,
        grant,
        encoded,
        pack,
        segmentVerified,
        observer: deps.observer,
        clientStallTimeoutMs: config.clientStallTimeoutMs,
      });
      return undefined;
    } finally {
      pack?.ended();
    }
  });
}

/*
 * How one descriptor GET's chunks are read, decided at serve time (once it is admitted): planned
 * in one call (read-plan.ts planReads: streamed or grouped, the plan, a packed segment's part in
 * it, the units), and the read-ahead that runs it, started.
 */

/** What a request's reads are made with: the gateway's pool, budgets and settings. */
interface ReadDeps {
  readonly pool: ReaderPool;
  /** Backend timeout (connect, headers, between body bytes) for streamed reads. */
  readonly backendTimeoutMs: number;
  readonly config: DescriptorGetConfig;
  /** Shared by every layerwise GET of the gateway. */
  readonly budget: ByteBudget;
  readonly observer?: DescriptorGetObserver;
  /** Shared by every layerwise GET of the gateway: streamed GETs yield to first layers. */
  readonly firstLayers?: FirstLayers;
}

interface ReadsRequest {
  readonly requestId: string;
  /** The chunks' bucket. */
  readonly bucket: string;
  /** The client went away. */
  readonly signal: AbortSignal;
  readonly descriptor: Descriptor;
  readonly mode: DeliveryMode;
  /** The chunks' index (a descriptor that names `codecs`). */
  readonly encoded: EncodedChunks | undefined;
  /** Where a packed segment is asked for (grouped reads); none is read when undefined. */
  readonly segments: RequestSegments | undefined;
  readonly deps: ReadDeps;
}

/** A request's reads, started. */
interface RequestReads {
  readonly planned: PlannedReads;
  readonly chunks: ChunkSource;
  /** The packed segment read, if any. */
  readonly segment: SegmentPlan | undefined;
  /** Serve the response from it (UnitSource.serve): it is closed once the sender settles. */
  readonly readAhead: UnitSource;
  /** Who checks the request's slices (sliceChecksFor). */
  readonly sliceChecks: SliceChecks;
}

/** Plans a request's reads and starts them. */
function startReads(r: ReadsRequest): RequestReads {
  const { descriptor, mode, encoded, deps } = r;
  const { config, pool } = deps;
  const sliceChecks = sliceChecksFor(config.sliceChecks, descriptor.sliceChecks);
  const chunks: ChunkSource = {
    requestId: r.requestId,
    bucket: r.bucket,
    keys: descriptor.keys,
    layout: descriptor.layout,
    layers: descriptor.layers,
    layerBytes: descriptor.layerBytes,
    encoded,
  };
  let segment: SegmentPlan | undefined;
  const planned = planReads({
    descriptor,
    mode,
    config,
    tasksInFlight: pool.tasksPerRequest,
    streamsChunks: pool.streamsChunks,
    blockBytes: pool.arenaBlockBytes,
    tryStreams: (streams) => pool.tryStreams(streams),
    slices: chunks,
    // Encoded slices differ in length: groups and tasks are sized by the largest.
    sliceBytes: encoded ? largestSlice(descriptor, encoded) : undefined,
    fromSegment: r.segments && ((input, chunkPlan) => (segment = r.segments?.plan({ input, chunkPlan, layerwise: mode === 'layerwise' }))?.plan),
  });
  const { plan, units, order } = planned;
  let readAhead: UnitSource;
  try {
    if (planned.reads === 'streamed') {
      const geometry = { ...chunks, first: descriptor.layerStart, end: descriptor.layerEnd };
      readAhead = new StreamReadAhead({
        pool,
        geometry,
        plan,
        runChunks: planned.runChunks,
        streams: planned.streams,
        windowBytes: config.streamWindowBytes,
        budget: deps.budget,
        timeoutMs: deps.backendTimeoutMs,
        signal: r.signal,
        observer: deps.observer,
        firstLayers: deps.firstLayers,
        sliceChecks,
      });
    } else {
      readAhead = new ReadAhead({
        pool,
        plan,
        units,
        chunks,
        order,
        windowBytes: segment ? segment.windowBytes : config.readAheadBytes,
        budget: deps.budget,
        tasksInFlight: pool.tasksPerRequest,
        firstUnitAlone: mode === 'layerwise',
        signal: r.signal,
        observer: deps.observer,
        segment: segment?.source,
        // Read from the chunks instead, at the segment's versions: the stream goes on.
        segmentFailed: segment ? (error) => segment?.failed(error) : undefined,
        sliceChecks,
      });
    }
  } catch (error) {
    // The streams planReads reserved are given back by the stream read-ahead's close(): not made, by no one else.
    if (planned.streams > 0) pool.releaseStreams(planned.streams);
    throw error;
  }
  return { planned, chunks, segment, readAhead, sliceChecks };
}
