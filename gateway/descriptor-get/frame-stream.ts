/**
 * A descriptor GET's framed stream (schemas/frames.ts), built and sent (sendStream): each unit's
 * LAYER (or CHUNK) frames as the read-ahead has its reads in, then END, or an ERROR frame for the
 * first failure after the stream began. Frames are built from the read tasks'
 * blocks without copying (FrameBuilder: a frame's payload is a list of pieces of the blocks, laid
 * out as gateway/threads/task-layout.ts says), each with its CRC32C combined from the workers'
 * slice checksums (schemas/crc32c-combine.ts), so nothing here touches payload bytes. They come
 * from a source in order, pass through a stage that turns them into socket writes (all at once,
 * or paced at the request's granted rate), and are written with backpressure. The source is
 * pulled, never pushed: a frame is produced only when the previous one has been handed to the
 * socket, and when the response closes the source is returned (its `finally` releases what it
 * holds).
 */
import type { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { crc32c } from '../../native/crc32c.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { crc32cCombine, crc32cShift } from '../../schemas/crc32c-combine.js';
import type { Descriptor } from '../../schemas/descriptor.js';
import { encodeEndPayload, encodeErrorPayload, encodeFrameHeader, FrameType, PREAMBLES, STREAM_VERSION, STREAM_VERSION_SEGMENTED } from '../../schemas/frames.js';
import type { DescriptorGetObserver } from '../common/metrics.js';
import type { RequestContext } from '../s3/context.js';
import { Pacer, PACE_SLICE_BYTES } from './scheduler/pacer.js';
import type { Grant } from './scheduler/epoch-scheduler.js';
import type { TaskRead, UnitRead, UnitSource } from './read-ahead.js';
import type { EncodedChunks } from './encoded-chunks.js';
import type { SegmentPack } from './packed-segments.js';
import type { DeliveryMode, ReadPlan } from './read-plan.js';
import { layoutOf, type Slices, type TaskLayout } from '../threads/task-layout.js';

export interface Frame {
  readonly type: FrameType;
  readonly index: number;
  /** The payload, in order (pieces of one layer from different worker tasks, not concatenated). */
  readonly pieces: readonly Uint8Array[];
  readonly length: number;
  readonly crc32c: number;
  /** Runs once the socket has taken every byte of this frame (and of those before it). */
  readonly onFlushed?: (() => void) | undefined;
}

/**
 * The data frames of read task blocks. Raw slices (stream version 1) are all `layerBytes` long;
 * encoded ones (`slices.encoded`: version 2, a descriptor that names `codecs`) are segments of
 * their own stored lengths, and a frame's payload starts with its slice-length table: one u32 LE
 * length per segment (schemas/wire-format.md section 6).
 */
export class FrameBuilder {
  readonly #slices: Slices;
  /** crc32cShift of a raw slice: combining N slices' checksums costs N small multiplications. */
  readonly #shift: number;
  readonly #shifts = new Map<number, number>();

  constructor(slices: Slices) {
    this.#slices = slices;
    this.#shift = crc32cShift(slices.layerBytes);
  }

  /** A layer group's LAYER frames: each layer's pieces from every task of the group (layer-major blocks), in chunk order. */
  layerFrames(reads: readonly TaskRead[]): Frame[] {
    const { first, end } = (reads[0] as TaskRead).task;
    const layouts = reads.map(({ task }) => layoutOf(task, 'layer-major', this.#slices));
    const out: Frame[] = [];
    for (let layer = first; layer < end; layer++) {
      const pieces: Uint8Array[] = [];
      const lengths: number[] = []; // the slice-length table's, for encoded slices only
      let crc: number | undefined;
      reads.forEach(({ region, crcs }, r) => {
        const layout = layouts[r] as TaskLayout;
        pieces.push(layout.layerPiece(region, layer));
        if (layout.sizes) for (let c = 0; c < layout.chunks; c++) lengths.push(layout.sliceBytes(layer, c));
        crc = this.#combined(crcs, layout, layout.slice(layer, 0), layout.chunks, crc);
      });
      out.push(this.#frame(FrameType.LAYER, layer, pieces, lengths, crc as number));
    }
    return out;
  }

  /** A task's CHUNK frames (a chunk-major block): each chunk's delivered layers. */
  chunkFrames(reads: readonly TaskRead[]): Frame[] {
    const out: Frame[] = [];
    for (const { task, region, crcs } of reads) {
      const layout = layoutOf(task, 'chunk-major', this.#slices);
      for (let i = 0; i < layout.chunks; i++) {
        const lengths: number[] = []; // the slice-length table's, for encoded slices only
        if (layout.sizes) for (let layer = layout.first; layer < layout.end; layer++) lengths.push(layout.sliceBytes(layer, i));
        out.push(
          this.#frame(
            FrameType.CHUNK,
            task.chunkStart + i,
            [layout.chunkPiece(region, i)],
            lengths,
            this.#combined(crcs, layout, layout.slice(layout.first, i), layout.layers) as number,
          ),
        );
      }
    }
    return out;
  }

  /**
   * A data frame of `pieces` (slices of `lengths`, whose CRC32C together is `crc`); encoded, its
   * slice-length table goes first and its CRC in front of theirs.
   */
  #frame(type: FrameType, index: number, pieces: Uint8Array[], lengths: readonly number[], crc: number): Frame {
    const length = pieces.reduce((n, piece) => n + piece.byteLength, 0);
    if (!this.#slices.encoded) return { type, index, pieces, length, crc32c: crc };
    const table = Buffer.alloc(lengths.length * 4);
    lengths.forEach((n, i) => table.writeUInt32LE(n, 4 * i));
    return { type, index, pieces: [table, ...pieces], length: table.byteLength + length, crc32c: crc32cCombine(crc32c(table), crc, crc32cShift(length)) };
  }

  /** crc32cShift of an encoded slice's length, made once per length (raw-sized slices share #shift). */
  #shiftOf(bytes: number): number {
    if (bytes === this.#slices.layerBytes) return this.#shift;
    let shift = this.#shifts.get(bytes);
    if (shift === undefined) {
      shift = crc32cShift(bytes);
      this.#shifts.set(bytes, shift);
    }
    return shift;
  }

  /** The CRC32C of `count` consecutive slices (from their checksums) appended to `crc`'s bytes. */
  #combined(crcs: Uint32Array, layout: TaskLayout, from: number, count: number, crc?: number): number | undefined {
    let out = crc;
    for (let i = from; i < from + count; i++) {
      const shift = layout.sizes ? this.#shiftOf(layout.offsetOf(i + 1) - layout.offsetOf(i)) : this.#shift;
      out = out === undefined ? crcs[i] : crc32cCombine(out, crcs[i] as number, shift);
    }
    return out;
  }
}

/** A data frame's slices, as a packed segment holds them: without an encoded frame's slice-length table (its first piece, FrameBuilder). */
export function slicesOf(frame: Frame, encoded: EncodedChunks | undefined): readonly Uint8Array[] {
  return encoded ? frame.pieces.slice(1) : frame.pieces;
}

/**
 * An ERROR or END frame around its UTF-8 JSON payload, built by schemas/frames.ts
 * (encodeErrorPayload, encodeEndPayload); the only payloads checksummed here directly.
 */
export function jsonFrame(type: typeof FrameType.ERROR | typeof FrameType.END, payload: Buffer): Frame {
  return { type, index: 0, pieces: [payload], length: payload.byteLength, crc32c: crc32c(payload) };
}

/** What the sender writes at once: header and/or payload bytes; `payloadBytes` for metrics. */
export interface Write {
  readonly chunks: readonly Uint8Array[];
  readonly payloadBytes: number;
  readonly onFlushed?: (() => void) | undefined;
}

function header(frame: Frame): Buffer {
  return encodeFrameHeader({ type: frame.type, index: frame.index, length: frame.length, crc32c: frame.crc32c });
}

/** The stream as writes: the preamble (schemas/frames.ts PREAMBLES), then each frame (header and payload) in one write. */
export async function* unpaced(frames: AsyncIterable<Frame>, preamble: Uint8Array = PREAMBLES[STREAM_VERSION]): AsyncGenerator<Write> {
  yield { chunks: [preamble], payloadBytes: 0 };
  for await (const frame of frames) yield { chunks: [header(frame), ...frame.pieces], payloadBytes: frame.type <= FrameType.CHUNK ? frame.length : 0, onFlushed: frame.onFlushed };
}

/**
 * The stream at the granted rate: payloads cut into slices, each released when the pacer allows
 * (ERROR and END frames are not held back).
 */
export async function* paced(frames: AsyncIterable<Frame>, pacer: Pacer, preamble: Uint8Array = PREAMBLES[STREAM_VERSION]): AsyncGenerator<Write> {
  yield { chunks: [preamble], payloadBytes: 0 };
  for await (const frame of frames) {
    if (frame.type === FrameType.ERROR || frame.type === FrameType.END) {
      yield { chunks: [header(frame), ...frame.pieces], payloadBytes: 0 };
      continue;
    }
    yield { chunks: [header(frame)], payloadBytes: 0 };
    for (const [i, piece] of frame.pieces.entries()) {
      for (let at = 0; at < piece.byteLength; at += PACE_SLICE_BYTES) {
        const slice = piece.subarray(at, Math.min(piece.byteLength, at + PACE_SLICE_BYTES));
        await pacer.take(slice.byteLength);
        const last = i === frame.pieces.length - 1 && at + PACE_SLICE_BYTES >= piece.byteLength;
        yield { chunks: [slice], payloadBytes: slice.byteLength, onFlushed: last ? frame.onFlushed : undefined };
      }
    }
  }
}

export interface SendOptions {
  /** A client that takes no data for this long is cut off (docs/reliability.md). */
  readonly stallTimeoutMs: number;
  /** Payload bytes handed to the socket (delivered-bytes metrics). */
  readonly onBytes?: ((bytes: number) => void) | undefined;
}

/**
 * Waits for one of `events` on the response (or on `on`, its socket), or for `timeoutMs`,
 * whichever comes first; on the timeout the response is destroyed (a client that takes nothing is
 * cut off) and false returned.
 */
export function responseEvent(res: ServerResponse, events: readonly ('drain' | 'finish' | 'close')[], timeoutMs: number, on: EventEmitter = res): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const done = (reached: boolean): void => {
      clearTimeout(timer);
      for (const event of events) on.off(event, onEvent);
      resolve(reached);
    };
    const onEvent = (): void => done(true);
    const timer = setTimeout(() => {
      done(false);
      res.destroy(); // the caller reports it; nothing else should see an 'error' event
    }, timeoutMs);
    for (const event of events) on.on(event, onEvent);
  });
}

