/**
 * Authorization: what each request needs from the access policy of the key that signed it
 * (gateway/common/access-policy.ts), checked after the signature and before the store is touched, so a
 * refusal never depends on whether a bucket or object exists.
 *
 * The mapping of operations to actions is IAM's for S3
 * (https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-with-s3-policy-actions.html).
 * Sub-resources are classified by name before the operation, so that `PUT /bucket?policy` is
 * s3:PutBucketPolicy, not CreateBucket; a query parameter that is neither an argument nor a
 * sub-resource the gateway knows makes the request unclassified, which only the administrator
 * key may send. Requests that name several objects (DeleteObjects, descriptors, lookups) are
 * refused as a whole when any one key is refused.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { ObjectCacheError } from '../../../schemas/errors.js';
import type { ClientCredential } from '../../common/config.js';
import { s3Operation, type S3Operation } from '../operation.js';
import { parseCopySource, queryValue, type S3Target } from '../request.js';
import { s3Arn, tenantArn, type Action, type ConditionContext, type Decision } from '../../common/access-policy.js';

export interface Check {
  readonly action: Action;
  readonly resource: string;
  readonly context?: ConditionContext;
}

/** Query parameters that are arguments of an operation, not sub-resources. */
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
  'metadata',
  'uploadId',
  'partNumber',
  'part-number-marker',
  'max-parts',
  'max-uploads',
  'key-marker',
  'upload-id-marker',
  'version-id-marker',
  'versionId',
  'select-type',
  'response-content-type',
  'response-content-language',
  'response-expires',
  'response-cache-control',
  'response-content-disposition',
  'response-content-encoding',
  // sub-resources that s3Operation() names
  'uploads',
  'delete',
  'location',
  'versions',
  'acl',
  'attributes',
]);

/** Query parameters that make a request another operation (MinIO routes them first). */
const OPERATION_PARAMETERS = new Set(['uploads', 'uploadId', 'partNumber', 'delete', 'location', 'versions', 'acl', 'attributes']);

/**
 * Request headers that make MinIO act on objects other than the one the request names: a file
 * inside a zip (`x-minio-extract`), the entries of an uploaded tar written under their own names
 * (the snowball auto-extract metadata), replication internals. Administrator key only.
 */
export const UNSAFE_HEADERS: readonly RegExp[] = [/^x-minio-extract$/, /^x-amz-meta-(minio-)?snowball-/, /^x-amz-replication-status$/, /^x-minio-source-/];

type ByMethod = Partial<Record<string, Action>>;

/** Sub-resources s3Operation() does not name, by level and method. */
const BUCKET_SUBRESOURCES: Record<string, ByMethod> = {
  policy: { GET: 's3:GetBucketPolicy', PUT: 's3:PutBucketPolicy', DELETE: 's3:DeleteBucketPolicy' },
  tagging: { GET: 's3:GetBucketTagging', PUT: 's3:PutBucketTagging', DELETE: 's3:PutBucketTagging' },
  versioning: { GET: 's3:GetBucketVersioning', PUT: 's3:PutBucketVersioning' },
  lifecycle: { GET: 's3:GetLifecycleConfiguration', PUT: 's3:PutLifecycleConfiguration', DELETE: 's3:PutLifecycleConfiguration' },
  cors: { GET: 's3:GetBucketCORS', PUT: 's3:PutBucketCORS', DELETE: 's3:PutBucketCORS' },
  encryption: { GET: 's3:GetEncryptionConfiguration', PUT: 's3:PutEncryptionConfiguration', DELETE: 's3:PutEncryptionConfiguration' },
  notification: { GET: 's3:GetBucketNotification', PUT: 's3:PutBucketNotification' },
  'object-lock': { GET: 's3:GetBucketObjectLockConfiguration', PUT: 's3:PutBucketObjectLockConfiguration' },
  replication: { GET: 's3:GetReplicationConfiguration', PUT: 's3:PutReplicationConfiguration', DELETE: 's3:PutReplicationConfiguration' },
};
const OBJECT_SUBRESOURCES: Record<string, ByMethod> = {
  tagging: { GET: 's3:GetObjectTagging', PUT: 's3:PutObjectTagging', DELETE: 's3:DeleteObjectTagging' },
  retention: { GET: 's3:GetObjectRetention', PUT: 's3:PutObjectRetention' },
  'legal-hold': { GET: 's3:GetObjectLegalHold', PUT: 's3:PutObjectLegalHold' },
  select: { POST: 's3:GetObject' },
  restore: { POST: 's3:RestoreObject' },
};

