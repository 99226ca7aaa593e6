/**
 * Object operations of the embedded store: GetObject and HeadObject (range, conditional
 * requests, response-* overrides), PutObject and DeleteObject.
 * https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
 */
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ObjectCacheError } from '../../../schemas/errors.js';
import type { FileHandle } from 'node:fs/promises';
import type { LocalStore, ObjectAttributes, ObjectMeta, OpenObject, WritePrecondition } from '../../stores/embedded/local-store.js';
import { uploadBody } from '../body/upload-body.js';
import { headerOf, type RequestContext } from '../context.js';
import { checkStoredMetadata } from '../metadata.js';
import { parseRange } from '../range.js';
import { parseCopySource, queryValue } from '../request.js';
import { sendEmpty, sendXml } from '../respond.js';
import { buildXml } from '../xml.js';

const STORED_HEADERS = ['cache-control', 'content-disposition', 'content-encoding', 'content-language', 'expires'] as const;

/** Response-header overrides a signed GET may ask for (`response-content-type=...`). */
const OVERRIDES: Record<string, string> = {
  'response-content-type': 'content-type',
  'response-content-language': 'content-language',
  'response-expires': 'expires',
  'response-cache-control': 'cache-control',
  'response-content-disposition': 'content-disposition',
  'response-content-encoding': 'content-encoding',
};

/**
 * Representation headers and user metadata of an upload (PUT, CreateMultipartUpload, CopyObject
 * with REPLACE), checked against S3's metadata limits (gateway/s3/metadata.ts) before any body
 * byte is read: 400 MetadataTooLarge past 2 KB of user metadata, as MinIO answers.
 */
export function objectAttributes(req: IncomingMessage): ObjectAttributes {
  const headers: Record<string, string> = {};
  for (const name of STORED_HEADERS) {
    let value = headerOf(req, name);
    if (name === 'content-encoding' && value !== undefined) {
      value = value
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '' && s.toLowerCase() !== 'aws-chunked')
        .join(', ');
    }
    if (value !== undefined && value !== '') headers[name] = value;
  }
  const userMeta: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith('x-amz-meta-') && value !== undefined) userMeta[name.slice('x-amz-meta-'.length)] = Array.isArray(value) ? value.join(',') : value;
  }
  const contentType = headerOf(req, 'content-type') ?? 'binary/octet-stream';
  checkStoredMetadata({ ...headers, 'content-type': contentType }, userMeta);
  return { contentType, headers, userMeta };
}

function quoted(etag: string): string {
  return `"${etag}"`;
}

