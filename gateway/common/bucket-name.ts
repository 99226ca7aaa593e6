import { ObjectCacheError } from '../../schemas/errors.js';

/**
 * S3 bucket naming rules (general purpose buckets): 3-63 characters of lowercase letters,
 * digits, dots and hyphens, starting and ending with a letter or digit, no `..`, not an IP
 * address. These names are also safe directory names for the embedded store.
 */
export function assertBucketName(bucket: string): void {
  const ok =
    /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket) && !bucket.includes('..') && !bucket.includes('.-') && !bucket.includes('-.') && !/^\d+\.\d+\.\d+\.\d+$/.test(bucket);
  if (!ok) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_BUCKET_NAME', `The bucket name ${JSON.stringify(bucket)} is not valid`, { details: { BucketName: bucket } });
}