/** What a request needs: checks, or a decision made elsewhere (a list filtered, a body read). */
export type Requirement =
  | { readonly kind: 'checks'; readonly checks: readonly Check[] }
  | { readonly kind: 'list-buckets' }
  | { readonly kind: 'delete-objects' }
  | { readonly kind: 'unclassified'; readonly what: string };

function listContext(target: S3Target): ConditionContext {
  const delimiter = queryValue(target, 'delimiter');
  // MinIO lists `/secret/` as `secret/`: the condition sees the prefix that is listed.
  const prefix = (queryValue(target, 'prefix') ?? '').replace(/^\/+/, '');
  return { 's3:prefix': prefix, ...(delimiter !== undefined ? { 's3:delimiter': delimiter } : {}) };
}

const BUCKET_ACTIONS: Partial<Record<S3Operation, Action>> = {
  CreateBucket: 's3:CreateBucket',
  HeadBucket: 's3:ListBucket',
  DeleteBucket: 's3:DeleteBucket',
  GetBucketLocation: 's3:GetBucketLocation',
  ListMultipartUploads: 's3:ListBucketMultipartUploads',
  ListObjects: 's3:ListBucket',
  ListObjectsV2: 's3:ListBucket',
  ListObjectVersions: 's3:ListBucketVersions',
  GetBucketAcl: 's3:GetBucketAcl',
  PutBucketAcl: 's3:PutBucketAcl',
};
const OBJECT_ACTIONS: Partial<Record<S3Operation, Action>> = {
  ListParts: 's3:ListMultipartUploadParts',
  GetObject: 's3:GetObject',
  HeadObject: 's3:GetObject',
  UploadPart: 's3:PutObject',
  PutObject: 's3:PutObject',
  AbortMultipartUpload: 's3:AbortMultipartUpload',
  DeleteObject: 's3:DeleteObject',
  CreateMultipartUpload: 's3:PutObject',
  CompleteMultipartUpload: 's3:PutObject',
  GetObjectAcl: 's3:GetObjectAcl',
  PutObjectAcl: 's3:PutObjectAcl',
  GetObjectAttributes: 's3:GetObjectAttributes',
};

