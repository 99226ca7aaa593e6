/**
 * Multipart upload on the embedded store: Create, UploadPart, Complete, Abort, ListParts and
 * ListMultipartUploads. https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html
 */
import { ObjectCacheError } from '../../../schemas/errors.js';
import { MAX_PART_NUMBER, type LocalStore, type UploadChecksum } from '../../stores/embedded/local-store.js';
import { checksumAlgorithmOf, createChecksum, type ChecksumAlgorithm } from '../body/checksum.js';
import { uploadBody } from '../body/upload-body.js';
import { headerOf, type RequestContext } from '../context.js';
import { queryValue } from '../request.js';
import { sendEmpty, sendXml } from '../respond.js';
import { buildXml, parseXmlBody, xmlList, xmlText } from '../xml.js';
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
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `Part number must be an integer between 1 and ${MAX_PART_NUMBER}, inclusive`, {
      details: { ArgumentName: 'partNumber', ArgumentValue: text ?? '' },
    });
  }
  return value;
}

/**
 * The checksum an upload is created with, as S3 and MinIO take it: `x-amz-checksum-algorithm`, and
 * `x-amz-checksum-type` FULL_OBJECT (a CRC of the whole object, combined from the parts) or
 * COMPOSITE (the checksum of the parts' checksums, `<value>-<parts>`). CRC64NVME is always
 * FULL_OBJECT (MinIO answers a COMPOSITE request with FULL_OBJECT too); the others default to
 * COMPOSITE; SHA-1 and SHA-256 cannot be FULL_OBJECT.
 */
function uploadChecksumOf(ctx: RequestContext): UploadChecksum | undefined {
  const name = headerOf(ctx.req, 'x-amz-checksum-algorithm');
  const typeText = headerOf(ctx.req, 'x-amz-checksum-type')?.trim().toUpperCase();
  if (name === undefined) {
    if (typeText !== undefined)
      throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-checksum-type needs x-amz-checksum-algorithm', { details: { ArgumentName: 'x-amz-checksum-type' } });
    return undefined;
  }
  const algorithm = checksumAlgorithmOf(name.trim());
  if (typeText !== undefined && typeText !== 'FULL_OBJECT' && typeText !== 'COMPOSITE') {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-checksum-type must be FULL_OBJECT or COMPOSITE', {
      details: { ArgumentName: 'x-amz-checksum-type', ArgumentValue: typeText },
    });
  }
  const crc = algorithm.startsWith('crc');
  if (typeText === 'FULL_OBJECT' && !crc) {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `The FULL_OBJECT checksum type is for CRC algorithms, not ${algorithm.toUpperCase()}`, {
      details: { ArgumentName: 'x-amz-checksum-type', ArgumentValue: typeText },
    });
  }
  const type = algorithm === 'crc64nvme' ? 'FULL_OBJECT' : (typeText ?? 'COMPOSITE');
  return { algorithm, type };
}

export async function createMultipartUpload(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  const checksum = uploadChecksumOf(ctx);
  const uploadId = await store.createUpload(bucket, key, objectAttributes(ctx.req), checksum);
  const headers = checksum ? { 'x-amz-checksum-algorithm': checksum.algorithm.toUpperCase(), 'x-amz-checksum-type': checksum.type } : undefined;
  sendXml(ctx.res, 200, buildXml('InitiateMultipartUploadResult', { Bucket: bucket, Key: key, UploadId: uploadId }), headers);
}

/**
 * The bytes of a part, with its checksum in the upload's algorithm computed as they pass (a part
 * the client sent no checksum for still gets one, which a COMPOSITE or FULL_OBJECT object needs).
 */
function withChecksum(source: AsyncIterable<Uint8Array>, algorithm: ChecksumAlgorithm | undefined): { bytes: AsyncIterable<Uint8Array>; value: () => string | undefined } {
  if (algorithm === undefined) return { bytes: source, value: () => undefined };
  const sum = createChecksum(algorithm);
  let value: string | undefined;
  return {
    bytes: (async function* fed(): AsyncGenerator<Uint8Array> {
      for await (const chunk of source) {
        sum.update(chunk);
        yield chunk;
      }
      value = await sum.digestBase64();
    })(),
    value: () => value,
  };
}

