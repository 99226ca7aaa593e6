/**
 * Packed segments as the descriptor GET sees them (docs/segments.md): all the serving path
 * (serve-descriptor-get.ts) knows of them. gateway/segments/ implements `PackedSegments`
 * (Segments); with --segments off the serving path is given none, and asks nothing.
 *
 * A request asks once, before admission (`request`: the read is counted, and a run that became
 * due is looked for in the store); then, for grouped reads, for a plan that reads its first chunks
 * from a segment (`RequestSegments.plan`); and, once its first unit is in, for a pack fed by its
 * frames (`RequestSegments.pack`).
 */
import type { Descriptor } from '../../schemas/descriptor.js';
import type { ObjectCacheError } from '../../schemas/errors.js';
import type { Logger } from '../common/logger.js';
import type { EncodedChunks } from './encoded-chunks.js';
import type { TaskRead } from './read-ahead.js';
import type { ChunkReads, PlanInput, ReadPlan } from './read-plan.js';
import type { SegmentSource } from './segment-source.js';

/** Packed segments, for the descriptor GET (gateway/segments/segments.ts implements it). */
export interface PackedSegments {
  /**
   * A descriptor GET of `descriptor` is about to be admitted: counts the read (layerwise only)
   * and, once its run is due, looks for the run's segment in the store. Never fails.
   */
  request(r: SegmentRequest): Promise<RequestSegments>;
}

export interface SegmentRequest {
  /** The chunks' bucket. */
  readonly bucket: string;
  readonly descriptor: Descriptor;
  /** Layerwise delivery: only those reads count towards packing. */
  readonly layerwise: boolean;
  /** The chunks' index (a descriptor that names `codecs`). */
  readonly encoded: EncodedChunks | undefined;
  /** The request's logger. */
  readonly logger: Pick<Logger, 'info'>;
}

/** One request's view of packed segments. */
export interface RequestSegments {
  /**
   * A plan that reads the request's first chunks from a segment, when one serves it for fewer
   * requests to the store than `chunkPlan` (grouped reads of the chunks); else undefined.
   * `input`: the chunk plan's input, `layerwise`: the delivery mode.
   */
  plan(r: { readonly input: PlanInput; readonly chunkPlan: ReadPlan; readonly layerwise: boolean }): SegmentPlan | undefined;
  /**
   * The request's first unit is in: a pack of its run, fed by its frames, when the run is due
   * and not served whole from a segment (grouped reads only); else undefined.
   */
  pack(r: PackRequest): SegmentPack | undefined;
}

/** A request's reads of a packed segment. */
export interface SegmentPlan {
  /** The plan: tasks over the segment's chunks marked `fromSegment` (read-plan.ts planFromSegment). */
  readonly plan: ReadPlan;
  /** The request's read-ahead window while it reads the segment (--segment-read-ahead-bytes). */
  readonly windowBytes: number;
  /** The request's chunks the segment covers (its first). */
  readonly chunks: number;
  /** Where the plan's `fromSegment` tasks read. */
  readonly source: SegmentSource;
  /**
   * A read of the segment failed in the segment itself (read-ahead.ts SEGMENT_BROKEN): those
   * layers are read from the chunks, and the segment is dropped.
   */
  failed(error: ObjectCacheError): void;
  /**
   * Awaits the first unit (`read`, its reads) together with the check of the segment's chunks. `retry`: the
   * segment is stale, or the first unit or the check failed (and `signal` has not aborted, else
   * that failure is thrown); the request is to be served from the chunks, nothing having been
   * sent. Otherwise the first unit's reads, and whether the segment's CRC32Cs are those every
   * covered chunk's writer recorded.
   */
  first<T>(read: Promise<T>, signal: AbortSignal): Promise<{ readonly reads: T; readonly verified: boolean } | 'retry'>;
}

export interface PackRequest {
  readonly reads: ChunkReads;
  /** The segment the request reads, if any. */
  readonly segment: SegmentPlan | undefined;
  /** The chunk versions the request has read so far, by prefix position (all of them once its first unit is in). */
  readonly versions: () => readonly (string | undefined)[];
  /** Whether every read of the request so far was checked against CRC32Cs its chunk's writer recorded. */
  readonly verified: () => boolean;
  /**
   * Whether the workers checked the request's bytes (false under --slice-checks client, where the
   * client does): only then may a pack copy its frames; else it reads its run from the chunks.
   */
  readonly framesChecked: boolean;
  /** Reads the layers a pack fell behind on from the chunks, after the request (read-rest.ts). */
  readonly rest: ReadRest;
}

/**
 * A segment being packed from a layerwise GET's LAYER frames (gateway/segments/pack.ts Pack): fed
 * by the frame source, in stream order.
 */
export interface SegmentPack {
  /** The slice checksums of a unit's reads. */
  checksums(reads: readonly TaskRead[]): void;
  /** A LAYER frame's payload: its slices, without an encoded frame's slice-length table. */
  frame(pieces: readonly Uint8Array[]): void;
  /** The request failed after its headers. */
  abandon(reason: string): void;
  /** The request sent its last frame (END). */
  finish(): Promise<void>;
  /** The request's response is over, whatever way it ended. */
  ended(): void;
}

/**
 * Reads layers [from, the run's end) of a pack's run from its chunks, locked to `versions` (the
 * versions its request read), holding at most `queueBytes` read but not taken, handing each unit's
 * reads and LAYER frames' pieces to `take` in order and waiting for it; ends early when `signal`
 * aborts (read-rest.ts). Resolves to whether every read was checked against CRC32Cs its chunk's
 * writer recorded.
 */
export type ReadRest = (r: {
  readonly from: number;
  readonly versions: readonly string[];
  readonly signal: AbortSignal;
  readonly queueBytes: number;
  readonly take: (reads: readonly TaskRead[], frames: readonly (readonly Uint8Array[])[]) => Promise<void>;
}) => Promise<boolean>;