function etagMatches(condition: string, etag: string): boolean {
  return condition.split(',').some((part) => {
    const value = part.trim().replace(/^W\//, '');
    return value === '*' || value === quoted(etag) || value === etag;
  });
}

/**
 * The If-Match / If-None-Match of a write (PUT, CompleteMultipartUpload), as MinIO evaluates
 * them: If-Match needs the object to exist with a listed ETag; If-None-Match fails when the
 * object exists and matches (`*` matches any). Undefined when the request has neither.
 */
export function writePrecondition(req: IncomingMessage): WritePrecondition | undefined {
  const ifMatch = headerOf(req, 'if-match');
  const ifNoneMatch = headerOf(req, 'if-none-match');
  if (ifMatch === undefined && ifNoneMatch === undefined) return undefined;
  return (current) => {
    if (ifMatch !== undefined && (current === undefined || !etagMatches(ifMatch, current.etag))) return false;
    if (ifNoneMatch !== undefined && current !== undefined && etagMatches(ifNoneMatch, current.etag)) return false;
    return true;
  };
}

function parseHttpDate(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const time = Date.parse(text);
  return Number.isNaN(time) ? undefined : time;
}

/**
 * RFC 9110 section 13.2.2 evaluation order: If-Match, If-Unmodified-Since, If-None-Match,
 * If-Modified-Since. Returns 304 when the client's copy is current.
 */
function checkConditions(req: IncomingMessage, meta: ObjectMeta): 304 | undefined {
  const lastModified = Math.floor(meta.lastModified / 1000) * 1000;
  const ifMatch = headerOf(req, 'if-match');
  const failed = (): ObjectCacheError =>
    new ObjectCacheError('OC_ERR_STORE_PRECONDITION_FAILED', 'At least one of the pre-conditions you specified did not hold', {
      details: { Condition: ifMatch !== undefined ? 'If-Match' : 'If-Unmodified-Since' },
    });
  if (ifMatch !== undefined) {
    if (!etagMatches(ifMatch, meta.etag)) throw failed();
  } else {
    const since = parseHttpDate(headerOf(req, 'if-unmodified-since'));
    if (since !== undefined && lastModified > since) throw failed();
  }
  const ifNoneMatch = headerOf(req, 'if-none-match');
  if (ifNoneMatch !== undefined) {
    if (etagMatches(ifNoneMatch, meta.etag)) return 304;
  } else {
    const since = parseHttpDate(headerOf(req, 'if-modified-since'));
    if (since !== undefined && lastModified <= since) return 304;
  }
  return undefined;
}

function objectHeaders(ctx: RequestContext, meta: ObjectMeta): Record<string, string> {
  const headers: Record<string, string> = {
    'last-modified': new Date(meta.lastModified).toUTCString(),
    etag: quoted(meta.etag),
    'content-type': meta.contentType,
    'accept-ranges': 'bytes',
  };
  for (const [name, value] of Object.entries(meta.headers)) headers[name] = value;
  for (const [name, value] of Object.entries(meta.userMeta)) headers[`x-amz-meta-${name}`] = value;
  for (const [param, header] of Object.entries(OVERRIDES)) {
    const value = queryValue(ctx.target, param);
    if (value !== undefined) headers[header] = value;
  }
  return headers;
}

/**
 * GET/HEAD ?partNumber=N: the bytes of part N of a multipart object (a single-part object has
 * part 1), answered 206 with its Content-Range and x-amz-mp-parts-count, as S3 and MinIO do.
 */
function partNumberOf(ctx: RequestContext, meta: ObjectMeta, headers: Record<string, string>): { start: number; end: number } | undefined {
  const text = queryValue(ctx.target, 'partNumber');
  if (text === undefined) return undefined;
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1) {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'partNumber must be an integer from 1 to 10000', {
      details: { ArgumentName: 'partNumber', ArgumentValue: text },
    });
  }
  const parts = meta.parts ?? [meta.size];
  const n = Number(text);
  if (n > parts.length) throw new ObjectCacheError('OC_ERR_STORE_INVALID_PART_NUMBER', 'The requested partnumber is not satisfiable');
  if (meta.parts) headers['x-amz-mp-parts-count'] = String(parts.length);
  let start = 0;
  for (let i = 0; i < n - 1; i++) start += parts[i] as number;
  return { start, end: start + (parts[n - 1] as number) - 1 };
}

/**
 * GetObjectAttributes (GET ?attributes): what x-amz-object-attributes asks for among ETag,
 * Checksum, ObjectParts, StorageClass and ObjectSize.
 */
export function getObjectAttributes(ctx: RequestContext, store: LocalStore): void {
  const meta = store.headObject(ctx.target.bucket, ctx.target.key);
  const wanted = new Set(
    (headerOf(ctx.req, 'x-amz-object-attributes') ?? '')
      .split(',')
      .map((s) => s.trim().toLowerCase())
      .filter((s) => s !== ''),
  );
  if (wanted.size === 0)
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-object-attributes must name at least one of ETag, Checksum, ObjectParts, StorageClass, ObjectSize', {
      details: { ArgumentName: 'x-amz-object-attributes' },
    });
  const body: Record<string, unknown> = {};
  if (wanted.has('etag')) body['ETag'] = meta.etag;
  if (wanted.has('checksum') && meta.checksum)
    body['Checksum'] = { [`Checksum${meta.checksum.algorithm.toUpperCase()}`]: meta.checksum.value, ChecksumType: meta.checksum.type ?? 'FULL_OBJECT' };
  if (wanted.has('objectparts') && meta.parts) body['ObjectParts'] = { PartsCount: meta.parts.length };
  if (wanted.has('storageclass')) body['StorageClass'] = 'STANDARD';
  if (wanted.has('objectsize')) body['ObjectSize'] = meta.size;
  sendXml(ctx.res, 200, buildXml('GetObjectAttributesResponse', body), { 'last-modified': new Date(meta.lastModified).toUTCString() });
}

