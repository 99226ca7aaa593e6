/**
 * Tenants kept apart by access policies, tried as a hostile tenant would, on both backends: two
 * teams confined to their prefixes of one bucket, a read-only inference-fleet key that may act as
 * the teams' tenants but is denied one prefix explicitly, and a key with no policy at all.
 *
 * Every refusal is a 403 AccessDenied S3 error (OC_ERR_ACCESS_DENIED) that comes before the store
 * is touched: nothing is written or deleted, a missing object is refused exactly like a present
 * one, and a descriptor or lookup with one forbidden key is refused as a whole without a read.
 */
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  GetObjectTaggingCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutBucketPolicyCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
  UploadPartCopyCommand,
} from '@aws-sdk/client-s3';
import { createPresignedPost } from '@aws-sdk/s3-presigned-post';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { SignatureV4 } from '@smithy/signature-v4';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { NodeSha256 } from '../sigv4/signer.js';
import { metricValue, sdkClient, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';

interface Key {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
}
const TEAM_A: Key = { accessKeyId: 'team-a-key', secretAccessKey: 'team-a-secret-0001' };
const TEAM_B: Key = { accessKeyId: 'team-b-key', secretAccessKey: 'team-b-secret-0002' };
const FLEET: Key = { accessKeyId: 'fleet-key', secretAccessKey: 'fleet-secret-0003' };
const NOBODY: Key = { accessKeyId: 'nobody-key', secretAccessKey: 'nobody-secret-0004' };

const LAYERS = 4;
const LAYER_BYTES = 1024;

/** A team confined to `<team>/` of `bucket` (objects, its multipart uploads, listing its prefix). */
function teamPolicy(bucket: string, team: string, extraPrefix?: string): unknown {
  return {
    Version: '2012-10-17',
    Statement: [
      {
        Sid: 'OwnPrefix',
        Effect: 'Allow',
        Action: ['s3:GetObject', 's3:PutObject', 's3:DeleteObject', 's3:AbortMultipartUpload', 's3:ListMultipartUploadParts'],
        Resource: [`arn:aws:s3:::${bucket}/${team}/*`, ...(extraPrefix ? [`arn:aws:s3:::${bucket}/${extraPrefix}/*`] : [])],
      },
      { Sid: 'ListOwnPrefix', Effect: 'Allow', Action: 's3:ListBucket', Resource: `arn:aws:s3:::${bucket}`, Condition: { StringLike: { 's3:prefix': `${team}/*` } } },
    ],
  };
}

/** One chunk object of LAYERS x LAYER_BYTES distinct bytes. */
function chunk(seed: number): Uint8Array {
  return new Uint8Array(Buffer.concat(Array.from({ length: (LAYERS * LAYER_BYTES) / 64 }, (_, i) => createHash('sha512').update(`${seed}/${i}`).digest())));
}

function descriptor(keys: readonly string[], extra: Partial<DescriptorInput> = {}): DescriptorInput {
  return { version: 1, keys: [...keys], layers: LAYERS, chunkTokens: 16, layerBytes: LAYER_BYTES, layout: 'KV_L2TD', delivery: 'layer-major', ...extra };
}

/** The layer-major payload of `chunks` (KV_L2TD stored = canonical: layer l of chunk c at l*S). */
function layerMajor(chunks: readonly Uint8Array[]): Buffer {
  const parts: Buffer[] = [];
  for (let l = 0; l < LAYERS; l++) for (const c of chunks) parts.push(Buffer.from(c.subarray(l * LAYER_BYTES, (l + 1) * LAYER_BYTES)));
  return Buffer.concat(parts);
}

/** Asserts a 403 AccessDenied S3 error with the gateway's code. */
async function expectDenied(promise: Promise<unknown>, code = 'OC_ERR_ACCESS_DENIED'): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, 'the request should have been refused').toBeDefined();
  if (error instanceof S3ServiceException) {
    expect(error.$metadata.httpStatusCode).toBe(403);
    // HEAD answers have no body: the SDK cannot read the S3 code from them.
    if (!['Forbidden', 'Unknown'].includes(error.name)) expect(error.name).toBe('AccessDenied');
    expect(error.$response?.headers['x-objectcache-error-code']).toBe(code);
  } else {
    expect(error).toBeInstanceOf(ObjectCacheError);
    expect((error as ObjectCacheError).code).toBe(code);
  }
}

