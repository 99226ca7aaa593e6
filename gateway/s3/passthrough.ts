/**
 * Passthrough of ordinary S3 requests to the `s3` backend, unchanged in meaning: the verified
 * client request is re-signed with the backend credentials; bodies stream both ways with
 * backpressure and are never buffered whole; aws-chunked uploads are decoded and verified here
 * and sent on as plain bodies of their decoded length; a client that goes away aborts the
 * backend request.
 *
 * The response is moved by an undici dispatch handler: each body chunk is written to the client
 * as it arrives, the backend is paused while the client's socket is full, and nothing per chunk
 * or per response is allocated beyond that (no Readable, no pipeline, no AbortController).
 */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { UNSIGNED_PAYLOAD } from './auth/request-verifier.js';
import { BACKEND_RETRY, EMPTY_PAYLOAD_SHA256, mapBackendError, retryPauseMs, type S3Backend } from '../stores/s3-backend.js';
import { checksumValueLength, type ChecksumAlgorithm } from './body/checksum.js';
import { uploadBody } from './body/upload-body.js';
import { headerOf, type RequestContext } from './context.js';
import { readDeleteObjects } from './delete-objects.js';
import { ObjectCacheError } from '../../schemas/errors.js';

/** Request headers forwarded as they are. */
const FORWARD = new Set([
  'content-type',
  'content-md5',
  'content-disposition',
  'content-language',
  'cache-control',
  'expires',
  'range',
  'if-match',
  'if-none-match',
  'if-modified-since',
  'if-unmodified-since',
]);

/** x-amz-* headers that belong to the client's own signature or body framing, not to the operation. */
const SIGNATURE_HEADERS = new Set(['x-amz-date', 'x-amz-content-sha256', 'x-amz-security-token', 'x-amz-decoded-content-length', 'x-amz-trailer', 'x-amz-user-agent']);

/** Response headers that are hop-by-hop (RFC 9110 section 7.6.1) or replaced by the gateway. */
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-authenticate', 'proxy-connection', 'x-amz-request-id']);

function forwardHeaders(ctx: RequestContext): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(ctx.req.headers)) {
    if (value === undefined) continue;
    const text = Array.isArray(value) ? value.join(',') : value;
    if (FORWARD.has(name) || (name.startsWith('x-amz-') && !SIGNATURE_HEADERS.has(name))) out[name] = text;
  }
  const encoding = headerOf(ctx.req, 'content-encoding');
  if (encoding !== undefined) {
    const kept = encoding
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '' && s.toLowerCase() !== 'aws-chunked');
    if (kept.length > 0) out['content-encoding'] = kept.join(', ');
  }
  return out;
}

/** Decoded bytes per chunk of a re-encoded aws-chunked body (MinIO refuses chunks over 16 MiB). */
const TRAILER_CHUNK_BYTES = 1024 * 1024;

/** The aws-chunked length of `length` decoded bytes in TRAILER_CHUNK_BYTES chunks, with a trailer line. */
function awsChunkedLength(length: number, trailerLineBytes: number): number {
  let total = 0;
  for (let at = 0; at < length; at += TRAILER_CHUNK_BYTES) {
    const size = Math.min(TRAILER_CHUNK_BYTES, length - at);
    total += size.toString(16).length + 2 + size + 2;
  }
  return total + 3 + trailerLineBytes + 2; // "0\r\n", the trailer line, the final "\r\n"
}

/**
 * The verified body as an unsigned aws-chunked stream with the checksum as its trailer: the
 * client's trailing checksum reaches the store as the client sent it, although its value is known
 * only once the whole body has been read (and verified). Streams; never buffers a chunk.
 */
async function* awsChunkedWithTrailer(body: AsyncIterable<Buffer>, length: number, trailer: () => string): AsyncGenerator<Buffer> {
  let inChunk = 0; // bytes left in the current chunk
  let sent = 0;
  for await (let data of body) {
    while (data.byteLength > 0) {
      if (inChunk === 0) {
        inChunk = Math.min(TRAILER_CHUNK_BYTES, length - sent);
        yield Buffer.from(`${inChunk.toString(16)}\r\n`, 'latin1');
      }
      const piece = data.byteLength <= inChunk ? data : data.subarray(0, inChunk);
      yield piece;
      inChunk -= piece.byteLength;
      sent += piece.byteLength;
      data = data.subarray(piece.byteLength);
      if (inChunk === 0) yield Buffer.from('\r\n', 'latin1');
    }
  }
  yield Buffer.from(`0\r\n${trailer()}\r\n\r\n`, 'latin1');
}

function hasBody(ctx: RequestContext): boolean {
  const method = ctx.req.method;
  if (method !== 'PUT' && method !== 'POST') return false;
  return true;
}

/** Counts a backend request repeated after a retryable failure. */
export type RetryObserver = (kind: 'passthrough') => void;