export async function getObject(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  const head = ctx.req.method === 'HEAD';
  const { meta, handle } = await store.openObject(bucket, key);
  let streaming = false;
  try {
    const headers = objectHeaders(ctx, meta);
    if (checkConditions(ctx.req, meta) === 304) {
      delete headers['content-type'];
      ctx.res.writeHead(304, headers);
      ctx.res.end();
      return;
    }
    const range = partNumberOf(ctx, meta, headers) ?? parseRange(headerOf(ctx.req, 'range'), meta.size);
    const start = range?.start ?? 0;
    const end = range?.end ?? meta.size - 1;
    const length = end - start + 1;
    headers['content-length'] = String(length);
    if (range) headers['content-range'] = `bytes ${start}-${end}/${meta.size}`;
    if (!range && meta.checksum && headerOf(ctx.req, 'x-amz-checksum-mode')?.toUpperCase() === 'ENABLED') {
      headers[`x-amz-checksum-${meta.checksum.algorithm}`] = meta.checksum.value;
      headers['x-amz-checksum-type'] = meta.checksum.type ?? 'FULL_OBJECT';
    }
    ctx.res.writeHead(range ? 206 : 200, headers);
    if (head || length === 0) {
      ctx.res.end();
      return;
    }
    streaming = true;
    // autoClose: the stream owns the handle from here and closes it on end, error or abort.
    await pipeline(handle.createReadStream({ start, end, autoClose: true, highWaterMark: 256 * 1024 }), ctx.res);
  } finally {
    if (!streaming) await handle.close();
  }
}

export async function putObject(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  if (headerOf(ctx.req, 'x-amz-copy-source') !== undefined) return copyObject(ctx, store);
  if (key === '') throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_KEY', 'The object key must not be empty');
  if (!store.hasBucket(bucket)) throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
  const attributes = objectAttributes(ctx.req);
  const body = uploadBody(ctx.req, ctx.auth, { maxBytes: ctx.config.maxObjectBytes });
  const meta = await store.putObject(bucket, key, body.stream, {
    ...attributes,
    precondition: writePrecondition(ctx.req),
    checksum: () => {
      const value = body.checksumValue();
      return body.checksum && value !== undefined ? { algorithm: body.checksum.algorithm, value } : undefined;
    },
  });
  const headers: Record<string, string> = { etag: quoted(meta.etag) };
  if (meta.checksum) headers[`x-amz-checksum-${meta.checksum.algorithm}`] = meta.checksum.value;
  sendEmpty(ctx.res, 200, headers);
}

/** `x-amz-copy-source` (gateway/s3/request.ts parseCopySource); the embedded store has no versions. */
function copySource(value: string): { bucket: string; key: string } {
  const source = parseCopySource(value);
  if (source.versionId !== undefined && source.versionId !== 'null') {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-copy-source names a version; the embedded store has no versions', {
      details: { ArgumentName: 'x-amz-copy-source', ArgumentValue: value },
    });
  }
  return { bucket: source.bucket, key: source.key };
}

