/**
 * Hand-signed raw requests for tests that need exact control over headers or bodies: the test
 * client's SigV4 signer, and the signed headers of one request.
 */
import { createHash } from 'node:crypto';
import { SignatureV4 } from '@smithy/signature-v4';
import { NodeSha256 } from '../../sigv4/signer.js';
import { CLIENT_KEY, CLIENT_SECRET } from './gateway.js';
import type { Dispatcher } from 'undici';

export const clientSigner = new SignatureV4({
  credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET },
  region: 'us-east-1',
  service: 's3',
  sha256: NodeSha256,
  uriEscapePath: false,
});

export interface SignOptions {
  readonly method: string;
  /** S3-encoded path, `/bucket/key`. */
  readonly path: string;
  readonly query?: Record<string, string>;
  readonly headers?: Record<string, string>;
  /** Sets content-length and, unless `headers` gives one, x-amz-content-sha256 to its SHA-256. */
  readonly body?: Buffer;
  readonly unsignable?: ReadonlySet<string>;
  readonly date?: Date;
}

/** The headers (Authorization included) of a request to `origin` signed by the test client. */
export async function signedHeaders(origin: string, options: SignOptions): Promise<Record<string, string>> {
  const url = new URL(origin);
  const headers: Record<string, string> = {
    host: url.host,
    'x-amz-content-sha256': createHash('sha256')
      .update(options.body ?? Buffer.alloc(0))
      .digest('hex'),
    ...options.headers,
  };
  if (options.body) headers['content-length'] = String(options.body.length);
  const signed = await clientSigner.sign(
    { method: options.method, protocol: 'http:', hostname: url.hostname, port: Number(url.port), path: options.path, query: options.query ?? {}, headers },
    { ...(options.unsignable ? { unsignableHeaders: new Set(options.unsignable) } : {}), ...(options.date ? { signingDate: options.date } : {}) },
  );
  return signed.headers;
}

/**
 * A signed `POST /{bucket}?objectcache` of `body` (a descriptor, JSON) through `pool`: the raw
 * answer, body unread. `extra` adds request options (for example a small highWaterMark).
 */
export async function postDescriptor(
  pool: Dispatcher,
  origin: string,
  bucket: string,
  body: Buffer,
  extra: Partial<Dispatcher.RequestOptions> = {},
): Promise<Dispatcher.ResponseData> {
  const headers = await signedHeaders(origin, { method: 'POST', path: `/${bucket}`, query: { objectcache: '' }, body });
  return pool.request({ ...extra, method: 'POST', path: `/${bucket}?objectcache=`, headers, body });
}
