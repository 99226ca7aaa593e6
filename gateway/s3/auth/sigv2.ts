/**
 * AWS Signature Version 2, as MinIO accepts it: `Authorization: AWS <key>:<signature>` and the
 * presigned query `AWSAccessKeyId`, `Signature`, `Expires` (what aws-cli v1's `s3 presign` makes
 * by default). The signature is the base64 HMAC-SHA1, with the client's secret, of
 *
 *   Verb \n Content-MD5 \n Content-Type \n Date (or Expires) \n CanonicalizedAmzHeaders CanonicalizedResource
 *
 * (https://docs.aws.amazon.com/AmazonS3/latest/userguide/RESTAuthentication.html). SigV2 covers
 * no body hash and no non-amz header, so what needs the body or a header signed (the layerwise
 * descriptor) still needs SigV4. Turned off with `--sigv2 off`. A presigned URL's `Expires` may
 * lie at most a cap (default 7 days, as SigV4's) after the time of the request.
 */
import { createHmac } from 'node:crypto';
import { sameSignature } from './same-signature.js';
import type { IncomingHttpHeaders } from 'node:http';
import { ObjectCacheError } from '../../../schemas/errors.js';
import type { ClientCredential } from '../../common/config.js';

/** Query parameters that are sub-resources and so part of the string to sign (MinIO's list). */
const SUBRESOURCES = new Set([
  'acl',
  'cors',
  'delete',
  'encryption',
  'legal-hold',
  'lifecycle',
  'location',
  'logging',
  'notification',
  'partNumber',
  'policy',
  'requestPayment',
  'response-cache-control',
  'response-content-disposition',
  'response-content-encoding',
  'response-content-language',
  'response-content-type',
  'response-expires',
  'retention',
  'select',
  'select-type',
  'tagging',
  'torrent',
  'uploadId',
  'uploads',
  'versionId',
  'versioning',
  'versions',
  'website',
]);

/** The query parameters of a SigV2 presigned URL (removed once verified, like SigV4's). */
export const SIGV2_QUERY_PARAMS = ['AWSAccessKeyId', 'Signature', 'Expires'] as const;

export interface SigV2Request {
  readonly method: string;
  readonly headers: IncomingHttpHeaders;
  /** The request path exactly as sent (still percent-encoded), without the query. */
  readonly rawPath: string;
  /** Decoded query pairs. */
  readonly query: readonly (readonly [string, string])[];
}

