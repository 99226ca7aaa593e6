/**
 * Upload bodies are verified before anything is stored, in both backends: signed aws-chunked
 * bodies (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) with chunk signature chaining, unsigned bodies with
 * a trailing checksum, x-amz-content-sha256 and Content-MD5. A body that fails is a 4xx S3 error
 * and leaves no object.
 */
import { createHash, randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { crc32 } from 'node:zlib';
import { CreateBucketCommand, HeadObjectCommand, S3ServiceException, type S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { clientSigner } from './helpers/signing.js';
import { sdkClient, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';

const minio = inject('minio');
const EMPTY_SHA256 = createHash('sha256').digest('hex');

const signer = clientSigner;

interface RawResponse {
  status: number;
  body: string;
}

/** Sends exactly these headers and bytes (fetch would rewrite Content-Length). */
async function send(url: URL, method: string, headers: Record<string, string>, body: Buffer): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function sign(url: URL, headers: Record<string, string>, date: Date): Promise<Record<string, string>> {
  const signed = await signer.sign(
    { method: 'PUT', protocol: 'http:', hostname: url.hostname, port: Number(url.port), path: url.pathname, query: {}, headers: { host: url.host, ...headers } },
    { signingDate: date },
  );
  return signed.headers;
}

/** Frames `data` as a signed aws-chunked body; `tamper` flips a data byte after signing. */
async function signedChunkedPut(url: URL, data: Buffer, chunkSize: number, tamper = false): Promise<RawResponse> {
  const date = new Date();
  const chunks: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunkSize) chunks.push(data.subarray(i, i + chunkSize));
  chunks.push(Buffer.alloc(0));
  const longDate = date
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
  const scope = `${longDate.slice(0, 8)}/us-east-1/s3/aws4_request`;
  const framedLength = chunks.reduce((n, c) => n + c.length.toString(16).length + ';chunk-signature='.length + 64 + 4 + c.length, 0);
  const headers = await sign(
    url,
    {
      'content-encoding': 'aws-chunked',
      'content-length': String(framedLength),
      'x-amz-content-sha256': 'STREAMING-AWS4-HMAC-SHA256-PAYLOAD',
      'x-amz-decoded-content-length': String(data.length),
    },
    date,
  );
  let previous = /Signature=([0-9a-f]{64})/.exec(headers['authorization'] ?? '')?.[1] as string;
  const framed: Buffer[] = [];
  for (const chunk of chunks) {
    const toSign = ['AWS4-HMAC-SHA256-PAYLOAD', longDate, scope, previous, EMPTY_SHA256, createHash('sha256').update(chunk).digest('hex')].join('\n');
    previous = await signer.sign(toSign, { signingDate: date });
    framed.push(Buffer.from(`${chunk.length.toString(16)};chunk-signature=${previous}\r\n`), Buffer.from(chunk), Buffer.from('\r\n'));
  }
  const body = Buffer.concat(framed);
  const at = body.indexOf('\r\n') + 10;
  if (tamper) body[at] = (body[at] as number) ^ 0xff;
  return send(url, 'PUT', headers, body);
}

/** Frames `data` as an unsigned aws-chunked body with a CRC32 trailer (what SDKs send by default). */
async function trailerPut(url: URL, data: Buffer, checksum: string): Promise<RawResponse> {
  const trailer = `x-amz-checksum-crc32:${checksum}\r\n\r\n`;
  const body = Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from('\r\n0\r\n'), Buffer.from(trailer)]);
  const headers = await sign(
    url,
    {
      'content-encoding': 'aws-chunked',
      'content-length': String(body.length),
      'x-amz-content-sha256': 'STREAMING-UNSIGNED-PAYLOAD-TRAILER',
      'x-amz-decoded-content-length': String(data.length),
      'x-amz-trailer': 'x-amz-checksum-crc32',
    },
    new Date(),
  );
  return send(url, 'PUT', headers, body);
}

function crc32Base64(data: Buffer): string {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(crc32(data) >>> 0);
  return out.toString('base64');
}