/** What an ordinary S3 request (not a descriptor or lookup) needs from the key's policy. */
export function requirementOf(method: string, target: S3Target, headers: IncomingHttpHeaders): Requirement {
  const { bucket, key } = target;
  const objectLevel = key !== '';
  const unsafe = Object.keys(headers).find((name) => UNSAFE_HEADERS.some((pattern) => pattern.test(name)));
  if (unsafe !== undefined) return { kind: 'unclassified', what: `a request with ${unsafe}` };
  let subresourceAction: Action | undefined;
  for (const [name] of target.query) {
    // x-amz-* query parameters left here (a presigned URL's were hoisted into headers before this)
    // are read by MinIO as metadata and settings: administrator key only.
    if (name.toLowerCase().startsWith('x-amz-')) return { kind: 'unclassified', what: `${method} with the query parameter ${name}` };
    if (ARGUMENTS.has(name)) continue;
    const table = objectLevel ? OBJECT_SUBRESOURCES : BUCKET_SUBRESOURCES;
    const action = bucket === '' ? undefined : table[name]?.[method];
    if (action === undefined || (subresourceAction !== undefined && subresourceAction !== action)) {
      return { kind: 'unclassified', what: `${method} with ?${name}` };
    }
    subresourceAction = action;
  }
  if (subresourceAction !== undefined) {
    // MinIO routes multipart and the other operations' parameters before these sub-resources: a
    // request that carries both would be checked as one operation and run as another.
    const other = target.query.find(([name]) => OPERATION_PARAMETERS.has(name));
    if (other !== undefined) return { kind: 'unclassified', what: `${method} with a sub-resource and ?${other[0]}` };
    return { kind: 'checks', checks: [{ action: subresourceAction, resource: objectLevel ? s3Arn(bucket, key) : s3Arn(bucket) }, ...headerChecks(bucket, key, headers)] };
  }
  // Two operations' parameters together: MinIO would pick one by its route order.
  const operationParameters = target.query.filter(([name]) => OPERATION_PARAMETERS.has(name) || name === 'list-type').map(([name]) => name);
  const multipartPart = operationParameters.length === 2 && operationParameters.includes('uploadId') && operationParameters.includes('partNumber');
  if (new Set(operationParameters).size > 1 && !multipartPart) return { kind: 'unclassified', what: `${method} with ?${operationParameters.join('&?')}` };

  const operation = s3Operation(method, target);
  if (operation === undefined) return { kind: 'unclassified', what: `${method} ${objectLevel ? 'on an object' : bucket !== '' ? 'on a bucket' : 'on the service'}` };
  if (operation === 'ListBuckets') return { kind: 'list-buckets' };
  if (operation === 'DeleteObjects') return { kind: 'delete-objects' };
  const versioned = queryValue(target, 'versionId') !== undefined;
  const bucketAction = BUCKET_ACTIONS[operation];
  if (operation === 'CreateBucket' && headers['x-amz-bucket-object-lock-enabled'] !== undefined) {
    // A bucket made with object lock on: as S3 and MinIO, that is also the lock configuration's.
    return {
      kind: 'checks',
      checks: [
        { action: 's3:CreateBucket', resource: s3Arn(bucket) },
        { action: 's3:PutBucketObjectLockConfiguration', resource: s3Arn(bucket) },
      ],
    };
  }
  if (bucketAction !== undefined) {
    const list = bucketAction === 's3:ListBucket' || bucketAction === 's3:ListBucketVersions' || bucketAction === 's3:ListBucketMultipartUploads';
    return { kind: 'checks', checks: [{ action: bucketAction, resource: s3Arn(bucket), ...(list && operation !== 'HeadBucket' ? { context: listContext(target) } : {}) }] };
  }
  let action = OBJECT_ACTIONS[operation];
  if (action === undefined) return { kind: 'unclassified', what: operation };
  if (versioned && action === 's3:GetObject') action = 's3:GetObjectVersion';
  if (versioned && action === 's3:DeleteObject') action = 's3:DeleteObjectVersion';
  const checks = [{ action, resource: s3Arn(bucket, key) }, ...headerChecks(bucket, key, headers)];
  // One check of each (action, resource): a copy's PutObject is the operation's own.
  return { kind: 'checks', checks: checks.filter((c, i) => checks.findIndex((d) => d.action === c.action && d.resource === c.resource) === i) };
}

/**
 * What headers ask beside the operation, checked on every request that carries them, whatever its
 * operation (MinIO routes a PUT with x-amz-copy-source to CopyObject before ?retention or
 * ?legal-hold, and honours object-lock and tagging headers there):
 * - x-amz-copy-source: the source is read (`s3:GetObject`) and the named object written
 *   (`s3:PutObject`); the store copies with the gateway's key;
 * - object-lock, legal-hold and tagging headers: `s3:PutObjectRetention`, `s3:PutObjectLegalHold`,
 *   `s3:PutObjectTagging`;
 * - x-amz-bypass-governance-retention: `s3:BypassGovernanceRetention`.
 */
