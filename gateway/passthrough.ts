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
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { UNSIGNED_PAYLOAD } from './auth/sigv4.js';
import { EMPTY_PAYLOAD_SHA256, mapBackendError, type S3Backend } from '../storage-worker/s3-backend.js';
import { uploadBody } from './body/upload-body.js';
import { headerOf, type RequestContext } from './context.js';
import { s3Operation } from './s3/operation.js';

/** Request headers forwarded as they are. */
const FORWARD = new Set([
  'content-type', 'content-md5', 'content-disposition', 'content-language', 'cache-control', 'expires', 'range',
  'if-match', 'if-none-match', 'if-modified-since', 'if-unmodified-since',
]);

/** x-amz-* headers that belong to the client's own signature or body framing, not to the operation. */
const SIGNATURE_HEADERS = new Set(['x-amz-date', 'x-amz-content-sha256', 'x-amz-security-token', 'x-amz-decoded-content-length', 'x-amz-trailer', 'x-amz-user-agent']);

/** Response headers that are hop-by-hop (RFC 9110 section 7.6.1) or replaced by the gateway. */
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-authenticate', 'proxy-connection', 'x-amz-request-id']);

function forwardHeaders(ctx: RequestContext, trailerChecksum: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(ctx.req.headers)) {
    if (value === undefined) continue;
    const text = Array.isArray(value) ? value.join(',') : value;
    if (FORWARD.has(name) || (name.startsWith('x-amz-') && !SIGNATURE_HEADERS.has(name))) out[name] = text;
  }
  const encoding = headerOf(ctx.req, 'content-encoding');
  if (encoding !== undefined) {
    const kept = encoding.split(',').map((s) => s.trim()).filter((s) => s !== '' && s.toLowerCase() !== 'aws-chunked');
    if (kept.length > 0) out['content-encoding'] = kept.join(', ');
  }
  // A trailer checksum was verified here; the backend receives a plain body without it.
  if (trailerChecksum) delete out['x-amz-sdk-checksum-algorithm'];
  return out;
}

function hasBody(ctx: RequestContext): boolean {
  const method = ctx.req.method;
  if (method !== 'PUT' && method !== 'POST') return false;
  return true;
}

export async function servePassthrough(ctx: RequestContext, backend: S3Backend): Promise<void> {
  ctx.operation = s3Operation(ctx.req.method ?? 'GET', ctx.target) ?? 'Other';
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
  }
  const headers = forwardHeaders(ctx, trailerChecksum);
  if (length !== undefined) headers['content-length'] = String(length);

  await new Promise<void>((resolve, reject) => {
    backend.dispatch(
      {
        method: ctx.req.method ?? 'GET',
        path: ctx.target.canonicalPath,
        query: ctx.target.query,
        headers,
        ...(body ? { body } : {}),
        payloadHash,
      },
      new RelayHandler(ctx.res, resolve, reject),
    );
  });
}

/** Bytes a relayed response may hold unsent before the backend is paused. */
const RELAY_BUFFER_BYTES = 1024 * 1024;

/** Relays the backend's response to the client response, with backpressure both ways. */
class RelayHandler implements Dispatcher.DispatchHandler {
  readonly #res: ServerResponse;
  readonly #resolve: () => void;
  readonly #reject: (error: unknown) => void;
  #controller: Dispatcher.DispatchController | undefined;
  #settled = false;

  constructor(res: ServerResponse, resolve: () => void, reject: (error: unknown) => void) {
    this.#res = res;
    this.#resolve = resolve;
    this.#reject = reject;
    res.once('close', this.#onClose);
  }

  /** The client went away (or the response is done): stop the backend request if still running. */
  readonly #onClose = (): void => {
    if (!this.#res.writableFinished) this.#controller?.abort(new Error('the client closed the connection'));
  };

  readonly #onDrain = (): void => this.#controller?.resume();

  #settle(error?: unknown): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#res.off('close', this.#onClose);
    this.#res.off('drain', this.#onDrain);
    if (error === undefined) this.#resolve();
    else this.#reject(error);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#res.destroyed) controller.abort(new Error('the client closed the connection'));
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
    this.#res.writeHead(statusCode, out);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    // The backend is paused only once the client's side holds RELAY_BUFFER_BYTES unsent (pausing
    // at every full socket buffer costs a pause/resume and a drain per body chunk).
    if (!this.#res.write(chunk) && this.#res.writableLength >= RELAY_BUFFER_BYTES && !controller.paused) {
      controller.pause();
      this.#res.once('drain', this.#onDrain);
    }
  }

  onResponseEnd(): void {
    this.#res.end();
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
