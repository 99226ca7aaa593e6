/**
 * Passthrough of ordinary S3 requests to the `s3` backend, unchanged in meaning: the verified
 * client request is re-signed with the backend credentials; bodies stream both ways with
 * backpressure and are never buffered whole; aws-chunked uploads are decoded and verified here
 * and sent on as plain bodies of their decoded length; a client that goes away aborts the
 * backend request.
 */
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { UNSIGNED_PAYLOAD } from './auth/sigv4.js';
import { EMPTY_PAYLOAD_SHA256, type S3Backend } from '../storage-worker/s3-backend.js';
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

  const response = await backend.request({
    method: ctx.req.method ?? 'GET',
    path: ctx.target.canonicalPath,
    query: ctx.target.query,
    headers,
    ...(body ? { body } : {}),
    payloadHash,
    signal: ctx.signal,
  });

  const outHeaders: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(response.headers)) {
    if (value === undefined || DROP_RESPONSE.has(name)) continue;
    outHeaders[name] = value;
  }
  const backendRequestId = response.headers['x-amz-request-id'];
  if (typeof backendRequestId === 'string') outHeaders['x-objectcache-backend-request-id'] = backendRequestId;
  ctx.res.writeHead(response.statusCode, outHeaders);
  await pipeline(response.body, ctx.res);
}
