/**
 * The failures of a read task's reads, with the fields that name where they happened; carried to
 * the task boundary and turned into the task's result (read-worker.ts).
 */
import type { ErrorCode, FailureSite } from '../schemas/errors.js';

/** A failure of one read, carried to the task boundary and turned into a ReadResult (its site: schemas/errors.ts FailureSite). */
export class ReadError extends Error implements FailureSite {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  chunk?: number;
  key?: string;
  layer?: number;
  constructor(code: ErrorCode, message: string, retryable = false) {
    super(message);
    this.code = code;
    this.retryable = retryable;
  }
}

export function sizeError(key: string, actual: number, expected: number): ReadError {
  return new ReadError('OC_ERR_CHUNK_SIZE', `chunk ${key} is ${actual} bytes; the descriptor's layers x layerBytes is ${expected}`);
}

/** A slice whose CRC32C is not the one recorded when its chunk was stored (`chunkIndex`: its prefix position). */
export function corruptSlice(key: string, chunkIndex: number, layer: number): ReadError {
  return Object.assign(new ReadError('OC_ERR_CHUNK_CORRUPT', `layer ${layer} of chunk ${key} does not match the CRC32C recorded when it was stored`), { chunk: chunkIndex, key, layer });
}

export function changed(key: string): ReadError {
  return new ReadError('OC_ERR_CHUNK_CHANGED', `chunk ${key} was overwritten while it was being read`, true);
}

export function cancelled(): ReadError {
  return new ReadError('OC_ERR_CANCELLED', 'the task was cancelled');
}
