/**
 * The S3 front door, through the real gateway, in both backend modes (embedded store and a real
 * MinIO), with @aws-sdk/client-s3 and the minio client.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetBucketCorsCommand,
  GetBucketPolicyCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsCommand,
  ListObjectsV2Command,
  ListPartsCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { signedHeaders } from './helpers/signing.js';
import { metricValue, minioClient, sdkClient, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';

const minio = inject('minio');

async function bodyBytes(body: unknown): Promise<Buffer> {
  return Buffer.from(await (body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
}

async function s3Error(promise: Promise<unknown>): Promise<S3ServiceException> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof S3ServiceException) return error;
    throw error;
  }
  throw new Error('expected the request to fail');
}

describe.each<BackendKind>(['local', 's3'])('S3 front door (%s backend)', (backend) => {
  let gw: TestGateway;
  let s3: S3Client;
  let bucket: string;

  beforeAll(async () => {
    gw = await startTestGateway({ backend, minio });
    s3 = sdkClient(gw.url);
    bucket = uniqueBucket();
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  });

  afterAll(async () => {
    s3?.destroy();
    await gw?.close();
  });

  it('round-trips objects byte-exact with the AWS SDK (PUT, GET, HEAD, metadata)', async () => {
    for (const size of [0, 1, 65_536 + 7, 3 * 1024 * 1024 + 5]) {
      const data = randomBytes(size);
      const key = `sdk/object-${size}`;
      const put = await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: data, ContentType: 'application/x-kv', Metadata: { layers: '32' } }));
      expect(put.ETag).toBe(`"${createHash('md5').update(data).digest('hex')}"`);
      const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      expect((await bodyBytes(got.Body)).equals(data)).toBe(true);
      const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
      expect(head.ContentLength).toBe(size);
      expect(head.ContentType).toBe('application/x-kv');
      expect(head.Metadata).toEqual({ layers: '32' });
      expect(head.$metadata.httpStatusCode).toBe(200);
    }
  });

  it('serves byte ranges (206 with Content-Range) and answers a bad range with 416 InvalidRange', async () => {
    const data = randomBytes(10_000);
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'ranged', Body: data }));
    const cases: [string, number, number][] = [
      ['bytes=0-0', 0, 0],
      ['bytes=100-4999', 100, 4999],
      ['bytes=9000-', 9000, 9999],
      ['bytes=-10', 9990, 9999],
      ['bytes=9990-20000', 9990, 9999],
    ];
    for (const [range, start, end] of cases) {
      const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'ranged', Range: range }));
      expect(got.$metadata.httpStatusCode).toBe(206);
      expect(got.ContentRange).toBe(`bytes ${start}-${end}/10000`);
      expect((await bodyBytes(got.Body)).equals(data.subarray(start, end + 1))).toBe(true);
    }
    const error = await s3Error(s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'ranged', Range: 'bytes=10000-10010' })));
    expect(error.$metadata.httpStatusCode).toBe(416);
    expect(error.name).toBe('InvalidRange');
  });

  it('answers a missing key with 404 NoSuchKey and a missing bucket with 404 NoSuchBucket', async () => {
    const missing = await s3Error(s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'does/not/exist' })));
    expect(missing.$metadata.httpStatusCode).toBe(404);
    expect(missing.name).toBe('NoSuchKey');
    const noBucket = await s3Error(s3.send(new GetObjectCommand({ Bucket: uniqueBucket('absent'), Key: 'x' })));
    expect(noBucket.$metadata.httpStatusCode).toBe(404);
    expect(noBucket.name).toBe('NoSuchBucket');
  });

  it('deletes objects one by one and in batches', async () => {
    for (const key of ['del/a', 'del/b', 'del/c']) await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: key }));
    const one = await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'del/a' }));
    expect(one.$metadata.httpStatusCode).toBe(204);
    expect((await s3Error(s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'del/a' })))).name).toBe('NoSuchKey');
    const batch = await s3.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: 'del/b' }, { Key: 'del/c' }, { Key: 'del/never-existed' }] } }));
    expect(batch.Deleted?.map((d) => d.Key).sort()).toEqual(['del/b', 'del/c', 'del/never-existed']);
    expect(batch.Errors ?? []).toEqual([]);
    const left = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'del/' }));
    expect(left.KeyCount).toBe(0);
  });

  it('lists with prefix, delimiter and continuation (ListObjectsV2 and ListObjects)', async () => {
    const keys = ['list/a/1', 'list/a/2', 'list/b', 'list/c/1', 'list/d', 'list/e/x/y', 'other'];
    for (const key of keys) await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: key }));
    const flat: string[] = [];
    let token: string | undefined;
    let pages = 0;
    do {
      const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'list/', MaxKeys: 2, ContinuationToken: token }));
      flat.push(...(page.Contents ?? []).map((c) => c.Key as string));
      token = page.NextContinuationToken;
      pages++;
      expect(page.Contents?.length ?? 0).toBeLessThanOrEqual(2);
      expect(page.IsTruncated).toBe(token !== undefined);
    } while (token !== undefined);
    expect(flat).toEqual(keys.filter((k) => k.startsWith('list/')));
    // The embedded store knows the last page is the last; MinIO may answer one more, empty page.
    expect(pages).toBeGreaterThanOrEqual(3);
    expect(pages).toBeLessThanOrEqual(4);

    const grouped = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'list/', Delimiter: '/' }));
    expect((grouped.Contents ?? []).map((c) => c.Key)).toEqual(['list/b', 'list/d']);
    expect((grouped.CommonPrefixes ?? []).map((p) => p.Prefix)).toEqual(['list/a/', 'list/c/', 'list/e/']);

    const v1 = await s3.send(new ListObjectsCommand({ Bucket: bucket, Prefix: 'list/', Delimiter: '/', MaxKeys: 100 }));
    expect((v1.Contents ?? []).map((c) => c.Key)).toEqual(['list/b', 'list/d']);
    expect((v1.CommonPrefixes ?? []).map((p) => p.Prefix)).toEqual(['list/a/', 'list/c/', 'list/e/']);
  });

  it('completes a multipart upload byte-exact, lists its parts, and aborts another', async () => {
    const part1 = randomBytes(5 * 1024 * 1024);
    const part2 = randomBytes(1234);
    const created = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'mpu/object', ContentType: 'application/x-kv' }));
    const uploadId = created.UploadId as string;
    const e1 = await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'mpu/object', UploadId: uploadId, PartNumber: 1, Body: part1 }));
    const e2 = await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'mpu/object', UploadId: uploadId, PartNumber: 2, Body: part2 }));
    const parts = await s3.send(new ListPartsCommand({ Bucket: bucket, Key: 'mpu/object', UploadId: uploadId }));
    expect(parts.Parts?.map((p) => [p.PartNumber, p.Size])).toEqual([
      [1, part1.length],
      [2, part2.length],
    ]);
    const done = await s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: 'mpu/object',
        UploadId: uploadId,
        MultipartUpload: {
          Parts: [
            { PartNumber: 1, ETag: e1.ETag },
            { PartNumber: 2, ETag: e2.ETag },
          ],
        },
      }),
    );
    const md5s = Buffer.concat([createHash('md5').update(part1).digest(), createHash('md5').update(part2).digest()]);
    expect(done.ETag).toBe(`"${createHash('md5').update(md5s).digest('hex')}-2"`);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'mpu/object' }));
    expect((await bodyBytes(got.Body)).equals(Buffer.concat([part1, part2]))).toBe(true);
    expect(got.ContentType).toBe('application/x-kv');

    const other = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'mpu/aborted' }));
    await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'mpu/aborted', UploadId: other.UploadId, PartNumber: 1, Body: part2 }));
    await s3.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: 'mpu/aborted', UploadId: other.UploadId }));
    const gone = await s3Error(s3.send(new ListPartsCommand({ Bucket: bucket, Key: 'mpu/aborted', UploadId: other.UploadId })));
    expect(gone.name).toBe('NoSuchUpload');
    expect((await s3Error(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'mpu/aborted' })))).$metadata.httpStatusCode).toBe(404);
  });

  it('round-trips special-character keys (space, +, unicode, %2F)', async () => {
    for (const key of ['with space', 'plus+sign', 'ünïcødé/κλειδί/键', 'literal%2Fpercent', 'emoji 🧠 key', 'tilde~and!bang*(x)']) {
      const data = Buffer.from(`value of ${key}`);
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: `special/${key}`, Body: data }));
      const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: `special/${key}` }));
      expect((await bodyBytes(got.Body)).equals(data)).toBe(true);
    }
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'special/' }));
    expect(listed.KeyCount).toBe(6);
    expect(listed.Contents?.map((c) => c.Key)).toContain('special/ünïcødé/κλειδί/键');
  });

  it('refuses keys a store could read as another key (//, a leading /, . and .. segments) on both backends, as MinIO refuses or rewrites them', async () => {
    for (const key of ['slashes//double', '/leading', 'dot/./segment', 'dot/../segment']) {
      const error = await s3Error(s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'x' })));
      expect([error.name, error.$metadata.httpStatusCode, error.$response?.headers['x-objectcache-error-code']], key).toEqual([
        'InvalidArgument',
        400,
        'OC_ERR_REQUEST_INVALID_KEY',
      ]);
    }
    if (backend === 's3') {
      // MinIO refuses // itself (and would read /leading as leading, which the gateway must not allow).
      const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
      expect((await s3Error(direct.send(new PutObjectCommand({ Bucket: bucket, Key: 'slashes//double', Body: 'x' })))).$metadata.httpStatusCode).toBe(400);
      direct.destroy();
    }
  });

  it('works with the minio client: putObject (multipart above the part size), getObject, statObject, listObjectsV2, removeObject', async () => {
    const client = minioClient(gw.url);
    const large = randomBytes(12 * 1024 * 1024 + 3);
    await client.putObject(bucket, 'minio-js/large', large, large.length, { 'Content-Type': 'application/x-kv' });
    const chunks: Buffer[] = [];
    for await (const chunk of await client.getObject(bucket, 'minio-js/large')) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).equals(large)).toBe(true);
    const partial: Buffer[] = [];
    for await (const chunk of await client.getPartialObject(bucket, 'minio-js/large', 1000, 500)) partial.push(chunk as Buffer);
    expect(Buffer.concat(partial).equals(large.subarray(1000, 1500))).toBe(true);
    const stat = await client.statObject(bucket, 'minio-js/large');
    expect(stat.size).toBe(large.length);
    await client.putObject(bucket, 'minio-js/small', Buffer.from('small'));
    const names: string[] = [];
    for await (const item of client.listObjectsV2(bucket, 'minio-js/', true)) names.push((item as { name: string }).name);
    expect(names.sort()).toEqual(['minio-js/large', 'minio-js/small']);
    await client.removeObject(bucket, 'minio-js/small');
    await expect(client.statObject(bucket, 'minio-js/small')).rejects.toMatchObject({ code: 'NotFound' });
  });

  it('accepts presigned URLs and rejects tampered ones', async () => {
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'presigned/obj', Body: 'presigned body' }));
    const url = await getSignedUrl(s3, new GetObjectCommand({ Bucket: bucket, Key: 'presigned/obj' }), { expiresIn: 60 });
    const ok = await fetch(url);
    expect(ok.status).toBe(200);
    expect(await ok.text()).toBe('presigned body');
    const tampered = await fetch(url.replace('presigned/obj', 'presigned/other'));
    expect(tampered.status).toBe(403);
    expect(await tampered.text()).toContain('<Code>SignatureDoesNotMatch</Code>');
    // With the SDK's default checksum setting the presigner bakes the CRC32 of an empty body into
    // the URL: refused, as AWS S3 refuses it, with a message that names the remedy.
    const defaults = sdkClient(gw.url);
    const baked = await getSignedUrl(defaults, new PutObjectCommand({ Bucket: bucket, Key: 'presigned/baked' }), { expiresIn: 300 });
    const refused = await fetch(baked, { method: 'PUT', body: 'uploaded via presigned PUT' });
    expect(refused.status).toBe(400);
    expect(refused.headers.get('x-objectcache-error-code')).toBe('OC_ERR_REQUEST_BAD_DIGEST');
    expect(await refused.text()).toContain('requestChecksumCalculation: &apos;WHEN_REQUIRED&apos;');
    defaults.destroy();
    // Checksums WHEN_REQUIRED: the URL carries none, and the PUT is stored.
    const presigner = sdkClient(gw.url, { requestChecksumCalculation: 'WHEN_REQUIRED' });
    const put = await getSignedUrl(presigner, new PutObjectCommand({ Bucket: bucket, Key: 'presigned/put' }), { expiresIn: 60 });
    expect((await fetch(put, { method: 'PUT', body: 'uploaded via presigned PUT' })).status).toBe(200);
    expect((await bodyBytes((await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'presigned/put' }))).Body)).toString()).toBe('uploaded via presigned PUT');
  });

  it('rejects a wrong secret with 403 SignatureDoesNotMatch and an unknown key with 403 InvalidAccessKeyId, without reaching the backend', async () => {
    const before = gw.gateway.backendStats()?.requests ?? 0;
    const wrongSecret = sdkClient(gw.url, { secretAccessKey: 'not-the-secret' });
    const e1 = await s3Error(wrongSecret.send(new GetObjectCommand({ Bucket: bucket, Key: 'ranged' })));
    expect([e1.$metadata.httpStatusCode, e1.name]).toEqual([403, 'SignatureDoesNotMatch']);
    const e2 = await s3Error(wrongSecret.send(new PutObjectCommand({ Bucket: bucket, Key: 'never-written', Body: 'x' })));
    expect([e2.$metadata.httpStatusCode, e2.name]).toEqual([403, 'SignatureDoesNotMatch']);
    const unknown = sdkClient(gw.url, { accessKeyId: 'nobody', secretAccessKey: 'whatever-secret' });
    const e3 = await s3Error(unknown.send(new ListBucketsCommand({})));
    expect([e3.$metadata.httpStatusCode, e3.name]).toEqual([403, 'InvalidAccessKeyId']);
    const anonymous = await fetch(`${gw.url}/${bucket}/ranged`);
    expect(anonymous.status).toBe(403);
    expect(await anonymous.text()).toContain('<Code>AccessDenied</Code>');
    expect(gw.gateway.backendStats()?.requests ?? 0).toBe(before);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_auth_failures_total')).toBeGreaterThanOrEqual(4);
    expect((await s3Error(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'never-written' })))).$metadata.httpStatusCode).toBe(404);
    wrongSecret.destroy();
    unknown.destroy();
  });

  it('rejects requests outside the 15-minute clock skew and accepts those inside it', async () => {
    const skewed = (minutes: number): S3Client => sdkClient(gw.url, { systemClockOffset: minutes * 60_000 });
    for (const minutes of [16, -16]) {
      const error = await s3Error(skewed(minutes).send(new HeadBucketCommand({ Bucket: bucket })));
      expect(error.$metadata.httpStatusCode).toBe(403);
    }
    for (const minutes of [14, -14]) {
      const ok = await skewed(minutes).send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1 }));
      expect(ok.$metadata.httpStatusCode).toBe(200);
    }
  });

  it('creates, lists, heads and deletes buckets', async () => {
    const name = uniqueBucket('life');
    await s3.send(new CreateBucketCommand({ Bucket: name }));
    expect((await s3.send(new ListBucketsCommand({}))).Buckets?.map((b) => b.Name)).toContain(name);
    expect((await s3.send(new HeadBucketCommand({ Bucket: name }))).$metadata.httpStatusCode).toBe(200);
    await s3.send(new PutObjectCommand({ Bucket: name, Key: 'k', Body: 'v' }));
    expect((await s3Error(s3.send(new DeleteBucketCommand({ Bucket: name })))).name).toBe('BucketNotEmpty');
    await s3.send(new DeleteObjectCommand({ Bucket: name, Key: 'k' }));
    await s3.send(new DeleteBucketCommand({ Bucket: name }));
    expect((await s3Error(s3.send(new HeadBucketCommand({ Bucket: name })))).$metadata.httpStatusCode).toBe(404);
  });

  it('answers a bucket without a policy or CORS configuration with 404, as MinIO does, and names the operation', async () => {
    const policy = await s3Error(s3.send(new GetBucketPolicyCommand({ Bucket: bucket })));
    expect(policy.name).toBe('NoSuchBucketPolicy');
    expect(policy.$metadata.httpStatusCode).toBe(404);
    const cors = await s3Error(s3.send(new GetBucketCorsCommand({ Bucket: bucket })));
    expect(cors.name).toBe('NoSuchCORSConfiguration');
    expect(cors.$metadata.httpStatusCode).toBe(404);
    // Counted (and logged) as what they are, not as a listing of the bucket.
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_http_requests_total{operation="GetBucketPolicy",status="404"}')).toBeGreaterThanOrEqual(1);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_http_requests_total{operation="GetBucketCors",status="404"}')).toBeGreaterThanOrEqual(1);
  });

  it('puts an x-amz-request-id on every response, errors included', async () => {
    const ok = await fetch(`${gw.url}/${bucket}/anything`);
    expect(ok.headers.get('x-amz-request-id')).toMatch(/^[0-9A-F]{16}$/);
    const body = await ok.text();
    expect(body).toContain(`<RequestId>${ok.headers.get('x-amz-request-id')}</RequestId>`);
  });

  it('answers an error from the store with the same request id in header and body', async () => {
    // A signed GET of a missing key: on the s3 backend the NoSuchKey document comes from MinIO.
    const path = `/${bucket}/never-written-${Date.now()}`;
    const res = await fetch(`${gw.url}${path}`, { headers: await signedHeaders(gw.url, { method: 'GET', path }) });
    expect(res.status).toBe(404);
    const body = await res.text();
    expect(body).toContain('<Code>NoSuchKey</Code>');
    const id = res.headers.get('x-amz-request-id');
    expect(id).toMatch(/^[0-9A-F]{16}$/);
    expect(body).toContain(`<RequestId>${id}</RequestId>`);
    expect(Number(res.headers.get('content-length'))).toBe(Buffer.byteLength(body));
  });
});