export async function servePassthrough(ctx: RequestContext, backend: S3Backend, onRetry?: RetryObserver): Promise<void> {
  if (ctx.operation === 'DeleteObjects') {
    // Read whole (at most 1000 keys) so that every key is checked before the store sees any.
    // The store gets the request rebuilt from the checked keys, with its own digest.
    const request = await readDeleteObjects(ctx);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(forwardHeaders(ctx))) {
      if (name !== 'content-md5' && !name.startsWith('x-amz-checksum-') && name !== 'x-amz-sdk-checksum-algorithm') headers[name] = value;
    }
    headers['content-md5'] = request.forwardMd5;
    headers['content-type'] = 'application/xml';
    headers['content-length'] = String(request.forward.byteLength);
    return relay(ctx, backend, headers, Readable.from([request.forward]), request.forwardSha256, onRetry);
  }
  let body: Readable | undefined;
  let payloadHash = EMPTY_PAYLOAD_SHA256;
  let trailerChecksum = false;
  let length: number | undefined;
  if (hasBody(ctx)) {
    const upload = uploadBody(ctx.req, ctx.auth, { maxBytes: ctx.config.maxObjectBytes });
    length = upload.length;
    trailerChecksum = upload.checksum !== undefined && upload.checksum.headerValue === undefined;
    if (upload.length > 0) {
      body = upload.stream;
      payloadHash = upload.sha256Hex ?? UNSIGNED_PAYLOAD;
    } else {
      // An empty body still has to pass verification (Content-MD5 of nothing, length 0).
      for await (const chunk of upload.stream) void chunk;
    }
    if (trailerChecksum && upload.length > 0) {
      // The checksum came in the trailer: pass it on the same way (aws-chunked, unsigned trailer).
      const algorithm = (upload.checksum as { algorithm: ChecksumAlgorithm }).algorithm;
      const name = `x-amz-checksum-${algorithm}`;
      const headers = forwardHeaders(ctx);
      const encodings = headers['content-encoding'];
      headers['content-encoding'] = encodings === undefined ? 'aws-chunked' : `aws-chunked, ${encodings}`;
      headers['x-amz-decoded-content-length'] = String(upload.length);
      headers['x-amz-trailer'] = name;
      headers['content-length'] = String(awsChunkedLength(upload.length, name.length + 1 + checksumValueLength(algorithm) + 2));
      const encoded = Readable.from(
        awsChunkedWithTrailer(upload.stream, upload.length, () => `${name}:${upload.checksumValue() ?? ''}`),
        { objectMode: false },
      );
      return relay(ctx, backend, headers, encoded, 'STREAMING-UNSIGNED-PAYLOAD-TRAILER', onRetry);
    }
    if (trailerChecksum) {
      // An empty body: its trailer has been read, so the checksum goes as an ordinary header.
      const value = upload.checksumValue();
      if (upload.checksum && value !== undefined) {
        const headers = forwardHeaders(ctx);
        headers[`x-amz-checksum-${upload.checksum.algorithm}`] = value;
        headers['content-length'] = '0';
        return relay(ctx, backend, headers, undefined, payloadHash, onRetry);
      }
    }
  }
  const headers = forwardHeaders(ctx);
  if (length !== undefined) headers['content-length'] = String(length);
  return relay(ctx, backend, headers, body, payloadHash, onRetry);
}

/**
 * A 5xx answer held back so the request can be repeated: a retryable OC_ERR_BACKEND_UNAVAILABLE,
 * as a transport failure is (mapBackendError), that never reaches the client as such: `send`
 * relays the store's own answer once no attempt is left.
 */
class RetryableAnswer extends ObjectCacheError {
  readonly send: () => void;
  constructor(send: () => void) {
    super('OC_ERR_BACKEND_UNAVAILABLE', 'the store answered 5xx', { retryable: true });
    this.send = send;
  }
}

/**
 * Sends the request to the backend and relays its response to the client. GETs and HEADs (no
 * body) are repeated under BACKEND_RETRY while the client has received nothing; the last 5xx is
 * relayed as it is.
 */
