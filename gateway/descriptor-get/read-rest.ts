/**
 * The rest of a pack's run (docs/segments.md, Packing): the layers a segment being packed fell
 * behind on, read from the chunks after its request (gateway/segments/pack.ts, Pack.finish).
 */
import type { Descriptor } from '../../schemas/descriptor.js';
import type { DescriptorGetConfig } from '../common/config.js';
import type { ByteBudget } from '../common/fifo-budget.js';
import { FrameBuilder, slicesOf } from './frame-stream.js';
import type { ReadRest } from './packed-segments.js';
import { ReadAhead, type ChunkSource } from './read-ahead.js';
import { largestSlice } from './encoded-index.js';
import { planInput, planLayerwise, planUnits } from './read-plan.js';
import type { ReaderPool } from './reader-pool.js';

/** What the rest of a request's run is read with: the request's chunks, and the gateway's pool, budget and settings. */
export interface RestReads {
  readonly descriptor: Descriptor;
  readonly chunks: ChunkSource;
  readonly config: DescriptorGetConfig;
  readonly pool: ReaderPool;
  /** The gateway-wide budget of read but unsent bytes. */
  readonly budget: ByteBudget;
}

/**
 * Reads the layers [from, end) of a pack's run from the chunks (ReadRest): layer groups within
 * the pack's own queue, locked to the versions the request read, each unit's LAYER frames handed
 * to `take` and its buffers given back once `take` has copied them. It uses the gateway-wide
 * budget and worker slots like a request, and at most --max-segment-packs run at once.
 */
export function restReader(s: RestReads): ReadRest {
  return async (r) => {
    const { descriptor, config, pool } = s;
    const windowBytes = Math.min(config.readAheadBytes, r.queueBytes);
    const tasksInFlight = pool.tasksPerRequest;
    const { encoded } = s.chunks;
    const plan = planLayerwise({
      ...planInput(descriptor, config, tasksInFlight, encoded ? largestSlice(descriptor, encoded) : descriptor.layerBytes, windowBytes),
      layerStart: r.from,
      firstGroupTasks: 1,
    });
    const units = planUnits(plan, true, 'layer-major', s.chunks);
    // An encoded prefix's reads are locked to its index's versions, which the request read too.
    const readAhead = new ReadAhead({
      pool,
      plan,
      units,
      chunks: s.chunks,
      order: 'layer-major',
      windowBytes,
      budget: s.budget,
      tasksInFlight,
      firstUnitAlone: false,
      signal: r.signal,
      versions: r.versions,
    });
    const build = new FrameBuilder({ layerBytes: descriptor.layerBytes, encoded });
    // Each unit's blocks go back once `take` has copied them; the read-ahead is closed once all are taken, or one failed.
    return readAhead.serve(async (reads) => {
      for (let unit = await reads.next(); !unit.done; unit = await reads.next()) {
        await r.take(
          unit.value.reads,
          build.layerFrames(unit.value.reads).map((frame) => slicesOf(frame, encoded)),
        );
        unit.value.flushed();
        unit.value.sent();
      }
      return readAhead.verified;
    });
  };
}
