/**
 * A read's failure, and its two conversions across the thread boundary (gateway/threads/protocol.ts:
 * nothing is thrown across it, and class identity does not survive postMessage):
 *
 *   thrown in the worker   --toWorkerFailure-->   WorkerFailure (a plain task result)
 *   WorkerFailure          --fromWorkerFailure--> ObjectCacheError (main thread)
 *
 * These two are the only places a failure changes form between the reads and the ERROR frame
 * (schemas/frames.ts encodeErrorPayload) or the XML error answer.
 */
import { ObjectCacheError, siteDetails } from '../../schemas/errors.js';
import { ReadError } from '../../http-range/read-error.js';
import type { WorkerFailure } from './protocol.js';

export function sizeError(key: string, actual: number, expected: number): ReadError {
  return new ReadError('OC_ERR_CHUNK_SIZE', `chunk ${key} is ${actual} bytes; the descriptor's layers x layerBytes is ${expected}`);
}

/** A slice whose CRC32C is not the one recorded when its chunk was stored (`chunkIndex`: its prefix position). */
export function corruptSlice(key: string, chunkIndex: number, layer: number): ReadError {
  return Object.assign(new ReadError('OC_ERR_CHUNK_CORRUPT', `layer ${layer} of chunk ${key} does not match the CRC32C recorded when it was stored`), {
    chunk: chunkIndex,
    key,
    layer,
  });
}

export function changed(key: string): ReadError {
  return new ReadError('OC_ERR_CHUNK_CHANGED', `chunk ${key} was overwritten while it was being read`, true);
}

/**
 * To the wire: what a task threw, as the failure it answers. A ReadError keeps its code,
 * message, `readAgain` and site; anything else is a defect and becomes OC_ERR_POOL_WORKER with its
 * message (the worker logs it: read-worker.ts).
 */
export function toWorkerFailure(error: unknown, requestId?: string): WorkerFailure {
  const request = requestId === undefined ? {} : { requestId };
  if (!(error instanceof ReadError)) {
    return { ok: false, code: 'OC_ERR_POOL_WORKER', message: (error as { message?: string } | null | undefined)?.message ?? String(error), readAgain: false, ...request };
  }
  return {
    ok: false,
    code: error.code,
    message: error.message,
    readAgain: error.readAgain,
    ...request,
    ...(error.chunk !== undefined ? { chunk: error.chunk } : {}),
    ...(error.key !== undefined ? { key: error.key } : {}),
    ...(error.layer !== undefined ? { layer: error.layer } : {}),
  };
}

/**
 * From the wire: a task's failure as the one error type of the gateway, its site as details
 * (ChunkIndex, Key, Layer) and its message prefixed with the chunk's prefix position. Whether the
 * client may retry is the code's (schemas/errors.ts), not `readAgain`, which said whether the
 * worker could read again (a cut connection, say) and was used up by the worker's own retries.
 */
export function fromWorkerFailure(failure: WorkerFailure): ObjectCacheError {
  const message = failure.chunk !== undefined ? `chunk ${failure.chunk}: ${failure.message}` : failure.message;
  return new ObjectCacheError(failure.code, message, { details: siteDetails(failure) });
}
