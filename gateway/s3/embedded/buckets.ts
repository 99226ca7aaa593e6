/**
 * Bucket operations of the embedded store: ListBuckets, CreateBucket, HeadBucket, DeleteBucket,
 * GetBucketLocation, ListObjects (v1 and v2) and DeleteObjects.
 * https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html
 */
import { ObjectCacheError } from '../../../schemas/errors.js';
import type { LocalStore, ObjectMeta } from '../../stores/embedded/local-store.js';
import { readWholeBody } from '../body/upload-body.js';
import { headerOf, type RequestContext } from '../context.js';
import { assertBucketName, queryValue } from '../request.js';
import { sendEmpty, sendXml } from '../respond.js';
import { readDeleteObjects } from '../delete-objects.js';
import { OWNER, sendBucketList } from '../list-buckets.js';
import { buildXml, MAX_XML_BODY_BYTES, parseXmlBody, xmlText } from '../xml.js';

/** S3 returns at most 1000 keys per list page. */
export const MAX_KEYS = 1000;

/** Reads a small, verified request body (XML documents). */
export async function readSmallBody(ctx: RequestContext): Promise<string> {
  return (await readWholeBody(ctx.req, ctx.auth, MAX_XML_BODY_BYTES)).toString('utf8');
}

export function listBuckets(ctx: RequestContext, store: LocalStore): void {
  sendBucketList(ctx, store.listBuckets());
}

export async function createBucket(ctx: RequestContext, store: LocalStore): Promise<void> {
  assertBucketName(ctx.target.bucket);
  const length = Number(ctx.req.headers['content-length'] ?? 0);
  if (length > 0 || ctx.auth.payloadHash.startsWith('STREAMING-')) {
    const xml = await readSmallBody(ctx);
    if (xml.trim() !== '') {
      const config = parseXmlBody(xml, 'CreateBucketConfiguration');
      const constraint = xmlText(config, 'LocationConstraint');
      if (constraint !== undefined && constraint !== '' && constraint !== ctx.config.region) {
        throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `The LocationConstraint ${constraint} is not this gateway's region ${ctx.config.region}`, {
          details: { LocationConstraint: constraint },
        });
      }
    }
  }
  await store.createBucket(ctx.target.bucket);
  sendEmpty(ctx.res, 200, { location: `/${ctx.target.bucket}` });
}

export function headBucket(ctx: RequestContext, store: LocalStore): void {
  if (!store.hasBucket(ctx.target.bucket)) {
    throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: ctx.target.bucket } });
  }
  sendEmpty(ctx.res, 200, { 'x-amz-bucket-region': ctx.config.region });
}

export async function deleteBucket(ctx: RequestContext, store: LocalStore): Promise<void> {
  await store.deleteBucket(ctx.target.bucket);
  sendEmpty(ctx.res, 204);
}

export function getBucketLocation(ctx: RequestContext, store: LocalStore): void {
  headBucketExists(ctx, store);
  // us-east-1 is reported as an empty LocationConstraint (S3 API reference, GetBucketLocation).
  const region = ctx.config.region === 'us-east-1' ? '' : ctx.config.region;
  sendXml(ctx.res, 200, buildXml('LocationConstraint', { '#text': region }));
}

function headBucketExists(ctx: RequestContext, store: LocalStore): void {
  if (!store.hasBucket(ctx.target.bucket)) {
    throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: ctx.target.bucket } });
  }
}

function parseMaxKeys(ctx: RequestContext): number {
  const text = queryValue(ctx.target, 'max-keys');
  if (text === undefined) return MAX_KEYS;
  if (!/^\d{1,9}$/.test(text))
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'max-keys must be a non-negative integer', { details: { ArgumentName: 'max-keys', ArgumentValue: text } });
  return Math.min(Number(text), MAX_KEYS);
}

function encodingOf(ctx: RequestContext): (value: string) => string {
  const type = queryValue(ctx.target, 'encoding-type');
  if (type === undefined) return (v) => v;
  if (type !== 'url')
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'encoding-type must be url', { details: { ArgumentName: 'encoding-type', ArgumentValue: type } });
  return s3UrlEncode;
}

/**
 * `encoding-type=url` as S3 and MinIO encode: Go's url.QueryEscape (space as `+`, other bytes as
 * %XX of their UTF-8), except that `/` and `*` stay as they are and `~` is encoded.
 */
