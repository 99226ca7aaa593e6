/**
 * Listing and bucket details common tools depend on, on both backends with MinIO direct as the
 * reference: keys under encoding-type=url encoded as S3 encodes them (space as +, / and * kept,
 * ~ encoded) in ListObjects v1 and v2, max-keys=0 answered untruncated and empty, DeleteBucket
 * of a bucket that holds only an open multipart upload, ListObjectVersions of an unversioned
 * bucket (how tools empty buckets), and the owner-only ACL (canned private accepted).
 */
import {
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  GetBucketAclCommand,
  GetObjectAclCommand,
  HeadBucketCommand,
  ListObjectVersionsCommand,
  PutObjectAclCommand,
  PutObjectCommand,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { COMPAT_TARGETS, compatSuite, uniqueBucket } from './helpers/gateway.js';
import { SignatureV4 } from '@smithy/signature-v4';
import { EMPTY_PAYLOAD_SHA256, NodeSha256 } from '../sigv4/signer.js';

const KEY = 'dir one/a b~c+d*e=f&g.txt';

describe.each(COMPAT_TARGETS)('listing details (%s)', (target) => {
  const suite = compatSuite(target, 'list', async (s3, bucket) => {
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: KEY, Body: 'x' }));
  });
  const { bucket } = suite;

  /** A signed GET of the bucket with the given query, as raw XML (the SDK would decode it). */
  async function list(query: Record<string, string>): Promise<string> {
    const path = `/${bucket}`;
    const url = new URL(suite.endpoint.url);
    const signer = new SignatureV4({ credentials: suite.endpoint.credentials, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
    const { headers } = await signer.sign({
      method: 'GET',
      protocol: 'http:',
      hostname: url.hostname,
      port: Number(url.port),
      path,
      query,
      headers: { host: url.host, 'x-amz-content-sha256': EMPTY_PAYLOAD_SHA256 },
    });
    const res = await fetch(`${suite.endpoint.url}${path}?${new URLSearchParams(query).toString()}`, { headers: headers as Record<string, string> });
    expect(res.status).toBe(200);
    return res.text();
  }

  it('encodes keys under encoding-type=url as S3 does, in v1 and v2', async () => {
    const encoded = 'dir+one/a+b%7Ec%2Bd*e%3Df%26g.txt';
    expect(await list({ 'encoding-type': 'url' })).toContain(`<Key>${encoded}</Key>`);
    expect(await list({ 'list-type': '2', 'encoding-type': 'url' })).toContain(`<Key>${encoded}</Key>`);
    expect(await list({ 'list-type': '2', 'encoding-type': 'url', delimiter: '/' })).toContain('<Prefix>dir+one/</Prefix>');
  });

  it('answers max-keys=0 with nothing and IsTruncated false', async () => {
    for (const query of [{ 'max-keys': '0' }, { 'list-type': '2', 'max-keys': '0' }]) {
      const xml = await list(query);
      expect(xml).toContain('<IsTruncated>false</IsTruncated>');
      expect(xml).not.toContain('<Contents>');
    }
  });

  it('lists every object once as its only version (VersionId null), page by page', async () => {
    const name = uniqueBucket('list-v');
    await suite.s3.send(new CreateBucketCommand({ Bucket: name }));
    const keys = ['a', 'b/1', 'b/2', 'c'];
    for (const key of keys) await suite.s3.send(new PutObjectCommand({ Bucket: name, Key: key, Body: key }));
    const seen: string[] = [];
    let keyMarker: string | undefined;
    for (let page = 0; page < 10; page++) {
      const out = await suite.s3.send(new ListObjectVersionsCommand({ Bucket: name, MaxKeys: 3, ...(keyMarker ? { KeyMarker: keyMarker } : {}) }));
      for (const v of out.Versions ?? []) {
        expect(v.VersionId).toBe('null');
        expect(v.IsLatest).toBe(true);
        seen.push(v.Key as string);
      }
      if (!out.IsTruncated) break;
      keyMarker = out.NextKeyMarker;
    }
    expect(seen).toEqual(keys);
    const grouped = await suite.s3.send(new ListObjectVersionsCommand({ Bucket: name, Delimiter: '/' }));
    expect(grouped.CommonPrefixes?.map((p) => p.Prefix)).toEqual(['b/']);
  });

  it('answers the owner-only ACL and accepts the canned private ACL', async () => {
    const bucketAcl = await suite.s3.send(new GetBucketAclCommand({ Bucket: bucket }));
    expect(bucketAcl.Grants?.map((g) => g.Permission)).toEqual(['FULL_CONTROL']);
    expect(bucketAcl.Owner).toBeDefined();
    const objectAcl = await suite.s3.send(new GetObjectAclCommand({ Bucket: bucket, Key: KEY }));
    expect(objectAcl.Grants?.map((g) => g.Permission)).toEqual(['FULL_CONTROL']);
    await suite.s3.send(new PutObjectAclCommand({ Bucket: bucket, Key: KEY, ACL: 'private' }));
    await suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'private-put', Body: 'x', ACL: 'private' }));
    const missing = await suite.s3.send(new GetObjectAclCommand({ Bucket: bucket, Key: 'never-written' })).catch((e: S3ServiceException) => e);
    expect((missing as S3ServiceException).$metadata.httpStatusCode).toBe(404);
  });

  it('deletes a bucket that holds only an open multipart upload', async () => {
    const name = uniqueBucket('list-mp');
    await suite.s3.send(new CreateBucketCommand({ Bucket: name }));
    await suite.s3.send(new PutObjectCommand({ Bucket: name, Key: 'k', Body: 'x' }));
    await suite.s3.send(new CreateMultipartUploadCommand({ Bucket: name, Key: 'open' }));
    await suite.s3.send(new DeleteObjectCommand({ Bucket: name, Key: 'k' }));
    await suite.s3.send(new DeleteBucketCommand({ Bucket: name }));
    const gone = await suite.s3.send(new HeadBucketCommand({ Bucket: name })).catch((e: S3ServiceException) => e);
    expect((gone as S3ServiceException).$metadata.httpStatusCode).toBe(404);
  });
});
