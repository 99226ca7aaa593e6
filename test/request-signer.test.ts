/**
 * The backend signer's lean path must sign exactly as the general signer of
 * @smithy/signature-v4 does (the reference): same headers, same signature, for range GETs, HEADs,
 * queries with repeated and empty values, metadata headers and bodies, across days (the cached
 * signing key must follow the date).
 */
import { SignatureV4 } from '@smithy/signature-v4';
import { describe, expect, it } from 'vitest';
import { EMPTY_PAYLOAD_SHA256, NodeSha256, RequestSigner, toQueryBag } from '../sigv4/signer.js';

const credentials = { accessKeyId: 'backend-key', secretAccessKey: 'backend-secret-0123456789' };
const host = '127.0.0.1:9000';

async function reference(
  region: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  query: [string, string][],
  payloadHash: string,
  now: number,
): Promise<Record<string, string>> {
  const signer = new SignatureV4({ credentials, region, service: 's3', sha256: NodeSha256, uriEscapePath: false, applyChecksum: true });
  const signed = await signer.sign(
    { method, protocol: 'http:', hostname: '127.0.0.1', port: 9000, path, query: toQueryBag(query), headers: { ...headers, host, 'x-amz-content-sha256': payloadHash } },
    { signingDate: new Date(now) },
  );
  return signed.headers;
}

const cases: { name: string; method: string; path: string; headers: Record<string, string>; query: [string, string][]; payloadHash?: string }[] = [
  { name: 'range GET', method: 'GET', path: '/kvcache/kv/ctx16384-g64/00017', headers: { range: 'bytes=4194304-8388607' }, query: [] },
  { name: 'encoded key', method: 'GET', path: '/kvcache/a%20b/%E2%9C%93', headers: { range: 'bytes=0-0' }, query: [] },
  { name: 'HEAD with conditions', method: 'HEAD', path: '/b/k', headers: { 'if-match': '"abc"', 'if-none-match': '"def"' }, query: [] },
  {
    name: 'list with query',
    method: 'GET',
    path: '/b',
    headers: {},
    query: [
      ['list-type', '2'],
      ['prefix', 'a/b c'],
      ['delimiter', '/'],
      ['encoding-type', 'url'],
    ],
  },
  {
    name: 'repeated and empty query values',
    method: 'POST',
    path: '/b/k',
    headers: {},
    query: [
      ['uploads', ''],
      ['x', '2'],
      ['x', '1'],
    ],
  },
  {
    name: 'PUT with metadata and body hash',
    method: 'PUT',
    path: '/b/k',
    headers: { 'content-type': 'application/octet-stream', 'x-amz-meta-oc-layer-crc32c': 'AAAA', 'content-length': '11', 'x-amz-meta-note': '  two  spaces  ' },
    query: [],
    payloadHash: 'a'.repeat(64),
  },
  {
    name: 'unsigned payload',
    method: 'PUT',
    path: '/b/k',
    headers: { 'content-length': '3' },
    query: [
      ['partNumber', '1'],
      ['uploadId', 'u/+='],
    ],
    payloadHash: 'UNSIGNED-PAYLOAD',
  },
];

describe('RequestSigner', () => {
  for (const c of cases) {
    it(`signs ${c.name} as @smithy/signature-v4 does`, async () => {
      const now = Date.UTC(2026, 10, 22, 5, 49, 59, 123);
      const payloadHash = c.payloadHash ?? EMPTY_PAYLOAD_SHA256;
      const lean = new RequestSigner({ ...credentials, region: 'us-east-1' }).sign({
        method: c.method,
        path: c.path,
        query: c.query,
        headers: { ...c.headers, host },
        payloadHash,
        now,
      });
      const ref = await reference('us-east-1', c.method, c.path, c.headers, c.query, payloadHash, now);
      expect(lean['authorization']).toBe(ref['authorization']);
      expect(lean['x-amz-date']).toBe(ref['x-amz-date']);
    });
  }

  it('derives a new signing key when the day changes (and for another region)', async () => {
    const signer = new RequestSigner({ ...credentials, region: 'eu-west-1' });
    for (const now of [Date.UTC(2026, 10, 22, 23, 59, 59), Date.UTC(2026, 10, 23, 0, 0, 1), Date.UTC(2026, 10, 23, 12, 0, 0)]) {
      const lean = signer.sign({ method: 'GET', path: '/b/k', headers: { host, range: 'bytes=0-9' }, now });
      const ref = await reference('eu-west-1', 'GET', '/b/k', { range: 'bytes=0-9' }, [], EMPTY_PAYLOAD_SHA256, now);
      expect(lean['authorization']).toBe(ref['authorization']);
    }
  });
});
