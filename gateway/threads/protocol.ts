/**
 * The contract between the gateway's main thread and the read workers (piscina). Nothing is
 * thrown across the boundary: a worker answers every task with a ReadResult; class identity does
 * not survive postMessage, so a failure travels as a plain WorkerFailure, made by
 * toWorkerFailure and turned back into an ObjectCacheError by fromWorkerFailure (both in
 * read-errors.ts).
 */
import type { ErrorCode, FailureSite } from '../../schemas/errors.js';
import type { MessagePort } from 'node:worker_threads';
import type { Layout } from '../../schemas/layouts.js';
import type { Delivery } from '../../schemas/descriptor.js';

export type WorkerBackend =
  | {
      readonly kind: 'local';
      readonly dataDir: string;
      /**
       * ETags as an S3 store shows them (quoted): the main thread reaches this store as S3, through
       * the store process that owns the directory (gateway/cluster/store-process.ts), while the
       * read workers read its object files directly.
       */
      readonly quotedEtags?: boolean;
    }
  | {
      readonly kind: 's3';
      readonly endpoint: string;
      readonly region: string;
      readonly accessKeyId: string;
      readonly secretAccessKey: string;
      readonly connections: number;
      readonly timeoutMs: number;
    };

/** `workerData` of every read worker. */
export interface WorkerInit {
  readonly backend: WorkerBackend;
  /** Range reads one task keeps in flight. */
  readonly readConcurrency: number;
  /**
   * Cancellation without a channel per task: the main thread stores a cancelled task's id in
   * `cancelFlags[id % length]` (checked when a task starts and between reads) and posts the id on
   * the BroadcastChannel of this name (aborts the reads in flight).
   */
  readonly cancelChannel: string;
  readonly cancelFlags: SharedArrayBuffer;
  /** The shared task-buffer arena (gateway/descriptor-get/reader-pool.ts BufferArena): tasks with `arenaOffset` write here. */
  readonly arena: SharedArrayBuffer;
  /** Most backend connections a worker's stream tasks hold open (one per chunk stream). */
  readonly streamConnections: number;
  /** SO_RCVBUF of each of those connections. */
  readonly streamReceiveBufferBytes: number;
  /** Whether a worker writes its log lines (unexpected failures) to stderr: the gateway's log level allows errors. */
  readonly logErrors: boolean;
}

/**
 * A streamed read (chunk-streams.ts): every chunk's layers [first, end) through one range GET per
 * chunk (per half for KV_2LTD), into a ring of layer buffers. Slot s of the ring takes layers
 * first + s, first + s + slots, ...; a slot's layer is split into runs of `runChunks` chunks, each
 * run in its own block (`blocks[slot][run]`, byte offsets into `ring`), slices in chunk order.
 * The worker posts a StreamLayer on `port` for each layer complete, in any order; the main thread
 * posts a StreamControl once a layer is sent, which frees its slot for the layer `slots` later.
 */
export interface StreamTask extends ChunkRun {
  readonly runChunks: number;
  readonly ring: SharedArrayBuffer;
  readonly blocks: readonly (readonly number[])[];
  readonly port: MessagePort;
  /** Time the store may take to answer, and between body bytes of a response being read. */
  readonly timeoutMs: number;
}

/** Worker to main thread: a layer of every chunk is in its slot. */
export interface StreamLayer {
  readonly layer: number;
  /** CRC32C of each chunk's slice of the layer, in chunk order. */
  readonly crcs: Uint32Array;
  /** So far every slice was checked against its recorded CRC32C. */
  readonly verified: boolean;
  /** Backend reads and retries so far. */
  readonly reads: number;
  readonly retries: number;
}

/** Main thread to worker: `layer` was sent; its slot is free. */
export interface StreamControl {
  readonly layer: number;
}

/** How a stream task ended. */
export type StreamResult = { readonly ok: true; readonly reads: number; readonly retries: number; readonly readMs: number } | WorkerFailure;

/** What every worker task reads: layers [first, end) of a run of consecutive chunks. */
export interface ChunkRun {
  /** Unique within the pool: the handle for cancellation. */
  readonly id: number;
  /** The gateway's id of the request the task reads for (x-amz-request-id): its failures and the worker's log lines name it. */
  readonly requestId: string;
  readonly bucket: string;
  readonly keys: readonly string[];
  /** Prefix position of keys[0], for error messages. */
  readonly chunkOffset: number;
  readonly layout: Layout;
  readonly layers: number;
  readonly layerBytes: number;
  readonly first: number;
  readonly end: number;
  /**
   * `client` (the client checks a request's own slices: config.ts sliceChecksFor): a slice whose writer recorded its
   * CRC32C is not checksummed; the recorded value is taken as its checksum, the frames carry it
   * and the client checks it. Absent: the worker checksums every slice and checks it (reads that
   * no client sees, such as a pack's, are always checked here).
   */
  readonly sliceChecks?: 'client' | undefined;
}

/**
 * Read layers [first, end) of a run of consecutive chunks into one block, its slices in `order`
 * (task-layout.ts: layer-major for LAYER frames, chunk-major for CHUNK frames). Every slice is in
 * KV_L2TD form (K part, then V part) whatever the stored layout.
 */
