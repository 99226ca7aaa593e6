/**
 * The read plan of a layerwise GET (docs/layerwise-get.md, Read plan). One range read per chunk per layer
 * (the N * L reads of the paper, docs/references.md) is the enemy for small slices, but consecutive layers of a chunk are
 * contiguous bytes, so one read can cover a group of layers. The first group is one layer, since
 * layer 0 gates the client's first compute; later groups grow fourfold (1, 4, 16, ...) until a
 * read reaches `readBytes` or a group fills the read-ahead window. The object store pays per
 * request (about 1 ms of MinIO CPU per range GET here), so fewer, larger reads are the point;
 * growing fourfold rather than twofold saves a read per chunk for a 32-layer model while layer 1
 * still follows layer 0 after a few layers' worth of transfer. Pure: a function of its inputs
 * (planReads too, but for the stream reservation it asks of its caller, `tryStreams`).
 *
 * What the plan is of is chosen here too, in two calls: the delivery mode (chooseMode, before the
 * scheduler), and at serve time everything else at once (planReads: how the chunks are read, the
 * plan, a packed segment's part in it, and the units it is sent in).
 */
import type { Delivery, Descriptor } from '../../schemas/descriptor.js';
import type { Layout } from '../../schemas/layouts.js';
import { layoutOf, type Slices } from '../threads/task-layout.js';
import { SEGMENT_SKIP_BYTES } from '../threads/protocol.js';
import type { DescriptorGetConfig } from '../common/config.js';

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
 * at once: see serve-descriptor-get.ts startReads.)
 */
export function chooseReads(descriptor: Descriptor, mode: DeliveryMode, config: DescriptorGetConfig, streamsChunks: boolean): ChunkReads {
  if (config.chunkReads === 'grouped' || mode !== 'layerwise' || !streamsChunks) return 'grouped';
  if (descriptor.codecs !== undefined) return 'grouped';
  if (descriptor.layerEnd - descriptor.layerStart < 2) return 'grouped';
  if (chunkStreams(descriptor) > config.maxChunkStreams) return 'grouped';
  if (descriptor.layerBytes > config.taskBytes) return 'grouped';
  return 'streamed';
}

/** What planReads plans from: the request, and what the gateway's read workers offer it now. */
export interface ReadsRequest {
  readonly descriptor: Descriptor;
  readonly mode: DeliveryMode;
  readonly config: DescriptorGetConfig;
  /** The request's tasks kept in the pool at once (ReaderPool.tasksPerRequest). */
  readonly tasksInFlight: number;
  /** Whether the workers can stream chunks at all (ReaderPool.streamsChunks). */
  readonly streamsChunks: boolean;
  /** Bytes of one buffer block (a streamed read's run of chunks fits one). */
  readonly blockBytes: number;
  /** Reserves `streams` chunk streams if they are free now, never waiting (ReaderPool.tryStreams). */
  tryStreams(streams: number): boolean;
  /** The request's slice lengths (encoded chunks: each chunk's own, from its index). */
  readonly slices: Slices;
  /** The largest slice (encoded chunks); groups and tasks are sized by it. Default: `layerBytes`. */
  readonly sliceBytes?: number | undefined;
  /**
   * Grouped reads only: a plan that reads the first chunks from a packed segment, when one serves
   * the request better than `chunkPlan` (packed-segments.ts RequestSegments.plan); else undefined.
   */
  readonly fromSegment?: ((input: PlanInput, chunkPlan: ReadPlan) => ReadPlan | undefined) | undefined;
}

/** A request's reads, planned: how, the plan, its units, and the block order. */
export interface PlannedReads {
  readonly reads: ChunkReads;
  readonly plan: ReadPlan;
  /** planUnits of the plan: what is sent together. */
  readonly units: readonly Unit[];
  /** The order of each task's slices: layer-major for LAYER frames, chunk-major for CHUNK frames. */
  readonly order: Delivery;
  /** Streamed reads: the chunk streams reserved (give them back when done), and the chunks per block. */
  readonly streams: number;
  readonly runChunks: number;
}

/**
 * Plans a request's reads at serve time, in one call: streamed if chooseReads allows it and the
 * streams are free now (a request never waits for another's streams: it is served with grouped
 * reads instead, so the kernel memory streams hold stays bounded), else grouped; the plan (from a
 * packed segment when `fromSegment` offers a better one); and its units.
 */
