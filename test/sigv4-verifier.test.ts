/**
 * SigV4 verification with an injected clock: presigned URLs expire, are not valid before their
 * date, and must carry X-Amz-Expires of at most 604800 (0 has expired, as MinIO answers); tampering with any signed part is caught.
 */
import { SignatureV4 } from '@smithy/signature-v4';
import { describe, expect, it } from 'vitest';
import { RequestVerifier } from '../gateway/s3/auth/request-verifier.js';
import { parseTarget } from '../gateway/s3/request.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { NodeSha256 } from '../sigv4/signer.js';
import { AccessPolicy } from '../gateway/common/access-policy.js';

const credential = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', tenant: 'AKIDEXAMPLE', access: AccessPolicy.unrestricted };
const signer = new SignatureV4({ credentials: credential, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
const T0 = Date.UTC(2026, 0, 15, 12, 0, 0);

async function presignedTarget(expiresIn: number, path = '/bucket/some%20key'): Promise<string> {
  const request = await signer.presign(
    // As @aws-sdk/s3-request-presigner does: S3 presigned URLs sign UNSIGNED-PAYLOAD.
    {
      method: 'GET',
      protocol: 'http:',
      hostname: 'gateway.test',
      path,
      query: { 'x-id': 'GetObject' },
      headers: { host: 'gateway.test', 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' },
    },
    { signingDate: new Date(T0), expiresIn, unsignableHeaders: new Set(['x-amz-content-sha256']), unhoistableHeaders: new Set(['x-amz-content-sha256']) },
  );
  const query = Object.entries(request.query ?? {})
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
    .join('&');
  return `${path}?${query}`;
}

async function verifyAt(now: number, url: string): Promise<unknown> {
  const verifier = new RequestVerifier({ credentials: [credential], region: 'us-east-1', now: () => now });
  const target = parseTarget(url);
  try {
    return await verifier.verify({ method: 'GET', headers: { host: 'gateway.test' }, canonicalPath: target.canonicalPath, query: target.query });
  } catch (error) {
    return error;
  }
}

function codeOf(result: unknown): string {
  return result instanceof ObjectCacheError ? result.code : 'OK';
}

describe('presigned URLs', () => {
  it('are valid from 15 minutes before their date until they expire', async () => {
    const url = await presignedTarget(3600);
    expect(codeOf(await verifyAt(T0, url))).toBe('OK');
    expect(codeOf(await verifyAt(T0 + 3600_000, url))).toBe('OK');
    expect(codeOf(await verifyAt(T0 + 3601_000, url))).toBe('OC_ERR_AUTH_EXPIRED');
    expect(codeOf(await verifyAt(T0 - 14 * 60_000, url))).toBe('OK');
    expect(codeOf(await verifyAt(T0 - 16 * 60_000, url))).toBe('OC_ERR_AUTH_NOT_YET_VALID');
  });

  it('answer X-Amz-Expires out of range as MinIO does: 0 has expired, the rest is malformed', async () => {
    const url = await presignedTarget(60);
    for (const bad of ['604801', '1000000', '-1', 'abc', '']) {
      const tampered = url.replace('X-Amz-Expires=60', `X-Amz-Expires=${bad}`);
      expect(codeOf(await verifyAt(T0, tampered)), bad).toBe('OC_ERR_AUTH_EXPIRES_RANGE');
    }
    // MinIO and S3: 403 AccessDenied "Request has expired" for a URL valid for 0 seconds.
    expect(codeOf(await verifyAt(T0, url.replace('X-Amz-Expires=60', 'X-Amz-Expires=0')))).toBe('OC_ERR_AUTH_EXPIRED');
    expect(codeOf(await verifyAt(T0, url.replace('X-Amz-Expires=60', 'X-Amz-Expires=604800')))).not.toBe('OC_ERR_AUTH_EXPIRES_RANGE');
  });

  it('detect tampering with the path, the method, any query parameter, or the signature', async () => {
    const url = await presignedTarget(60);
    expect(codeOf(await verifyAt(T0, url.replace('some%20key', 'other%20key')))).toBe('OC_ERR_AUTH_SIGNATURE');
    expect(codeOf(await verifyAt(T0, url.replace('x-id=GetObject', 'x-id=PutObject')))).toBe('OC_ERR_AUTH_SIGNATURE');
    expect(codeOf(await verifyAt(T0, `${url}&extra=1`))).toBe('OC_ERR_AUTH_SIGNATURE');
    expect(codeOf(await verifyAt(T0, url.replace(/X-Amz-Signature=[0-9a-f]/, 'X-Amz-Signature=z')))).toBe('OC_ERR_AUTH_SIGNATURE');
    const verifier = new RequestVerifier({ credentials: [credential], region: 'us-east-1', now: () => T0 });
    const target = parseTarget(url);
    const asPut = await verifier.verify({ method: 'PUT', headers: { host: 'gateway.test' }, canonicalPath: target.canonicalPath, query: target.query }).catch((e: unknown) => e);
    expect(codeOf(asPut)).toBe('OC_ERR_AUTH_SIGNATURE');
  });

  it('reject an unknown access key and a wrong region', async () => {
    const url = await presignedTarget(60);
    expect(codeOf(await verifyAt(T0, url.replace('AKIDEXAMPLE', 'AKIDOTHER')))).toBe('OC_ERR_AUTH_UNKNOWN_KEY');
    expect(codeOf(await verifyAt(T0, url.replace('us-east-1', 'eu-west-1')))).toBe('OC_ERR_AUTH_SCOPE');
  });
});
