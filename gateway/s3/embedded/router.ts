/**
 * Maps an authenticated path-style request to an embedded-store operation. Sub-resources the
 * store does not implement (?acl, ?tagging, ?versioning, ...) are a clear 501 NotImplemented,
 * never silently treated as the plain operation.
 */
import { ObjectCacheError } from '../../../schemas/errors.js';
import type { LocalStore } from '../../stores/embedded/local-store.js';
import type { RequestContext } from '../context.js';
import { s3Operation, type S3Operation } from '../operation.js';
import { assertBucketName } from '../request.js';
import { sendEmpty } from '../respond.js';
import { createBucket, deleteBucket, deleteObjects, getAcl, getBucketLocation, headBucket, listBuckets, listObjects, listObjectVersions, putAcl } from './buckets.js';
import { abortMultipartUpload, completeMultipartUpload, createMultipartUpload, listMultipartUploads, listParts, uploadPart } from './multipart.js';
import { deleteObject, getObject, getObjectAttributes, putObject } from './objects.js';

type Handler = (ctx: RequestContext, store: LocalStore) => void | Promise<void>;

/** Query parameters that are arguments, not sub-resources. */
const ARGUMENTS = new Set([
  'x-id',
  'prefix',
  'delimiter',
  'max-keys',
  'marker',
  'list-type',
  'continuation-token',
  'start-after',
  'fetch-owner',
  'encoding-type',
  'allow-unordered',
  'uploadId',
  'partNumber',
  'part-number-marker',
  'max-parts',
  'max-uploads',
  'key-marker',
  'upload-id-marker',
  'response-content-type',
  'response-content-language',
  'response-expires',
  'response-cache-control',
  'response-content-disposition',
  'response-content-encoding',
  'uploads',
  'delete',
  'location',
  'versions',
  'version-id-marker',
  'acl',
  'attributes',
  'policy',
  'cors',
]);

/**
 * A bucket's policy and CORS configuration, which the embedded store never holds (access is the
 * gateway's own policies): read, there is none (404, as MinIO answers a bucket without one);
 * deleted, nothing is; set, not implemented.
 */
function bucketConfiguration(missing: 'OC_ERR_STORE_NO_SUCH_BUCKET_POLICY' | 'OC_ERR_STORE_NO_SUCH_CORS', what: string): Handler {
  return (ctx, store) => {
    if (!store.hasBucket(ctx.target.bucket))
      throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: ctx.target.bucket } });
    switch (ctx.req.method) {
      case 'GET':
        throw new ObjectCacheError(missing, `The bucket has no ${what}`, { details: { BucketName: ctx.target.bucket } });
      case 'DELETE':
        return sendEmpty(ctx.res, 204);
      default:
        throw new ObjectCacheError('OC_ERR_REQUEST_NOT_IMPLEMENTED', `The embedded store keeps no ${what}`);
    }
  };
}

function unsupportedSubresource(ctx: RequestContext): string | undefined {
  return ctx.target.query.map(([name]) => name).find((name) => !ARGUMENTS.has(name) && !name.startsWith('X-Amz-'));
}

const HANDLERS: Record<S3Operation, Handler> = {
  ListBuckets: listBuckets,
  CreateBucket: createBucket,
  HeadBucket: headBucket,
  DeleteBucket: deleteBucket,
  GetBucketLocation: getBucketLocation,
  ListMultipartUploads: listMultipartUploads,
  ListObjects: listObjects,
  ListObjectsV2: listObjects,
  DeleteObjects: deleteObjects,
  ListParts: listParts,
  GetObject: getObject,
  HeadObject: getObject,
  UploadPart: uploadPart,
  PutObject: putObject,
  AbortMultipartUpload: abortMultipartUpload,
  DeleteObject: deleteObject,
  CreateMultipartUpload: createMultipartUpload,
  CompleteMultipartUpload: completeMultipartUpload,
  ListObjectVersions: listObjectVersions,
  GetBucketAcl: getAcl,
  PutBucketAcl: putAcl,
  GetObjectAcl: getAcl,
  PutObjectAcl: putAcl,
  GetObjectAttributes: getObjectAttributes,
  GetBucketPolicy: bucketConfiguration('OC_ERR_STORE_NO_SUCH_BUCKET_POLICY', 'bucket policy'),
  PutBucketPolicy: bucketConfiguration('OC_ERR_STORE_NO_SUCH_BUCKET_POLICY', 'bucket policy'),
  DeleteBucketPolicy: bucketConfiguration('OC_ERR_STORE_NO_SUCH_BUCKET_POLICY', 'bucket policy'),
  GetBucketCors: bucketConfiguration('OC_ERR_STORE_NO_SUCH_CORS', 'CORS configuration'),
  PutBucketCors: bucketConfiguration('OC_ERR_STORE_NO_SUCH_CORS', 'CORS configuration'),
  DeleteBucketCors: bucketConfiguration('OC_ERR_STORE_NO_SUCH_CORS', 'CORS configuration'),
};

/** Serves one request from the embedded store. */
export async function serveEmbedded(ctx: RequestContext, store: LocalStore): Promise<void> {
  const subresource = unsupportedSubresource(ctx);
  if (subresource !== undefined) {
    throw new ObjectCacheError('OC_ERR_REQUEST_NOT_IMPLEMENTED', `The ?${subresource} sub-resource is not implemented by the embedded store`);
  }
  if (ctx.target.bucket !== '' && ctx.req.method !== 'PUT') {
    // Existing buckets were validated when created; a bad name here simply does not exist.
    try {
      assertBucketName(ctx.target.bucket);
    } catch {
      throw new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: ctx.target.bucket } });
    }
  }
  if (ctx.target.bucket !== '' && ctx.target.key !== '' && ctx.req.method === 'PUT') assertBucketName(ctx.target.bucket);
  const method = ctx.req.method ?? 'GET';
  const operation = s3Operation(method, ctx.target);
  if (operation === undefined) {
    const { bucket, key } = ctx.target;
    throw new ObjectCacheError('OC_ERR_REQUEST_METHOD_NOT_ALLOWED', `The ${method} method is not allowed against this resource`, {
      details: { Method: method, ResourceType: key !== '' ? 'OBJECT' : bucket !== '' ? 'BUCKET' : 'SERVICE' },
    });
  }
  await HANDLERS[operation](ctx, store);
}
