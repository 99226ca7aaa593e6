/**
 * S3 request parsing: path-style `/{bucket}/{key}?{query}`, and virtual-hosted-style
 * `Host: {bucket}.{domain}` with `/{key}?{query}` when the gateway is given its domains (the
 * `--domain` setting, as MinIO's `MINIO_DOMAIN`). Either way the target names the bucket and key
 * the same; only what the client signed differs (see `signedPath`).
 *
 * The key is percent-decoded to bytes and then decoded as strict UTF-8, the way S3 names
 * objects. The canonical path used for SigV4 is re-encoded from the decoded path with the S3
 * rules (every byte but the RFC 3986 unreserved set and '/' escaped), as Amazon S3 and MinIO do,
 * so clients that escape slightly differently still verify.
 */
import { escapeUriPath } from '@smithy/util-uri-escape';
import { ObjectCacheError } from '../../schemas/errors.js';
import { objectKeyProblem } from '../../schemas/object-key.js';
import { assertBucketName } from '../common/bucket-name.js';

export interface S3Target {
  /** Empty for service-level requests (ListBuckets). */
  readonly bucket: string;
  /** Empty for bucket-level requests. */
  readonly key: string;
  /** The decoded path, `/bucket/key`. */
  readonly path: string;
  /** The path sent to the backend and the embedded store, path-style: `/bucket/key`, S3-escaped. */
  readonly canonicalPath: string;
  /**
   * The SigV4 canonical URI as the client signed it: `canonicalPath` for path-style requests,
   * the escaped `/key` alone for virtual-hosted-style ones (the bucket is in the signed Host).
   */
  readonly signedPath: string;
  /**
   * The SigV2 canonical resource's path: the path as sent, prefixed by `/bucket` for
   * virtual-hosted-style requests (the AWS SigV2 rule for CanonicalizedResource).
   */
  readonly sigV2Path: string;
  /** The bucket came from the Host header. */
  readonly virtualHosted: boolean;
  /** Query parameters in order of appearance, decoded (`+` is a space, as in Go's url.ParseQuery). */
  readonly query: readonly (readonly [string, string])[];
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function percentDecode(raw: string, what: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < raw.length; i++) {
    const ch = raw.charCodeAt(i);
    if (ch === 0x25 /* % */) {
      const hex = raw.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_KEY', `The ${what} has a malformed percent escape`);
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else if (ch < 0x80) {
      bytes.push(ch);
    } else {
      // Raw non-ASCII in the request line: take the code point's UTF-8 bytes.
      const cp = raw.codePointAt(i) ?? ch;
      for (const b of Buffer.from(String.fromCodePoint(cp), 'utf8')) bytes.push(b);
      if (cp > 0xffff) i++;
    }
  }
  try {
    return utf8.decode(Uint8Array.from(bytes));
  } catch {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_KEY', `The ${what} is not valid UTF-8`);
  }
}

/** Percent-decoding for query components (`+` is a space). */
function decodeQueryComponent(raw: string): string {
  return percentDecode(raw.replace(/\+/g, ' '), 'query string');
}

export function parseQuery(rawQuery: string): [string, string][] {
  if (rawQuery === '') return [];
  const pairs: [string, string][] = [];
  for (const part of rawQuery.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const name = eq === -1 ? part : part.slice(0, eq);
    const value = eq === -1 ? '' : part.slice(eq + 1);
    try {
      pairs.push([decodeQueryComponent(name), decodeQueryComponent(value)]);
    } catch {
      throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `The query parameter ${JSON.stringify(name)} is not valid percent-encoded UTF-8`);
    }
  }
  return pairs;
}

/**
 * The bucket a virtual-hosted-style Host header names (`{bucket}.{domain}`, port ignored), or
 * undefined for path-style requests: no domains configured, a Host that is one of the domains
 * itself, or any other host (an IP address, `localhost`).
 */
export function bucketFromHost(host: string | undefined, domains: readonly string[]): string | undefined {
  if (host === undefined || domains.length === 0) return undefined;
  let name = host.trim().toLowerCase();
  if (name.startsWith('[')) return undefined; // an IPv6 literal
  const colon = name.lastIndexOf(':');
  if (colon !== -1) name = name.slice(0, colon);
  if (name.endsWith('.')) name = name.slice(0, -1);
  for (const domain of domains) {
    if (name.length > domain.length + 1 && name.endsWith(`.${domain}`)) return name.slice(0, name.length - domain.length - 1);
  }
  return undefined;
}

/**
 * Parses the request target of an HTTP request (`req.url`); `hostBucket` is the bucket of a
 * virtual-hosted-style request (from {@link bucketFromHost}), whose path is then the key alone.
 */
