/**
 * Signature Version 2 (what aws-cli v1's `s3 presign` makes), as MinIO accepts it: the published
 * AWS SigV2 examples verify (header and query forms), tampering and expiry are refused, and
 * through a running gateway on both backends SigV2 PUT, GET and presigned GET work byte-exact;
 * `--sigv2 off` refuses them with a stable code.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { RequestVerifier } from '../gateway/s3/auth/request-verifier.js';
import { signV2, stringToSignV2 } from '../gateway/s3/auth/sigv2.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { CLIENT_KEY, CLIENT_SECRET, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';
import { signedHeaders } from './helpers/signing.js';
import { AccessPolicy } from '../gateway/common/access-policy.js';

// The credentials and requests of the SigV2 examples in the Amazon S3 documentation
// ("Signing and authenticating REST requests"), bucket johnsmith, path-style here.
const EXAMPLE = { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', tenant: 'example', access: AccessPolicy.unrestricted };

function verifierAt(iso: string, sigV2 = true): RequestVerifier {
  return new RequestVerifier({ credentials: [EXAMPLE], region: 'us-east-1', now: () => Date.parse(iso), sigV2 });
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'OK';
  } catch (error) {
    return error instanceof ObjectCacheError ? error.code : String(error);
  }
}

describe('SigV2 verification (published examples)', () => {
  it('verifies the object GET example and refuses it tampered, re-dated or from an unknown key', async () => {
    const verifier = verifierAt('2007-03-27T19:40:00Z');
    const request = (auth: string, date = 'Tue, 27 Mar 2007 19:36:42 +0000') => ({
      method: 'GET',
      headers: { host: 'localhost', date, authorization: auth },
      canonicalPath: '/johnsmith/photos/puppy.jpg',
      rawPath: '/johnsmith/photos/puppy.jpg',
      query: [],
    });
    expect(await codeOf(verifier.verify(request('AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU=')))).toBe('OK');
    expect(await codeOf(verifier.verify(request('AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMV=')))).toBe('OC_ERR_AUTH_SIGNATURE');
    expect(await codeOf(verifier.verify(request('AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU=', 'Tue, 27 Mar 2007 19:36:43 +0000')))).toBe('OC_ERR_AUTH_SIGNATURE');
    expect(await codeOf(verifier.verify(request('AWS AKIAIOSFODNN7EXAMPLF:bWq2s1WEIj+Ydj0vQ697zp+IXMU=')))).toBe('OC_ERR_AUTH_UNKNOWN_KEY');
    expect(await codeOf(verifierAt('2007-03-28T19:40:00Z').verify(request('AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU=')))).toBe('OC_ERR_AUTH_CLOCK_SKEW');
    expect(await codeOf(verifierAt('2007-03-27T19:40:00Z', false).verify(request('AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU=')))).toBe('OC_ERR_AUTH_SIGV2_DISABLED');
  });

  it('verifies the object PUT example (Content-Type signed) and the listing example (query not signed)', async () => {
    const put = {
      method: 'PUT',
      headers: {
        host: 'localhost',
        date: 'Tue, 27 Mar 2007 21:15:45 +0000',
        'content-type': 'image/jpeg',
        'content-length': '94328',
        authorization: 'AWS AKIAIOSFODNN7EXAMPLE:MyyxeRY7whkBe+bq8fHCL/2kKUg=',
      },
      canonicalPath: '/johnsmith/photos/puppy.jpg',
      rawPath: '/johnsmith/photos/puppy.jpg',
      query: [],
    };
    expect(await codeOf(verifierAt('2007-03-27T21:20:00Z').verify(put))).toBe('OK');
    const list = {
      method: 'GET',
      headers: { host: 'localhost', date: 'Tue, 27 Mar 2007 19:42:41 +0000', authorization: 'AWS AKIAIOSFODNN7EXAMPLE:htDYFYduRNen8P9ZfE/s9SuKy0U=' },
      canonicalPath: '/johnsmith/',
      rawPath: '/johnsmith/',
      query: [
        ['prefix', 'photos'],
        ['max-keys', '50'],
        ['marker', 'puppy'],
      ] as [string, string][],
    };
    expect(await codeOf(verifierAt('2007-03-27T19:45:00Z').verify(list))).toBe('OK');
  });

  it('verifies the query-string example until it expires', async () => {
    const query: [string, string][] = [
      ['AWSAccessKeyId', 'AKIAIOSFODNN7EXAMPLE'],
      ['Expires', '1175139620'],
      ['Signature', 'NpgCjnDzrM+WFzoENXmpNDUsSn8='],
    ];
    const request = { method: 'GET', headers: { host: 'localhost' }, canonicalPath: '/johnsmith/photos/puppy.jpg', rawPath: '/johnsmith/photos/puppy.jpg', query };
    expect(await codeOf(verifierAt('2007-03-29T03:00:00Z').verify(request))).toBe('OK');
    expect(await codeOf(verifierAt('2007-03-29T04:00:21Z').verify(request))).toBe('OC_ERR_AUTH_EXPIRED');
  });
});

describe.each<BackendKind>(['local', 's3'])('SigV2 through the gateway (%s backend)', (backend) => {
  const minio = inject('minio');
  let gw: TestGateway;
  let off: TestGateway;
  const bucket = uniqueBucket('sigv2');
  const body = Buffer.from('signed with SigV2 \u2713');

  beforeAll(async () => {
    gw = await startTestGateway({ backend, minio });
    off = await startTestGateway({ backend, minio, args: ['--sigv2', 'off'] });
    const path = `/${bucket}`;
    const res = await fetch(`${gw.url}${path}`, { method: 'PUT', headers: await signedHeaders(gw.url, { method: 'PUT', path }) });
    expect(res.status).toBe(200);
  });

  afterAll(async () => {
    await gw?.close();
    await off?.close();
  });

  function v2Headers(method: string, path: string, extra: Record<string, string> = {}): Record<string, string> {
    const headers: Record<string, string> = { date: new Date().toUTCString(), ...extra };
    const signature = signV2(CLIENT_SECRET, stringToSignV2({ method, headers, rawPath: path, query: [] }, headers['date'] as string));
    return { ...headers, authorization: `AWS ${CLIENT_KEY}:${signature}` };
  }

  it('stores and reads an object with SigV2 headers, and serves a SigV2 presigned GET', async () => {
    const path = `/${bucket}/dir/with%20space.bin`;
    const put = await fetch(`${gw.url}${path}`, { method: 'PUT', body, headers: v2Headers('PUT', path, { 'content-type': 'application/octet-stream', 'x-amz-meta-note': 'v2' }) });
    expect(put.status).toBe(200);
    const get = await fetch(`${gw.url}${path}`, { headers: v2Headers('GET', path) });
    expect(get.status).toBe(200);
    expect(get.headers.get('x-amz-meta-note')).toBe('v2');
    expect(Buffer.from(await get.arrayBuffer()).equals(body)).toBe(true);
    const expires = String(Math.floor(Date.now() / 1000) + 300);
    const signature = signV2(CLIENT_SECRET, stringToSignV2({ method: 'GET', headers: {}, rawPath: path, query: [] }, expires));
    const url = `${gw.url}${path}?AWSAccessKeyId=${CLIENT_KEY}&Expires=${expires}&Signature=${encodeURIComponent(signature)}`;
    const presigned = await fetch(url);
    expect(presigned.status).toBe(200);
    expect(Buffer.from(await presigned.arrayBuffer()).equals(body)).toBe(true);
    const tampered = await fetch(url.replace(`Expires=${expires}`, `Expires=${Number(expires) + 1}`));
    expect(tampered.status).toBe(403);
    expect(tampered.headers.get('x-objectcache-error-code')).toBe('OC_ERR_AUTH_SIGNATURE');
    await tampered.body?.cancel();
    // The holder of a SigV2 presigned URL cannot add x-amz-* query parameters (SigV2 does not sign them).
    const added = await fetch(`${url}&x-amz-meta-snowball-auto-extract=true`);
    expect(added.status).toBe(403);
    expect(added.headers.get('x-objectcache-error-code')).toBe('OC_ERR_AUTH_HEADERS_NOT_SIGNED');
    await added.body?.cancel();
    const refused = await fetch(url.replace(gw.url, off.url));
    expect(refused.status).toBe(403);
    expect(refused.headers.get('x-objectcache-error-code')).toBe('OC_ERR_AUTH_SIGV2_DISABLED');
    await refused.body?.cancel();
  });
});
