/**
 * Virtual-hosted-style addressing (`--domain`): a Host of `<bucket>.<domain>` names the bucket,
 * for SigV4 (header and presigned) and SigV2 alike, on both backends; path-style keeps working on
 * the same gateway; without `--domain` such a Host is an ordinary path-style request. Names are
 * resolved by the clients' own connect lookups (loopback only), not by the machine's DNS.
 */
import { request as httpRequest, Agent, type IncomingHttpHeaders } from 'node:http';
import type { LookupFunction } from 'node:net';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { signV2, stringToSignV2 } from '../gateway/s3/auth/sigv2.js';
import { bucketFromHost, parseTarget } from '../gateway/s3/request.js';
import { loadServeConfig } from '../gateway/common/config.js';
import { ObjectCacheClient } from '../client/client.js';
import { CLIENT_KEY, CLIENT_SECRET, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';

const DOMAIN = 'oc.test';

/** Resolves every name to 127.0.0.1: `<bucket>.oc.test` reaches the gateway on loopback. */
const loopbackLookup = ((_host: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
  if (options.all) callback(null, [{ address: '127.0.0.1', family: 4 }]);
  else callback(null, '127.0.0.1', 4);
}) as unknown as LookupFunction;

function virtualClient(port: number): S3Client {
  return new S3Client({
    endpoint: `http://${DOMAIN}:${port}`,
    region: 'us-east-1',
    forcePathStyle: false,
    maxAttempts: 1,
    credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET },
    requestHandler: { httpAgent: new Agent({ lookup: loopbackLookup }) },
  });
}

/** A raw request to 127.0.0.1:port with the Host header given (what a virtual-hosted client sends). */
function rawRequest(
  port: number,
  host: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: Buffer,
): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method, path, headers: { host, ...headers, ...(body ? { 'content-length': String(body.length) } : {}) } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (part: Buffer) => parts.push(part));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('bucketFromHost and parseTarget', () => {
  it('takes the bucket from <bucket>.<domain> only', () => {
    expect(bucketFromHost('kv.oc.test:9080', ['oc.test'])).toBe('kv');
    expect(bucketFromHost('my.dotted.bucket.oc.test', ['s3.local', 'oc.test'])).toBe('my.dotted.bucket');
    expect(bucketFromHost('KV.OC.TEST.', ['oc.test'])).toBe('kv');
    expect(bucketFromHost('oc.test:9080', ['oc.test'])).toBeUndefined();
    expect(bucketFromHost('127.0.0.1:9080', ['oc.test'])).toBeUndefined();
    expect(bucketFromHost('[::1]:9080', ['oc.test'])).toBeUndefined();
    expect(bucketFromHost('kv.oc.test', [])).toBeUndefined();
    expect(bucketFromHost('kv.other.test', ['oc.test'])).toBeUndefined();
  });

  it('maps /key under the host bucket to the path-style target, signed as sent', () => {
    const object = parseTarget('/dir/a%20b?x=1', 'kvc');
    expect(object).toMatchObject({
      bucket: 'kvc',
      key: 'dir/a b',
      path: '/kvc/dir/a b',
      canonicalPath: '/kvc/dir/a%20b',
      signedPath: '/dir/a%20b',
      sigV2Path: '/kvc/dir/a%20b',
      virtualHosted: true,
    });
    expect(parseTarget('/', 'kvc')).toMatchObject({ bucket: 'kvc', key: '', path: '/kvc', signedPath: '/', sigV2Path: '/kvc/' });
    expect(parseTarget('/kvc/k')).toMatchObject({ bucket: 'kvc', key: 'k', signedPath: '/kvc/k', virtualHosted: false });
    expect(() => parseTarget('/k', 'Bad_Bucket')).toThrow(expect.objectContaining({ code: 'OC_ERR_REQUEST_INVALID_BUCKET_NAME' }));
  });

  it('validates --domain', () => {
    expect(loadServeConfig(['--domain', 'oc.test, S3.Example.com'], {}).domains).toEqual(['oc.test', 's3.example.com']);
    expect(loadServeConfig([], {}).domains).toEqual([]);
    expect(() => loadServeConfig(['--domain', 'http://oc.test:9000'], {})).toThrow(expect.objectContaining({ setting: 'domain' }));
  });
});

