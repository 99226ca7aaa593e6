/**
 * What a request is, decided once, before authentication, from its method, path, query and
 * headers: a browser-form upload, a descriptor GET (the layerwise GET, in either delivery mode), a
 * prefix lookup, or a plain S3 operation. The server routes on the kind; the operation name labels
 * the request's log line and metrics, and nothing renames it later.
 *
 * Presigned requests carry their x-amz-* headers in the query until authentication hoists them
 * (gateway/s3/request.ts unhoistPresigned), so x-amz-copy-source is looked for in both places.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { DESCRIPTOR_HEADER } from '../../schemas/descriptor.js';
import { s3Operation, type S3Operation } from '../s3/operation.js';
import { hasQuery, type S3Target } from '../s3/request.js';

export type Classified =
  /** A browser-form POST upload: its signed policy is its authentication. */
  | { readonly kind: 'post-object'; readonly operation: 'PostObject' }
  /**
   * A GET carrying a descriptor (header form) or `POST /{bucket}?objectcache` (body form). Its
   * metrics label is its delivery mode's, once chosen (operationLabel).
   */
  | { readonly kind: 'descriptor-get'; readonly operation: 'DescriptorGet' }
  | { readonly kind: 'prefix-lookup'; readonly operation: 'PrefixLookup' }
  /** `POST /{bucket}?objectcache-pin`: retain chunks of a budgeted bucket until a time (gateway/capacity/pin-request.ts). */
  | { readonly kind: 'pin'; readonly operation: 'PinObjects' }
  /** An S3 API call; `Other` when it is none this gateway names (passed through, or refused by the embedded store). */
  | { readonly kind: 's3'; readonly operation: S3Operation | 'CopyObject' | 'UploadPartCopy' | 'Other' };

export function classify(method: string, target: S3Target, headers: IncomingHttpHeaders): Classified {
  const { bucket, key } = target;
  if (method === 'POST' && bucket !== '' && key === '') {
    if (target.query.length === 0 && /^multipart\/form-data/i.test(headers['content-type'] ?? '')) return { kind: 'post-object', operation: 'PostObject' };
    if (hasQuery(target, 'objectcache')) return { kind: 'descriptor-get', operation: 'DescriptorGet' };
    if (hasQuery(target, 'objectcache-lookup')) return { kind: 'prefix-lookup', operation: 'PrefixLookup' };
    if (hasQuery(target, 'objectcache-pin')) return { kind: 'pin', operation: 'PinObjects' };
  }
  if (method === 'GET' && key !== '' && headers[DESCRIPTOR_HEADER] !== undefined) return { kind: 'descriptor-get', operation: 'DescriptorGet' };
  const operation = s3Operation(method, target);
  // A presigned request's x-amz-* headers are in its query until authentication hoists them.
  const presigned = target.query.some(([name]) => name === 'X-Amz-Signature');
  const copies = headers['x-amz-copy-source'] !== undefined || (presigned && target.query.some(([name]) => name.toLowerCase() === 'x-amz-copy-source'));
  if (copies && operation === 'PutObject') return { kind: 's3', operation: 'CopyObject' };
  if (copies && operation === 'UploadPart') return { kind: 's3', operation: 'UploadPartCopy' };
  return { kind: 's3', operation: operation ?? 'Other' };
}

/**
 * The operation label of a request's metrics and log line. Descriptor GETs keep the labels they
 * have always had: `LayerwiseGet` or `ChunkwiseGet` by the delivery mode once it is chosen
 * (`LayerwiseGet` when refused before, as by admission control).
 */
export function operationLabel(operation: string, mode: 'layerwise' | 'chunkwise' | undefined): string {
  if (operation !== 'DescriptorGet') return operation;
  return mode === 'chunkwise' ? 'ChunkwiseGet' : 'LayerwiseGet';
}
