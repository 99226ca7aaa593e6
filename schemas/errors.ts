/**
 * The one error registry of ObjectCache.
 *
 * Every failure a user can see has a stable `OC_ERR_*` code, the HTTP status it is answered with
 * before streaming starts, and the S3 error code put in the XML body (so S3 clients map it the way
 * they map Amazon S3's own errors). Codes are part of the wire contract: the ERROR frame and the
 * client library carry them, tests assert them, docs/reference.md lists them. Messages are for people and
 * may change; codes may not.
 */

export interface ErrorSpec {
  /** HTTP status used when the error is answered before any response byte was sent. */
  readonly status: number;
  /** S3 error code for the XML body (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html). */
  readonly s3Code: string;
  /** One line for the error table in docs/reference.md. */
  readonly description: string;
  /**
   * Sending the same request again may succeed (an outage, throttling, a chunk overwritten while
   * it was read). Carried on the wire: the `x-objectcache-retryable` header of an error answer and
   * the ERROR frame's `retryable` (schemas/wire-format.md section 4).
   */
  readonly retryable?: true;
}

export const ERRORS = {
  // --- authentication and authorisation (docs/reliability.md) ---
  OC_ERR_AUTH_MISSING: { status: 403, s3Code: 'AccessDenied', description: 'The request carries no SigV4 signature (anonymous access is not allowed).' },
  OC_ERR_AUTH_MALFORMED: { status: 400, s3Code: 'AuthorizationHeaderMalformed', description: 'The Authorization header or the presigned query parameters cannot be parsed.' },
  OC_ERR_AUTH_ALGORITHM: { status: 400, s3Code: 'InvalidArgument', description: 'Only AWS4-HMAC-SHA256 (SigV4) is supported.' },
  OC_ERR_AUTH_SIGV2_DISABLED: {
    status: 403,
    s3Code: 'AccessDenied',
    description: 'The request is signed with Signature Version 2, which this gateway refuses (--sigv2 off); sign it with SigV4.',
  },
  OC_ERR_POST_POLICY: {
    status: 403,
    s3Code: 'AccessDenied',
    description: 'A browser-form POST upload does not satisfy its policy (a condition, a field not in the policy, or the expiration; the message says which).',
  },
  OC_ERR_POST_FORM: {
    status: 400,
    s3Code: 'MalformedPOSTRequest',
    description: 'A browser-form POST upload is not a valid multipart/form-data body with policy, signature fields and one file.',
  },
  OC_ERR_POST_TOO_SMALL: { status: 400, s3Code: 'EntityTooSmall', description: "A browser-form POST upload is smaller than its policy's content-length-range allows." },
  OC_ERR_AUTH_MULTIPLE: { status: 400, s3Code: 'InvalidArgument', description: 'Header and query-string authentication were both used; only one is allowed.' },
  OC_ERR_AUTH_UNKNOWN_KEY: { status: 403, s3Code: 'InvalidAccessKeyId', description: 'The access key id is not one of the configured client credentials.' },
  OC_ERR_AUTH_SIGNATURE: { status: 403, s3Code: 'SignatureDoesNotMatch', description: 'The computed signature does not match the one the client sent.' },
  OC_ERR_AUTH_CLOCK_SKEW: { status: 403, s3Code: 'RequestTimeTooSkewed', description: 'The request time differs from the gateway clock by more than 15 minutes.' },
  OC_ERR_AUTH_EXPIRED: { status: 403, s3Code: 'AccessDenied', description: 'The presigned URL has expired.' },
  OC_ERR_AUTH_NOT_YET_VALID: { status: 403, s3Code: 'AccessDenied', description: 'The presigned URL is dated in the future.' },
  OC_ERR_AUTH_EXPIRES_RANGE: {
    status: 400,
    s3Code: 'AuthorizationQueryParametersError',
    description:
      'X-Amz-Expires is not a number, is negative, or is over 604800 seconds (0 is an expired URL: OC_ERR_AUTH_EXPIRED); or a Signature Version 2 Expires lies more than --sigv2-max-expires-seconds after the request.',
  },
  OC_ERR_AUTH_SCOPE: { status: 400, s3Code: 'AuthorizationHeaderMalformed', description: 'The credential scope names the wrong date, region or service.' },
  OC_ERR_AUTH_HEADERS_NOT_SIGNED: {
    status: 403,
    s3Code: 'AccessDenied',
    description:
      'The request carries x-amz-* headers (or, for Signature Version 2 presigned URLs, x-amz-* query parameters) that its signature does not cover (AWS S3: "There were headers present in the request which were not signed").',
  },
  OC_ERR_ACCESS_DENIED: {
    status: 403,
    s3Code: 'AccessDenied',
    description:
      "The key's access policy does not allow this (an explicit Deny, or no Allow; the message names the action and resource). A descriptor, lookup or DeleteObjects naming any such key is refused as a whole, before anything is read or deleted.",
  },
  OC_ERR_ACCESS_TENANT: {
    status: 403,
    s3Code: 'AccessDenied',
    description: "The descriptor's tenant is neither the key's own nor one its policy grants (objectcache:ActAsTenant).",
  },
  OC_ERR_AUTH_FORBIDDEN_HEADER: { status: 403, s3Code: 'AccessDenied', description: 'The request carries a header reserved for the object store (X-Minio-Internal-*).' },
  OC_ERR_ACCESS_RESERVED: {
    status: 403,
    s3Code: 'AccessDenied',
    description:
      "The request names one of the object store's reserved namespaces (--reserved-buckets: MinIO's admin, health, metrics and KMS APIs under /minio/, Ceph RGW's /admin/ and Swift paths) or an API that is not S3 (MinIO's STS); only the administrator key may send it.",
  },
  OC_ERR_STORE_NO_SUCH_BUCKET_POLICY: {
    status: 404,
    s3Code: 'NoSuchBucketPolicy',
    description: 'The bucket has no policy (the embedded store keeps none; access is the gateway\u2019s own policies, docs/access-control.md).',
  },
  OC_ERR_STORE_NO_SUCH_CORS: { status: 404, s3Code: 'NoSuchCORSConfiguration', description: 'The bucket has no CORS configuration (the embedded store keeps none).' },
  OC_ERR_QUOTA_EXCEEDED: {
    status: 403,
    s3Code: 'QuotaExceeded',
    description:
      "The write would take the tenant past its --tenant-quota, and not enough of the tenant's own chunks can be evicted (pinned, being read or written); nothing was stored. Another tenant's chunks are never evicted for it.",
  },
  OC_ERR_CAPACITY_FULL: {
    status: 503,
    s3Code: 'SlowDown',
    retryable: true,
    description:
      'The write would take its budgeted bucket past its --budget, and eviction did not make room within 5 s (the bucket is pinned, being read, or written faster than the store deletes); nothing was stored. Retry after the Retry-After delay.',
  },
  OC_ERR_CAPACITY_TOO_LARGE: {
    status: 400,
    s3Code: 'EntityTooLarge',
    description: 'The write is larger than its budgeted bucket\u2019s whole --budget, so it can never be stored there; nothing was stored.',
  },
  OC_ERR_KV_TOKENS: {
    status: 400,
    s3Code: 'InvalidArgument',
    description:
      'The chunk\u2019s x-amz-meta-objectcache-tokens is not a token list (base64url of unsigned LEB128 varints, at most 1,400 characters), or the chunk is named by an ObjectCache key that these tokens do not hash to (after the chunk its x-amz-meta-objectcache-after names); nothing was stored (schemas/kv-tokens.ts).',
  },
  OC_ERR_CAPACITY_UNMANAGED: {
    status: 400,
    s3Code: 'InvalidRequest',
    description: 'A pin names a bucket without a --budget: only budgeted buckets evict, so only their chunks can be pinned.',
  },
  OC_ERR_PIN_INVALID: {
    status: 400,
    s3Code: 'InvalidArgument',
    description: 'The pin request is not {"keys": [object keys], "until": an RFC 3339 time or null}; the message says what is wrong.',
  },
  OC_ERR_KEY_CONCURRENCY: {
    status: 503,
    s3Code: 'SlowDown',
    retryable: true,
    description: 'The access key already has its limit of requests in flight (--max-requests-per-key); retry after the Retry-After delay. Other keys are served meanwhile.',
  },

  // --- request shape ---
  OC_ERR_REQUEST_CONTENT_SHA256: { status: 400, s3Code: 'XAmzContentSHA256Mismatch', description: 'The body does not match x-amz-content-sha256.' },
  OC_ERR_REQUEST_MISSING_CONTENT_SHA256: { status: 400, s3Code: 'InvalidRequest', description: 'A header-signed request must carry x-amz-content-sha256.' },
  OC_ERR_REQUEST_BAD_DIGEST: { status: 400, s3Code: 'BadDigest', description: 'The body does not match Content-MD5 or the x-amz-checksum-* value.' },
  OC_ERR_REQUEST_INVALID_DIGEST: { status: 400, s3Code: 'InvalidDigest', description: 'Content-MD5 or an x-amz-checksum-* header is not valid base64 of the right length.' },
  OC_ERR_REQUEST_CHUNKED_ENCODING: { status: 400, s3Code: 'IncompleteBody', description: 'The aws-chunked body is malformed, truncated or longer than declared.' },
  OC_ERR_REQUEST_CHUNK_SIGNATURE: { status: 403, s3Code: 'SignatureDoesNotMatch', description: 'A chunk signature of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body does not match.' },
  OC_ERR_REQUEST_INCOMPLETE_BODY: { status: 400, s3Code: 'IncompleteBody', description: 'The body ended before Content-Length bytes arrived.' },
  OC_ERR_REQUEST_MISSING_LENGTH: {
    status: 411,
    s3Code: 'MissingContentLength',
    description: 'An upload must declare its length (Content-Length or x-amz-decoded-content-length).',
  },
  OC_ERR_REQUEST_TOO_LARGE: { status: 400, s3Code: 'EntityTooLarge', description: 'The body is larger than the configured maximum object size.' },
  OC_ERR_REQUEST_INVALID_BUCKET_NAME: { status: 400, s3Code: 'InvalidBucketName', description: 'The bucket name does not follow the S3 naming rules.' },
  OC_ERR_REQUEST_INVALID_KEY: { status: 400, s3Code: 'InvalidArgument', description: 'The object key is empty, too long (over 1024 bytes), or contains NUL or invalid UTF-8.' },
  OC_ERR_REQUEST_COPY_TO_ITSELF: {
    status: 400,
    s3Code: 'InvalidRequest',
    description: 'A CopyObject onto its own source changes nothing (use x-amz-metadata-directive: REPLACE to change its metadata).',
  },
  OC_ERR_REQUEST_INVALID_ARGUMENT: { status: 400, s3Code: 'InvalidArgument', description: 'A query parameter or header has an invalid value (the message names it).' },
  OC_ERR_REQUEST_MALFORMED_XML: { status: 400, s3Code: 'MalformedXML', description: 'The XML request body is not well formed or does not follow the S3 schema.' },
  OC_ERR_REQUEST_UNSUPPORTED_CHECKSUM: {
    status: 400,
    s3Code: 'InvalidRequest',
    description: 'The checksum algorithm is not supported (supported: CRC32, CRC32C, CRC64NVME, SHA1, SHA256).',
  },
  OC_ERR_REQUEST_NOT_IMPLEMENTED: { status: 501, s3Code: 'NotImplemented', description: 'The S3 operation is not implemented by the embedded store.' },
  OC_ERR_REQUEST_METHOD_NOT_ALLOWED: { status: 405, s3Code: 'MethodNotAllowed', description: 'The HTTP method is not allowed on this resource.' },
  OC_ERR_REQUEST_HEADER_TOO_LARGE: { status: 400, s3Code: 'RequestHeaderSectionTooLarge', description: 'The request headers exceed the configured limit.' },
  OC_ERR_REQUEST_TIMEOUT: {
    status: 400,
    s3Code: 'RequestTimeout',
    description: 'The client sent its request too slowly: no body byte for --body-idle-timeout-ms, or the whole request not within --request-timeout-ms. The connection is closed.',
  },
  OC_ERR_REQUEST_METADATA_TOO_LARGE: {
    status: 400,
    s3Code: 'MetadataTooLarge',
    description: 'The user metadata (x-amz-meta-*) exceeds 2 KB, or the stored headers and metadata together exceed what an object may carry.',
  },

  // --- store semantics (both backends) ---
  OC_ERR_STORE_NO_SUCH_BUCKET: { status: 404, s3Code: 'NoSuchBucket', description: 'The bucket does not exist.' },
  OC_ERR_STORE_NO_SUCH_KEY: { status: 404, s3Code: 'NoSuchKey', description: 'The object does not exist.' },
  OC_ERR_STORE_NO_SUCH_UPLOAD: { status: 404, s3Code: 'NoSuchUpload', description: 'The multipart upload does not exist (never created, completed or aborted).' },
  OC_ERR_STORE_BUCKET_EXISTS: { status: 409, s3Code: 'BucketAlreadyOwnedByYou', description: 'The bucket already exists.' },
  OC_ERR_STORE_BUCKET_NOT_EMPTY: { status: 409, s3Code: 'BucketNotEmpty', description: 'The bucket still holds objects or uploads.' },
  OC_ERR_STORE_INVALID_RANGE: { status: 416, s3Code: 'InvalidRange', description: 'The requested range is not satisfiable for the object size.' },
  OC_ERR_STORE_PRECONDITION_FAILED: { status: 412, s3Code: 'PreconditionFailed', description: 'An If-Match / If-Unmodified-Since (or If-None-Match on PUT) condition failed.' },
  OC_ERR_STORE_INVALID_PART: { status: 400, s3Code: 'InvalidPart', description: 'A part named in CompleteMultipartUpload is missing or its ETag differs.' },
  OC_ERR_STORE_INVALID_PART_NUMBER: { status: 416, s3Code: 'InvalidPartNumber', description: 'GET or HEAD with a partNumber the object does not have.' },
  OC_ERR_STORE_INVALID_PART_ORDER: { status: 400, s3Code: 'InvalidPartOrder', description: 'CompleteMultipartUpload lists parts out of ascending order.' },
  OC_ERR_STORE_ENTITY_TOO_SMALL: { status: 400, s3Code: 'EntityTooSmall', description: 'A part other than the last is smaller than 5 MiB.' },
  OC_ERR_STORE_IO: { status: 500, s3Code: 'InternalError', description: 'The embedded store failed to read or write its data directory.' },

  // --- the S3 backend behind the gateway ---
  OC_ERR_BACKEND_UNAVAILABLE: { status: 503, s3Code: 'ServiceUnavailable', retryable: true, description: 'The object store behind the gateway cannot be reached.' },
  OC_ERR_BACKEND_TIMEOUT: { status: 503, s3Code: 'ServiceUnavailable', retryable: true, description: 'The object store did not answer within the backend timeout.' },
  OC_ERR_BACKEND_PROTOCOL: { status: 502, s3Code: 'InternalError', description: 'The object store answered with something that is not valid S3.' },

  // --- descriptors and the layerwise GET (docs/layerwise-get.md) ---
  OC_ERR_DESCRIPTOR_ENCODING: { status: 400, s3Code: 'InvalidArgument', description: 'The descriptor is not base64 (header form) or not JSON.' },
  OC_ERR_DESCRIPTOR_INVALID: { status: 400, s3Code: 'InvalidArgument', description: 'One or more descriptor fields are wrong; the message names each of them.' },
  OC_ERR_DESCRIPTOR_LIMIT: { status: 400, s3Code: 'InvalidArgument', description: 'The descriptor exceeds a configured limit (keys, layers, layer bytes, total bytes).' },
  OC_ERR_DESCRIPTOR_UNSIGNED: { status: 403, s3Code: 'AccessDenied', description: 'The descriptor is not covered by the signature (sign the header, or send a hashed POST body).' },
  OC_ERR_DESCRIPTOR_KEY_MISMATCH: { status: 400, s3Code: 'InvalidArgument', description: "The GET path does not name the descriptor's last chunk key." },
  OC_ERR_CHUNK_MISSING: { status: 404, s3Code: 'NoSuchKey', description: 'A chunk named by the descriptor does not exist (the message names it).' },
  OC_ERR_CHUNK_SIZE: { status: 400, s3Code: 'InvalidArgument', description: 'A chunk object is not layers x layerBytes bytes long (the message names it).' },
  OC_ERR_CHUNK_CHANGED: {
    status: 409,
    s3Code: 'OperationAborted',
    retryable: true,
    description: 'A chunk object was overwritten while the layerwise GET was reading it (its ETag changed between reads): nothing of the new version was delivered. Retry the GET.',
  },
  OC_ERR_CHUNK_INDEX: {
    status: 400,
    s3Code: 'InvalidArgument',
    description:
      "An encoded chunk's index (its oc-codec and oc-slice-bytes metadata) is malformed, is not for the descriptor's layers, or does not add up to the object's size (the message names the chunk).",
  },
  OC_ERR_CODEC_UNACCEPTED: {
    status: 406,
    s3Code: 'InvalidRequest',
    description: 'A chunk is stored in an encoding the descriptor does not accept (its `codecs` field; absent: raw bytes only). The message names the chunk and its codec.',
  },
  OC_ERR_CODEC_MIXED: {
    status: 409,
    s3Code: 'InvalidRequest',
    description: "The prefix's chunks are stored in different encodings; one stream carries one. The message names the first chunk that differs.",
  },
  OC_ERR_CHUNK_CORRUPT: {
    status: 502,
    s3Code: 'InternalError',
    description: 'A slice read from a chunk does not match the CRC32C recorded when it was stored (the message names chunk and layer).',
  },
  OC_ERR_BACKEND_RANGE: { status: 502, s3Code: 'InternalError', description: 'A range read came back with the wrong status, Content-Range or length.' },
  OC_ERR_CLIENT_STALLED: {
    status: 408,
    s3Code: 'RequestTimeout',
    description: 'The client stopped reading the stream for longer than --client-stall-timeout-ms; the stream was ended to release its buffers.',
  },
  OC_ERR_POOL_BUSY: { status: 503, s3Code: 'SlowDown', retryable: true, description: 'The read-worker queue is full; retry after the Retry-After delay.' },
  OC_ERR_ADMISSION_LIMIT: {
    status: 503,
    s3Code: 'SlowDown',
    retryable: true,
    description: 'The gateway is at its limit of concurrent layerwise GETs or buffered bytes; retry after the Retry-After delay.',
  },
  OC_ERR_POOL_WORKER: { status: 500, s3Code: 'InternalError', description: 'A read worker failed while executing a task; only its own request fails.' },
  OC_ERR_CANCELLED: {
    status: 499,
    s3Code: 'RequestCancelled',
    description:
      'A read task was cancelled because its request ended first (the client went away, or a failure elsewhere ended the stream); it is what the worker answers for the task, and never what a client still connected receives.',
  },
  OC_ERR_SCHEDULER_CLOSED: {
    status: 503,
    s3Code: 'ServiceUnavailable',
    retryable: true,
    description: 'The gateway is shutting down and admits no more layerwise GETs; retry against another gateway or later.',
  },

  // --- start-up (never sent by the gateway; status 0) ---
  OC_ERR_CONFIG_INVALID: {
    status: 0,
    s3Code: '-',
    description: 'A setting (flag, environment variable or file) is invalid; the message names it, and `objectcache serve` exits with code 2.',
  },

  // --- the client library (never sent by the gateway; status 0) ---
  OC_ERR_CLIENT_PROTOCOL: {
    status: 0,
    s3Code: '-',
    description: 'The gateway\u2019s answer is not a valid ObjectCache answer: a stream\u2019s preamble, frame order or sizes, or a lookup or pin answer that is not short JSON.',
  },
  OC_ERR_CLIENT_CRC: { status: 0, s3Code: '-', description: 'A delivered payload does not match its CRC32C.' },
  OC_ERR_CLIENT_INCOMPLETE: {
    status: 0,
    s3Code: '-',
    retryable: true,
    description:
      'The stream ended before its END frame: its connection, or the gateway process serving it, went. The same fetch may succeed again; neither client sends it again itself, since layers were already announced.',
  },
  OC_ERR_CLIENT_TARGET: { status: 0, s3Code: '-', description: 'The target buffer is too small for the delivered layers.' },
  OC_ERR_CLIENT_TIMEOUT: {
    status: 0,
    s3Code: '-',
    description:
      'A client call did not finish within its overall deadline (the client\u2019s `deadline`): a gateway that answers slowly or trickles bytes cannot hold a call longer; nothing it wrote is complete.',
  },
  OC_ERR_CLIENT_USAGE: { status: 0, s3Code: '-', description: 'A client call or CLI option is invalid (the message names it).' },

  // --- the gateway itself ---
  OC_ERR_INTERNAL: { status: 500, s3Code: 'InternalError', description: 'An unexpected gateway failure (logged with the request id).' },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

/**
 * Where a read failed, in the one shape it keeps from the read worker to the wire: the chunk's
 * position in the prefix, its key, the layer. A worker's failure (ReadError in
 * gateway/threads/read-errors.ts, WorkerFailure in gateway/threads/protocol.ts) and the ERROR frame
 * (schemas/frames.ts ErrorPayload) carry these fields; an ObjectCacheError carries them as details
 * under the names of an S3 error document (ChunkIndex, Key, Layer), converted by these two
 * functions and nowhere else (fromWorkerFailure and encodeErrorPayload call them).
 */
export interface FailureSite {
  readonly chunk?: number | undefined;
  readonly key?: string | undefined;
  readonly layer?: number | undefined;
}

/** A site as an error's details (and XML elements): ChunkIndex, Key, Layer. */
export function siteDetails(site: FailureSite): Record<string, string | number> {
  const details: Record<string, string | number> = {};
  if (site.chunk !== undefined) details['ChunkIndex'] = site.chunk;
  if (site.key !== undefined) details['Key'] = site.key;
  if (site.layer !== undefined) details['Layer'] = site.layer;
  return details;
}

/** An error's site, from its details (for the ERROR frame). */
export function siteOf(details: Readonly<Record<string, string | number>>): FailureSite {
  return {
    ...(details['ChunkIndex'] !== undefined ? { chunk: Number(details['ChunkIndex']) } : {}),
    ...(details['Key'] !== undefined ? { key: String(details['Key']) } : {}),
    ...(details['Layer'] !== undefined ? { layer: Number(details['Layer']) } : {}),
  };
}

export interface ObjectCacheErrorOptions {
  readonly cause?: unknown;
  /** Extra elements for the S3 XML body (BucketName, Key, ...). */
  readonly details?: Readonly<Record<string, string | number>>;
  /** Whether retrying the same request may succeed; the code's (ErrorSpec.retryable) unless given. */
  readonly retryable?: boolean;
}

/**
 * The one error class of ObjectCache. Recognise it by `code`, never by message. Its subclasses
 * only add what their origin knows: ConfigError (gateway/common/config.ts) and PolicyError
 * (gateway/common/access-policy.ts) the setting, ReadError (gateway/threads/read-errors.ts) a read's site and
 * whether the worker may read again.
 */
export class ObjectCacheError extends Error {
  override readonly name = 'ObjectCacheError';
  readonly code: ErrorCode;
  readonly status: number;
  readonly s3Code: string;
  readonly details: Readonly<Record<string, string | number>>;
  /** Sending the same request again may succeed: the only meaning `retryable` has (ErrorSpec.retryable). */
  readonly retryable: boolean;

  constructor(code: ErrorCode, message: string, options: ObjectCacheErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const spec: ErrorSpec = ERRORS[code];
    this.code = code;
    this.status = spec.status;
    this.s3Code = spec.s3Code;
    this.details = options.details ?? {};
    this.retryable = options.retryable ?? spec.retryable === true;
  }
}
