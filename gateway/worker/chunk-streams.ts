/**
 * Streamed chunk reads, the read worker's side (docs/layerwise-get.md, Streamed reads). One
 * range GET per chunk (two for KV_2LTD, one per half) covers every delivered layer; each response
 * is held open and read by the socket range reader (socket-range-get.ts) straight into a ring of
 * layer buffers that the main thread owns and hands back layer by layer. A response whose next
 * layer has no buffer yet stops reading its socket, so TCP flow control holds the rest in the
 * kernel (in a receive buffer bounded by SO_RCVBUF), not in this heap.
 *
 * - Version lock: the first answer for a chunk locks its version (ETag); every later answer for that
 *   chunk (its other half, a resumed read) must carry the same one, or the task fails with
 *   OC_ERR_CHUNK_CHANGED.
 * - Resume: a response that breaks off (the store cut a paused connection, a reset, a 5xx) is
 *   reopened from its next unread byte under the same version lock; a stream that broke while it waited
 *   for a buffer is reopened only once the buffer is there. BACKEND_RETRY attempts without
 *   progress, then the task fails.
 * - Integrity: once every chunk has delivered a layer, its slices are checksummed (CRC32C) and
 *   checked against the checksums recorded at store time, as grouped reads do.
 * - Cancellation: the task's end (its signal, a failure, the port closing) aborts every read in
 *   flight or queued, and closes their connections before the task answers, so nothing is
 *   written into the ring after it is handed back.
 */
import { setMaxListeners } from 'node:events';
import type { MessagePort } from 'node:worker_threads';
import { escapeUriPath } from '@smithy/util-uri-escape';
import { crc32c } from '../../native/crc32c.js';
import { layerRanges, slicePiece } from '../../schemas/layouts.js';
import { decodeLayerCrcs } from '../../schemas/integrity.js';
import { BACKEND_RETRY, retryPauseMs } from '../stores/s3-backend.js';
import { ERROR_BODY_LIMIT, checkRangeAnswer, errorBodyFailure, pause } from './range-reader.js';
import { RAW_CODEC } from '../../schemas/encoded-chunk.js';
import { ReadError, cancelled } from '../../http-range/read-error.js';
import { changed, corruptSlice } from '../threads/read-errors.js';
import type { BodyTarget, RangeAnswer, RangeAnswerSink, SocketRangeClient } from '../../http-range/socket-range-get.js';
import type { StreamControl, StreamLayer, StreamTask } from '../threads/protocol.js';
import { RingLayout } from '../threads/task-layout.js';

/**
 * One response stream: one chunk's range (or one half of it) from its next unread byte, read by
 * the socket range reader straight into the ring's layer buffers (it is the read's BodyTarget).
 */
class PartStream implements RangeAnswerSink, BodyTarget {
  readonly #owner: ChunkStreams;
  readonly chunk: number;
  readonly part: number;
  readonly key: string;
  readonly #path: string;
  /** The range's first byte in the object and its length. */
  readonly #start: number;
  readonly #length: number;
  /** Bytes of the range placed in layer buffers so far. */
  pos = 0;
  /** A request is in flight. */
  #open = false;
  /** The last response ended before the range's end (broke off, or its segment is done): open the rest. */
  #reopen = false;
  /** Where the response in progress ends (bytes of the range). */
  #asked = 0;
  /** Failed attempts since the last byte placed, and when the first of them failed (or its reopen after a wait began). */
  #failures = 0;
  #failingSince = 0;
  /** Set while the connection is stopped for want of a buffer: reads on when called. */
  #readOn: (() => void) | undefined;
  /** In the owner's list of streams waiting for a buffer. */
  #waiting = false;

  constructor(owner: ChunkStreams, chunk: number, part: number, key: string, path: string, start: number, length: number) {
    this.#owner = owner;
    this.chunk = chunk;
    this.part = part;
    this.key = key;
    this.#path = path;
    this.#start = start;
    this.#length = length;
  }

  get done(): boolean {
    return this.pos === this.#length;
  }

