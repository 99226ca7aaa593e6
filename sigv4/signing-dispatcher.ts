/**
 * The one SigV4 HTTP client of the project: an undici interceptor that signs every request sent
 * through the dispatcher it is composed onto (`pool.compose(sigv4(...))`), so `request`,
 * `stream` and `dispatch` all go out signed. Used by the gateway's backend (range reads and
 * passthrough), the client, and the benchmarks.
 *
 * What is signed: the method, the path as given (already S3-encoded), the query, `host` and every
 * header given. The payload hash is the caller's `x-amz-content-sha256` when set; otherwise the
 * SHA-256 of a buffer or string body, the empty body's hash without a body, and UNSIGNED-PAYLOAD
 * for a streamed body.
 */
import { createHash } from 'node:crypto';
import { Pool, type Dispatcher } from 'undici';
import { EMPTY_PAYLOAD_SHA256, RequestSigner } from './signer.js';

export interface SigningOptions {
  /** The origin the requests go to (its host is signed). */
  readonly endpoint: URL | string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** Default us-east-1. */
  readonly region?: string;
  /** Default s3. */
  readonly service?: string;
}

type Headers = Dispatcher.DispatchOptions['headers'];

/** Header names in lower case, values as strings (repeated values joined by commas). */
function headerRecord(headers: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  const put = (name: string, value: unknown): void => {
    if (value === undefined || value === null) return;
    const key = name.toLowerCase();
    const text = Array.isArray(value) ? value.join(',') : typeof value === 'string' ? value : JSON.stringify(value);
    out[key] = out[key] === undefined ? text : `${out[key]},${text}`;
  };
  if (headers === null || headers === undefined) return out;
  if (Array.isArray(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) put(headers[i] as string, headers[i + 1]);
  } else if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const [name, value] of headers as Iterable<[string, string | string[] | undefined]>) put(name, value);
  } else {
    for (const [name, value] of Object.entries(headers)) put(name, value);
  }
  return out;
}

function queryPairs(query: string): [string, string][] {
  if (query === '') return [];
  return query.split('&').map((part) => {
    const eq = part.indexOf('=');
    return eq === -1 ? [decodeURIComponent(part), ''] : [decodeURIComponent(part.slice(0, eq)), decodeURIComponent(part.slice(eq + 1))];
  });
}

function payloadHashOf(body: Dispatcher.DispatchOptions['body']): string {
  if (body === undefined || body === null) return EMPTY_PAYLOAD_SHA256;
  if (typeof body === 'string' || body instanceof Uint8Array) return createHash('sha256').update(body).digest('hex');
  return 'UNSIGNED-PAYLOAD';
}

/** An interceptor that signs each request with SigV4 (see the module comment). */
export function sigv4(options: SigningOptions): Dispatcher.DispatcherComposeInterceptor {
  const host = new URL(options.endpoint).host;
  const signer = new RequestSigner({
    accessKeyId: options.accessKeyId,
    secretAccessKey: options.secretAccessKey,
    region: options.region ?? 'us-east-1',
    ...(options.service !== undefined ? { service: options.service } : {}),
  });
  return (dispatch) => (opts, handler) => {
    const headers = headerRecord(opts.headers);
    headers['host'] = host;
    const payloadHash = headers['x-amz-content-sha256'] ?? payloadHashOf(opts.body);
    delete headers['x-amz-content-sha256'];
    const at = opts.path.indexOf('?');
    const path = at === -1 ? opts.path : opts.path.slice(0, at);
    const query = at === -1 ? [] : queryPairs(opts.path.slice(at + 1));
    return dispatch({ ...opts, headers: signer.sign({ method: opts.method, path, query, headers, payloadHash }) }, handler);
  };
}

/** A keep-alive pool to `endpoint` and the same pool signing every request. Close `pool`. */
export function signingPool(options: SigningOptions & { readonly pool?: Pool.Options }): { readonly pool: Pool; readonly http: Dispatcher.ComposedDispatcher } {
  const pool = new Pool(new URL(options.endpoint).origin, options.pool);
  return { pool, http: pool.compose(sigv4(options)) };
}