export interface ReadTask extends ChunkRun {
  /** The order of the slices in the task's block (task-layout.ts). */
  readonly order: Delivery;
  /**
   * Encoded chunks (schemas/encoded-chunk.ts): their codec, and each chunk's stored slice lengths
   * by layer (index as in `keys`, all L layers). Absent: raw chunks of `layerBytes` slices, and a
   * chunk found encoded is refused (OC_ERR_CODEC_UNACCEPTED).
   */
  readonly encoded?: { readonly codec: string; readonly sliceBytes: readonly (readonly number[])[] };
  /**
   * Each chunk's ETag as its first read saw it (index as in `keys`; undefined: not locked yet).
   * A later read of a locked chunk must find the same version (its ETag), or the task fails with
   * OC_ERR_CHUNK_CHANGED: a chunk overwritten mid-stream is never delivered half old, half new.
   */
  readonly etags?: readonly (string | undefined)[];
  /**
   * Read the task's slices from a packed segment instead of the chunks (gateway/descriptor-get/
   * segments.ts; docs/segments.md): where each of the task's layers lies in it is SegmentRead's.
   */
  readonly segment?: SegmentRead;
  /** Where in the shared arena the task's buffer is (preferred: nothing is allocated or moved). */
  readonly arenaOffset?: number;
  /**
   * Otherwise a recycled buffer of at least the task's size, transferred in; every byte of the
   * task's part is overwritten, so it needs no clearing. Neither: the worker allocates one.
   */
  readonly buffer?: ArrayBuffer;
}

/**
 * Where a task's slices lie in a packed segment: one object holding layers [first, end) of a run
 * of chunks in layer-major order (every chunk's slice of layer `first`, then of the next layer,
 * ...), each slice as the task reads it (KV_L2TD form for raw chunks, `layerBytes` long; the
 * stored slice for encoded ones, as long as the task's `encoded` sizes say). A layer's slices of
 * the task's chunks lie together, from `offsets[layer - task.first]`.
 */
export interface SegmentRead {
  readonly bucket: string;
  readonly key: string;
  /** The segment object's ETag as its manifest pins it: any other version fails the task (OC_ERR_CHUNK_CHANGED). */
  readonly etag: string;
  /** The segment object's size. */
  readonly bytes: number;
  /** Byte offset in the segment of the task's first chunk's slice of each of its layers, first to last. */
  readonly offsets: readonly number[];
  /** The CRC32C each of the task's slices must have, in the task's slice order (from the manifest). */
  readonly crcs: Uint32Array;
}

/**
 * Gaps of up to this many bytes between the ranges a task needs of a segment are read through and
 * dropped rather than asked for apart (gateway/threads/task-layout.ts segmentTargets): about what one
 * more request costs the store. The plan counts its reads by the same rule (read-plan.ts).
 */
export const SEGMENT_SKIP_BYTES = 1024 * 1024;

/** What a worker answers (the wire form of ReadResult). */
export type WorkerResult =
  | (Omit<ReadResult & { ok: true }, 'region'> & {
      /** The task's own buffer, transferred back; absent when the task wrote into the arena. */
      readonly buffer?: ArrayBuffer;
    })
  | WorkerFailure;

export type ReadResult =
  | {
      readonly ok: true;
      /** The task's bytes (in the shared arena or in the task's own buffer), in slice order. */
      readonly region: Uint8Array;
      /**
       * CRC32C of every slice (one layer of one chunk, layerBytes bytes), in the order the slices
       * lie in the buffer: the frame checksums are combined from these, never recomputed.
       */
      readonly crcs: Uint32Array;
      /** The ETag of each chunk's version that was read (index as in the task's keys). */
      readonly etags: readonly (string | undefined)[];
      /** Backend range reads this task issued (retries included). */
      readonly reads: number;
      /** Range reads repeated after a failure the worker could read again from (`readAgain`; BACKEND_RETRY in gateway/stores/s3-backend.ts). */
      readonly retries: number;
      readonly readMs: number;
      /** Every slice was checked against the CRC32C recorded in its chunk's metadata. */
      readonly verified: boolean;
    }
  | WorkerFailure;

/**
 * A task's failure, the one form a failure takes across the thread boundary: made from whatever
 * the task threw by toWorkerFailure (read-errors.ts, in the worker; the pool makes its own for a
 * full queue or a dead worker), turned back into an ObjectCacheError by fromWorkerFailure (the
 * same file, on the main thread).
 */
export interface WorkerFailure extends FailureSite {
  readonly ok: false;
  readonly code: ErrorCode;
  readonly message: string;
  /**
   * The worker could read again (a cut connection, a reset, a timeout, a 5xx): ReadError's
   * `readAgain`, which drove the worker's own retries and was used up by them. Absent: false.
   * Not whether the client may retry: that is the code's `retryable` (schemas/errors.ts).
   */
  readonly readAgain?: boolean;
  /** The task's request (absent when the task never reached a worker). */
  readonly requestId?: string;
}

/**
 * The read worker's named tasks (piscina's `name`; gateway/worker/read-worker.ts exports one
 * function of each name), each with its task and its answer. A failure is an answer
 * (WorkerFailure), never a rejection.
 */
export interface WorkerTasks {
  /** A layer group of a run of chunks, read into its block (or its own buffer). */
  read(task: ReadTask): Promise<WorkerResult>;
  /** A run of chunks read whole through streamed GETs, its slices sent on the task's port. */
  stream(task: StreamTask): Promise<StreamResult>;
}