async function expectInvalidKey(promise: Promise<unknown>, code: string): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, 'the request should have been refused').toBeDefined();
  if (error instanceof S3ServiceException) {
    expect(error.$metadata.httpStatusCode).toBe(400);
    expect(error.$response?.headers['x-objectcache-error-code']).toBe(code);
  } else {
    expect((error as ObjectCacheError).code).toBe(code);
  }
}

describe.each(['local', 's3'] as const)('access policies keep tenants apart (%s)', (backend: BackendKind) => {
  const bucket = uniqueBucket('acl');
  const otherBucket = uniqueBucket('acl-other');
  let dir: string;
  let gw: TestGateway;
  let admin: S3Client;
  const sdk = new Map<string, S3Client>();
  const as = (key: Key): S3Client => {
    let client = sdk.get(key.accessKeyId);
    if (!client) sdk.set(key.accessKeyId, (client = sdkClient(gw.url, { accessKeyId: key.accessKeyId, secretAccessKey: key.secretAccessKey })));
    return client;
  };
  const kv = (key: Key): ObjectCacheClient =>
    new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: key.accessKeyId, secretAccessKey: key.secretAccessKey } });
  const A_OBJECT = Buffer.from('team A prompt-derived KV');
  const get = async (client: S3Client, key: string, b = bucket): Promise<Buffer> =>
    Buffer.from(await (await client.send(new GetObjectCommand({ Bucket: b, Key: key }))).Body!.transformToByteArray());
  const exists = (key: string): Promise<boolean> =>
    admin.send(new HeadObjectCommand({ Bucket: bucket, Key: key })).then(
      () => true,
      (e: S3ServiceException) => (e.$metadata.httpStatusCode === 404 ? false : Promise.reject(e)),
    );
  /** A SigV4-signed raw request by `key` (exact control over the path and query). */
  async function raw(
    key: Key,
    method: string,
    path: string,
    query: Record<string, string> = {},
    body?: Buffer,
    extraHeaders: Record<string, string> = {},
  ): Promise<{ status: number; code: string | null; text: string }> {
    const url = new URL(gw.url);
    const signer = new SignatureV4({ credentials: key, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
    const payload = body ?? Buffer.alloc(0);
    const headers = { host: url.host, 'x-amz-content-sha256': createHash('sha256').update(payload).digest('hex'), ...extraHeaders };
    const canonical = path
      .split('/')
      .map((s) => encodeURIComponent(decodeURIComponent(s)).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`))
      .join('/');
    const signed = await signer.sign({ method, protocol: 'http:', hostname: url.hostname, port: Number(url.port), path: canonical, query, headers });
    const qs = new URLSearchParams(query).toString();
    // node:http sends the path as given (fetch() and undici resolve %2E%2E segments first).
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, path: `${path}${qs ? `?${qs}` : ''}`, method, headers: signed.headers }, resolve);
      req.on('error', reject);
      req.end(body);
    });
    let text = '';
    for await (const piece of res) text += (piece as Buffer).toString();
    const code = res.headers['x-objectcache-error-code'];
    return { status: res.statusCode ?? 0, code: typeof code === 'string' ? code : null, text };
  }

  const A_CHUNKS = [chunk(1), chunk(2), chunk(3)];
  const B_CHUNKS = [chunk(4)];
  const aKeys = ['team-a/kv/00000', 'team-a/kv/00001', 'team-a/kv/00002'];
  const bKeys = ['team-b/kv/00000'];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'objectcache-acl-'));
    const fleetPolicy = {
      Version: '2012-10-17',
      Statement: [
        { Sid: 'ReadAllKV', Effect: 'Allow', Action: 's3:GetObject', Resource: `arn:aws:s3:::${bucket}/*` },
        { Sid: 'NeverSecrets', Effect: 'Deny', Action: 's3:*', Resource: `arn:aws:s3:::${bucket}/secret/*` },
        { Sid: 'ServeTeams', Effect: 'Allow', Action: 'objectcache:ActAsTenant', Resource: 'arn:objectcache:::tenant/team-*' },
      ],
    };
    writeFileSync(
      join(dir, 'credentials.json'),
      JSON.stringify([{ ...TEAM_A, tenant: 'team-a' }, { ...TEAM_B, tenant: 'team-b' }, { ...FLEET, tenant: 'fleet', policy: fleetPolicy }, { ...NOBODY }]),
    );
    writeFileSync(
      join(dir, 'policies.json'),
      JSON.stringify({
        policies: { 'team-a-kv': teamPolicy(bucket, 'team-a'), 'team-b-kv': teamPolicy(bucket, 'team-b', 'équipe-b') },
        tenants: { 'team-a': ['team-a-kv'], 'team-b': ['team-b-kv'] },
      }),
    );
    gw = await startTestGateway({
      backend,
      minio: inject('minio'),
      args: ['--credentials', join(dir, 'credentials.json'), '--access-policies', join(dir, 'policies.json'), '--threshold', '0'],
    });
    admin = sdkClient(gw.url);
    await admin.send(new CreateBucketCommand({ Bucket: bucket }));
    await admin.send(new CreateBucketCommand({ Bucket: otherBucket }));
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'team-a/notes', Body: A_OBJECT }));
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'team-b/notes', Body: 'team B' }));
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'secret/x', Body: 'secret' }));
    await kv(TEAM_A).putChunks(aKeys, A_CHUNKS);
    await kv(TEAM_B).putChunks(bKeys, B_CHUNKS);
  });

  afterAll(async () => {
    for (const client of sdk.values()) client.destroy();
    admin?.destroy();
    await gw?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("refuses team B reading, listing, writing and deleting team A's KV, and nothing changes", async () => {
    const b = as(TEAM_B);
    await expectDenied(b.send(new GetObjectCommand({ Bucket: bucket, Key: 'team-a/notes' })));
    await expectDenied(b.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'team-a/' })));
    await expectDenied(b.send(new ListObjectsV2Command({ Bucket: bucket })));
    await expectDenied(b.send(new PutObjectCommand({ Bucket: bucket, Key: 'team-a/planted', Body: 'x' })));
    // A body larger than the sockets hold: the 403 is read, not lost to a connection the gateway
    // closed under the upload (as an engine's chunk PUT would be).
    await expectDenied(b.send(new PutObjectCommand({ Bucket: bucket, Key: 'team-a/planted-large', Body: Buffer.alloc(16 * 1024 * 1024, 7) })));
    await expectDenied(b.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'team-a/notes' })));
    expect(await exists('team-a/planted')).toBe(false);
    expect(await exists('team-a/planted-large')).toBe(false);
    expect((await get(admin, 'team-a/notes')).equals(A_OBJECT)).toBe(true);
    // Its own prefix works, and its listing shows only its own keys.
    await b.send(new PutObjectCommand({ Bucket: bucket, Key: 'team-b/own', Body: 'mine' }));
    expect((await get(b, 'team-b/own')).toString()).toBe('mine');
    const listed = await b.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'team-b/' }));
    expect((listed.Contents ?? []).every((o) => o.Key!.startsWith('team-b/'))).toBe(true);
    expect(listed.Contents?.map((o) => o.Key)).toContain('team-b/own');
    await b.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'team-b/own' }));
  });

  it('answers with an S3 error document, and tells a missing object or bucket no differently from a present one', async () => {
    const present = await raw(TEAM_B, 'GET', `/${bucket}/team-a/notes`);
    const missing = await raw(TEAM_B, 'GET', `/${bucket}/team-a/no-such-object`);
    const noBucket = await raw(TEAM_B, 'GET', `/no-such-bucket-${process.pid}/team-a/notes`);
    for (const answer of [present, missing, noBucket]) {
      expect(answer.status).toBe(403);
      expect(answer.code).toBe('OC_ERR_ACCESS_DENIED');
      expect(answer.text).toMatch(/<Code>AccessDenied<\/Code>/);
    }
    await expectDenied(as(TEAM_B).send(new HeadBucketCommand({ Bucket: otherBucket })));
    await expectDenied(as(TEAM_B).send(new HeadObjectCommand({ Bucket: bucket, Key: 'team-a/no-such-object' })));
  });

  it('shows each key only the buckets it may list; the administrator sees all', async () => {
    const names = async (client: S3Client): Promise<string[]> => ((await client.send(new ListBucketsCommand({}))).Buckets ?? []).map((x) => x.Name!);
    expect(await names(as(TEAM_A))).toEqual([bucket]);
    expect(await names(as(NOBODY))).toEqual([]);
    expect(await names(as(FLEET))).toEqual([]);
    expect(await names(admin)).toEqual(expect.arrayContaining([bucket, otherBucket]));
  });

  it('checks both ends of a copy, and every step of a multipart upload', async () => {
    const a = as(TEAM_A);
    const b = as(TEAM_B);
    await expectDenied(b.send(new CopyObjectCommand({ Bucket: bucket, Key: 'team-b/stolen', CopySource: `${bucket}/team-a/notes` })));
    expect(await exists('team-b/stolen')).toBe(false);
    await expectDenied(a.send(new CopyObjectCommand({ Bucket: bucket, Key: 'team-b/pushed', CopySource: `${bucket}/team-a/notes` })));
    expect(await exists('team-b/pushed')).toBe(false);
    await a.send(new CopyObjectCommand({ Bucket: bucket, Key: 'team-a/copy', CopySource: `${bucket}/team-a/notes` }));
    expect((await get(a, 'team-a/copy')).equals(A_OBJECT)).toBe(true);

    await expectDenied(b.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'team-a/mp' })));
    const upload = await b.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'team-b/mp' }));
    await expectDenied(b.send(new UploadPartCopyCommand({ Bucket: bucket, Key: 'team-b/mp', UploadId: upload.UploadId, PartNumber: 1, CopySource: `${bucket}/team-a/notes` })));
    const part = await b.send(new UploadPartCommand({ Bucket: bucket, Key: 'team-b/mp', UploadId: upload.UploadId, PartNumber: 1, Body: 'own part' }));
    await b.send(
      new CompleteMultipartUploadCommand({ Bucket: bucket, Key: 'team-b/mp', UploadId: upload.UploadId, MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag }] } }),
    );
    expect((await get(b, 'team-b/mp')).toString()).toBe('own part');
  });

  it('refuses a DeleteObjects that names one forbidden key as a whole: nothing is deleted', async () => {
    const b = as(TEAM_B);
    await b.send(new PutObjectCommand({ Bucket: bucket, Key: 'team-b/batch', Body: 'b' }));
    await expectDenied(b.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: 'team-b/batch' }, { Key: 'team-a/notes' }] } })));
    expect(await exists('team-b/batch')).toBe(true);
    expect(await exists('team-a/notes')).toBe(true);
    const own = await b.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: 'team-b/batch' }] } }));
    expect(own.Deleted?.map((d) => d.Key)).toEqual(['team-b/batch']);
    expect(await exists('team-b/batch')).toBe(false);
  });

  it('passes the store only the DeleteObjects keys it checked: namespace prefixes, a second <Key> or character references cannot smuggle another', async () => {
    const md5 = (body: Buffer): string => createHash('md5').update(body).digest('base64');
    const send = async (key: Key, xml: string): Promise<{ status: number; code: string | null; text: string }> => {
      const body = Buffer.from(xml);
      return raw(key, 'POST', `/${bucket}`, { delete: '' }, body, { 'content-md5': md5(body), 'content-type': 'application/xml' });
    };
    for (const xml of [
      '<Delete xmlns:x="urn:x"><Object><Key>team-b/decoy</Key></Object><x:Object><Key>team-a/notes</Key></x:Object></Delete>',
      '<Delete xmlns:x="urn:x"><Object><Key>team-b/decoy</Key><x:Key>team-a/notes</x:Key></Object></Delete>',
    ]) {
      await as(TEAM_B).send(new PutObjectCommand({ Bucket: bucket, Key: 'team-b/decoy', Body: 'd' }));
      const answer = await send(TEAM_B, xml);
      expect(answer.status, answer.text).toBe(200);
      expect(await exists('team-a/notes')).toBe(true);
      expect(await exists('team-b/decoy')).toBe(false);
    }
    // A character reference is read as the character it names, here and at the store alike.
    const smuggled = await send(TEAM_B, '<Delete><Object><Key>&#x74;eam-a/notes</Key></Object></Delete>');
    expect([smuggled.status, smuggled.code]).toEqual([403, 'OC_ERR_ACCESS_DENIED']);
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'team-a/by-reference', Body: 'r' }));
    const byAdmin = await raw(
      { accessKeyId: 'test-client', secretAccessKey: 'test-client-secret' },
      'POST',
      `/${bucket}`,
      { delete: '' },
      Buffer.from('<Delete><Object><Key>&#x74;eam-a/by-reference</Key></Object></Delete>'),
      { 'content-md5': md5(Buffer.from('<Delete><Object><Key>&#x74;eam-a/by-reference</Key></Object></Delete>')) },
    );
    expect(byAdmin.status, byAdmin.text).toBe(200);
    expect(byAdmin.text).toContain('<Key>team-a/by-reference</Key>');
    expect(await exists('team-a/by-reference')).toBe(false);
    expect(await exists('team-a/notes')).toBe(true);
  });

  it('refuses, to a confined key, headers with which MinIO writes other objects than the one named (snowball tar extraction)', async () => {
    const answer = await raw(TEAM_B, 'PUT', `/${bucket}/team-b/a.tar`, {}, Buffer.from('not a tar'), { 'x-amz-meta-snowball-auto-extract': 'true' });
    expect([answer.status, answer.code]).toEqual([403, 'OC_ERR_ACCESS_DENIED']);
    expect(await exists('team-b/a.tar')).toBe(false);
  });

  it('judges a presigned URL and a form upload by the policy of the key that signed them', async () => {
    const byB = await getSignedUrl(as(TEAM_B), new GetObjectCommand({ Bucket: bucket, Key: 'team-a/notes' }), { expiresIn: 300 });
    const refused = await fetch(byB);
    expect(refused.status).toBe(403);
    expect(refused.headers.get('x-objectcache-error-code')).toBe('OC_ERR_ACCESS_DENIED');
    expect(await refused.text()).toMatch(/<Code>AccessDenied<\/Code>/);
    const byA = await getSignedUrl(as(TEAM_A), new GetObjectCommand({ Bucket: bucket, Key: 'team-a/notes' }), { expiresIn: 300 });
    const allowed = await fetch(byA);
    expect(allowed.status).toBe(200);
    expect(Buffer.from(await allowed.arrayBuffer()).equals(A_OBJECT)).toBe(true);
    // Whoever holds a URL cannot add x-amz-* headers its signer did not sign (here the
    // administrator's URL, and a header with which MinIO would unpack a tar into other keys).
    const byAdmin = await getSignedUrl(admin, new PutObjectCommand({ Bucket: bucket, Key: 'team-b/admin.tar' }), { expiresIn: 300 });
    const smuggled = await fetch(byAdmin, { method: 'PUT', body: '', headers: { 'x-amz-meta-snowball-auto-extract': 'true' } });
    expect([smuggled.status, smuggled.headers.get('x-objectcache-error-code')]).toEqual([403, 'OC_ERR_AUTH_HEADERS_NOT_SIGNED']);
    expect(await exists('team-b/admin.tar')).toBe(false);
    // (the SDK presigned the checksum of an empty body)
    const plain = await fetch(byAdmin, { method: 'PUT', body: '' });
    expect(plain.status, await plain.text()).toBe(200);
    const putByB = await getSignedUrl(as(TEAM_B), new PutObjectCommand({ Bucket: bucket, Key: 'team-a/presigned-put' }), { expiresIn: 300 });
    expect((await fetch(putByB, { method: 'PUT', body: 'x' })).status).toBe(403);
    expect(await exists('team-a/presigned-put')).toBe(false);

    const form = async (client: S3Client, key: string): Promise<Response> => {
      const { url, fields } = await createPresignedPost(client, { Bucket: bucket, Key: key, Expires: 300 });
      const body = new FormData();
      for (const [name, value] of Object.entries(fields)) body.append(name, value);
      body.append('file', new Blob([Buffer.from('form data')]), 'f.bin');
      return fetch(url, { method: 'POST', body });
    };
    const formRefused = await form(as(TEAM_B), 'team-a/form-upload');
    expect(formRefused.status).toBe(403);
    expect(formRefused.headers.get('x-objectcache-error-code')).toBe('OC_ERR_ACCESS_DENIED');
    expect(await exists('team-a/form-upload')).toBe(false);
    expect((await form(as(TEAM_B), 'team-b/form-upload')).status).toBe(204);
    expect(await exists('team-b/form-upload')).toBe(true);
  });

  it('classifies sub-resources before operations: a bucket policy, tagging or an unknown sub-resource needs its own grant', async () => {
    const a = as(TEAM_A);
    await expectDenied(a.send(new PutBucketPolicyCommand({ Bucket: bucket, Policy: JSON.stringify({ Version: '2012-10-17', Statement: [] }) })));
    await expectDenied(a.send(new GetObjectTaggingCommand({ Bucket: bucket, Key: 'team-a/notes' })));
    for (const [method, query] of [
      ['GET', { policy: '' }],
      ['PUT', { lifecycle: '' }],
      ['GET', { 'no-such-subresource': '' }],
      ['DELETE', { cors: '' }],
    ] as const) {
      const answer = await raw(TEAM_A, method, `/${bucket}`, query);
      expect(answer.status, `${method} ?${Object.keys(query)[0]}`).toBe(403);
      expect(answer.code).toBe('OC_ERR_ACCESS_DENIED');
    }
    // MinIO would read a file inside a zip object for this header: not the object the key names.
    expect((await raw(TEAM_A, 'GET', `/${bucket}/team-a/notes`, {}, undefined, { 'x-minio-extract': 'true' })).status).toBe(403);
    const unknown = await raw(TEAM_A, 'GET', `/${bucket}/team-a/notes`, { 'no-such-subresource': '' });
    expect(unknown.status).toBe(403);
    expect(unknown.text).toContain('only the administrator key');
  });

  it('refuses keys a store could read as another key (.., %2F, a leading /), and does not fold case or Unicode', async () => {
    for (const path of [
      `/${bucket}/team-b/%2E%2E/team-a/notes`,
      `/${bucket}/team-b%2F..%2Fteam-a%2Fnotes`,
      `/${bucket}//team-a/notes`,
      `/${bucket}/team-b/./x`,
      `/${bucket}/team-b//x`,
    ]) {
      const answer = await raw(TEAM_B, 'GET', path);
      expect(answer.status, `${path}: ${answer.text}`).toBe(400);
      expect(answer.code, path).toBe('OC_ERR_REQUEST_INVALID_KEY');
      expect(answer.text).not.toContain(A_OBJECT.toString());
    }
    await expectInvalidKey(
      as(TEAM_B).send(new CopyObjectCommand({ Bucket: bucket, Key: 'team-b/x', CopySource: `${bucket}/team-b/../team-a/notes` })),
      'OC_ERR_REQUEST_INVALID_ARGUMENT',
    );
    await expectInvalidKey(kv(TEAM_B).fetch(descriptor(['../team-a/kv/00000'], { keyPrefix: 'team-b/' })), 'OC_ERR_DESCRIPTOR_INVALID');
    await expectInvalidKey(kv(TEAM_B).lookup(['../team-a/kv/00000'], 'team-b/'), 'OC_ERR_DESCRIPTOR_INVALID');
    await expectDenied(as(TEAM_B).send(new GetObjectCommand({ Bucket: bucket, Key: 'TEAM-A/notes' })));
    await expectDenied(as(TEAM_B).send(new GetObjectCommand({ Bucket: bucket, Key: 'Team-b/notes' })));

    // NFC and NFD spellings are two keys; the policy names the NFC one only.
    const nfc = 'équipe-b/x'.normalize('NFC');
    const nfd = 'équipe-b/x'.normalize('NFD');
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: nfc, Body: 'composed' }));
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: nfd, Body: 'decomposed' }));
    expect((await get(as(TEAM_B), nfc)).toString()).toBe('composed');
    await expectDenied(as(TEAM_B).send(new GetObjectCommand({ Bucket: bucket, Key: nfd })));

    // A very long key: 1024 bytes is a key like any other; 1025 is an invalid key, not a crash.
    // (segments of 200 bytes: MinIO keeps each segment within a file name's 255 bytes)
    const segments = `${'k'.repeat(199)}/`.repeat(5);
    const longOwn = `team-b/${segments}${'k'.repeat(1024 - 'team-b/'.length - segments.length)}`;
    expect(Buffer.byteLength(longOwn)).toBe(1024);
    await as(TEAM_B).send(new PutObjectCommand({ Bucket: bucket, Key: longOwn, Body: 'long' }));
    expect((await get(as(TEAM_B), longOwn)).toString()).toBe('long');
    await expectDenied(as(TEAM_B).send(new GetObjectCommand({ Bucket: bucket, Key: `team-a/${longOwn.slice('team-a/'.length)}` })));
    await expectInvalidKey(as(TEAM_B).send(new PutObjectCommand({ Bucket: bucket, Key: `${longOwn}k`, Body: 'x' })), 'OC_ERR_REQUEST_INVALID_KEY');
  });

  it("serves a team its own prefix in one stream, and refuses a descriptor naming another team's chunk as a whole, before any read", async () => {
    const own = await kv(TEAM_A).fetch(descriptor(aKeys));
    expect(Buffer.from(own.target).equals(layerMajor(A_CHUNKS))).toBe(true);
    const before = gw.gateway.poolStats().completed + gw.gateway.poolStats().running + gw.gateway.poolStats().queued;
    const backendBefore = gw.gateway.backendStats()?.requests;
    for (const transport of ['get', 'post'] as const) {
      for (const mode of ['layerwise', 'chunkwise'] as const) {
        await expectDenied(kv(TEAM_B).fetch(descriptor(aKeys, { mode }), { transport }));
        // One allowed key and one forbidden key: the whole request is refused.
        await expectDenied(kv(TEAM_B).fetch(descriptor([bKeys[0]!, aKeys[1]!], { mode }), { transport }));
      }
    }
    const stats = gw.gateway.poolStats();
    expect(stats.completed + stats.running + stats.queued).toBe(before);
    expect(gw.gateway.backendStats()?.requests).toBe(backendBefore);
  });

  it('answers a lookup that probes another prefix with the same refusal whether the chunks exist or not', async () => {
    expect(await kv(TEAM_A).lookup(aKeys)).toBe(3);
    await expectDenied(kv(TEAM_B).lookup(aKeys));
    await expectDenied(kv(TEAM_B).lookup(['team-a/kv/99999']));
    await expectDenied(kv(TEAM_B).lookup([...bKeys, aKeys[0]!]));
    await expectDenied(kv(TEAM_B).lookup(['kv/00000'], 'team-a/'));
    expect(await kv(TEAM_B).lookup(bKeys)).toBe(1);
  });

  it("will not let a descriptor's tenant be spoofed; a fleet key may act as the tenants its policy grants", async () => {
    await expectDenied(kv(TEAM_A).fetch(descriptor(aKeys, { tenant: 'team-b' })), 'OC_ERR_ACCESS_TENANT');
    const ownTenant = await kv(TEAM_A).fetch(descriptor(aKeys, { tenant: 'team-a' }));
    expect(Buffer.from(ownTenant.target).equals(layerMajor(A_CHUNKS))).toBe(true);

    const delivered = (tenant: string): Promise<number> => metricValue(gw.gateway.adminUrl, `objectcache_delivered_bytes_total{tenant="${tenant}"}`);
    const [teamB0, fleet0] = [await delivered('team-b'), await delivered('fleet')];
    const forB = await kv(FLEET).fetch(descriptor(bKeys, { tenant: 'team-b' }));
    expect(Buffer.from(forB.target).equals(layerMajor(B_CHUNKS))).toBe(true);
    expect(await delivered('team-b')).toBe(teamB0 + LAYERS * LAYER_BYTES);
    const asItself = await kv(FLEET).fetch(descriptor(aKeys));
    expect(asItself.target.byteLength).toBe(3 * LAYERS * LAYER_BYTES);
    expect(await delivered('fleet')).toBe(fleet0 + 3 * LAYERS * LAYER_BYTES);
    await expectDenied(kv(FLEET).fetch(descriptor(aKeys, { tenant: 'outsider' })), 'OC_ERR_ACCESS_TENANT');
  });

  it('lets an explicit Deny win over a broader Allow, and gives a key without a policy nothing', async () => {
    expect((await get(as(FLEET), 'team-a/notes')).equals(A_OBJECT)).toBe(true);
    await expectDenied(as(FLEET).send(new GetObjectCommand({ Bucket: bucket, Key: 'secret/x' })));
    const deniedByName = await as(FLEET)
      .send(new GetObjectCommand({ Bucket: bucket, Key: 'secret/x' }))
      .then(
        () => undefined,
        (e: S3ServiceException) => e,
      );
    expect(deniedByName?.message).toContain('an explicit Deny in its policy (statement NeverSecrets)');
    await expectDenied(as(FLEET).send(new PutObjectCommand({ Bucket: bucket, Key: 'team-a/by-fleet', Body: 'x' })));
    await expectDenied(kv(FLEET).fetch(descriptor([aKeys[0]!, 'secret/x'])));
    const error = await as(NOBODY)
      .send(new GetObjectCommand({ Bucket: bucket, Key: 'team-a/notes' }))
      .then(
        () => undefined,
        (e: S3ServiceException) => e,
      );
    expect(error?.$metadata.httpStatusCode).toBe(403);
    expect(error?.message).toContain('it has no access policy');
    await expectDenied(as(NOBODY).send(new PutObjectCommand({ Bucket: bucket, Key: 'anything', Body: 'x' })));
  });

  it('still lets the administrator key do everything', async () => {
    expect((await get(admin, 'secret/x')).toString()).toBe('secret');
    await admin.send(new PutObjectCommand({ Bucket: otherBucket, Key: 'admin/x', Body: randomBytes(10) }));
    const whole = await new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: 'test-client', secretAccessKey: 'test-client-secret' } }).fetch(
      descriptor([...aKeys, ...bKeys], { tenant: 'anyone' }),
    );
    expect(Buffer.from(whole.target).equals(layerMajor([...A_CHUNKS, ...B_CHUNKS]))).toBe(true);
  });
});