export function s3UrlEncode(value: string): string {
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    const c = String.fromCharCode(byte);
    if (/[A-Za-z0-9\-_./*]/.test(c)) out += c;
    else if (c === ' ') out += '+';
    else out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function contentsOf(items: readonly ObjectMeta[], encode: (v: string) => string, withOwner: boolean): Record<string, unknown>[] {
  return items.map((meta) => ({
    Key: encode(meta.key),
    LastModified: new Date(meta.lastModified).toISOString(),
    ETag: `"${meta.etag}"`,
    Size: meta.size,
    ...(withOwner ? { Owner: OWNER } : {}),
    StorageClass: 'STANDARD',
  }));
}

/** Continuation tokens are opaque to clients: base64url of the last key or prefix returned. */
function decodeToken(token: string): string {
  const decoded = Buffer.from(token, 'base64url').toString('utf8');
  if (token === '' || Buffer.from(decoded, 'utf8').toString('base64url') !== token) {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'The continuation token provided is incorrect', { details: { ArgumentName: 'continuation-token' } });
  }
  return decoded;
}

/** A page of the listing; max-keys=0 asks for nothing and is never truncated (as S3 and MinIO answer). */
function listPage(store: LocalStore, bucket: string, options: Parameters<LocalStore['list']>[1]): ReturnType<LocalStore['list']> {
  if (options.maxKeys === 0) return { contents: [], commonPrefixes: [], isTruncated: false, next: undefined };
  return store.list(bucket, options);
}

export function listObjects(ctx: RequestContext, store: LocalStore): void {
  const v2 = queryValue(ctx.target, 'list-type') === '2';
  const prefix = queryValue(ctx.target, 'prefix') ?? '';
  const delimiter = queryValue(ctx.target, 'delimiter') ?? '';
  const maxKeys = parseMaxKeys(ctx);
  const encode = encodingOf(ctx);
  const encodingType = queryValue(ctx.target, 'encoding-type');
  const bucket = ctx.target.bucket;
  headBucketExists(ctx, store);

  if (v2) {
    const token = queryValue(ctx.target, 'continuation-token');
    const startAfter = queryValue(ctx.target, 'start-after');
    const after = token !== undefined ? decodeToken(token) : startAfter;
    const page = listPage(store, bucket, { prefix, delimiter, after, maxKeys });
    const body: Record<string, unknown> = { Name: bucket, Prefix: encode(prefix) };
    if (delimiter !== '') body['Delimiter'] = encode(delimiter);
    body['MaxKeys'] = maxKeys;
    if (encodingType !== undefined) body['EncodingType'] = encodingType;
    body['KeyCount'] = page.contents.length + page.commonPrefixes.length;
    body['IsTruncated'] = page.isTruncated;
    if (token !== undefined) body['ContinuationToken'] = token;
    if (page.isTruncated && page.next !== undefined) body['NextContinuationToken'] = Buffer.from(page.next, 'utf8').toString('base64url');
    if (startAfter !== undefined) body['StartAfter'] = encode(startAfter);
    body['Contents'] = contentsOf(page.contents, encode, queryValue(ctx.target, 'fetch-owner') === 'true');
    body['CommonPrefixes'] = page.commonPrefixes.map((p) => ({ Prefix: encode(p) }));
    sendXml(ctx.res, 200, buildXml('ListBucketResult', body));
    return;
  }

  const marker = queryValue(ctx.target, 'marker') ?? '';
  const page = listPage(store, bucket, { prefix, delimiter, after: marker === '' ? undefined : marker, maxKeys });
  const body: Record<string, unknown> = { Name: bucket, Prefix: encode(prefix), Marker: encode(marker), MaxKeys: maxKeys };
  if (delimiter !== '') body['Delimiter'] = encode(delimiter);
  if (encodingType !== undefined) body['EncodingType'] = encodingType;
  body['IsTruncated'] = page.isTruncated;
  if (page.isTruncated && page.next !== undefined) body['NextMarker'] = encode(page.next);
  body['Contents'] = contentsOf(page.contents, encode, true);
  body['CommonPrefixes'] = page.commonPrefixes.map((p) => ({ Prefix: encode(p) }));
  sendXml(ctx.res, 200, buildXml('ListBucketResult', body));
}

/**
 * ListObjectVersions of an unversioned bucket, as S3 and MinIO answer it: every object once, as
 * its only and latest version, VersionId "null" (tools empty buckets this way).
 */
export function listObjectVersions(ctx: RequestContext, store: LocalStore): void {
  headBucketExists(ctx, store);
  const prefix = queryValue(ctx.target, 'prefix') ?? '';
  const delimiter = queryValue(ctx.target, 'delimiter') ?? '';
  const keyMarker = queryValue(ctx.target, 'key-marker') ?? '';
  const maxKeys = parseMaxKeys(ctx);
  const encode = encodingOf(ctx);
  const encodingType = queryValue(ctx.target, 'encoding-type');
  const page = listPage(store, ctx.target.bucket, { prefix, delimiter, after: keyMarker === '' ? undefined : keyMarker, maxKeys });
  const body: Record<string, unknown> = {
    Name: ctx.target.bucket,
    Prefix: encode(prefix),
    KeyMarker: encode(keyMarker),
    VersionIdMarker: queryValue(ctx.target, 'version-id-marker') ?? '',
    MaxKeys: maxKeys,
  };
  if (delimiter !== '') body['Delimiter'] = encode(delimiter);
  if (encodingType !== undefined) body['EncodingType'] = encodingType;
  body['IsTruncated'] = page.isTruncated;
  if (page.isTruncated && page.next !== undefined) {
    body['NextKeyMarker'] = encode(page.next);
    body['NextVersionIdMarker'] = 'null';
  }
  body['Version'] = page.contents.map((meta) => ({
    Key: encode(meta.key),
    VersionId: 'null',
    IsLatest: true,
    LastModified: new Date(meta.lastModified).toISOString(),
    ETag: `"${meta.etag}"`,
    Size: meta.size,
    Owner: OWNER,
    StorageClass: 'STANDARD',
  }));
  body['CommonPrefixes'] = page.commonPrefixes.map((p) => ({ Prefix: encode(p) }));
  sendXml(ctx.res, 200, buildXml('ListVersionsResult', body));
}

/** The one ACL the embedded store has: the owner's FULL_CONTROL (as MinIO answers GET ?acl). */
export function getAcl(ctx: RequestContext, store: LocalStore): void {
  headBucketExists(ctx, store);
  if (ctx.target.key !== '') store.headObject(ctx.target.bucket, ctx.target.key);
  const grantee = { '@_xmlns:xsi': 'http://www.w3.org/2001/XMLSchema-instance', '@_xsi:type': 'CanonicalUser', ...OWNER };
  sendXml(ctx.res, 200, buildXml('AccessControlPolicy', { Owner: OWNER, AccessControlList: { Grant: [{ Grantee: grantee, Permission: 'FULL_CONTROL' }] } }));
}

/** PUT ?acl: the canned `private` ACL (what the store has anyway) is accepted; any other is 501. */
export async function putAcl(ctx: RequestContext, store: LocalStore): Promise<void> {
  headBucketExists(ctx, store);
  if (ctx.target.key !== '') store.headObject(ctx.target.bucket, ctx.target.key);
  const canned = headerOf(ctx.req, 'x-amz-acl');
  const body = (await readSmallBody(ctx)).trim();
  const grants = Object.keys(ctx.req.headers).filter((name) => name.startsWith('x-amz-grant-'));
  const onlyOwner = body === '' || (/<Permission>FULL_CONTROL<\/Permission>/.test(body) && (body.match(/<Grant>/g) ?? []).length === 1);
  if ((canned !== undefined && canned !== 'private') || grants.length > 0 || !onlyOwner) {
    throw new ObjectCacheError('OC_ERR_REQUEST_NOT_IMPLEMENTED', 'The embedded store keeps every bucket and object private: only the canned ACL "private" is accepted');
  }
  sendEmpty(ctx.res, 200);
}

export async function deleteObjects(ctx: RequestContext, store: LocalStore): Promise<void> {
  const request = await readDeleteObjects(ctx); // access is checked before existence
  headBucketExists(ctx, store);
  const deleted: Record<string, unknown>[] = [];
  const errors: Record<string, unknown>[] = [];
  for (const { key } of request.objects) {
    try {
      await store.deleteObject(ctx.target.bucket, key);
      if (!request.quiet) deleted.push({ Key: key });
    } catch (error) {
      const e = error instanceof ObjectCacheError ? error : new ObjectCacheError('OC_ERR_INTERNAL', 'Delete failed', { cause: error });
      errors.push({ Key: key, Code: e.s3Code, Message: e.message });
    }
  }
  sendXml(ctx.res, 200, buildXml('DeleteResult', { Deleted: deleted, Error: errors }));
}