describe.each<BackendKind>(['local', 's3'])('virtual-hosted-style requests (%s backend)', (backend) => {
  const minio = inject('minio');
  let gw: TestGateway;
  let plain: TestGateway;
  let s3: S3Client;
  let port: number;
  const bucket = uniqueBucket('vhost');
  const host = `${bucket}.${DOMAIN}`;

  beforeAll(async () => {
    gw = await startTestGateway({ backend, minio, args: ['--domain', DOMAIN] });
    plain = await startTestGateway({ backend, minio });
    port = gw.gateway.port;
    s3 = virtualClient(port);
  });

  afterAll(async () => {
    s3?.destroy();
    await gw?.close();
    await plain?.close();
  });

  it('creates a bucket, writes, lists, reads, heads and deletes through <bucket>.<domain> with the AWS SDK', async () => {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    const body = Buffer.from('virtual-hosted \u2713 '.repeat(100));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'dir/a b.bin', Body: body, Metadata: { note: 'vh' } }));
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'dir/' }));
    expect(listed.Contents?.map((c) => c.Key)).toEqual(['dir/a b.bin']);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'dir/a b.bin', Range: 'bytes=3-20' }));
    expect(Buffer.from(await got.Body!.transformToByteArray()).equals(body.subarray(3, 21))).toBe(true);
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'dir/a b.bin' }));
    expect(head.ContentLength).toBe(body.length);
    expect(head.Metadata).toEqual({ note: 'vh' });
    // The same object path-style on the same gateway.
    const pathStyle = await rawRequest(port, `127.0.0.1:${port}`, 'GET', `/${bucket}/dir/a%20b.bin`, await sdkSignedHeaders(`/${bucket}/dir/a%20b.bin`, `127.0.0.1:${port}`));
    expect(pathStyle.status).toBe(200);
    expect(pathStyle.body.equals(body)).toBe(true);
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'dir/a b.bin' }));
    await expect(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'dir/a b.bin' }))).rejects.toMatchObject({ $metadata: { httpStatusCode: 404 } });
  });

  it('runs a multipart upload and serves a presigned GET, virtual-hosted', async () => {
    const part = Buffer.alloc(5 * 1024 * 1024, 7);
    const last = Buffer.from('tail');
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'mp' }));
    const one = await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'mp', UploadId, PartNumber: 1, Body: part }));
    const two = await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'mp', UploadId, PartNumber: 2, Body: last }));
    await s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: 'mp',
        UploadId,
        MultipartUpload: {
          Parts: [
            { PartNumber: 1, ETag: one.ETag! },
            { PartNumber: 2, ETag: two.ETag! },
          ],
        },
      }),
    );
    const url = new URL(await getSignedUrl(s3, new GetObjectCommand({ Bucket: bucket, Key: 'mp' }), { expiresIn: 300 }));
    expect(url.host).toBe(`${host}:${port}`);
    const presigned = await rawRequest(port, url.host, 'GET', url.pathname + url.search);
    expect(presigned.status).toBe(200);
    expect(presigned.body.equals(Buffer.concat([part, last]))).toBe(true);
    // The signature covers the Host: the same URL for another bucket is refused.
    const elsewhere = await rawRequest(port, `other-bucket.${DOMAIN}:${port}`, 'GET', url.pathname + url.search);
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.headers['x-objectcache-error-code']).toBe('OC_ERR_AUTH_SIGNATURE');
  });

  it('verifies SigV2 over /<bucket>/<key> for a virtual-hosted request', async () => {
    const body = Buffer.from('sigv2 virtual');
    const v2 = (method: string, resource: string, extra: Record<string, string> = {}): Record<string, string> => {
      const headers: Record<string, string> = { date: new Date().toUTCString(), ...extra };
      const signature = signV2(CLIENT_SECRET, stringToSignV2({ method, headers, rawPath: resource, query: [] }, headers['date'] as string));
      return { ...headers, authorization: `AWS ${CLIENT_KEY}:${signature}` };
    };
    const put = await rawRequest(port, `${host}:${port}`, 'PUT', '/v2.bin', v2('PUT', `/${bucket}/v2.bin`, { 'content-type': 'application/octet-stream' }), body);
    expect(put.status).toBe(200);
    const get = await rawRequest(port, `${host}:${port}`, 'GET', '/v2.bin', v2('GET', `/${bucket}/v2.bin`));
    expect(get.status).toBe(200);
    expect(get.body.equals(body)).toBe(true);
    // Signed without the bucket (as if path-style at the root): refused.
    const wrong = await rawRequest(port, `${host}:${port}`, 'GET', '/v2.bin', v2('GET', '/v2.bin'));
    expect(wrong.status).toBe(403);
  });

  it('serves the layerwise GET and the prefix lookup virtual-hosted (the TypeScript client, path-style, reads the same chunks)', async () => {
    const layers = 4;
    const layerBytes = 1024;
    const chunks = [Buffer.alloc(layers * layerBytes, 1), Buffer.alloc(layers * layerBytes, 2)];
    const keys = ['kv/vh/0', 'kv/vh/1'];
    for (const [i, key] of keys.entries()) await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: chunks[i] as Buffer }));
    const descriptor = { version: 1, keys, layers, chunkTokens: 16, layerBytes, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
    const encoded = Buffer.from(JSON.stringify(descriptor)).toString('base64url');
    const res = await rawRequest(port, `${host}:${port}`, 'GET', '/kv/vh/1', await sdkSignedHeaders('/kv/vh/1', `${host}:${port}`, { 'x-objectcache-descriptor': encoded }));
    expect(res.status).toBe(200);
    expect(res.headers['x-objectcache-mode']).toBeDefined();
    expect(res.body.subarray(0, 4).toString()).toBe('OCKV');
    const client = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET } });
    const fetched = await client.fetch(descriptor as never);
    const target = Buffer.from(fetched.target.buffer, fetched.target.byteOffset, fetched.target.byteLength);
    for (let layer = 0; layer < layers; layer++) {
      for (let c = 0; c < 2; c++)
        expect(target.subarray(layer * 2 * layerBytes + c * layerBytes, layer * 2 * layerBytes + (c + 1) * layerBytes).every((b) => b === c + 1)).toBe(true);
    }
    const lookupBody = Buffer.from(JSON.stringify({ keys: [...keys, 'kv/vh/missing'] }));
    const lookup = await rawRequest(
      port,
      `${host}:${port}`,
      'POST',
      '/?objectcache-lookup=',
      await sdkSignedHeaders('/', `${host}:${port}`, { 'content-type': 'application/json' }, { 'objectcache-lookup': '' }, lookupBody),
      lookupBody,
    );
    expect(lookup.status).toBe(200);
    expect(JSON.parse(lookup.body.toString()).matched).toBe(2);
  });

  it('without --domain, a <bucket>.<domain> Host is a path-style request', async () => {
    const res = await rawRequest(plain.gateway.port, `${host}:${plain.gateway.port}`, 'GET', '/', await sdkSignedHeaders('/', `${host}:${plain.gateway.port}`));
    // `GET /` path-style is ListBuckets, not a listing of the bucket.
    expect(res.status).toBe(200);
    expect(res.body.toString()).toContain('<ListAllMyBucketsResult');
  });
});

/** SigV4 headers signed for `path` at `host` by the test client (the SDK's signer, as any client). */
async function sdkSignedHeaders(
  path: string,
  host: string,
  extra: Record<string, string> = {},
  query: Record<string, string> = {},
  body?: Buffer,
): Promise<Record<string, string>> {
  const { clientSigner } = await import('./helpers/signing.js');
  const { createHash } = await import('node:crypto');
  const [hostname, port] = host.split(':') as [string, string];
  const headers: Record<string, string> = {
    host,
    'x-amz-content-sha256': createHash('sha256')
      .update(body ?? Buffer.alloc(0))
      .digest('hex'),
    ...extra,
  };
  const signed = await clientSigner.sign({ method: body ? 'POST' : 'GET', protocol: 'http:', hostname, port: Number(port), path, query, headers });
  return signed.headers;
}
