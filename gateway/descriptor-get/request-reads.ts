/**
 * How one descriptor GET's chunks are read, decided at serve time (once it is admitted): streamed
 * or grouped (read-plan.ts chooseReads, and the chunk streams free at once), the plan (reading its
 * first chunks from a packed segment when one serves it: packed-segments.ts), its units, and the
 * read-ahead that runs it, started.
 */
import type { DescriptorGetConfig } from '../common/config.js';
import type { FifoBudget } from '../common/fifo-budget.js';
import type { DescriptorGetObserver } from '../common/metrics.js';
import type { Descriptor } from '../../schemas/descriptor.js';
import { largestSlice } from './encoded-index.js';
import type { EncodedChunks } from './encoded-chunks.js';
import type { FirstLayerGate } from './first-layer-gate.js';
import type { RequestSegments, SegmentPlan } from './packed-segments.js';
import { ReadAhead, type ChunkSource, type UnitSource } from './read-ahead.js';
import { chooseReads, chunkStreams, planFor, planInput, planStreamed, planUnits, type ChunkReads, type DeliveryMode, type ReadPlan, type Unit } from './read-plan.js';
import type { ReaderPool } from './read-pool/reader-pool.js';
import { StreamReadAhead, runChunksFor } from './stream-read-ahead.js';

/** What a request's reads are made with: the gateway's pool, budgets and settings. */
export interface ReadDeps {
  readonly pool: ReaderPool;
  /** Backend timeout (connect, headers, between body bytes) for streamed reads. */
  readonly backendTimeoutMs: number;
  readonly config: DescriptorGetConfig;
  /** Shared by every layerwise GET of the gateway. */
  readonly budget: FifoBudget;
  readonly observer?: DescriptorGetObserver;
  /** Shared by every layerwise GET of the gateway: streamed GETs yield to first layers. */
  readonly firstLayers?: FirstLayerGate;
}

export interface ReadsRequest {
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
export interface RequestReads {
  readonly reads: ChunkReads;
  readonly plan: ReadPlan;
  readonly units: readonly Unit[];
  readonly chunks: ChunkSource;
  /** The packed segment read, if any. */
  readonly segment: SegmentPlan | undefined;
  /** Close it once the response refers to none of its bytes. */
  readonly readAhead: UnitSource;
}

/** Chooses and plans a request's reads and starts them. */
export function startReads(r: ReadsRequest): RequestReads {
  const { descriptor, mode, encoded, deps } = r;
  const { config, pool } = deps;
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
  const chunkPlan = reads === 'streamed' ? planStreamed(descriptor, runChunks) : planFor(descriptor, mode, config, tasksInFlight, sliceBytes);
  const segment =
    reads === 'grouped' ? r.segments?.plan({ input: planInput(descriptor, config, tasksInFlight, sliceBytes), chunkPlan, layerwise: mode === 'layerwise' }) : undefined;
  const plan = segment ? segment.plan : chunkPlan;
  const chunks: ChunkSource = {
    requestId: r.requestId,
    bucket: r.bucket,
    keys: descriptor.keys,
    layout: descriptor.layout,
    layers: descriptor.layers,
    layerBytes: descriptor.layerBytes,
    encoded,
  };
  const units = planUnits(plan, mode === 'layerwise', order, chunks);
  let readAhead: UnitSource;
  if (reads === 'streamed') {
    const geometry = { ...chunks, first: descriptor.layerStart, end: descriptor.layerEnd };
    readAhead = new StreamReadAhead({
      pool,
      geometry,
      plan,
      runChunks,
      streams,
      windowBytes: config.streamWindowBytes,
      budget: deps.budget,
      timeoutMs: deps.backendTimeoutMs,
      signal: r.signal,
      observer: deps.observer,
      firstLayers: deps.firstLayers,
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
      tasksInFlight,
      firstUnitAlone: mode === 'layerwise',
      signal: r.signal,
      observer: deps.observer,
      segment: segment?.source,
      // Read from the chunks instead, at the segment's versions: the stream goes on.
      segmentFailed: segment ? (error) => segment.failed(error) : undefined,
    });
  }
  return { reads, plan, units, chunks, segment, readAhead };
}