export function planReads(r: ReadsRequest): PlannedReads {
  const { descriptor, mode, config } = r;
  const streams = chunkStreams(descriptor);
  const reads: ChunkReads = chooseReads(descriptor, mode, config, r.streamsChunks) === 'streamed' && r.tryStreams(streams) ? 'streamed' : 'grouped';
  const order: Delivery = mode === 'layerwise' ? 'layer-major' : 'chunk-major';
  let plan: ReadPlan;
  let runChunks = 0;
  if (reads === 'streamed') {
    runChunks = runChunksFor(descriptor.layerBytes, r.blockBytes);
    plan = planStreamed(descriptor, runChunks);
  } else {
    const input = planInput(descriptor, config, r.tasksInFlight, r.sliceBytes ?? descriptor.layerBytes);
    const chunkPlan = mode === 'layerwise' ? planLayerwise(input) : planChunkwise(input);
    plan = r.fromSegment?.(input, chunkPlan) ?? chunkPlan;
  }
  return { reads, plan, units: planUnits(plan, mode === 'layerwise', order, r.slices), order, streams: reads === 'streamed' ? streams : 0, runChunks };
}

/** Chunks whose slices of one layer share a buffer block (at least one): a streamed read's run. */
export function runChunksFor(layerBytes: number, blockBytes: number): number {
  return Math.max(1, Math.floor(blockBytes / layerBytes));
}