  open(): void {
    // Nothing is opened for a task that ended (a retry's pause or the first layer's wait can outlive it).
    if (this.#owner.ended || this.done || this.#open) return;
    this.#open = true;
    this.#reopen = false;
    this.#owner.reads++;
    const from = this.#start + this.pos;
    // The first layer comes alone: the streams' first bytes arrive together, as a layer group
    // read's would, instead of behind the megabytes the store pushes into the first connections.
    this.#asked = this.pos < this.#owner.pieceBytes ? this.#owner.pieceBytes : this.#length;
    this.#owner.sockets.get(this.#path, `bytes=${from}-${this.#start + this.#asked - 1}`, this, this.#owner.stopped).then(
      (answer) => this.#answered(answer),
      (error: unknown) => this.#broke(error),
    );
  }

  onHead(status: number, headers: Readonly<Record<string, string>>): BodyTarget | { collect: number } | ReadError {
    const asked = this.#asked - this.pos;
    const answer = checkRangeAnswer(status, headers, this.key, this.#start + this.pos, asked, { objectBytes: this.#owner.objectBytes, codec: RAW_CODEC });
    if (answer === 'error-body') return { collect: ERROR_BODY_LIMIT };
    if (answer instanceof ReadError) return answer;
    // A chunked answer has no Content-Length: its Content-Range (checked above) is the length, and
    // the socket reader holds the chunks to it (socket-range-get.ts).
    if (headers['transfer-encoding'] === undefined && headers['content-length'] !== String(asked))
      return new ReadError('OC_ERR_BACKEND_RANGE', `chunk ${this.key}: the range read answered ${headers['content-length']} bytes where ${asked} were asked for`);
    return this.#owner.lockVersion(this.chunk, answer.etag, answer.layerCrcs) ?? this;
  }

  /** The next bytes' place: the rest of the current layer's piece, if that layer has a buffer. */
  next(): Uint8Array | undefined {
    const owner = this.#owner;
    const layer = owner.first + Math.floor(this.pos / owner.pieceBytes);
    if (layer >= owner.allowedEnd || owner.ended) return undefined;
    return owner.destination(layer, this.chunk, this.part).subarray(this.pos % owner.pieceBytes);
  }

  wrote(n: number): void {
    const piece = this.#owner.pieceBytes;
    const layer = this.#owner.first + Math.floor(this.pos / piece);
    const at = this.pos % piece;
    this.pos += n;
    this.#failures = 0;
    if (at + n === piece) this.#owner.pieceDone(layer);
  }

  paused(readOn: () => void): void {
    this.#readOn = readOn;
    this.#wait();
  }

  #wait(): void {
    if (this.#waiting) return;
    this.#waiting = true;
    this.#owner.wait(this);
  }

  #answered(answer: RangeAnswer): void {
    this.#open = false;
    if (this.#owner.ended) return;
    if (answer.text !== undefined) return this.#owner.fail(errorBodyFailure(answer.status, answer.text, this.#owner.bucket, this.key, this.#owner.objectBytes), this.chunk);
    if (this.pos < this.#asked)
      return this.#brokeOff(new ReadError('OC_ERR_BACKEND_UNAVAILABLE', `chunk ${this.key}: the response ended at byte ${this.pos} of ${this.#asked}`, true));
    if (this.pos < this.#length) {
      // The first segment is done: the rest of the range once the first layer has been sent.
      this.#reopen = true;
      this.#owner.afterFirstLayer(this);
    }
  }

  #broke(error: unknown): void {
    this.#open = false;
    this.#readOn = undefined;
    if (this.#owner.ended) return;
    const failure = error instanceof ReadError ? error : new ReadError('OC_ERR_INTERNAL', `reading chunk ${this.key}: ${String(error)}`);
    // A cut, a reset, a timeout or a 5xx is read again; what the store answered deliberately is not.
    if (failure.readAgain && failure.code !== 'OC_ERR_CHUNK_CHANGED') return this.#brokeOff(failure);
    this.#owner.fail(failure, this.chunk);
  }

  /** The response broke off before its end: reopen from the next unread byte, now or once resumed. */
  #brokeOff(error: ReadError): void {
    if (this.#failures++ === 0) this.#failingSince = performance.now();
    const delay = retryPauseMs(this.#failures);
    // As grouped reads: attempts without progress stop after BACKEND_RETRY.attempts, or once
    // another would end beyond the backend timeout from the first failure.
    if (this.#failures >= BACKEND_RETRY.attempts || performance.now() - this.#failingSince + delay >= this.#owner.timeoutMs) return this.#owner.fail(error, this.chunk);
    this.#owner.retries++;
    this.#reopen = true;
    // Broke while it waited for a buffer, or stands before a layer without one: reopened by resume().
    if (this.#waiting || this.next() === undefined) return this.#wait();
    void pause(delay, this.#owner.signal).then(
      () => this.open(),
      () => {},
    );
  }

  /** A buffer was handed back: read on, or reopen what broke off meanwhile. */
  resume(): void {
    this.#waiting = false;
    const readOn = this.#readOn;
    this.#readOn = undefined;
    if (readOn) return readOn();
    if (this.#reopen && !this.#open) {
      // Broke off while it waited: the time spent waiting is not the store's.
      this.#failingSince = performance.now();
      this.open();
    }
  }
}

/** Runs one stream task: every chunk's streams, layer by layer, into the task's ring. */
export class ChunkStreams {
  readonly #task: StreamTask;
  readonly sockets: SocketRangeClient;
  readonly signal: AbortSignal;
  /** Aborted when the task ends, for whatever reason: every read in flight or queued stops. */
  readonly #stop = new AbortController();
  readonly #ring: Uint8Array;
  /** The layout of each ring block (task-layout.ts): one layer of `runChunks` chunks. */
  readonly #ringLayout: RingLayout;
  readonly #streams: PartStream[] = [];
  /** Pieces (chunk halves or whole slices) still to come, by layer - first. */
  readonly #remaining: Int32Array;
  #waiting: PartStream[] = [];
  #afterFirst: PartStream[] = [];
  /** The main thread has sent the first layer. */
  #firstSent = false;
  readonly #etags: (string | undefined)[];
  readonly #recorded: (number[] | undefined)[];
  readonly #port: MessagePort;
  readonly bucket: string;
  readonly first: number;
  readonly objectBytes: number;
  readonly pieceBytes: number;
  readonly timeoutMs: number;
  /** Layers below this have a buffer to go to. */
  allowedEnd: number;
  reads = 0;
  retries = 0;
  verified = true;
  #layersDone = 0;
  #ended = false;
  #settle!: (error?: ReadError) => void;
  readonly finished: Promise<void>;

  constructor(task: StreamTask, sockets: SocketRangeClient, signal: AbortSignal) {
    this.#task = task;
    this.sockets = sockets;
    this.signal = signal;
    this.#port = task.port;
    this.bucket = task.bucket;
    this.first = task.first;
    this.objectBytes = task.layers * task.layerBytes;
    this.timeoutMs = task.timeoutMs;
    const ranges = layerRanges(task.layout, task.layers, task.layerBytes, task.first, task.end);
    this.pieceBytes = slicePiece(task.layout, task.layerBytes, 0).length;
    this.#ring = new Uint8Array(task.ring);
    this.#ringLayout = new RingLayout(task.blocks.length, task.keys.length, task.runChunks, task.layerBytes);
    this.#remaining = new Int32Array(task.end - task.first).fill(task.keys.length * ranges.length);
    this.#etags = new Array<string | undefined>(task.keys.length);
    this.#recorded = new Array<number[] | undefined>(task.keys.length);
    this.allowedEnd = Math.min(task.end, task.first + task.blocks.length);
    this.finished = new Promise<void>((resolve, reject) => {
      this.#settle = (error) => (error ? reject(error) : resolve());
    });
    this.finished.catch(() => {});
    setMaxListeners(0, this.#stop.signal); // every read in flight or queued listens to it
    task.keys.forEach((key, chunk) => {
      const path = escapeUriPath(`/${task.bucket}/${key}`);
      ranges.forEach((range, part) => this.#streams.push(new PartStream(this, chunk, part, key, path, range.offset, range.length)));
    });
    this.#port.on('message', (message: StreamControl) => this.#freed(message.layer));
    // The main thread closes its end when it ends the request: a cancellation that cannot be lost.
    this.#port.on('close', () => this.fail(cancelled()));
    signal.addEventListener('abort', () => this.fail(cancelled()), { once: true });
  }

  start(): Promise<void> {
    // Cancelled before it began: the abort listener above never fires for it.
    if (this.signal.aborted) this.fail(cancelled());
    for (const stream of this.#streams) stream.open();
    return this.finished;
  }

  get stopped(): AbortSignal {
    return this.#stop.signal;
  }

  /** Where `chunk`'s piece (`part`) of `layer` goes. */
  destination(layer: number, chunk: number, part: number): Uint8Array {
    const task = this.#task;
    const ring = this.#ringLayout;
    const at = (task.blocks[ring.slotOf(layer - task.first)] as number[])[Math.floor(chunk / task.runChunks)] as number;
    const offset = at + ring.sliceOffset(chunk) + slicePiece(task.layout, task.layerBytes, part).offset;
    return this.#ring.subarray(offset, offset + this.pieceBytes);
  }

  /** The first answer for a chunk locks its version (ETag); later ones must match. */
  lockVersion(chunk: number, etag: string | undefined, layerCrcs: string | undefined): ReadError | undefined {
    const locked = this.#etags[chunk];
    const key = this.#task.keys[chunk] as string;
    if (locked !== undefined && etag !== undefined && etag !== locked) return changed(key);
    this.#etags[chunk] ??= etag;
    this.#recorded[chunk] ??= decodeLayerCrcs(layerCrcs, this.#task.layers);
    return undefined;
  }

  /**
   * Opens the rest of `stream`'s range once the first layer has been sent: opened earlier, the
   * store pushes megabytes into every connection at once (up to its send buffer, 4 MiB a
   * connection at MinIO), which on shared cores delays the first layer's reads and its sending.
   */
  afterFirstLayer(stream: PartStream): void {
    if (this.#firstSent) stream.open();
    else this.#afterFirst.push(stream);
  }

  /** `stream` has bytes for a layer without a buffer: it is resumed when the buffer comes. */
  wait(stream: PartStream): void {
    this.#waiting.push(stream);
  }

  /** The main thread sent `layer`: its slot takes the layer one ring length later. */
  #freed(layer: number): void {
    if (layer === this.#task.first && !this.#firstSent) {
      this.#firstSent = true;
      const queued = this.#afterFirst;
      this.#afterFirst = [];
      for (const stream of queued) stream.open();
    }
    const next = Math.min(this.#task.end, layer + this.#task.blocks.length + 1);
    if (next <= this.allowedEnd) return;
    this.allowedEnd = next;
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const stream of waiting) {
      if (this.#ended) return;
      stream.resume();
    }
  }

  pieceDone(layer: number): void {
    const index = layer - this.#task.first;
    const left = (this.#remaining[index] as number) - 1;
    this.#remaining[index] = left;
    if (left === 0) this.#layerDone(layer);
  }

  #layerDone(layer: number): void {
    const task = this.#task;
    const chunks = task.keys.length;
    const crcs = new Uint32Array(chunks);
    for (let chunk = 0; chunk < chunks; chunk++) {
      const expected = this.#recorded[chunk];
      if (expected && task.sliceChecks === 'client') {
        crcs[chunk] = expected[layer] as number; // the frame carries it; the client checks it
        continue;
      }
      const slice = this.destination(layer, chunk, 0);
      // The whole slice: for KV_2LTD the K half's view, with the V half right after it.
      const crc = crc32c(new Uint8Array(slice.buffer, slice.byteOffset, task.layerBytes));
      crcs[chunk] = crc;
      if (!expected) {
        this.verified = false;
        continue;
      }
      if (expected[layer] !== crc) return this.fail(corruptSlice(task.keys[chunk] as string, task.chunkOffset + chunk, layer));
    }
    const message: StreamLayer = { layer, crcs, verified: this.verified, reads: this.reads, retries: this.retries };
    this.#port.postMessage(message);
    if (++this.#layersDone === task.end - task.first) this.#finish();
  }

  /** The task has ended: succeeded, failed or cancelled. */
  get ended(): boolean {
    return this.#ended;
  }

  #finish(error?: ReadError): void {
    this.#ended = true;
    this.#stop.abort(); // no read outlives the task
    this.#port.close();
    this.#settle(error);
  }

  /** Ends the task with `error`, unless it has ended already: every open response is aborted. */
  fail(error: ReadError, chunk?: number): void {
    if (chunk !== undefined && error.chunk === undefined) {
      error.chunk = this.#task.chunkOffset + chunk;
      error.key = this.#task.keys[chunk] as string;
    }
    if (this.#ended) return;
    // Ended before the aborts: each aborted response reports back, and the first error must win.
    this.#ended = true;
    this.#finish(error);
  }
}
