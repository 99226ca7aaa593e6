/**
 * A failure of one read, as the range reader (socket-range-get.ts) and the worker's reads
 * (gateway/worker/) throw it. How it crosses the thread boundary: gateway/threads/read-errors.ts.
 */
import { ObjectCacheError, type ErrorCode, type FailureSite } from '../schemas/errors.js';

/**
 * A failure of one read: an ObjectCacheError with two things of the worker's own. `readAgain`
 * says whether reading again may work (a cut connection, a reset, a timeout, a 5xx); it drives the
 * worker's own retries (BACKEND_RETRY) and is not what the client is told, which is `retryable`,
 * the code's (schemas/errors.ts). Its site (schemas/errors.ts FailureSite: chunk, key, layer) is
 * filled in where it becomes known, by the task's reads, and becomes the error's details only in
 * fromWorkerFailure.
 */
export class ReadError extends ObjectCacheError implements FailureSite {
  readonly readAgain: boolean;
  chunk?: number;
  key?: string;
  layer?: number;
  constructor(code: ErrorCode, message: string, readAgain = false, options: { cause?: unknown } = {}) {
    super(code, message, options);
    this.readAgain = readAgain;
  }
}

export function cancelled(): ReadError {
  return new ReadError('OC_ERR_CANCELLED', 'the task was cancelled');
}