export interface SigV2Result {
  readonly credential: ClientCredential;
  readonly mode: 'header' | 'presigned';
  readonly signature: string;
  /** The request's Date / x-amz-date, or for a presigned URL its expiry. */
  readonly date: Date;
  /** Lowercase names of the headers the signature covers. */
  readonly signedHeaders: readonly string[];
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

/** Is this request signed with SigV2 (header or query form)? */
export function isSigV2(headers: IncomingHttpHeaders, query: readonly (readonly [string, string])[]): boolean {
  const authorization = header(headers, 'authorization');
  if (authorization !== undefined) return authorization.startsWith('AWS ');
  return query.some(([k]) => k === 'AWSAccessKeyId') && query.some(([k]) => k === 'Signature');
}

/** `x-amz-*` headers, lowercase and sorted, `name:value\n` each. */
function canonicalAmzHeaders(headers: IncomingHttpHeaders): { text: string; names: string[] } {
  const names = Object.keys(headers)
    .filter((name) => name.startsWith('x-amz-'))
    .sort();
  return { text: names.map((name) => `${name}:${(header(headers, name) ?? '').trim()}\n`).join(''), names };
}

/** The raw path, then the sub-resources among the query parameters, sorted, with decoded values. */
function canonicalResource(rawPath: string, query: readonly (readonly [string, string])[]): string {
  const subresources = query.filter(([name]) => SUBRESOURCES.has(name)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (subresources.length === 0) return rawPath;
  return `${rawPath}?${subresources.map(([name, value]) => (value === '' ? name : `${name}=${value}`)).join('&')}`;
}

export function stringToSignV2(request: SigV2Request, dateOrExpires: string): string {
  const { text } = canonicalAmzHeaders(request.headers);
  return (
    [request.method, header(request.headers, 'content-md5') ?? '', header(request.headers, 'content-type') ?? '', dateOrExpires].join('\n') +
    '\n' +
    text +
    canonicalResource(request.rawPath, request.query)
  );
}

export function signV2(secretAccessKey: string, stringToSign: string): string {
  return createHmac('sha1', secretAccessKey).update(stringToSign, 'utf8').digest('base64');
}

/**
 * Verifies a SigV2 request; throws the S3 error a client expects when it does not verify.
 * `maxExpiresS` caps how far past `now` a presigned URL's `Expires` may lie (0: no cap): SigV2
 * signs an absolute expiry and no signing date, so the cap is all that stops a URL that never
 * expires (SigV4's X-Amz-Expires is capped at 7 days).
 */
export function verifySigV2(request: SigV2Request, credentials: ReadonlyMap<string, ClientCredential>, now: number, maxSkewMs: number, maxExpiresS = 0): SigV2Result {
  const authorization = header(request.headers, 'authorization');
  let accessKeyId: string;
  let signature: string;
  let dateField: string;
  let date: Date;
  let mode: SigV2Result['mode'];
  if (authorization !== undefined) {
    const m = /^AWS ([^:\s]+):(\S+)$/.exec(authorization.trim());
    if (!m) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'The SigV2 Authorization header must be "AWS <access-key>:<signature>"');
    [accessKeyId, signature] = [m[1] as string, m[2] as string];
    const amzDate = header(request.headers, 'x-amz-date');
    const dateText = amzDate ?? header(request.headers, 'date');
    date = new Date(dateText === undefined ? NaN : Date.parse(dateText));
    if (Number.isNaN(date.getTime())) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'A SigV2 request needs a Date or x-amz-date header');
    if (Math.abs(now - date.getTime()) > maxSkewMs)
      throw new ObjectCacheError('OC_ERR_AUTH_CLOCK_SKEW', 'The difference between the request time and the server time is too large');
    // With x-amz-date, the Date position of the string to sign is empty (x-amz-date is signed among the amz headers).
    dateField = amzDate !== undefined ? '' : (dateText as string);
    mode = 'header';
  } else {
    const q = (name: string): string | undefined => request.query.find(([k]) => k === name)?.[1];
    accessKeyId = q('AWSAccessKeyId') ?? '';
    signature = q('Signature') ?? '';
    const expires = q('Expires') ?? '';
    if (!/^\d+$/.test(expires)) throw new ObjectCacheError('OC_ERR_AUTH_MALFORMED', 'A SigV2 presigned URL needs Expires, in seconds since the epoch');
    const expiresMs = Number(expires) * 1000;
    if (now > expiresMs) throw new ObjectCacheError('OC_ERR_AUTH_EXPIRED', 'Request has expired');
    // Checked before the signature, as SigV4's X-Amz-Expires range is.
    if (maxExpiresS > 0 && expiresMs - now > maxExpiresS * 1000) {
      throw new ObjectCacheError(
        'OC_ERR_AUTH_EXPIRES_RANGE',
        `Expires must be at most ${maxExpiresS} seconds after the time of the request; this URL would be valid for another ${Math.ceil((expiresMs - now) / 1000)} seconds`,
      );
    }
    date = new Date(expiresMs);
    // Past the largest date (year 275760): no comparison with it would ever say "expired".
    if (Number.isNaN(date.getTime())) throw new ObjectCacheError('OC_ERR_AUTH_EXPIRES_RANGE', 'Expires is beyond the largest date');
    dateField = expires;
    mode = 'presigned';
  }
  const credential = credentials.get(accessKeyId);
  if (!credential) throw new ObjectCacheError('OC_ERR_AUTH_UNKNOWN_KEY', 'The access key id you provided does not exist in our records');
  const query = mode === 'presigned' ? request.query.filter(([k]) => !(SIGV2_QUERY_PARAMS as readonly string[]).includes(k)) : request.query;
  const expected = signV2(credential.secretAccessKey, stringToSignV2({ ...request, query }, dateField));
  if (!sameSignature(expected, signature)) {
    throw new ObjectCacheError('OC_ERR_AUTH_SIGNATURE', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.');
  }
  const signedHeaders = [...canonicalAmzHeaders(request.headers).names, ...['content-md5', 'content-type', 'date'].filter((name) => request.headers[name] !== undefined)];
  return { credential, mode, signature, date, signedHeaders };
}