export function parseTarget(url: string, hostBucket?: string): S3Target {
  if (!url.startsWith('/')) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'The request target must be an absolute path');
  const q = url.indexOf('?');
  const rawPath = q === -1 ? url : url.slice(0, q);
  const rawQuery = q === -1 ? '' : url.slice(q + 1);
  const sentPath = percentDecode(rawPath, 'object key');
  if (sentPath.includes('\0')) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_KEY', 'The object key contains a NUL character');
  if (hostBucket !== undefined) assertBucketName(hostBucket);
  // A virtual-hosted request for the bucket itself is `/`; for a key, `/key`.
  const path = hostBucket === undefined ? sentPath : sentPath === '/' ? `/${hostBucket}` : `/${hostBucket}${sentPath}`;

  const slash = path.indexOf('/', 1);
  const bucket = slash === -1 ? path.slice(1) : path.slice(1, slash);
  const key = slash === -1 ? '' : path.slice(slash + 1);
  if (bucket === '' && key !== '') throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_BUCKET_NAME', 'The path names an object without a bucket (it starts with //)');
  const problem = key === '' ? undefined : objectKeyProblem(key);
  if (problem !== undefined) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_KEY', `The object key ${problem}`, { details: { BucketName: bucket } });
  const canonicalPath = escapeUriPath(path);
  return {
    bucket,
    key,
    path,
    canonicalPath,
    signedPath: hostBucket === undefined ? canonicalPath : escapeUriPath(sentPath),
    sigV2Path: hostBucket === undefined ? rawPath : `/${hostBucket}${rawPath}`,
    virtualHosted: hostBucket !== undefined,
    query: parseQuery(rawQuery),
  };
}

/**
 * `x-amz-copy-source`: `[/]bucket/key[?versionId=id]`, the path percent-encoded. Read the way
 * MinIO reads it (Go's url.Parse, then one leading slash dropped, then split at the first slash),
 * and refused where the two could disagree (a `#`, a leading `//`), because access to the source
 * is checked on what this returns while the store copies what it parses itself.
 */
export function parseCopySource(value: string): { bucket: string; key: string; versionId: string | undefined } {
  const invalid = (why: string): ObjectCacheError =>
    new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `x-amz-copy-source must be bucket/key, URL-encoded, with an optional ?versionId=: ${why}`, {
      details: { ArgumentName: 'x-amz-copy-source', ArgumentValue: value },
    });
  // eslint-disable-next-line no-control-regex -- control characters are what it refuses
  if (value.includes('#') || /[\x00-\x1f\x7f]/.test(value)) throw invalid('it contains # or a control character');
  const q = value.indexOf('?');
  const rawPath = q === -1 ? value : value.slice(0, q);
  if (rawPath.startsWith('//')) throw invalid('it starts with //');
  let path: string;
  try {
    path = percentDecode(rawPath, 'copy source');
  } catch {
    throw invalid('it is not valid percent-encoded UTF-8');
  }
  if (path.startsWith('/')) path = path.slice(1);
  const slash = path.indexOf('/');
  if (slash <= 0 || slash === path.length - 1) throw invalid('it names no bucket and key');
  const bucket = path.slice(0, slash);
  const key = path.slice(slash + 1);
  try {
    assertBucketName(bucket);
  } catch {
    throw invalid(`${JSON.stringify(bucket)} is not a bucket name`);
  }
  const problem = objectKeyProblem(key);
  if (problem !== undefined) throw invalid(`the key ${problem}`);
  let versionId: string | undefined;
  if (q !== -1) {
    let query: [string, string][];
    try {
      query = parseQuery(value.slice(q + 1));
    } catch {
      throw invalid('its query is not valid percent-encoded UTF-8');
    }
    for (const [name, v] of query) if (name === 'versionId') versionId = v;
  }
  return { bucket, key, versionId };
}

/** First value of a query parameter, or undefined. */
export function queryValue(target: Pick<S3Target, 'query'>, name: string): string | undefined {
  for (const [k, v] of target.query) if (k === name) return v;
  return undefined;
}

export function hasQuery(target: Pick<S3Target, 'query'>, name: string): boolean {
  return target.query.some(([k]) => k === name);
}

export { assertBucketName };

/** Query parameters of presigned SigV4 authentication (compared case-insensitively). */
const PRESIGN_PARAMS = new Set([
  'x-amz-algorithm',
  'x-amz-credential',
  'x-amz-date',
  'x-amz-expires',
  'x-amz-signedheaders',
  'x-amz-signature',
  'x-amz-security-token',
  'x-amz-content-sha256',
  // SigV2 presigned URLs
  'awsaccesskeyid',
  'signature',
  'expires',
]);

/**
 * After a presigned request is verified, its authentication parameters are spent and its other
 * `x-amz-*` query parameters are headers that the presigner hoisted into the URL (S3 treats them
 * as headers). Returns the target without either, and the hoisted headers to apply.
 */
export function unhoistPresigned(target: S3Target): { target: S3Target; headers: Record<string, string> } {
  const headers: Record<string, string> = {};
  const query: [string, string][] = [];
  for (const [name, value] of target.query) {
    const lower = name.toLowerCase();
    if (PRESIGN_PARAMS.has(lower)) continue;
    if (lower.startsWith('x-amz-')) {
      // One value, or the gateway's checks and the store could each read another.
      if (headers[lower] !== undefined)
        throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `The query parameter ${name} appears twice`, { details: { ArgumentName: name } });
      headers[lower] = value;
    } else query.push([name, value]);
  }
  return { target: { ...target, query }, headers };
}
