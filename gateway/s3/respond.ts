/**
 * Writing S3 responses, and the headers-sent rule (as fastify's reply.js has it): before
 * headers, an error is a real S3 XML error response with the right status; after headers, the
 * response is destroyed (the framed stream has its own ERROR frame); a client that is gone gets
 * nothing.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ObjectCacheError } from '../../schemas/errors.js';
import { errorXml } from './xml.js';

/** 16 upper-case hex characters, like Amazon S3's request ids. */
/** 8 random hex digits per process, then a counter: unique, sortable within a process, and cheap. */
const REQUEST_ID_PREFIX = randomBytes(4).toString('hex').toUpperCase();
let requestCounter = 0;

export function newRequestId(): string {
  requestCounter = (requestCounter + 1) % 0x100000000;
  return REQUEST_ID_PREFIX + requestCounter.toString(16).toUpperCase().padStart(8, '0');
}

export function sendXml(res: ServerResponse, status: number, xml: string, headers: Record<string, string> = {}): void {
  const body = Buffer.from(xml, 'utf8');
  res.writeHead(status, { ...headers, 'content-type': 'application/xml', 'content-length': String(body.length) });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

export function sendEmpty(res: ServerResponse, status: number, headers: Record<string, string> = {}): void {
  // RFC 9110 section 8.6: no Content-Length on 204.
  res.writeHead(status, status === 204 ? headers : { ...headers, 'content-length': '0' });
  res.end();
}

/**
 * Discards the unread rest of a request body so the keep-alive connection stays usable after an
 * early error response, up to `limit` bytes; a body larger than that closes the connection. A
 * limit of 0 reads none of it: the caller has set `connection: close`, and Node discards the rest.
 */
export function drainRequest(req: IncomingMessage, limit: number): void {
  if (req.complete || req.destroyed || limit <= 0) return;
  req.unpipe();
  let drained = 0;
  req.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > limit) req.socket.destroy();
  });
  req.resume();
}

export function toObjectCacheError(error: unknown): ObjectCacheError {
  if (error instanceof ObjectCacheError) return error;
  return new ObjectCacheError('OC_ERR_INTERNAL', 'We encountered an internal error. Please try again.', { cause: error });
}

/** Answers `error` as S3 XML if nothing has been sent yet; otherwise cuts the response. */
export function sendError(res: ServerResponse, error: ObjectCacheError, requestId: string, resource: string, drainLimit: number): void {
  if (res.headersSent) {
    res.destroy(error);
    return;
  }
  if (res.destroyed || res.req.socket.destroyed) return;
  drainRequest(res.req, drainLimit);
  // The stable ObjectCache code, for clients that want more than the S3 code.
  const headers: Record<string, string> = { 'x-objectcache-error-code': error.code };
  if (error.code === 'OC_ERR_STORE_INVALID_RANGE' && error.details['ObjectSize'] !== undefined) headers['content-range'] = `bytes */${error.details['ObjectSize']}`;
  // Whether sending the request again may succeed (the ERROR frame's `retryable` after headers).
  headers['x-objectcache-retryable'] = String(error.retryable);
  if (error.retryable) headers['retry-after'] = '1';
  const details = { ...error.details };
  delete details['ObjectSize'];
  sendXml(res, error.status, errorXml({ code: error.s3Code, message: error.message, resource, requestId, details }), headers);
}