/** The x-amz-copy-source-if-* conditions against the source (412 when one fails). */
function checkCopySourceConditions(req: IncomingMessage, meta: ObjectMeta): void {
  const lastModified = Math.floor(meta.lastModified / 1000) * 1000;
  const fail = (condition: string): never => {
    throw new ObjectCacheError('OC_ERR_STORE_PRECONDITION_FAILED', 'At least one of the pre-conditions you specified did not hold', { details: { Condition: condition } });
  };
  const ifMatch = headerOf(req, 'x-amz-copy-source-if-match');
  const ifNoneMatch = headerOf(req, 'x-amz-copy-source-if-none-match');
  const unmodifiedSince = parseHttpDate(headerOf(req, 'x-amz-copy-source-if-unmodified-since'));
  const modifiedSince = parseHttpDate(headerOf(req, 'x-amz-copy-source-if-modified-since'));
  if (ifMatch !== undefined && !etagMatches(ifMatch, meta.etag)) fail('x-amz-copy-source-if-match');
  // S3: If-Match true makes If-Unmodified-Since irrelevant; If-None-Match false makes If-Modified-Since irrelevant.
  if (ifMatch === undefined && unmodifiedSince !== undefined && lastModified > unmodifiedSince) fail('x-amz-copy-source-if-unmodified-since');
  if (ifNoneMatch !== undefined && etagMatches(ifNoneMatch, meta.etag)) fail('x-amz-copy-source-if-none-match');
  if (ifNoneMatch === undefined && modifiedSince !== undefined && lastModified <= modifiedSince) fail('x-amz-copy-source-if-modified-since');
}

/**
 * Opens the object named by x-amz-copy-source and checks the x-amz-copy-source-if-* conditions
 * against it (CopyObject, UploadPartCopy). The caller closes the handle; the open handle pins the
 * source version even if it is replaced while it is copied.
 */
export async function openCopySource(ctx: RequestContext, store: LocalStore): Promise<OpenObject & { readonly bucket: string; readonly key: string }> {
  const source = copySource(headerOf(ctx.req, 'x-amz-copy-source') ?? '');
  const opened = await store.openObject(source.bucket, source.key);
  try {
    checkCopySourceConditions(ctx.req, opened.meta);
  } catch (error) {
    await opened.handle.close();
    throw error;
  }
  return { ...opened, ...source };
}

/** The bytes [start, end] of an open object as a stream (an empty one for an empty range). */
export function copyStream(handle: FileHandle, start: number, end: number): Readable {
  return end < start ? Readable.from([]) : handle.createReadStream({ start, end, autoClose: false, highWaterMark: 1024 * 1024 });
}

/**
 * CopyObject: the source's bytes streamed into a new object (staged, fsynced and renamed like any
 * PUT), with the source's metadata (x-amz-metadata-directive COPY, the default) or the request's
 * (REPLACE); the destination's own If-Match / If-None-Match apply as on PUT.
 */
async function copyObject(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  const directive = (headerOf(ctx.req, 'x-amz-metadata-directive') ?? 'COPY').toUpperCase();
  if (directive !== 'COPY' && directive !== 'REPLACE') {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-metadata-directive must be COPY or REPLACE', {
      details: { ArgumentName: 'x-amz-metadata-directive', ArgumentValue: directive },
    });
  }
  if (!store.hasBucket(bucket)) throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
  const replaced = directive === 'REPLACE' ? objectAttributes(ctx.req) : undefined;
  const source = await openCopySource(ctx, store);
  const { meta, handle } = source;
  let copied: ObjectMeta;
  try {
    if (source.bucket === bucket && source.key === key && directive === 'COPY') {
      throw new ObjectCacheError(
        'OC_ERR_REQUEST_COPY_TO_ITSELF',
        "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
      );
    }
    const attributes: ObjectAttributes = replaced ?? { contentType: meta.contentType, headers: meta.headers, userMeta: meta.userMeta };
    copied = await store.putObject(bucket, key, copyStream(handle, 0, meta.size - 1), { ...attributes, precondition: writePrecondition(ctx.req) });
  } finally {
    await handle.close();
  }
  sendXml(ctx.res, 200, buildXml('CopyObjectResult', { LastModified: new Date(copied.lastModified).toISOString(), ETag: quoted(copied.etag) }));
}

export async function deleteObject(ctx: RequestContext, store: LocalStore): Promise<void> {
  await store.deleteObject(ctx.target.bucket, ctx.target.key);
  sendEmpty(ctx.res, 204);
}