export function headerChecks(bucket: string, key: string, headers: IncomingHttpHeaders): Check[] {
  const checks: Check[] = [];
  const object = s3Arn(bucket, key);
  const has = (name: string): boolean => headers[name] !== undefined;
  const copySource = headers['x-amz-copy-source'];
  if (copySource !== undefined) {
    const source = parseCopySource(Array.isArray(copySource) ? copySource.join(',') : copySource);
    checks.push({ action: source.versionId !== undefined ? 's3:GetObjectVersion' : 's3:GetObject', resource: s3Arn(source.bucket, source.key) });
    if (key !== '') checks.push({ action: 's3:PutObject', resource: object });
  }
  if (key !== '') {
    if (has('x-amz-object-lock-mode') || has('x-amz-object-lock-retain-until-date')) checks.push({ action: 's3:PutObjectRetention', resource: object });
    if (has('x-amz-object-lock-legal-hold')) checks.push({ action: 's3:PutObjectLegalHold', resource: object });
    if (has('x-amz-tagging')) checks.push({ action: 's3:PutObjectTagging', resource: object });
    if (has('x-amz-bypass-governance-retention')) checks.push({ action: 's3:BypassGovernanceRetention', resource: object });
  }
  return checks;
}

function denied(credential: ClientCredential, action: Action, resource: string, decision: Extract<Decision, { allowed: false }>): ObjectCacheError {
  const why = decision.explicit
    ? `an explicit Deny in its policy${decision.sid === undefined ? '' : ` (statement ${decision.sid})`}`
    : credential.access.empty
      ? 'it has no access policy'
      : 'no statement of its policy allows it';
  return new ObjectCacheError('OC_ERR_ACCESS_DENIED', `Access Denied: the key ${credential.accessKeyId} may not ${action} on ${resource} (${why})`, {
    details: { Action: action, Resource: resource },
  });
}

/** Throws OC_ERR_ACCESS_DENIED unless every check is allowed. */
export function authorize(credential: ClientCredential, checks: readonly Check[]): void {
  const policy = credential.access;
  if (policy.unrestricted) return;
  for (const check of checks) {
    const decision = policy.decide(check.action, check.resource, check.context);
    if (!decision.allowed) throw denied(credential, check.action, check.resource, decision);
  }
}

/**
 * Throws OC_ERR_ACCESS_DENIED unless `action` is allowed on every one of `keys` in `bucket`:
 * the descriptor, lookup and DeleteObjects rule (one refused key refuses the whole request).
 */
export function authorizeKeys(credential: ClientCredential, action: Action, bucket: string, keys: readonly string[]): void {
  const policy = credential.access;
  if (policy.unrestricted) return;
  const check = policy.objectChecker(action, bucket);
  for (const key of keys) {
    const decision = check(key);
    if (!decision.allowed) throw denied(credential, action, s3Arn(bucket, key), decision);
  }
}

/**
 * Throws OC_ERR_ACCESS_DENIED unless the key's policy could allow one of `actions` on some object
 * of `bucket` (AccessPolicy.mayEverOnSomeObject: conditions and Denies ignored). The check that
 * needs no body: a request that names its keys in a body (a descriptor, a lookup, DeleteObjects)
 * from a key that can act on nothing there is refused before the body is read or parsed. The
 * decision per key comes once the body is read.
 */
export function authorizeSomeObject(credential: ClientCredential, actions: readonly Action[], bucket: string): void {
  if (credential.access.mayEverOnSomeObject(actions, bucket)) return;
  const why = credential.access.empty ? 'it has no access policy' : 'no statement of its policy allows it on an object of this bucket';
  throw new ObjectCacheError('OC_ERR_ACCESS_DENIED', `Access Denied: the key ${credential.accessKeyId} may not ${actions.join(' or ')} on any object of ${bucket} (${why})`, {
    details: { Action: actions[0] as string, Resource: s3Arn(bucket, '*') },
  });
}

/** The unclassified request's refusal: only the administrator key sends what policies cannot name. */
export function authorizeUnclassified(credential: ClientCredential, what: string): void {
  if (credential.access.unrestricted) return;
  throw new ObjectCacheError('OC_ERR_ACCESS_DENIED', `Access Denied: ${what} is not an operation access policies cover; only the administrator key may send it`);
}

