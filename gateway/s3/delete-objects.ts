/**
 * The request of DeleteObjects (`POST /{bucket}?delete`), read, verified and checked in one place
 * for both backends: every key it names must be one the caller may delete, or nothing is deleted
 * (gateway/s3/auth/access.ts). S3 itself would delete the allowed keys and report the others; the
 * gateway refuses the whole request instead, as it does for descriptors and lookups. A key that
 * could not delete any object of the bucket is refused before the body is read, so that it
 * cannot make the gateway read and parse megabytes of XML at all.
 */
import { createHash } from 'node:crypto';
import { ObjectCacheError } from '../../schemas/errors.js';
import { objectKeyProblem } from '../../schemas/object-key.js';
import { authorize, authorizeSomeObject } from './auth/access.js';
import { s3Arn } from '../common/access-policy.js';
import { readWholeBody } from './body/upload-body.js';
import type { RequestContext } from './context.js';
import { MAX_XML_BODY_BYTES, parseXmlBody, S3_XMLNS, xmlList, xmlText } from './xml.js';

/** S3 accepts at most 1000 keys per DeleteObjects. */
export const MAX_DELETE_KEYS = 1000;

export interface DeleteObjectsRequest {
  /**
   * The request rebuilt from the keys that were checked, to pass on to an S3 backend: never the
   * client's bytes, which another XML reader (Go's, at MinIO) could read as other keys
   * (namespace-prefixed elements, a second <Key>, character references).
   */
  readonly forward: Buffer;
  readonly forwardMd5: string;
  readonly forwardSha256: string;
  readonly objects: readonly { readonly key: string; readonly versionId: string | undefined }[];
  readonly quiet: boolean;
}

/** XML text with markup and every control character escaped as a character reference. */
function xmlEscape(text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what it escapes
  return text.replace(/[&<>"'\x00-\x1f\x7f]/g, (c) => `&#x${c.charCodeAt(0).toString(16).toUpperCase()};`);
}

export async function readDeleteObjects(ctx: RequestContext): Promise<DeleteObjectsRequest> {
  authorizeSomeObject(ctx.auth.credential, ['s3:DeleteObject', 's3:DeleteObjectVersion'], ctx.target.bucket);
  const body = await readWholeBody(ctx.req, ctx.auth, MAX_XML_BODY_BYTES);
  const document = parseXmlBody(body.toString('utf8'), 'Delete');
  const elements = xmlList(document, 'Object');
  if (elements.length === 0 || elements.length > MAX_DELETE_KEYS) {
    throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', `DeleteObjects takes 1 to ${MAX_DELETE_KEYS} <Object> elements, got ${elements.length}`);
  }
  const objects = elements.map((element) => {
    const key = xmlText(element, 'Key');
    if (key === undefined || key === '') throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', 'Every <Object> needs a non-empty <Key>');
    // eslint-disable-next-line no-control-regex -- control characters are what it refuses
    const problem = objectKeyProblem(key) ?? (/[\x00-\x08\x0b\x0c\x0e-\x1f]/.test(key) ? 'contains a control character XML cannot carry' : undefined);
    if (problem !== undefined) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_KEY', `The key ${JSON.stringify(key.slice(0, 64))} ${problem}`);
    const versionId = xmlText(element, 'VersionId');
    return { key, versionId: versionId === undefined || versionId === '' ? undefined : versionId };
  });
  const { bucket } = ctx.target;
  const bypass = ctx.req.headers['x-amz-bypass-governance-retention'] !== undefined;
  authorize(
    ctx.auth.credential,
    objects.flatMap((o) => [
      { action: o.versionId === undefined ? ('s3:DeleteObject' as const) : ('s3:DeleteObjectVersion' as const), resource: s3Arn(bucket, o.key) },
      ...(bypass ? [{ action: 's3:BypassGovernanceRetention' as const, resource: s3Arn(bucket, o.key) }] : []),
    ]),
  );
  const quiet = xmlText(document, 'Quiet')?.trim() === 'true';
  const forward = Buffer.from(
    `<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="${S3_XMLNS}">${quiet ? '<Quiet>true</Quiet>' : ''}` +
      objects.map((o) => `<Object><Key>${xmlEscape(o.key)}</Key>${o.versionId === undefined ? '' : `<VersionId>${xmlEscape(o.versionId)}</VersionId>`}</Object>`).join('') +
      '</Delete>',
    'utf8',
  );
  ctx.deleteKeys = objects.map((o) => o.key);
  return {
    forward,
    forwardMd5: createHash('md5').update(forward).digest('base64'),
    forwardSha256: createHash('sha256').update(forward).digest('hex'),
    objects,
    quiet,
  };
}