async function relay(
  ctx: RequestContext,
  backend: S3Backend,
  headers: Record<string, string>,
  body: Readable | undefined,
  payloadHash: string,
  onRetry?: RetryObserver,
): Promise<void> {
  const method = ctx.req.method ?? 'GET';
  const attempts = body === undefined && (method === 'GET' || method === 'HEAD') ? BACKEND_RETRY.attempts : 1;
  const deadline = performance.now() + backend.timeoutMs;
  for (let attempt = 1; ; attempt++) {
    const mayRetry = attempt < attempts;
    try {
      await new Promise<void>((resolve, reject) => {
        backend.dispatch(
          { method, path: ctx.target.canonicalPath, query: ctx.target.query, headers, ...(body ? { body } : {}), payloadHash, signal: ctx.signal },
          new RelayHandler(ctx.res, ctx.requestId, resolve, reject, mayRetry),
        );
      });
      return;
    } catch (error) {
      const delay = retryPauseMs(attempt);
      const retryable = error instanceof ObjectCacheError && error.retryable;
      if (!mayRetry || !retryable || ctx.res.headersSent || ctx.res.destroyed || performance.now() + delay >= deadline) {
        if (error instanceof RetryableAnswer) return error.send();
        throw error;
      }
      onRetry?.('passthrough');
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

/** Bytes a relayed response may hold unsent before the backend is paused. */
const RELAY_BUFFER_BYTES = 1024 * 1024;

/** The largest error body whose <RequestId> is rewritten (S3 error documents are a few hundred bytes). */
const ERROR_BODY_LIMIT = 64 * 1024;

/** Relays the backend's response to the client response, with backpressure both ways. */
class RelayHandler implements Dispatcher.DispatchHandler {
  readonly #res: ServerResponse;
  readonly #requestId: string;
  readonly #resolve: () => void;
  readonly #reject: (error: unknown) => void;
  /** A 5xx error document is held back (RetryableAnswer) instead of relayed. */
  readonly #mayRetry: boolean;
  #controller: Dispatcher.DispatchController | undefined;
  #settled = false;
  /**
   * An XML error from the store, held until its end: its <RequestId> becomes the gateway's, so
   * the body and the x-amz-request-id header agree (S3 clients match them).
   */
  #error: { status: number; headers: Record<string, string | string[]>; body: Buffer[]; bytes: number } | undefined;

  /** The connection the response goes out on (known before the response is assigned to it). */
  readonly #socket: Socket;

  constructor(res: ServerResponse, requestId: string, resolve: () => void, reject: (error: unknown) => void, mayRetry = false) {
    this.#res = res;
    this.#socket = res.req.socket;
    this.#requestId = requestId;
    this.#resolve = resolve;
    this.#reject = reject;
    this.#mayRetry = mayRetry;
    // The client going away: its response closes, or, for a pipelined request still queued behind
    // another, only its socket does (Node closes no queued response). A paused relay would
    // otherwise hold its backend connection for ever.
    res.once('close', this.#onClose);
    this.#socket.once('close', this.#onClose);
  }

  /** The client went away: stop the backend request if still running. */
  readonly #onClose = (): void => {
    if (this.#res.writableFinished) return;
    this.#controller?.abort(new Error('the client closed the connection'));
    this.#settle();
  };

  readonly #onDrain = (): void => this.#controller?.resume();

  #settle(error?: unknown): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#res.off('close', this.#onClose);
    this.#socket.off('close', this.#onClose);
    this.#res.off('drain', this.#onDrain);
    if (error === undefined) this.#resolve();
    else this.#reject(error);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#res.destroyed || this.#socket.destroyed) controller.abort(new Error('the client closed the connection'));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    const out: Record<string, string | string[]> = {};
    for (const name in headers) {
      const value = headers[name];
      if (value === undefined || DROP_RESPONSE.has(name)) continue;
      out[name] = value;
    }
    const backendRequestId = headers['x-amz-request-id'];
    if (typeof backendRequestId === 'string') out['x-objectcache-backend-request-id'] = backendRequestId;
    const type = headers['content-type'];
    const xmlError = statusCode >= 300 && typeof type === 'string' && type.includes('xml');
    if ((xmlError || (statusCode >= 500 && this.#mayRetry)) && Number(headers['content-length'] ?? 0) <= ERROR_BODY_LIMIT) {
      this.#error = { status: statusCode, headers: out, body: [], bytes: 0 };
      return;
    }
    this.#res.writeHead(statusCode, out);
  }

  /** Sends a held error with the gateway's request id in its body. */
  #sendError(error: { status: number; headers: Record<string, string | string[]>; body: Buffer[] }): void {
    const text = Buffer.concat(error.body)
      .toString('utf8')
      .replace(/<RequestId>[^<]*<\/RequestId>/, `<RequestId>${this.#requestId}</RequestId>`);
    const body = Buffer.from(text, 'utf8');
    this.#res.writeHead(error.status, { ...error.headers, 'content-length': String(body.byteLength) });
    this.#res.end(body);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#error) {
      this.#error.body.push(chunk);
      this.#error.bytes += chunk.byteLength;
      if (this.#error.bytes > ERROR_BODY_LIMIT) {
        // Too large to be an S3 error document: relay it as it is from here on.
        const held = this.#error;
        this.#error = undefined;
        this.#res.writeHead(held.status, held.headers);
        for (const piece of held.body) this.#res.write(piece);
      }
      return;
    }
    // The backend is paused only once the client's side holds RELAY_BUFFER_BYTES unsent (pausing
    // at every full socket buffer costs a pause/resume and a drain per body chunk).
    if (!this.#res.write(chunk) && this.#res.writableLength >= RELAY_BUFFER_BYTES && !controller.paused) {
      controller.pause();
      this.#res.once('drain', this.#onDrain);
    }
  }

  onResponseEnd(): void {
    const held = this.#error;
    if (held && held.status >= 500 && this.#mayRetry) return this.#settle(new RetryableAnswer(() => this.#sendError(held)));
    if (this.#error) this.#sendError(this.#error);
    else this.#res.end();
    this.#settle();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (this.#res.destroyed) return this.#settle(); // the client is gone: nothing to answer
    // Before the status line: an S3 error answers the client. After: the response cannot be
    // mended, so it is cut (the client sees a truncated body, never a wrong one).
    if (!this.#res.headersSent) return this.#settle(mapBackendError(error));
    this.#res.destroy();
    this.#settle();
  }
}