/**
 * The tenant a layerwise GET is scheduled and counted as: the key's own, or the descriptor's when
 * it names the key's own or one the policy grants (objectcache:ActAsTenant).
 */
export function tenantFor(credential: ClientCredential, claimed: string | undefined): string {
  if (claimed === undefined || claimed === credential.tenant) return credential.tenant;
  if (credential.access.allows('objectcache:ActAsTenant', tenantArn(claimed))) return claimed;
  throw new ObjectCacheError(
    'OC_ERR_ACCESS_TENANT',
    `The descriptor names the tenant ${JSON.stringify(claimed)}, but the key ${credential.accessKeyId} belongs to ${JSON.stringify(credential.tenant)} and its policy does not grant objectcache:ActAsTenant on ${tenantArn(claimed)}`,
    {
      details: { Tenant: claimed },
    },
  );
}

/**
 * Whether some key of `tenant` may write `key` in `bucket` (s3:PutObject): what a write another
 * gateway journalled for the tenant must pass to be applied (gateway/capacity/capacity.ts).
 */
export function tenantMayWrite(credentials: readonly ClientCredential[], tenant: string, bucket: string, key: string): boolean {
  const arn = s3Arn(bucket, key);
  return credentials.some((c) => c.tenant === tenant && c.access.allows('s3:PutObject', arn));
}

/**
 * The object store's own APIs (--reserved-buckets: MinIO's /minio/ admin, health, metrics and KMS
 * routes, Ceph RGW's /admin/ and Swift entries) parse as a bucket and key, and a passthrough that
 * re-signs them with the backend's key would hand any key the store's root rights. Only the
 * administrator key reaches them; every other key is refused whatever its policy says, on every
 * request shape (plain S3, descriptor, lookup, copy source, form upload).
 */
export function authorizeNamespace(credential: ClientCredential | undefined, bucket: string, reserved: ReadonlySet<string>, role = 'path'): void {
  if (bucket === '' || !reserved.has(bucket.toLowerCase())) return;
  if (credential?.access.unrestricted === true) return;
  throw new ObjectCacheError(
    'OC_ERR_ACCESS_RESERVED',
    `Access Denied: /${bucket}/ is reserved (the object store's own API, --reserved-buckets, or the gateways' own state: the capacity state and segment buckets); only the administrator key may use it${role === 'path' ? '' : ` (in ${role})`}`,
    {
      details: { BucketName: bucket },
    },
  );
}

/** What a route authorizes from its request line and headers alone, before any body is read (gateway/pipeline/routes.ts). */
export type LineNeed =
  /** One of these actions on some object of the bucket: the keys come in the body and are checked once read. */
  | { readonly someObject: readonly Action[] }
  /** What the S3 operation requires (requirementOf). */
  | 'operation';

/**
 * A signed request's authorization before its body is read, in one place: the store's reserved
 * namespaces kept from every key but the administrator's (the path, and a copy's source), then
 * what its route needs. A bucket listing without s3:ListAllMyBuckets is answered filtered.
 */
export function authorizeLine(
  credential: ClientCredential,
  method: string,
  target: S3Target,
  headers: IncomingHttpHeaders,
  reserved: ReadonlySet<string>,
  need: LineNeed,
): { readonly filteredListing: boolean } {
  authorizeNamespace(credential, target.bucket, reserved);
  const copySource = headers['x-amz-copy-source'];
  if (copySource !== undefined) authorizeNamespace(credential, parseCopySource(String(copySource)).bucket, reserved, 'x-amz-copy-source');
  if (need !== 'operation') {
    authorizeSomeObject(credential, need.someObject, target.bucket);
    return { filteredListing: false };
  }
  const requirement = requirementOf(method, target, headers);
  if (requirement.kind === 'checks') authorize(credential, requirement.checks);
  else if (requirement.kind === 'unclassified') authorizeUnclassified(credential, requirement.what);
  return { filteredListing: requirement.kind === 'list-buckets' && !credential.access.allows('s3:ListAllMyBuckets', s3Arn('*')) };
}
