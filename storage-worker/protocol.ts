/**
 * The contract between the gateway's main thread and the read workers (piscina). Nothing is
 * thrown across the boundary: a worker answers every task with a ReadResult; class identity does
 * not survive postMessage, so errors travel as codes.
 */
import type { ErrorCode } from '../schemas/errors.js';
import type { Layout } from '../schemas/layouts.js';

export type WorkerBackend =
  | { readonly kind: 'local'; readonly dataDir: string }
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
  /** The shared task-buffer arena (buffer-arena.ts): tasks with `arenaOffset` write here. */
  readonly arena: SharedArrayBuffer;
}

/** Where the delivered bytes go inside the task's buffer. */
export type TaskOrder = 'layer-major' | 'chunk-major';

/**
 * Read layers [first, end) of a run of consecutive chunks into one buffer.
 * layer-major: for each layer, each chunk's slice (the layer payload's piece for these chunks).
 * chunk-major: for each chunk, each layer's slice (whole CHUNK frame payloads).
 * Every slice is in KV_L2TD form (K part, then V part) whatever the stored layout.
 */
export interface ReadTask {
  /** Unique within the pool: the handle for cancellation. */
  readonly id: number;
  readonly bucket: string;
  readonly keys: readonly string[];
  /** Prefix position of keys[0], for error messages. */
  readonly chunkOffset: number;
  readonly layout: Layout;
  readonly layers: number;
  readonly layerBytes: number;
  readonly first: number;
  readonly end: number;
  readonly order: TaskOrder;
  /**
   * Each chunk's ETag as its first read saw it (index as in `keys`; undefined: not pinned yet).
   * A later read of a pinned chunk must find the same version (its ETag), or the task fails with
   * OC_ERR_CHUNK_CHANGED: a chunk overwritten mid-stream is never delivered half old, half new.
   */
  readonly etags?: readonly (string | undefined)[];
  /** Where in the shared arena the task's buffer is (preferred: nothing is allocated or moved). */
  readonly arenaOffset?: number;
  /**
   * Otherwise a recycled buffer of at least the task's size, transferred in; every byte of the
   * task's part is overwritten, so it needs no clearing. Neither: the worker allocates one.
   */
  readonly buffer?: ArrayBuffer;
}

/** What a worker answers (the wire form of ReadResult). */
export type WorkerResult =
  | (Omit<ReadResult & { ok: true }, 'region'> & {
      /** The task's own buffer, transferred back; absent when the task wrote into the arena. */
      readonly buffer?: ArrayBuffer;
    })
  | (ReadResult & { ok: false });

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
      /** Range reads repeated after a retryable failure (range-reader.ts RetryPolicy). */
      readonly retries: number;
      readonly readMs: number;
      /** Every slice was checked against the CRC32C recorded in its chunk's metadata. */
      readonly verified: boolean;
    }
  | {
      readonly ok: false;
      readonly code: ErrorCode;
      readonly message: string;
      readonly retryable: boolean;
      readonly chunk?: number;
      readonly key?: string;
      readonly layer?: number;
    };
