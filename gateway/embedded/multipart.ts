/**
 * Multipart upload on the embedded store: Create, UploadPart, Complete, Abort, ListParts and
 * ListMultipartUploads. https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html
 */
import { ObjectCacheError } from '../../schemas/errors.js';
import { MAX_PART_NUMBER, type LocalStore } from '../../backends/embedded/local-store.js';
import { uploadBody } from '../body/upload-body.js';
import { headerOf, type RequestContext } from '../context.js';
import { queryValue } from '../s3/request.js';
import { sendEmpty, sendXml } from '../s3/respond.js';
import { buildXml, parseXmlBody, xmlList, xmlText } from '../s3/xml.js';
import { readSmallBody } from './buckets.js';
import { copyStream, objectAttributes, openCopySource, writePrecondition } from './objects.js';

const OWNER = { ID: 'objectcache', DisplayName: 'objectcache' };

function uploadIdOf(ctx: RequestContext): string {
  const uploadId = queryValue(ctx.target, 'uploadId');
  if (uploadId === undefined || uploadId === '') throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'uploadId is required', { details: { ArgumentName: 'uploadId' } });
  return uploadId;
}

function partNumberOf(text: string | undefined): number {
  const value = text !== undefined && /^\d{1,5}$/.test(text) ? Number(text) : NaN;
  if (!(value >= 1 && value <= MAX_PART_NUMBER)) {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `Part number must be an integer between 1 and ${MAX_PART_NUMBER}, inclusive`, { details: { ArgumentName: 'partNumber', ArgumentValue: text ?? '' } });
  }
  return value;
}

export async function createMultipartUpload(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  const uploadId = await store.createUpload(bucket, key, objectAttributes(ctx.req));
  sendXml(ctx.res, 200, buildXml('InitiateMultipartUploadResult', { Bucket: bucket, Key: key, UploadId: uploadId }));
}

export async function uploadPart(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  if (headerOf(ctx.req, 'x-amz-copy-source') !== undefined) return uploadPartCopy(ctx, store);
  const partNumber = partNumberOf(queryValue(ctx.target, 'partNumber'));
  const uploadId = uploadIdOf(ctx);
  store.assertUpload(bucket, key, uploadId); // NoSuchUpload before reading the body
  const body = uploadBody(ctx.req, ctx.auth, { maxBytes: ctx.config.maxObjectBytes });
  const part = await store.putPart(bucket, key, uploadId, partNumber, body.stream);
  const headers: Record<string, string> = { etag: `"${part.etag}"` };
  const checksum = body.checksumValue();
  if (body.checksum && checksum !== undefined) headers[`x-amz-checksum-${body.checksum.algorithm}`] = checksum;
  sendEmpty(ctx.res, 200, headers);
}

/**
 * UploadPartCopy: a part made of an existing object's bytes, all of them or the
 * x-amz-copy-source-range `bytes=first-last`, with the copy-source conditions of CopyObject.
 */
async function uploadPartCopy(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  const partNumber = partNumberOf(queryValue(ctx.target, 'partNumber'));
  const uploadId = uploadIdOf(ctx);
  store.assertUpload(bucket, key, uploadId);
  const source = await openCopySource(ctx, store);
  try {
    const rangeText = headerOf(ctx.req, 'x-amz-copy-source-range');
    let [start, end] = [0, source.meta.size - 1];
    if (rangeText !== undefined) {
      const m = /^bytes=(\d+)-(\d+)$/.exec(rangeText.trim());
      if (!m || Number(m[1]) > Number(m[2])) {
        throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-copy-source-range must be bytes=first-last, the zero-based offsets of the first and last bytes to copy', { details: { ArgumentName: 'x-amz-copy-source-range', ArgumentValue: rangeText } });
      }
      [start, end] = [Number(m[1]), Number(m[2])];
      if (end >= source.meta.size) throw new ObjectCacheError('OC_ERR_STORE_INVALID_RANGE', `The range ${rangeText} is outside the ${source.meta.size}-byte source`);
    }
    const part = await store.putPart(bucket, key, uploadId, partNumber, copyStream(source.handle, start, end));
    sendXml(ctx.res, 200, buildXml('CopyPartResult', { LastModified: new Date().toISOString(), ETag: `"${part.etag}"` }));
  } finally {
    await source.handle.close();
  }
}

export async function completeMultipartUpload(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  const uploadId = uploadIdOf(ctx);
  store.assertUpload(bucket, key, uploadId);
  const document = parseXmlBody(await readSmallBody(ctx), 'CompleteMultipartUpload');
  const parts = xmlList(document, 'Part').map((part) => {
    const etag = xmlText(part, 'ETag');
    if (etag === undefined) throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', 'Every <Part> needs an <ETag>');
    return { partNumber: partNumberOf(xmlText(part, 'PartNumber')?.trim()), etag: etag.trim() };
  });
  const meta = await store.completeUpload(bucket, key, uploadId, parts, writePrecondition(ctx.req));
  sendXml(ctx.res, 200, buildXml('CompleteMultipartUploadResult', { Location: `/${bucket}/${key}`, Bucket: bucket, Key: key, ETag: `"${meta.etag}"` }));
}

export async function abortMultipartUpload(ctx: RequestContext, store: LocalStore): Promise<void> {
  await store.abortUpload(ctx.target.bucket, ctx.target.key, uploadIdOf(ctx));
  sendEmpty(ctx.res, 204);
}

export function listParts(ctx: RequestContext, store: LocalStore): void {
  const { bucket, key } = ctx.target;
  const uploadId = uploadIdOf(ctx);
  const markerText = queryValue(ctx.target, 'part-number-marker') ?? '0';
  const marker = /^\d{1,5}$/.test(markerText) ? Number(markerText) : 0;
  const maxText = queryValue(ctx.target, 'max-parts') ?? '1000';
  const maxParts = /^\d{1,5}$/.test(maxText) ? Math.min(Number(maxText), 1000) : 1000;
  const { parts } = store.listParts(bucket, key, uploadId);
  const after = parts.filter((p) => p.partNumber > marker);
  const page = after.slice(0, maxParts);
  const truncated = after.length > page.length;
  sendXml(
    ctx.res,
    200,
    buildXml('ListPartsResult', {
      Bucket: bucket,
      Key: key,
      UploadId: uploadId,
      Initiator: OWNER,
      Owner: OWNER,
      StorageClass: 'STANDARD',
      PartNumberMarker: marker,
      NextPartNumberMarker: page.at(-1)?.partNumber ?? marker,
      MaxParts: maxParts,
      IsTruncated: truncated,
      Part: page.map((p) => ({ PartNumber: p.partNumber, LastModified: new Date(p.lastModified).toISOString(), ETag: `"${p.etag}"`, Size: p.size })),
    }),
  );
}

export function listMultipartUploads(ctx: RequestContext, store: LocalStore): void {
  const { bucket } = ctx.target;
  const prefix = queryValue(ctx.target, 'prefix') ?? '';
  const uploads = store.listUploads(bucket, prefix).slice(0, 1000);
  sendXml(
    ctx.res,
    200,
    buildXml('ListMultipartUploadsResult', {
      Bucket: bucket,
      KeyMarker: '',
      UploadIdMarker: '',
      Prefix: prefix,
      MaxUploads: 1000,
      IsTruncated: false,
      Upload: uploads.map((u) => ({ Key: u.key, UploadId: u.uploadId, Initiator: OWNER, Owner: OWNER, StorageClass: 'STANDARD', Initiated: new Date(u.initiated).toISOString() })),
    }),
  );
}