/** A request's plan input: its geometry, the read and task sizes, groups within `windowBytes`, the first group over `tasksInFlight` tasks. */
export function planInput(descriptor: Descriptor, config: DescriptorGetConfig, tasksInFlight: number, layerBytes: number, windowBytes = config.readAheadBytes): PlanInput {
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

export interface PlanInput {
  readonly layout: Layout;
  readonly layerStart: number;
  readonly layerEnd: number;
  readonly layerBytes: number;
  readonly chunks: number;
  /** Target bytes per range read. */
  readonly readBytes: number;
  /** Target bytes per worker task (a task covers a run of chunks for one group). */
  readonly taskBytes: number;
  /**
   * Most bytes one layer group may span across all chunks (a group is sent only once all of it
   * has been read, so it must fit in the request's read-ahead window).
   */
  readonly maxGroupBytes: number;
  /**
   * Tasks the first group is split into (at most one per chunk): the first layer gates the
   * client's first compute, so it is spread over every worker slot.
   */
  readonly firstGroupTasks?: number;
}

export interface PlannedTask {
  readonly group: number;
  readonly first: number;
  readonly end: number;
  readonly chunkStart: number;
  readonly chunkEnd: number;
  /** Read from the request's packed segment (planFromSegment), not from the chunks. */
  readonly fromSegment?: true;
}

export interface ReadPlan {
  /** Layer groups as [first, end). */
  readonly groups: readonly (readonly [number, number])[];
  readonly tasks: readonly PlannedTask[];
  /** Range reads the plan issues (KV_2LTD needs two per chunk per group). */
  readonly reads: number;
}

/** A run of consecutive plan tasks sent together, [from, to), and the bytes of their blocks. */
export interface Unit {
  readonly from: number;
  readonly to: number;
  readonly bytes: number;
}

/**
 * Units of delivery: the tasks of one layer group (`byGroup`: layerwise delivery, whose LAYER
 * frames need every chunk of the group), or each task alone (chunkwise: a task's CHUNK frames are
 * whole). Bytes are the tasks' blocks, laid out in `order`.
 */
export function planUnits(plan: ReadPlan, byGroup: boolean, order: Delivery, slices: Slices): Unit[] {
  const units: Unit[] = [];
  const { tasks } = plan;
  for (let from = 0; from < tasks.length;) {
    let to = from + 1;
    if (byGroup) while (to < tasks.length && tasks[to]?.group === tasks[from]?.group) to++;
    let bytes = 0;
    for (let t = from; t < to; t++) bytes += layoutOf(tasks[t] as PlannedTask, order, slices).bytes;
    units.push({ from, to, bytes });
    from = to;
  }
  return units;
}

/** Bytes of one layer within one range read: the whole slice, or half of it for KV_2LTD. */
function rangeBytesPerLayer(layout: Layout, layerBytes: number): number {
  return layout === 'KV_2LTD' ? layerBytes / 2 : layerBytes;
}

/** How much each layer group grows over the one before it. */
const GROWTH = 4;

export function planLayerGroups(input: Pick<PlanInput, 'layout' | 'layerStart' | 'layerEnd' | 'layerBytes' | 'readBytes' | 'chunks' | 'maxGroupBytes'>): [number, number][] {
  const byRead = Math.floor(input.readBytes / rangeBytesPerLayer(input.layout, input.layerBytes));
  const byGroup = Math.floor(input.maxGroupBytes / (input.chunks * input.layerBytes));
  const cap = Math.max(1, Math.min(byRead, byGroup));
  const groups: [number, number][] = [];
  let size = 1;
  for (let first = input.layerStart; first < input.layerEnd;) {
    const end = Math.min(input.layerEnd, first + Math.min(size, cap));
    groups.push([first, end]);
    first = end;
    size *= GROWTH;
  }
  return groups;
}

export function planLayerwise(input: PlanInput): ReadPlan {
  const groups = planLayerGroups(input);
  const tasks: PlannedTask[] = [];
  groups.forEach(([first, end], group) => {
    const perChunk = (end - first) * input.layerBytes;
    let chunksPerTask = Math.max(1, Math.floor(input.taskBytes / perChunk));
    if (group === 0 && input.firstGroupTasks !== undefined) chunksPerTask = Math.min(chunksPerTask, Math.max(1, Math.ceil(input.chunks / input.firstGroupTasks)));
    for (let chunkStart = 0; chunkStart < input.chunks; chunkStart += chunksPerTask) {
      tasks.push({ group, first, end, chunkStart, chunkEnd: Math.min(input.chunks, chunkStart + chunksPerTask) });
    }
  });
  const rangesPerChunk = input.layout === 'KV_2LTD' ? 2 : 1;
  return { groups, tasks, reads: groups.length * input.chunks * rangesPerChunk };
}

/** Chunkwise: every chunk read once (its delivered layers), in prefix order, in task-sized runs. */
export function planChunkwise(input: PlanInput): ReadPlan {
  const perChunk = (input.layerEnd - input.layerStart) * input.layerBytes;
  const chunksPerTask = Math.max(1, Math.floor(input.taskBytes / perChunk));
  const tasks: PlannedTask[] = [];
  for (let chunkStart = 0; chunkStart < input.chunks; chunkStart += chunksPerTask) {
    tasks.push({ group: 0, first: input.layerStart, end: input.layerEnd, chunkStart, chunkEnd: Math.min(input.chunks, chunkStart + chunksPerTask) });
  }
  const rangesPerChunk = input.layout === 'KV_2LTD' ? 2 : 1;
  return { groups: [[input.layerStart, input.layerEnd]], tasks, reads: input.chunks * rangesPerChunk };
}

/**
 * Streamed (docs/layerwise-get.md, Streamed reads): each chunk read once (twice for KV_2LTD,
 * a GET per half) as one stream covering every delivered layer; delivery goes layer by layer, each
 * layer in runs of `runChunks` chunks (one buffer block each).
 */
export function planStreamed(input: Pick<PlanInput, 'layout' | 'layerStart' | 'layerEnd' | 'chunks'>, runChunks: number): ReadPlan {
  const groups: [number, number][] = [];
  const tasks: PlannedTask[] = [];
  for (let layer = input.layerStart; layer < input.layerEnd; layer++) {
    const group = groups.push([layer, layer + 1]) - 1;
    for (let chunkStart = 0; chunkStart < input.chunks; chunkStart += runChunks) {
      tasks.push({ group, first: layer, end: layer + 1, chunkStart, chunkEnd: Math.min(input.chunks, chunkStart + runChunks) });
    }
  }
  return { groups, tasks, reads: input.chunks * (input.layout === 'KV_2LTD' ? 2 : 1) };
}

/** What a packed segment holds of a request (docs/segments.md): its first `chunks` chunks, `segmentChunks` in all. */
export interface SegmentCover {
  readonly chunks: number;
  readonly segmentChunks: number;
}

/**
 * A plan whose first `cover.chunks` chunks are read from a packed segment (docs/segments.md).
 * The segment holds each layer's slices of its chunks together, so a task over all of them reads
 * one range however many layers it covers: when the segment covers the whole request, groups
 * grow (1, 4, 16, ... layers) until a task reaches `taskBytes`, and the plan is a few large
 * sequential reads. Otherwise the groups are those of the chunk reads, and the tasks are cut at
 * the segment's last chunk: the rest are read from the chunks, as without a segment.
 */
export function planFromSegment(input: PlanInput, layerwise: boolean, cover: SegmentCover): ReadPlan {
  const whole = cover.chunks === input.chunks;
  const shaped = whole ? { ...input, readBytes: Math.max(rangeBytesPerLayer(input.layout, input.layerBytes), Math.floor(input.taskBytes / cover.chunks)) } : input;
  const base = layerwise ? planLayerwise(shaped) : planChunkwise(shaped);
  const tasks: PlannedTask[] = [];
  for (const task of base.tasks) {
    if (task.chunkEnd <= cover.chunks) tasks.push({ ...task, fromSegment: true });
    else if (task.chunkStart >= cover.chunks) tasks.push(task);
    else tasks.push({ ...task, chunkEnd: cover.chunks, fromSegment: true }, { ...task, chunkStart: cover.chunks });
  }
  const rangesPerChunk = input.layout === 'KV_2LTD' ? 2 : 1;
  let reads = 0;
  for (const task of tasks) {
    if (!task.fromSegment) reads += (task.chunkEnd - task.chunkStart) * rangesPerChunk;
    else reads += segmentRanges(task, cover, input.layerBytes);
  }
  return { groups: base.groups, tasks, reads };
}

/** Range reads of a task read from a segment: one when the gaps between its layers are read through, else one per layer. */
function segmentRanges(task: PlannedTask, cover: SegmentCover, layerBytes: number): number {
  const gap = (cover.segmentChunks - (task.chunkEnd - task.chunkStart)) * layerBytes;
  return gap <= SEGMENT_SKIP_BYTES ? 1 : task.end - task.first;
}