/** After a write that filled the socket buffer: wait for its 'drain', the client leaving, or the stall timeout. */
async function drained(res: ServerResponse, stallTimeoutMs: number): Promise<void> {
  if (!(await responseEvent(res, ['drain', 'close'], stallTimeoutMs, res.socket ?? res))) {
    throw new ObjectCacheError('OC_ERR_CLIENT_STALLED', `The client took no data for ${stallTimeoutMs} ms`);
  }
}

/**
 * Writes every write of `writes` to the response with backpressure, then ends it. Stops (and
 * returns the source) as soon as the response is destroyed; rejects with OC_ERR_CLIENT_STALLED
 * for a client that stopped reading.
 */
export async function send(res: ServerResponse, writes: AsyncIterable<Write>, options: SendOptions): Promise<void> {
  for await (const write of writes) {
    if (res.destroyed) return;
    // The socket is corked around the response's own cork: the response's uncork() uncorks the
    // socket first and only then hands it the chunks it held (Node 24, _http_outgoing.js), each
    // of which the socket would then write on its own (a LAYER frame has a piece per task of its
    // layer group). So corked, they leave in one writev when the socket is uncorked.
    const corked = res.socket;
    corked?.cork();
    res.cork();
    const last = write.chunks.length - 1;
    for (let i = 0; i <= last; i++) {
      const chunk = write.chunks[i] as Uint8Array;
      if (i === last && write.onFlushed) res.write(chunk, write.onFlushed);
      else res.write(chunk);
    }
    res.uncork();
    corked?.uncork();
    if (write.payloadBytes > 0) options.onBytes?.(write.payloadBytes);
    // Whether to wait is asked of the socket after uncork(), not read from write()'s answers nor
    // from the response's own flag: while corked, Node 24 answers false for writes that uncork()
    // then flushes whole, and the response's writableNeedDrain can stay true with nothing
    // buffered anywhere (seen on Node 24 under load: writableLength 0, the socket not waiting),
    // and then no 'drain' ever comes. The socket's writableNeedDrain is true only while it holds
    // more than its high-water mark, when its 'drain' is sure to come.
    const socket = res.socket;
    if ((socket ? socket.writableNeedDrain : res.writableNeedDrain) && !res.destroyed) await drained(res, options.stallTimeoutMs);
  }
  if (!res.destroyed) res.end();
}

