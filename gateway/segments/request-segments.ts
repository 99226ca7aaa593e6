/**
 * One descriptor GET's view of the packed segments (descriptor-get/packed-segments.ts,
 * RequestSegments), as Segments.request makes it: the segment that serves its first chunks, with
 * its plan and the checks of its chunks, and the pack of its run once the run is due.
 */
import { setMaxListeners } from 'node:events';
import type { Descriptor } from '../../schemas/descriptor.js';
import type { EncodedChunks } from '../descriptor-get/encoded-chunks.js';
import type { PackRequest, ReadRest, RequestSegments, SegmentPack, SegmentPlan, SegmentRequest } from '../descriptor-get/packed-segments.js';
import { planFromSegment } from '../descriptor-get/read-plan.js';
import type { Found, SegmentCheck } from './catalog.js';
import type { Heads } from './manifest.js';

/** What a request's view asks of the segments (Segments). */
export interface SegmentIndex {
  /** --segment-read-ahead-bytes. */
  readonly readAheadBytes: number;
  find(bucket: string, d: Descriptor, chunkReads: (chunks: number) => number, encoded?: EncodedChunks, heads?: Heads): Found | undefined;
  current(bucket: string, found: Found, heads: Heads): Promise<SegmentCheck>;
  served(): void;
  drop(run: string, why: string, data?: string): void;
  packFor(
    bucket: string,
    d: Descriptor,
    run: string,
    rest: ReadRest,
    versions: () => readonly (string | undefined)[],
    verified: () => boolean,
    framesChecked: boolean,
    encoded?: EncodedChunks,
  ): SegmentPack | undefined;
}

/** One descriptor GET's view of the segments (RequestSegments): its due run, if any, and the HEADs its checks make. */
export class SegmentsOfRequest implements RequestSegments {
  readonly #segments: SegmentIndex;
  readonly #r: SegmentRequest;
  /** The run's name once it is due for packing (Segments.counted). */
  readonly #due: string | undefined;
  readonly #heads: Heads;

  constructor(segments: SegmentIndex, r: SegmentRequest, due: string | undefined, heads: Heads) {
    this.#segments = segments;
    this.#r = r;
    this.#due = due;
    this.#heads = heads;
  }

  plan(p: Parameters<RequestSegments['plan']>[0]): SegmentPlan | undefined {
    const segments = this.#segments;
    const { bucket, descriptor, encoded, logger } = this.#r;
    const heads = this.#heads;
    const rangesPerChunk = descriptor.layout === 'KV_2LTD' ? 2 : 1;
    const found = segments.find(bucket, descriptor, (chunks) => p.chunkPlan.groups.length * chunks * rangesPerChunk, encoded, heads);
    if (!found) return undefined;
    // A segment's reads are few, large and sequential: a smaller window keeps the stream going (--segment-read-ahead-bytes).
    const windowBytes = Math.min(p.input.maxGroupBytes, segments.readAheadBytes);
    return {
      plan: planFromSegment({ ...p.input, maxGroupBytes: windowBytes }, p.layerwise, found.cover),
      windowBytes,
      chunks: found.cover.chunks,
      source: found.source,
      failed: (error) => {
        logger.info({ error }, 'a packed segment could not be read; its layers are read from the chunks');
        segments.drop(found.run, `a read of it failed: ${error.message}`, found.source.key);
      },
      first: async (read, signal) => {
        let opened: { reads: Awaited<typeof read>; verified: boolean };
        try {
          const [check, reads] = await Promise.all([segments.current(bucket, found, heads), read]);
          if (check === 'stale') return 'retry';
          opened = { reads, verified: check === 'verified' };
        } catch (error) {
          if (signal.aborted) throw error;
          // Served from the chunks, which decide (they are the source of truth). A failure of the
          // segment itself (gone, changed, damaged) never gets here: the read-ahead reads those
          // layers from the chunks and drops the segment (`failed`). A chunk beyond it that a
          // longer request names, or a check that could not be made, does not drop it.
          logger.info({ error }, 'a packed segment could not be read or checked; serving from the chunks');
          return 'retry';
        }
        segments.served();
        return opened;
      },
    };
  }

  pack(p: PackRequest): SegmentPack | undefined {
    const { bucket, descriptor, encoded } = this.#r;
    if (this.#due === undefined || p.reads !== 'grouped' || p.segment?.chunks === descriptor.chunks) return undefined;
    return this.#segments.packFor(bucket, descriptor, this.#due, p.rest, p.versions, p.verified, p.framesChecked, encoded);
  }
}

/** Bounds a check of a segment's chunks: not the client's signal, since requests that arrive meanwhile share the check (Segments.current). */
export function checkSignal(timeoutMs: number): AbortSignal {
  const signal = AbortSignal.timeout(timeoutMs);
  setMaxListeners(0, signal); // a HEAD per covered chunk listens to it
  return signal;
}
