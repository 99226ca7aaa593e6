/**
 * What the client makes of the gateway's refusals and of failures on the way to it: always an
 * ObjectCacheError with a stable code (schemas/errors.ts), the original kept as `cause`. An error
 * answer, whichever transport met it (the AWS SDK's S3ServiceException, an undici response, the
 * socket path's head), is mapped by one function, errorFromAnswer.
 */
import type { Readable } from 'node:stream';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { XMLParser } from 'fast-xml-parser';
import { ERRORS, ObjectCacheError, type ErrorCode } from '../schemas/errors.js';

/** The part of an error answer's body that is read. */
export const ERROR_BODY_LIMIT = 64 * 1024;

const errorXml = new XMLParser({ parseTagValue: false, processEntities: true });

/** The Code and Message of an S3 error document (absent when the body is not one). */
export function parseErrorDocument(xml: string): { code?: string; message?: string } {
  try {
    const doc = errorXml.parse(xml) as { Error?: { Code?: unknown; Message?: unknown } };
    const text = (v: unknown): string | undefined => (typeof v === 'string' || typeof v === 'number' ? String(v) : undefined);
    const code = text(doc.Error?.Code);
    const message = text(doc.Error?.Message);
    return { ...(code !== undefined ? { code } : {}), ...(message !== undefined ? { message } : {}) };
  } catch {
    return {};
  }
}

function codeForS3(s3Code: string, status: number): ErrorCode {
  const match = (Object.entries(ERRORS) as [ErrorCode, { status: number; s3Code: string }][]).find(([, spec]) => spec.s3Code === s3Code && spec.status === status);
  return match ? match[0] : status === 503 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_INTERNAL';
}

/**
 * The gateway's answer to a refused request as an ObjectCacheError: its stable code (the
 * `x-objectcache-error-code` header, else the S3 code's), whether a retry may succeed (the
 * `x-objectcache-retryable` header, else the code's), the request id (`x-amz-request-id`) and the
 * answer's Retry-After (details.RetryAfter, read by the retry policy, client/retry.ts).
 */
export function errorFromAnswer(status: number, parsed: { code?: string; message?: string }, header: (name: string) => string | undefined, cause?: unknown): ObjectCacheError {
  const s3Code = parsed.code ?? 'Unknown';
  const message = parsed.message ?? `the gateway answered ${status}`;
  const headerCode = header('x-objectcache-error-code');
  const code = headerCode !== undefined && headerCode in ERRORS ? (headerCode as ErrorCode) : codeForS3(s3Code, status);
  const retryable = header('x-objectcache-retryable');
  const requestId = header('x-amz-request-id');
  const retryAfter = header('retry-after');
  return new ObjectCacheError(code, message, {
    details: { S3Code: s3Code, Status: status, ...(requestId !== undefined ? { RequestId: requestId } : {}), ...(retryAfter !== undefined ? { RetryAfter: retryAfter } : {}) },
    ...(retryable === 'true' || retryable === 'false' ? { retryable: retryable === 'true' } : {}),
    ...(cause !== undefined ? { cause } : {}),
  });
}

/** An undici response's error answer (its body read up to ERROR_BODY_LIMIT) as an ObjectCacheError. */
export async function errorFromResponse(response: { statusCode: number; headers: Record<string, string | string[] | undefined>; body: Readable }): Promise<ObjectCacheError> {
  let text = '';
  try {
    ({ text } = await readCapped(response.body, ERROR_BODY_LIMIT));
  } catch {
    // Cut off: the status and headers still say what went wrong.
  }
  return errorFromAnswer(response.statusCode, parseErrorDocument(text), (name) => {
    const value = response.headers[name];
    return typeof value === 'string' ? value : undefined;
  });
}

/** An error met while reading a stream (an ERROR frame, a broken stream), naming the request as an error answer does. */
export function withRequestId(error: unknown, requestId: string | undefined): unknown {
  if (!(error instanceof ObjectCacheError) || requestId === undefined || error.details['RequestId'] !== undefined) return error;
  return new ObjectCacheError(error.code, error.message, { details: { ...error.details, RequestId: requestId }, retryable: error.retryable, cause: error.cause ?? error });
}

/** Errors that say the gateway could not be reached at all (so another one may be tried). */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_CLOSED']);

export function unreachable(error: unknown): boolean {
  for (let e = error as { code?: unknown; cause?: unknown; errors?: unknown[] } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (typeof e.code === 'string' && UNREACHABLE.has(e.code)) return true;
    if (Array.isArray(e.errors) && e.errors.some(unreachable)) return true;
  }
  return false;
}

/** A network error (a system call's, or undici's), by its code. */
function networkError(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return unreachable(error) || (typeof code === 'string' && (/^E[A-Z]+$/.test(code) || code.startsWith('UND_ERR_')));
}

/**
 * Any failure of a call as the ObjectCacheError a caller sees: an ObjectCacheError as it is; the
 * AWS SDK's S3ServiceException by its S3 code and status (as errorFromAnswer maps any answer); a
 * gateway that could not be reached, or a connection that failed before the answer, as
 * OC_ERR_BACKEND_UNAVAILABLE; anything else (an answer the SDK could not parse) as
 * OC_ERR_CLIENT_PROTOCOL. `what` names the call in messages.
 */
export function toObjectCacheError(error: unknown, what: string): ObjectCacheError {
  if (error instanceof ObjectCacheError) return error;
  if (error instanceof S3ServiceException) {
    const headers = (error.$response?.headers ?? {}) as Record<string, string | undefined>;
    const status = error.$metadata.httpStatusCode ?? 0;
    return errorFromAnswer(
      status,
      { code: error.name, message: error.message },
      (name) => headers[name] ?? (name === 'x-amz-request-id' ? error.$metadata.requestId : undefined),
      error,
    );
  }
  const message = error instanceof Error ? error.message : String(error);
  if (networkError(error)) return new ObjectCacheError('OC_ERR_BACKEND_UNAVAILABLE', `${what}: cannot reach the gateway: ${message}`, { cause: error, retryable: true });
  return new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `${what}: the gateway's answer could not be used: ${message}`, { cause: error });
}

/**
 * Up to `limit` bytes of a body, as UTF-8; the rest is not read (the connection is closed), so
 * a broken or hostile server cannot make the client hold more. `whole` says whether that was all.
 */
export async function readCapped(body: Readable, limit: number): Promise<{ text: string; whole: boolean }> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of body) {
    const b = chunk as Buffer;
    chunks.push(b.subarray(0, limit - bytes));
    bytes += b.byteLength;
    if (bytes > limit) {
      body.destroy();
      return { text: Buffer.concat(chunks).toString('utf8'), whole: false };
    }
  }
  return { text: Buffer.concat(chunks).toString('utf8'), whole: true };
}