/** A descriptor GET's stream once its head is written: what its frames are made of, and how they are sent. */
export interface StreamInput {
  readonly ctx: RequestContext;
  readonly descriptor: Descriptor;
  readonly mode: DeliveryMode;
  readonly plan: ReadPlan;
  /** The first unit, already in (the head was written once it was). */
  readonly first: UnitRead;
  /** The units after it (UnitSource.serve). */
  readonly units: AsyncIterator<UnitRead, undefined>;
  /** Where the units come from: its backend reads and verification go into the END summary. */
  readonly source: Pick<UnitSource, 'backendReads' | 'verified'>;
  readonly firstReadMs: number;
  readonly grant: Grant | undefined;
  readonly encoded: EncodedChunks | undefined;
  /** A segment being packed from this stream's LAYER frames. */
  readonly pack: SegmentPack | undefined;
  /** The segment read from (if any) holds CRC32Cs that every covered chunk's writer recorded. */
  readonly segmentVerified: boolean;
  readonly observer: DescriptorGetObserver | undefined;
  /** --client-stall-timeout: a client that takes nothing this long is cut off. */
  readonly clientStallTimeoutMs: number;
}

/**
 * Sends a descriptor GET's stream: its frames (frames(), below), all at once or paced at the
 * scheduler's grant, with backpressure. Resolves once the response refers to none of the task
 * blocks' bytes (flushed, or destroyed), when they may be reused.
 */