describe.each<BackendKind>(['local', 's3'])('upload verification (%s backend)', (backend) => {
  let gw: TestGateway;
  let s3: S3Client;
  const bucket = uniqueBucket('verify');
  const objectUrl = (key: string): URL => new URL(`${gw.url}/${bucket}/${key}`);
  const exists = async (key: string): Promise<boolean> => {
    const result = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key })).catch((e: S3ServiceException) => e);
    return !(result instanceof S3ServiceException);
  };
  const download = async (key: string): Promise<Buffer> => {
    const headers = await signer.sign({
      method: 'GET',
      protocol: 'http:',
      hostname: objectUrl(key).hostname,
      port: Number(objectUrl(key).port),
      path: objectUrl(key).pathname,
      query: {},
      headers: { host: objectUrl(key).host, 'x-amz-content-sha256': EMPTY_SHA256 },
    });
    return Buffer.from(await (await fetch(objectUrl(key), { headers: headers.headers })).arrayBuffer());
  };

  beforeAll(async () => {
    gw = await startTestGateway({ backend, minio });
    s3 = sdkClient(gw.url);
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  });

  afterAll(async () => {
    s3?.destroy();
    await gw?.close();
  });

  it('stores a signed aws-chunked body byte-exact', async () => {
    const data = randomBytes(200_000);
    const res = await signedChunkedPut(objectUrl('chunked/ok'), data, 65_536);
    expect(res.status).toBe(200);
    expect((await download('chunked/ok')).equals(data)).toBe(true);
  });

  it('rejects a signed aws-chunked body whose chunk was altered, and stores nothing', async () => {
    const res = await signedChunkedPut(objectUrl('chunked/tampered'), randomBytes(200_000), 65_536, true);
    expect(res.status).toBe(403);
    expect(res.body).toContain('<Code>SignatureDoesNotMatch</Code>');
    expect(await exists('chunked/tampered')).toBe(false);
  });

  it('accepts an unsigned body with a matching CRC32 trailer and rejects a wrong one', async () => {
    const data = randomBytes(70_000);
    expect((await trailerPut(objectUrl('trailer/ok'), data, crc32Base64(data))).status).toBe(200);
    expect((await download('trailer/ok')).equals(data)).toBe(true);
    const bad = await trailerPut(objectUrl('trailer/bad'), data, crc32Base64(Buffer.from('something else')));
    expect(bad.status).toBe(400);
    expect(bad.body).toContain('<Code>BadDigest</Code>');
    expect(await exists('trailer/bad')).toBe(false);
  });

  it('rejects a body that does not match x-amz-content-sha256 or Content-MD5', async () => {
    const data = Buffer.from('the real body');
    const wrongSha = await sign(
      objectUrl('plain/sha'),
      { 'content-length': String(data.length), 'x-amz-content-sha256': createHash('sha256').update('another body').digest('hex') },
      new Date(),
    );
    const r1 = await send(objectUrl('plain/sha'), 'PUT', wrongSha, data);
    expect(r1.status).toBe(400);
    expect(r1.body).toContain('<Code>XAmzContentSHA256Mismatch</Code>');
    expect(await exists('plain/sha')).toBe(false);

    const wrongMd5 = await sign(
      objectUrl('plain/md5'),
      { 'content-length': String(data.length), 'content-md5': createHash('md5').update('another body').digest('base64'), 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' },
      new Date(),
    );
    const r2 = await send(objectUrl('plain/md5'), 'PUT', wrongMd5, data);
    expect(r2.status).toBe(400);
    expect(r2.body).toContain('<Code>BadDigest</Code>');
    expect(await exists('plain/md5')).toBe(false);
  });

  it('rejects X-Minio-Internal-* headers and mixed header/query authentication', async () => {
    const data = Buffer.from('x');
    const internal = await sign(objectUrl('internal'), { 'content-length': '1', 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD', 'x-minio-internal-replication': 'true' }, new Date());
    const r1 = await send(objectUrl('internal'), 'PUT', internal, data);
    expect(r1.status).toBe(403);
    expect(r1.body).toContain('<Code>AccessDenied</Code>');
    const headers = await sign(objectUrl('mixed'), { 'content-length': '1', 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' }, new Date());
    const mixed = new URL(`${objectUrl('mixed').href}?X-Amz-Signature=${'0'.repeat(64)}`);
    const r2 = await send(mixed, 'PUT', headers, data);
    expect(r2.status).toBe(400);
    expect(r2.body).toContain('<Code>InvalidArgument</Code>');
    expect(await exists('internal')).toBe(false);
    expect(await exists('mixed')).toBe(false);
  });
});
