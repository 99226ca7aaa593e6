/**
 * ListBuckets for a key whose policy does not grant s3:ListAllMyBuckets: the gateway answers it
 * itself with only the buckets the key may list, at least in part (a ListBucket Allow matches the
 * bucket and no unconditional Deny does), as MinIO does for users without that permission.
 */
import { XMLParser } from 'fast-xml-parser';
import { ObjectCacheError } from '../../schemas/errors.js';
import type { AccessPolicy } from '../common/access-policy.js';
import { s3Arn } from '../common/access-policy.js';
import type { RequestContext } from './context.js';
import { sendXml } from './respond.js';
import { buildXml } from './xml.js';

export interface BucketEntry {
  readonly name: string;
  /** Creation time, ms since the epoch. */
  readonly created: number;
}

/** The owner every ListBuckets answer names (one owner: the gateway). */
export const OWNER = { ID: 'objectcache', DisplayName: 'objectcache' };

export function sendBucketList(ctx: RequestContext, buckets: readonly BucketEntry[]): void {
  const entries = buckets.map((b) => ({ Name: b.name, CreationDate: new Date(b.created).toISOString() }));
  sendXml(ctx.res, 200, buildXml('ListAllMyBucketsResult', { Owner: OWNER, Buckets: { Bucket: entries } }));
}

export function visibleBuckets(policy: AccessPolicy, buckets: readonly BucketEntry[]): BucketEntry[] {
  return buckets.filter((b) => policy.mayEver('s3:ListBucket', s3Arn(b.name)));
}

const parser = new XMLParser({ ignoreAttributes: true, parseTagValue: false, isArray: (name) => name === 'Bucket' });

/** The buckets of an S3 ListBuckets answer. */
export function parseBucketList(xml: string): BucketEntry[] {
  const document = parser.parse(xml) as { ListAllMyBucketsResult?: { Buckets?: { Bucket?: { Name?: unknown; CreationDate?: unknown }[] } | '' } };
  const result = document.ListAllMyBucketsResult;
  if (result === undefined) throw new ObjectCacheError('OC_ERR_BACKEND_PROTOCOL', 'The store answered ListBuckets without a ListAllMyBucketsResult');
  const list = typeof result.Buckets === 'object' ? (result.Buckets.Bucket ?? []) : [];
  const text = (value: unknown): string => (typeof value === 'string' ? value : '');
  return list.map((b) => ({ name: text(b.Name), created: Date.parse(text(b.CreationDate)) || 0 }));
}