export async function sendStream(s: StreamInput): Promise<void> {
  const { res } = s.ctx;
  const source = frames(s);
  const preamble = PREAMBLES[s.encoded ? STREAM_VERSION_SEGMENTED : STREAM_VERSION];
  const writes = s.grant ? paced(source, new Pacer(s.grant.rateBytesPerSec), preamble) : unpaced(source, preamble);
  try {
    await send(res, writes, { stallTimeoutMs: s.clientStallTimeoutMs, onBytes: (bytes) => s.observer?.delivered(s.ctx.tenant, bytes) });
  } catch (error) {
    // The client stalled (its response is destroyed) or went away: nobody to answer.
    if (!res.destroyed) throw error;
  }
  await responseDone(res, s.clientStallTimeoutMs);
}

/**
 * The frames of the stream, in order: each unit's LAYER (or CHUNK) frames once its reads are
 * in, then END; or an ERROR frame for the first failure after the stream began.
 */
async function* frames(s: StreamInput): AsyncGenerator<Frame> {
  const { descriptor } = s;
  const started = s.ctx.startedAt;
  const build = new FrameBuilder({ layerBytes: descriptor.layerBytes, encoded: s.encoded });
  let payloadBytes = 0;
  let firstFrameMs = 0;
  try {
    for (let unit: UnitRead | undefined = s.first; unit; unit = (await s.units.next()).value) {
      const { reads } = unit;
      const unitFrames = s.mode === 'layerwise' ? build.layerFrames(reads) : build.chunkFrames(reads);
      s.pack?.checksums(reads);
      for (let i = 0; i < unitFrames.length; i++) {
        const frame = unitFrames[i] as Frame;
        s.pack?.frame(slicesOf(frame, s.encoded));
        // Once the socket has taken the unit's last frame, its blocks go back to the pool.
        yield i === unitFrames.length - 1 ? { ...frame, onFlushed: unit.flushed } : frame;
        if (firstFrameMs === 0) firstFrameMs = performance.now() - started;
        if (s.mode === 'layerwise') s.observer?.layerReady((performance.now() - started) / 1000);
        payloadBytes += frame.length;
      }
      unit.sent();
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
    backendReads: s.source.backendReads,
    plan: s.plan.groups,
    rateBytesPerSec: s.grant ? Math.floor(s.grant.rateBytesPerSec) : null,
    // Writer-verified: every slice was checked against the CRC32C its chunk's writer recorded.
    verified: s.source.verified && s.segmentVerified,
    ...(s.encoded ? { codec: s.encoded.codec } : {}),
    timings: { firstReadMs: round(s.firstReadMs), firstFrameMs: round(firstFrameMs), totalMs: round(performance.now() - started) },
  });
  if (s.pack) void s.pack.finish();
  yield jsonFrame(FrameType.END, summary);
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

/** Resolves once the response has flushed everything or is destroyed; a client that stops reading the last bytes is cut off after the stall timeout. */
async function responseDone(res: ServerResponse, stallTimeoutMs: number): Promise<void> {
  if (res.writableFinished || res.destroyed) return;
  await responseEvent(res, ['finish', 'close'], stallTimeoutMs);
}
