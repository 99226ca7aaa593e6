/**
 * Presigned URLs whose X-Amz-Expires is out of range, through the gateway on both backends and
 * against MinIO direct as the reference: 0 is 403 AccessDenied (expired), over a week, negative
 * or not a number 400 AuthorizationQueryParametersError, and an expired URL 403.
 */
import { SignatureV4 } from '@smithy/signature-v4';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { NodeSha256 } from '../sigv4/signer.js';
import { COMPAT_TARGETS, compatEndpoint, type CompatEndpoint } from './helpers/gateway.js';

const minio = inject('minio');

describe.each(COMPAT_TARGETS)('presigned expiry (%s)', (target) => {
  let endpoint: CompatEndpoint;
  let signer: SignatureV4;

  beforeAll(async () => {
    endpoint = await compatEndpoint(target, minio);
    signer = new SignatureV4({ credentials: endpoint.credentials, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
  });

  afterAll(async () => {
    await endpoint?.close();
  });

  async function answer(expires: string, signingDate?: Date): Promise<{ status: number; code: string | undefined }> {
    const url = new URL(endpoint.url);
    const signed = await signer.presign(
      { method: 'GET', protocol: 'http:', hostname: url.hostname, port: Number(url.port), path: '/some-bucket/some-key', query: {}, headers: { host: url.host } },
      { expiresIn: 60, ...(signingDate ? { signingDate } : {}) },
    );
    const query = new URLSearchParams(signed.query as Record<string, string>);
    if (expires !== '60') query.set('X-Amz-Expires', expires);
    const res = await fetch(`${endpoint.url}/some-bucket/some-key?${query.toString()}`);
    const body = await res.text();
    return { status: res.status, code: /<Code>([^<]*)<\/Code>/.exec(body)?.[1] };
  }

  it('answers out-of-range and expired presigned URLs as MinIO does', async () => {
    expect(await answer('0')).toEqual({ status: 403, code: 'AccessDenied' });
    for (const bad of ['604801', '-1', 'abc']) expect(await answer(bad), bad).toEqual({ status: 400, code: 'AuthorizationQueryParametersError' });
    expect(await answer('60', new Date(Date.now() - 2 * 3600_000))).toEqual({ status: 403, code: 'AccessDenied' });
  });
});