export async function uploadPart(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  if (headerOf(ctx.req, 'x-amz-copy-source') !== undefined) return uploadPartCopy(ctx, store);
  const partNumber = partNumberOf(queryValue(ctx.target, 'partNumber'));
  const uploadId = uploadIdOf(ctx);
  const upload = store.uploadChecksum(bucket, key, uploadId); // NoSuchUpload before reading the body
  const body = uploadBody(ctx.req, ctx.auth, { maxBytes: ctx.config.maxObjectBytes });
  if (upload && body.checksum && body.checksum.algorithm !== upload.algorithm) {
    throw new ObjectCacheError(
      'OC_ERR_REQUEST_INVALID_ARGUMENT',
      `The upload was created with ${upload.algorithm.toUpperCase()}; the part's checksum is ${body.checksum.algorithm.toUpperCase()}`,
      { details: { ArgumentName: `x-amz-checksum-${body.checksum.algorithm}` } },
    );
  }
  const fed = withChecksum(body.stream, upload?.algorithm as ChecksumAlgorithm | undefined);
  const part = await store.putPart(bucket, key, uploadId, partNumber, fed.bytes, fed.value);
  const headers: Record<string, string> = { etag: `"${part.etag}"` };
  const checksum = body.checksumValue();
  if (body.checksum && checksum !== undefined) headers[`x-amz-checksum-${body.checksum.algorithm}`] = checksum;
  else if (upload && part.checksum !== undefined) headers[`x-amz-checksum-${upload.algorithm}`] = part.checksum;
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
  const upload = store.uploadChecksum(bucket, key, uploadId);
  const source = await openCopySource(ctx, store);
  try {
    const rangeText = headerOf(ctx.req, 'x-amz-copy-source-range');
    let [start, end] = [0, source.meta.size - 1];
    if (rangeText !== undefined) {
      const m = /^bytes=(\d+)-(\d+)$/.exec(rangeText.trim());
      if (!m || Number(m[1]) > Number(m[2])) {
        throw new ObjectCacheError(
          'OC_ERR_REQUEST_INVALID_ARGUMENT',
          'x-amz-copy-source-range must be bytes=first-last, the zero-based offsets of the first and last bytes to copy',
          { details: { ArgumentName: 'x-amz-copy-source-range', ArgumentValue: rangeText } },
        );
      }
      [start, end] = [Number(m[1]), Number(m[2])];
      if (end >= source.meta.size) throw new ObjectCacheError('OC_ERR_STORE_INVALID_RANGE', `The range ${rangeText} is outside the ${source.meta.size}-byte source`);
    }
    const fed = withChecksum(copyStream(source.handle, start, end), upload?.algorithm as ChecksumAlgorithm | undefined);
    const part = await store.putPart(bucket, key, uploadId, partNumber, fed.bytes, fed.value);
    const checksum = upload && part.checksum !== undefined ? { [`Checksum${upload.algorithm.toUpperCase()}`]: part.checksum } : {};
    sendXml(ctx.res, 200, buildXml('CopyPartResult', { LastModified: new Date().toISOString(), ETag: `"${part.etag}"`, ...checksum }));
  } finally {
    await source.handle.close();
  }
}

export async function completeMultipartUpload(ctx: RequestContext, store: LocalStore): Promise<void> {
  const { bucket, key } = ctx.target;
  const uploadId = uploadIdOf(ctx);
  const upload = store.uploadChecksum(bucket, key, uploadId);
  const document = parseXmlBody(await readSmallBody(ctx), 'CompleteMultipartUpload');
  const element = upload ? `Checksum${upload.algorithm.toUpperCase()}` : undefined;
  const parts = xmlList(document, 'Part').map((part) => {
    const etag = xmlText(part, 'ETag');
    if (etag === undefined) throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', 'Every <Part> needs an <ETag>');
    return { partNumber: partNumberOf(xmlText(part, 'PartNumber')?.trim()), etag: etag.trim(), checksum: element === undefined ? undefined : xmlText(part, element)?.trim() };
  });
  const algorithm = upload?.algorithm as ChecksumAlgorithm | undefined;
  // A whole-object checksum the client claims (x-amz-checksum-<algorithm>) must be the one the
  // parts make, or nothing is stored.
  const claimed = algorithm === undefined ? undefined : headerOf(ctx.req, `x-amz-checksum-${algorithm}`);
  const checksums =
    algorithm === undefined
      ? undefined
      : {
          composite: async (partChecksums: readonly Buffer[]) => {
            const sum = createChecksum(algorithm);
            for (const value of partChecksums) sum.update(value);
            return sum.digestBase64();
          },
          full: () => {
            const sum = createChecksum(algorithm);
            return {
              update: (bytes: Uint8Array) => sum.update(bytes),
              digestBase64: async () => {
                const value = await sum.digestBase64();
                if (claimed !== undefined && claimed.trim() !== value)
                  throw new ObjectCacheError('OC_ERR_REQUEST_BAD_DIGEST', `The x-amz-checksum-${algorithm} you specified did not match the checksum of the parts`);
                return value;
              },
            };
          },
        };
  const meta = await store.completeUpload(bucket, key, uploadId, parts, writePrecondition(ctx.req), checksums);
  const checksum = meta.checksum ? { [`Checksum${meta.checksum.algorithm.toUpperCase()}`]: meta.checksum.value, ChecksumType: meta.checksum.type ?? 'FULL_OBJECT' } : {};
  sendXml(ctx.res, 200, buildXml('CompleteMultipartUploadResult', { Location: `/${bucket}/${key}`, Bucket: bucket, Key: key, ETag: `"${meta.etag}"`, ...checksum }));
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
