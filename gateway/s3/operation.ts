/**
 * Names the S3 operation of a path-style request from its method, target and sub-resources,
 * the way the S3 API reference names them. Used to route the embedded store and to label logs
 * and metrics of passthrough requests; `undefined` means no operation this gateway knows.
 */
import { hasQuery, type S3Target } from './request.js';

export type S3Operation =
  | 'ListBuckets'
  | 'CreateBucket'
  | 'HeadBucket'
  | 'DeleteBucket'
  | 'GetBucketLocation'
  | 'ListMultipartUploads'
  | 'ListObjects'
  | 'ListObjectsV2'
  | 'DeleteObjects'
  | 'ListParts'
  | 'GetObject'
  | 'HeadObject'
  | 'UploadPart'
  | 'PutObject'
  | 'AbortMultipartUpload'
  | 'DeleteObject'
  | 'CreateMultipartUpload'
  | 'CompleteMultipartUpload'
  | 'ListObjectVersions'
  | 'GetBucketAcl'
  | 'PutBucketAcl'
  | 'GetObjectAcl'
  | 'PutObjectAcl'
  | 'GetObjectAttributes'
  | 'GetBucketPolicy'
  | 'PutBucketPolicy'
  | 'DeleteBucketPolicy'
  | 'GetBucketCors'
  | 'PutBucketCors'
  | 'DeleteBucketCors';

/** A bucket's configuration sub-resources named here (the others are `undefined`: never read as a listing). */
const BUCKET_CONFIGURATIONS: Readonly<Record<string, Readonly<Record<string, S3Operation>>>> = {
  policy: { GET: 'GetBucketPolicy', PUT: 'PutBucketPolicy', DELETE: 'DeleteBucketPolicy' },
  cors: { GET: 'GetBucketCors', PUT: 'PutBucketCors', DELETE: 'DeleteBucketCors' },
};
/** Bucket sub-resources S3 has that this gateway names no operation for. */
const OTHER_BUCKET_SUBRESOURCES = [
  'tagging',
  'versioning',
  'lifecycle',
  'encryption',
  'notification',
  'object-lock',
  'replication',
  'website',
  'logging',
  'requestPayment',
  'accelerate',
  'analytics',
  'inventory',
  'metrics',
  'ownershipControls',
  'publicAccessBlock',
  'intelligent-tiering',
];

export function s3Operation(method: string, target: S3Target): S3Operation | undefined {
  const { bucket, key } = target;
  const q = (name: string): boolean => hasQuery(target, name);
  if (bucket === '') return method === 'GET' ? 'ListBuckets' : undefined;
  if (key === '') {
    for (const [name, byMethod] of Object.entries(BUCKET_CONFIGURATIONS)) if (q(name)) return byMethod[method];
    // Another configuration: no operation of ours, and never the plain request it would look like.
    if (OTHER_BUCKET_SUBRESOURCES.some(q)) return undefined;
    switch (method) {
      case 'PUT':
        return q('acl') ? 'PutBucketAcl' : 'CreateBucket';
      case 'HEAD':
        return 'HeadBucket';
      case 'DELETE':
        return 'DeleteBucket';
      case 'GET':
        if (q('location')) return 'GetBucketLocation';
        if (q('versions')) return 'ListObjectVersions';
        if (q('acl')) return 'GetBucketAcl';
        if (q('uploads')) return 'ListMultipartUploads';
        return q('list-type') ? 'ListObjectsV2' : 'ListObjects';
      case 'POST':
        return q('delete') ? 'DeleteObjects' : undefined;
      default:
        return undefined;
    }
  }
  switch (method) {
    case 'GET':
      if (q('acl')) return 'GetObjectAcl';
      if (q('attributes')) return 'GetObjectAttributes';
      return q('uploadId') ? 'ListParts' : 'GetObject';
    case 'HEAD':
      return 'HeadObject';
    case 'PUT':
      if (q('acl')) return 'PutObjectAcl';
      return q('uploadId') || q('partNumber') ? 'UploadPart' : 'PutObject';
    case 'DELETE':
      return q('uploadId') ? 'AbortMultipartUpload' : 'DeleteObject';
    case 'POST':
      if (q('uploads')) return 'CreateMultipartUpload';
      return q('uploadId') ? 'CompleteMultipartUpload' : undefined;
    default:
      return undefined;
  }
}
