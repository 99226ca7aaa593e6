/**
 * Hardening of authentication, access policies and XML bodies, each against a finding reproduced
 * on the gateway, as pure unit tests and through a running gateway:
 *
 * - a header-signed SigV4 request may carry no x-amz-* header that its signature does not list
 *   (a signed PUT replayed with x-amz-copy-source added ran as a CopyObject), while what the AWS
 *   SDK and the minio client sign still passes;
 * - a SigV2 presigned URL's Expires may lie at most 7 days (sigV2MaxExpiresSeconds) after the
 *   request: one dated 2100 was accepted;
 * - the policy wildcard `?` is one code point: a Deny on `secret-?/*` missed `secret-😀/doc`;
 * - hostile XML bodies (document types, entities, deep nesting, megabytes of empty elements) are
 *   400 MalformedXML, refused by a linear scan before parsing, not 500 after it;
 * - DeleteObjects by a key that could delete nothing in the bucket is refused before its body is
 *   read.
 */
import {
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3ServiceException,
  type S3Client,
} from '@aws-sdk/client-s3';
import { SignatureV4 } from '@smithy/signature-v4';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { authorizeKeys } from '../gateway/s3/auth/access.js';
import { AccessPolicy, parseAccessPolicy, s3Arn, wildcard } from '../gateway/common/access-policy.js';
import { RequestVerifier, unsignedAmzHeaders, type SignedRequestInfo } from '../gateway/s3/auth/request-verifier.js';
import { signV2, stringToSignV2 } from '../gateway/s3/auth/sigv2.js';
import { MAX_XML_ATTRIBUTES, MAX_XML_DEPTH, MAX_XML_ELEMENTS, MAX_XML_RUN, parseXmlBody, scanXmlBody } from '../gateway/s3/xml.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { NodeSha256 } from '../sigv4/signer.js';
import { CLIENT_KEY, CLIENT_SECRET, minioClient, sdkClient, startTestGateway, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';

const EMPTY_SHA256 = createHash('sha256').update('').digest('hex');
const T0 = Date.UTC(2026, 0, 15, 12, 0, 0);
const KEY = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', tenant: 'AKIDEXAMPLE', access: AccessPolicy.unrestricted };
const signer = new SignatureV4({ credentials: KEY, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });

function verifierAt(now: number, extra: { sigV2MaxExpiresSeconds?: number } = {}): RequestVerifier {
  return new RequestVerifier({ credentials: [KEY], region: 'us-east-1', now: () => now, ...extra });
}

async function outcome(promise: Promise<unknown>): Promise<{ code: string; message: string; details: Readonly<Record<string, string | number>> }> {
  try {
    await promise;
    return { code: 'OK', message: '', details: {} };
  } catch (error) {
    if (!(error instanceof ObjectCacheError)) throw error;
    return { code: error.code, message: error.message, details: error.details };
  }
}

function codeOf(run: () => unknown): string {
  try {
    run();
    return 'OK';
  } catch (error) {
    if (!(error instanceof ObjectCacheError)) throw error;
    return error.code;
  }
}

/** A PUT of an empty body header-signed by KEY at T0, with `signed` headers signed and `unsigned` ones left out. */
async function signedPut(signed: Record<string, string> = {}, unsignable: readonly string[] = []): Promise<Record<string, string>> {
  const request = await signer.sign(
    {
      method: 'PUT',
      protocol: 'http:',
      hostname: 'gateway.test',
      path: '/bucket/dst',
      query: {},
      headers: { host: 'gateway.test', 'x-amz-content-sha256': EMPTY_SHA256, ...signed },
    },
    { signingDate: new Date(T0), unsignableHeaders: new Set(unsignable) },
  );
  return Object.fromEntries(Object.entries(request.headers).map(([k, v]) => [k.toLowerCase(), v]));
}

const put = (headers: Record<string, string>): SignedRequestInfo => ({ method: 'PUT', headers, canonicalPath: '/bucket/dst', query: [] });

describe('x-amz-* headers a SigV4 signature does not cover', () => {
  it('refuses a header-signed request that carries one, naming every such header', async () => {
    const headers = await signedPut({ 'x-amz-meta-owner': 'me' });
    expect((await outcome(verifierAt(T0).verify(put(headers)))).code).toBe('OK');
    // The finding: the signed PUT, replayed with a copy source added, would run as a CopyObject.
    const replayed = await outcome(verifierAt(T0).verify(put({ ...headers, 'x-amz-copy-source': '/bucket/secret' })));
    expect(replayed.code).toBe('OC_ERR_AUTH_HEADERS_NOT_SIGNED');
    expect(replayed.message).toContain('There were headers present in the request which were not signed: x-amz-copy-source');
    expect(replayed.details).toEqual({ HeadersNotSigned: 'x-amz-copy-source' });
    const two = await outcome(verifierAt(T0).verify(put({ ...headers, 'x-amz-tagging': 'a=b', 'x-amz-copy-source': '/bucket/secret' })));
    expect(two.details).toEqual({ HeadersNotSigned: 'x-amz-copy-source, x-amz-tagging' });
    // Signed when sent by the signer: accepted.
    const copy = await signedPut({ 'x-amz-copy-source': '/bucket/secret', 'x-amz-tagging': 'a=b' });
    expect((await outcome(verifierAt(T0).verify(put(copy)))).code).toBe('OK');
  });

  it('leaves x-amz-content-sha256 out of the rule (its value is the payload-hash line), and checks the signature first', async () => {
    const unlisted = await signedPut({}, ['x-amz-content-sha256']);
    expect(unlisted['authorization']).not.toContain('x-amz-content-sha256');
    expect((await outcome(verifierAt(T0).verify(put(unlisted)))).code).toBe('OK');
    // Its value is still covered: changing it breaks the signature.
    expect(await outcome(verifierAt(T0).verify(put({ ...unlisted, 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' })))).toMatchObject({ code: 'OC_ERR_AUTH_SIGNATURE' });
    const forged = await signedPut();
    forged['authorization'] = (forged['authorization'] as string).replace(/Signature=[0-9a-f]/, 'Signature=z');
    expect((await outcome(verifierAt(T0).verify(put({ ...forged, 'x-amz-copy-source': '/bucket/secret' })))).code).toBe('OC_ERR_AUTH_SIGNATURE');
    expect(unsignedAmzHeaders({ 'x-amz-date': 'd', 'x-amz-content-sha256': 'h', 'x-amzn-trace-id': 't', 'x-amz-meta-b': '1', 'x-amz-acl': 'private' }, ['x-amz-date'])).toEqual([
      'x-amz-acl',
      'x-amz-meta-b',
    ]);
  });

  it('refuses one that the holder of a presigned URL adds', async () => {
    // As @aws-sdk/s3-request-presigner does: S3 presigned URLs sign UNSIGNED-PAYLOAD.
    const request = await signer.presign(
      { method: 'PUT', protocol: 'http:', hostname: 'gateway.test', path: '/bucket/dst', query: {}, headers: { host: 'gateway.test', 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' } },
      { signingDate: new Date(T0), expiresIn: 300, unsignableHeaders: new Set(['x-amz-content-sha256']), unhoistableHeaders: new Set(['x-amz-content-sha256']) },
    );
    const query = Object.entries(request.query ?? {}).map(([k, v]) => [k, String(v)] as [string, string]);
    const presigned = (headers: Record<string, string>): SignedRequestInfo => ({
      method: 'PUT',
      headers: { host: 'gateway.test', ...headers },
      canonicalPath: '/bucket/dst',
      query,
    });
    expect((await outcome(verifierAt(T0).verify(presigned({})))).code).toBe('OK');
    const added = await outcome(verifierAt(T0).verify(presigned({ 'x-amz-meta-snowball-auto-extract': 'true', 'x-amz-copy-source': '/bucket/secret' })));
    expect(added).toMatchObject({ code: 'OC_ERR_AUTH_HEADERS_NOT_SIGNED', details: { HeadersNotSigned: 'x-amz-copy-source, x-amz-meta-snowball-auto-extract' } });
  });
});

describe('SigV2 presigned URLs expire within the cap', () => {
  const path = '/bucket/key';
  const presignedV2 = (expires: string): SignedRequestInfo => {
    const signature = signV2(KEY.secretAccessKey, stringToSignV2({ method: 'GET', headers: {}, rawPath: path, query: [] }, expires));
    return {
      method: 'GET',
      headers: { host: 'gateway.test' },
      canonicalPath: path,
      rawPath: path,
      query: [
        ['AWSAccessKeyId', KEY.accessKeyId],
        ['Expires', expires],
        ['Signature', signature],
      ],
    };
  };
  const at = (seconds: number): string => String(T0 / 1000 + seconds);

  it('refuses an Expires more than 7 days after the request by default, and accepts one within', async () => {
    expect((await outcome(verifierAt(T0).verify(presignedV2(String(Date.UTC(2100, 0, 1) / 1000))))).code).toBe('OC_ERR_AUTH_EXPIRES_RANGE');
    expect((await outcome(verifierAt(T0).verify(presignedV2(at(604_801))))).code).toBe('OC_ERR_AUTH_EXPIRES_RANGE');
    expect((await outcome(verifierAt(T0).verify(presignedV2(at(604_800))))).code).toBe('OK');
    expect((await outcome(verifierAt(T0).verify(presignedV2(at(60))))).code).toBe('OK');
    // The cap counts from the request: the same URL is fine a day later, and expires as before.
    expect((await outcome(verifierAt(T0 + 86_400_000).verify(presignedV2(at(604_801 + 86_400 - 1))))).code).toBe('OK');
    expect((await outcome(verifierAt(T0 + 61_000).verify(presignedV2(at(60))))).code).toBe('OC_ERR_AUTH_EXPIRED');
    // Past the largest date: never a URL that cannot expire.
    expect((await outcome(verifierAt(T0).verify(presignedV2('9'.repeat(40))))).code).toBe('OC_ERR_AUTH_EXPIRES_RANGE');
  });

  it('takes the cap from sigV2MaxExpiresSeconds (0: no cap), and refuses a cap that is not a whole number of seconds', async () => {
    expect((await outcome(verifierAt(T0, { sigV2MaxExpiresSeconds: 60 }).verify(presignedV2(at(61))))).code).toBe('OC_ERR_AUTH_EXPIRES_RANGE');
    expect((await outcome(verifierAt(T0, { sigV2MaxExpiresSeconds: 60 }).verify(presignedV2(at(60))))).code).toBe('OK');
    expect((await outcome(verifierAt(T0, { sigV2MaxExpiresSeconds: 0 }).verify(presignedV2(String(Date.UTC(2100, 0, 1) / 1000))))).code).toBe('OK');
    expect((await outcome(verifierAt(T0, { sigV2MaxExpiresSeconds: 0 }).verify(presignedV2('9'.repeat(40))))).code).toBe('OC_ERR_AUTH_EXPIRES_RANGE');
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY])
      expect(
        codeOf(() => verifierAt(T0, { sigV2MaxExpiresSeconds: bad })),
        String(bad),
      ).toBe('OC_ERR_CONFIG_INVALID');
  });
});

describe('policy wildcards count code points', () => {
  const policy = (...Statement: unknown[]): AccessPolicy => parseAccessPolicy({ Version: '2012-10-17', Statement }, 'test');

  it('lets ? match one astral character (two UTF-16 units), never half of one', () => {
    expect(wildcard('kvcache/secret-?/*')('kvcache/secret-😀/doc')).toBe(true);
    expect(wildcard('a?b')('a😀b')).toBe(true);
    expect(wildcard('a??b')('a😀b')).toBe(false);
    expect(wildcard('*?')('😀')).toBe(true);
    expect(wildcard('*??')('😀')).toBe(false);
    expect(wildcard('*?b')('😀😀b')).toBe(true);
    expect(wildcard('?')('\ud800')).toBe(true); // a lone surrogate is one code point
    expect(wildcard('S3:GET?BJECT', true)('s3:GetObject')).toBe(true);
  });

  it('agrees with a Unicode regular expression on random patterns over astral, accented and ASCII characters', () => {
    // xorshift32: a float LCG's low bits are too regular to pick astral characters often.
    let seed = 0x9e3779b9;
    const next = (n: number): number => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    const letters = ['a', 'é', '😀', '𝄞', '/'];
    const escape = (c: string): string => c.replace(/[.*+?^${}()|[\]\\/]/gu, '\\$&');
    for (let i = 0; i < 3000; i++) {
      const pattern = Array.from({ length: next(7) }, () => [...letters, '*', '?'][next(letters.length + 2)]).join('');
      const text = Array.from({ length: next(8) }, () => letters[next(letters.length)]).join('');
      const regex = new RegExp(`^${[...pattern].map((c) => (c === '*' ? '.*' : c === '?' ? '.' : escape(c))).join('')}$`, 'su');
      expect(wildcard(pattern)(text), `${pattern} ~ ${text}`).toBe(regex.test(text));
    }
    const hostile = wildcard(`${'*?'.repeat(40)}*b`);
    const started = performance.now();
    expect(hostile('😀'.repeat(1024))).toBe(false);
    expect(performance.now() - started).toBeLessThan(500);
  });

  it("makes a Deny on secret-?/* cover secret-😀/doc in every check: one ARN, a bucket's keys in bulk, and s3:prefix conditions", () => {
    const p = policy(
      { Effect: 'Allow', Action: 's3:*', Resource: 'arn:aws:s3:::kvcache/*' },
      { Sid: 'NoSecrets', Effect: 'Deny', Action: 's3:*', Resource: 'arn:aws:s3:::kvcache/secret-?/*' },
    );
    expect(p.decide('s3:GetObject', s3Arn('kvcache', 'secret-😀/doc'))).toEqual({ allowed: false, explicit: true, sid: 'NoSecrets' });
    expect(p.decide('s3:GetObject', s3Arn('kvcache', 'secret-a/doc'))).toEqual({ allowed: false, explicit: true, sid: 'NoSecrets' });
    expect(p.allows('s3:GetObject', s3Arn('kvcache', 'secret-😀😀/doc'))).toBe(true);
    expect(p.objectChecker('s3:GetObject', 'kvcache')('secret-😀/doc')).toEqual({ allowed: false, explicit: true, sid: 'NoSecrets' });
    const credential = { accessKeyId: 'k', secretAccessKey: 's', tenant: 't', access: p };
    expect(codeOf(() => authorizeKeys(credential, 's3:GetObject', 'kvcache', ['public/a', 'secret-😀/doc']))).toBe('OC_ERR_ACCESS_DENIED');
    const listing = policy({ Effect: 'Allow', Action: 's3:ListBucket', Resource: 'arn:aws:s3:::kvcache', Condition: { StringNotLike: { 's3:prefix': 'secret-?/*' } } });
    expect(listing.allows('s3:ListBucket', s3Arn('kvcache'), { 's3:prefix': 'public/' })).toBe(true);
    expect(listing.allows('s3:ListBucket', s3Arn('kvcache'), { 's3:prefix': 'secret-😀/' })).toBe(false);
  });

  it('says whether a key could ever act on some object of a bucket (mayEverOnSomeObject)', () => {
    const del = ['s3:DeleteObject', 's3:DeleteObjectVersion'] as const;
    const cases: [unknown, string, boolean][] = [
      [{ Effect: 'Allow', Action: 's3:DeleteObject', Resource: 'arn:aws:s3:::kv/team-a/*' }, 'kv', true],
      [{ Effect: 'Allow', Action: 's3:DeleteObject', Resource: 'arn:aws:s3:::kv/team-a/*' }, 'kv2', false],
      [{ Effect: 'Allow', Action: 's3:DeleteObjectVersion', Resource: 'arn:aws:s3:::kv/x' }, 'kv', true],
      [{ Effect: 'Allow', Action: 's3:GetObject', Resource: 'arn:aws:s3:::kv/*' }, 'kv', false],
      [{ Effect: 'Allow', Action: 's3:*', Resource: 'arn:aws:s3:::kv' }, 'kv', false],
      [{ Effect: 'Allow', Action: 's3:*', Resource: 'arn:aws:s3:::kv/' }, 'kv', false],
      [{ Effect: 'Allow', Action: 's3:*', Resource: 'arn:aws:s3:::k?' }, 'kv', false],
      [{ Effect: 'Allow', Action: 's3:*', Resource: 'arn:aws:s3:::k?/*' }, 'kv', true],
      [{ Effect: 'Allow', Action: 's3:*', Resource: 'arn:aws:s3:::kv*' }, 'kv', true],
      [{ Effect: 'Allow', Action: 's3:*', Resource: 'arn:aws:s3:::*/a' }, 'kv', true],
      [{ Effect: 'Allow', Action: 's3:*', Resource: '*' }, 'kv', true],
      [{ Effect: 'Allow', Action: '*', Resource: 'arn:objectcache:::tenant/*' }, 'kv', false],
      [{ Effect: 'Allow', Action: 's3:DeleteObject', Resource: 'arn:aws:s3:::kv/*', Condition: { StringLike: { 's3:prefix': 'x' } } }, 'kv', true],
      [{ Effect: 'Deny', Action: 's3:DeleteObject', Resource: 'arn:aws:s3:::kv/*' }, 'kv', false],
    ];
    for (const [statement, bucket, expected] of cases) expect(policy(statement).mayEverOnSomeObject(del, bucket), `${JSON.stringify(statement)} on ${bucket}`).toBe(expected);
    expect(new AccessPolicy([]).mayEverOnSomeObject(del, 'kv')).toBe(false);
    expect(AccessPolicy.unrestricted.mayEverOnSomeObject(del, 'kv')).toBe(true);
  });
});

describe('XML request bodies', () => {
  const MB = 1.6 * 1024 * 1024;
  const hostile: Record<string, string> = {
    'an external entity': '<?xml version="1.0"?><!DOCTYPE Delete [<!ENTITY x SYSTEM "file:///etc/passwd">]><Delete><Object><Key>&x;</Key></Object></Delete>',
    'a parameter entity': '<!DOCTYPE Delete [<!ENTITY % p "x">]><Delete><Object><Key>k</Key></Object></Delete>',
    'a large entity': `<!DOCTYPE Delete [<!ENTITY x "${'a'.repeat(20_000)}">]><Delete><Object><Key>&x;</Key></Object></Delete>`,
    'a large expansion': `<!DOCTYPE Delete [<!ENTITY x "${'a'.repeat(9000)}">]><Delete><Object><Key>${'&x;'.repeat(2000)}</Key></Object></Delete>`,
    'a lowercase doctype': '<!doctype Delete><Delete><Object><Key>k</Key></Object></Delete>',
    'deep nesting': `<Delete>${'<a>'.repeat(200)}${'</a>'.repeat(200)}</Delete>`,
    'a reserved name': '<Delete><__proto__>x</__proto__><Object><Key>k</Key></Object></Delete>',
    'megabytes of empty elements': `<Delete>${'<a/>'.repeat(Math.floor(MB / 4))}</Delete>`,
    'megabytes of empty objects': `<Delete>${'<Object></Object>'.repeat(Math.floor(MB / 17))}</Delete>`,
    'many attributes': `<Delete ${Array.from({ length: 1000 }, (_, i) => `a${i}=""`).join(' ')}><Object><Key>k</Key></Object></Delete>`,
    'many processing instructions': `<?xml version="1.0"?><Delete>${'<?a?>'.repeat(1000)}<Object><Key>k</Key></Object></Delete>`,
    'an unterminated comment': '<Delete><!-- <Object><Key>k</Key></Object></Delete>',
    'a key of megabytes': `<Delete><Object><Key>${'k'.repeat(MB)}</Key></Object></Delete>`,
    'an attribute value of megabytes': `<Delete a="${'v'.repeat(MB)}"><Object><Key>k</Key></Object></Delete>`,
    'a tag name of megabytes': `<Delete><${'t'.repeat(MB)}/><Object><Key>k</Key></Object></Delete>`,
  };

  it.each(Object.entries(hostile))('answers %s with MalformedXML, never an internal error', (_name, xml) => {
    expect(codeOf(() => parseXmlBody(xml, 'Delete'))).toBe('OC_ERR_REQUEST_MALFORMED_XML');
  });

  it('refuses megabytes of elements in a linear scan, in well under a few ms per MB', () => {
    const delete16 = hostile['megabytes of empty elements'] as string;
    const complete16 = `<CompleteMultipartUpload>${'<a/>'.repeat(Math.floor(MB / 4))}</CompleteMultipartUpload>`;
    const timed = (run: () => unknown): number => {
      const times: number[] = [];
      for (let i = 0; i < 5; i++) {
        const started = performance.now();
        expect(codeOf(run)).toBe('OC_ERR_REQUEST_MALFORMED_XML');
        times.push(performance.now() - started);
      }
      return times.sort((a, b) => a - b)[2] as number;
    };
    // Before the scan, parsing the first took 0.3-0.6 s of main thread; the scan takes a few ms.
    // The bound sits between the two, well clear of a busy machine's noise (once 24 ms under load).
    expect(timed(() => parseXmlBody(delete16, 'Delete'))).toBeLessThan(100);
    expect(timed(() => parseXmlBody(complete16, 'CompleteMultipartUpload'))).toBeLessThan(100);
    expect(timed(() => parseXmlBody(hostile['a key of megabytes'] as string, 'Delete'))).toBeLessThan(100);
    expect(timed(() => parseXmlBody(hostile['a tag name of megabytes'] as string, 'Delete'))).toBeLessThan(100);
    // A body the scan lets through is scanned at the same pace: 1000 keys of 1.6 KiB.
    const text = `<Delete>${Array.from({ length: 1000 }, (_, i) => `<Object><Key>${'k'.repeat(1600)}${i}</Key></Object>`).join('')}</Delete>`;
    const started = performance.now();
    for (let i = 0; i < 5; i++) scanXmlBody(text, 'Delete');
    expect((performance.now() - started) / 5).toBeLessThan(50);
  });

  it('still reads every body an S3 client can send, up to the limits of its root', () => {
    const object = (i: number): string =>
      `<Object><Key>k${i}</Key><VersionId>v</VersionId><ETag>"e"</ETag><LastModifiedTime>2026-01-01T00:00:00Z</LastModifiedTime><Size>1</Size></Object>`;
    const full = `<?xml version="1.0" encoding="UTF-8"?>\n<!-- 1000 keys -->\n<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>${Array.from({ length: 1000 }, (_, i) => object(i)).join('\n  ')}</Delete>`;
    expect(MAX_XML_ELEMENTS['Delete']).toBe(2 + 1000 * 6);
    // The comment counts as an element: drop <Quiet> to stay at the limit.
    const atLimit = full.replace('<Quiet>true</Quiet>', '');
    expect((parseXmlBody(atLimit, 'Delete')['Object'] as unknown[]).length).toBe(1000);
    expect(codeOf(() => parseXmlBody(full, 'Delete'))).toBe('OC_ERR_REQUEST_MALFORMED_XML');
    const part = (i: number): string =>
      `<Part><PartNumber>${i}</PartNumber><ETag>&quot;e&quot;</ETag><ChecksumCRC32>A</ChecksumCRC32><ChecksumCRC32C>A</ChecksumCRC32C><ChecksumCRC64NVME>A</ChecksumCRC64NVME><ChecksumSHA1>A</ChecksumSHA1><ChecksumSHA256>A</ChecksumSHA256></Part>`;
    const complete = `<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">${Array.from({ length: 10_000 }, (_, i) => part(i + 1)).join('')}</CompleteMultipartUpload>`;
    expect((parseXmlBody(complete, 'CompleteMultipartUpload')['Part'] as unknown[]).length).toBe(10_000);
    const config =
      '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>us-east-1</LocationConstraint><![CDATA[]]></CreateBucketConfiguration>';
    expect(parseXmlBody(config, 'CreateBucketConfiguration')['LocationConstraint']).toBe('us-east-1');
    // The longest key: 1024 code points, each a 10-character reference.
    const longest = parseXmlBody(`<Delete><Object><Key>${'&#x10FFFF;'.repeat(1024)}</Key></Object></Delete>`, 'Delete')['Object'] as { Key: string }[];
    expect(longest[0]?.Key).toBe('\u{10FFFF}'.repeat(1024));
    expect(codeOf(() => scanXmlBody(`<Delete><Object><Key>${'k'.repeat(MAX_XML_RUN)}</Key></Object></Delete>`, 'Delete'))).toBe('OK');
    expect(codeOf(() => scanXmlBody(`<Delete><Object><Key>${'k'.repeat(MAX_XML_RUN + 1)}</Key></Object></Delete>`, 'Delete'))).toBe('OC_ERR_REQUEST_MALFORMED_XML');
    const grant = `<Delete xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" a='>' b="/"><Object xsi:type="x"><Key>a&gt;b/&amp;&#x74;</Key></Object></Delete>`;
    expect(parseXmlBody(grant, 'Delete')['Object']).toEqual([{ Key: 'a>b/&t' }]);
    const nested = (depth: number): string => `${'<a>'.repeat(depth - 1)}<b/>${'</a>'.repeat(depth - 1)}`;
    expect(codeOf(() => scanXmlBody(`<Delete>${nested(MAX_XML_DEPTH - 1)}</Delete>`, 'Delete'))).toBe('OK');
    expect(codeOf(() => scanXmlBody(`<Delete>${nested(MAX_XML_DEPTH)}<a></a></Delete>`, 'Delete'))).toBe('OK');
    expect(codeOf(() => scanXmlBody(`<Delete>${'<a>'.repeat(MAX_XML_DEPTH)}</Delete>`, 'Delete'))).toBe('OC_ERR_REQUEST_MALFORMED_XML');
    const attributes = (n: number): string => `<Delete ${Array.from({ length: n }, (_, i) => `a${i}="1"`).join(' ')}/>`;
    expect(codeOf(() => scanXmlBody(attributes(MAX_XML_ATTRIBUTES), 'Delete'))).toBe('OK');
    expect(codeOf(() => scanXmlBody(attributes(MAX_XML_ATTRIBUTES + 1), 'Delete'))).toBe('OC_ERR_REQUEST_MALFORMED_XML');
  });
});

// --- through a running gateway ---------------------------------------------------------------

const NOBODY = { accessKeyId: 'nobody-key', secretAccessKey: 'nobody-secret-0001' };
const READER = { accessKeyId: 'reader-key', secretAccessKey: 'reader-secret-0002' };
const DELETER = { accessKeyId: 'deleter-key', secretAccessKey: 'deleter-secret-0003' };
const CONFINED = { accessKeyId: 'confined-key', secretAccessKey: 'confined-secret-0004' };

interface Answer {
  readonly status: number;
  readonly code: string | undefined;
  readonly text: string;
}

describe.each<BackendKind>(['local', 's3'])('through the gateway (%s backend)', (backend) => {
  const bucket = uniqueBucket('harden');
  let dir: string;
  let gw: TestGateway;
  let admin: S3Client;

  /** A request header-signed by `key` (SigV4), sent as given plus `added` headers that are not signed. */
  async function send(
    key: { accessKeyId: string; secretAccessKey: string },
    method: string,
    path: string,
    query: Record<string, string>,
    body: Buffer,
    signed: Record<string, string> = {},
    added: Record<string, string> = {},
  ): Promise<Answer> {
    const url = new URL(gw.url);
    const keySigner = new SignatureV4({ credentials: key, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
    const headers = { host: url.host, 'x-amz-content-sha256': createHash('sha256').update(body).digest('hex'), 'content-length': String(body.length), ...signed };
    const request = await keySigner.sign({ method, protocol: 'http:', hostname: url.hostname, port: Number(url.port), path, query, headers });
    const qs = new URLSearchParams(query).toString();
    return rawSend(method, `${path}${qs ? `?${qs}` : ''}`, { ...request.headers, ...added }, body);
  }

  async function rawSend(method: string, pathAndQuery: string, headers: Record<string, string>, body?: Buffer): Promise<Answer> {
    const url = new URL(gw.url);
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, path: pathAndQuery, method, headers }, resolve);
      req.on('error', reject);
      req.end(body);
    });
    let text = '';
    for await (const piece of res) text += (piece as Buffer).toString();
    const code = res.headers['x-objectcache-error-code'];
    return { status: res.statusCode ?? 0, code: typeof code === 'string' ? code : undefined, text };
  }

  const exists = (key: string): Promise<boolean> =>
    admin.send(new HeadObjectCommand({ Bucket: bucket, Key: key })).then(
      () => true,
      (e: S3ServiceException) => (e.$metadata.httpStatusCode === 404 ? false : Promise.reject(e)),
    );
  const read = async (client: S3Client, key: string): Promise<string> =>
    Buffer.from(await (await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body!.transformToByteArray()).toString();
  const md5 = (body: Buffer): string => createHash('md5').update(body).digest('base64');

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'objectcache-harden-'));
    writeFileSync(
      join(dir, 'credentials.json'),
      JSON.stringify([
        NOBODY,
        { ...READER, policy: { Statement: [{ Effect: 'Allow', Action: 's3:GetObject', Resource: `arn:aws:s3:::${bucket}/*` }] } },
        { ...DELETER, policy: { Statement: [{ Effect: 'Allow', Action: ['s3:DeleteObject', 's3:GetObject'], Resource: `arn:aws:s3:::${bucket}/team/*` }] } },
        {
          ...CONFINED,
          policy: {
            Statement: [
              { Effect: 'Allow', Action: 's3:*', Resource: `arn:aws:s3:::${bucket}/*` },
              { Sid: 'NoSecrets', Effect: 'Deny', Action: 's3:*', Resource: `arn:aws:s3:::${bucket}/secret-?/*` },
            ],
          },
        },
      ]),
    );
    gw = await startTestGateway({ backend, minio: inject('minio'), args: ['--credentials', join(dir, 'credentials.json')] });
    admin = sdkClient(gw.url);
    await admin.send(new CreateBucketCommand({ Bucket: bucket }));
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'src', Body: 'the source' }));
  });

  afterAll(async () => {
    admin?.destroy();
    await gw?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a signed PUT replayed with an unsigned x-amz-copy-source: nothing is copied', async () => {
    const body = Buffer.from('mine');
    const replayed = await send({ accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET }, 'PUT', `/${bucket}/dst`, {}, body, {}, { 'x-amz-copy-source': `/${bucket}/src` });
    expect([replayed.status, replayed.code]).toEqual([403, 'OC_ERR_AUTH_HEADERS_NOT_SIGNED']);
    expect(replayed.text).toContain('<HeadersNotSigned>x-amz-copy-source</HeadersNotSigned>');
    expect(await exists('dst')).toBe(false);
    const plain = await send({ accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET }, 'PUT', `/${bucket}/dst`, {}, body);
    expect(plain.status, plain.text).toBe(200);
    expect(await read(admin, 'dst')).toBe('mine');
  });

  it('serves what the AWS SDK and the minio client sign: metadata, tagging, checksums, trailers, copies', async () => {
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'sdk/meta', Body: 'm', Metadata: { layers: '32' }, Tagging: 'a=b', ChecksumAlgorithm: 'CRC32C' }));
    // A stream of unknown length: aws-chunked with a trailing checksum (x-amz-trailer, x-amz-decoded-content-length).
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'sdk/trailer', Body: Readable.from([Buffer.from('trailed')]), ContentLength: 7 }));
    await admin.send(new CopyObjectCommand({ Bucket: bucket, Key: 'sdk/copy', CopySource: `${bucket}/src`, MetadataDirective: 'REPLACE', Metadata: { copied: 'yes' } }));
    const whenRequired = sdkClient(gw.url, { requestChecksumCalculation: 'WHEN_REQUIRED' });
    await whenRequired.send(new PutObjectCommand({ Bucket: bucket, Key: 'sdk/plain', Body: 'p', StorageClass: 'STANDARD' }));
    whenRequired.destroy();
    expect(await read(admin, 'sdk/trailer')).toBe('trailed');
    expect(await read(admin, 'sdk/copy')).toBe('the source');
    const minio = minioClient(gw.url);
    await minio.putObject(bucket, 'minio/meta', Buffer.from('mc'), 2, { 'x-amz-meta-layers': '32', 'Content-Type': 'application/x-kv' });
    await minio.copyObject(bucket, 'minio/copy', `/${bucket}/src`);
    expect(await read(admin, 'minio/copy')).toBe('the source');
  });

  it('answers a SigV2 presigned URL that expires in 2100 with 400 AuthorizationQueryParametersError', async () => {
    const path = `/${bucket}/src`;
    const url = (expires: string): string =>
      `${path}?AWSAccessKeyId=${CLIENT_KEY}&Expires=${expires}&Signature=${encodeURIComponent(signV2(CLIENT_SECRET, stringToSignV2({ method: 'GET', headers: {}, rawPath: path, query: [] }, expires)))}`;
    const host = new URL(gw.url).host;
    const far = await rawSend('GET', url(String(Date.UTC(2100, 0, 1) / 1000)), { host });
    expect([far.status, far.code]).toEqual([400, 'OC_ERR_AUTH_EXPIRES_RANGE']);
    expect(far.text).toContain('<Code>AuthorizationQueryParametersError</Code>');
    const soon = await rawSend('GET', url(String(Math.floor(Date.now() / 1000) + 300)), { host });
    expect([soon.status, soon.text]).toEqual([200, 'the source']);
  });

  it('applies a Deny on secret-?/* to a key with an astral character there', async () => {
    const confined = sdkClient(gw.url, CONFINED);
    try {
      await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'secret-😀/doc', Body: 'hidden' }));
      for (const key of ['secret-😀/doc', 'secret-a/doc']) {
        const error = await confined.send(new GetObjectCommand({ Bucket: bucket, Key: key })).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error, key).toBeInstanceOf(S3ServiceException);
        expect((error as S3ServiceException).$response?.headers['x-objectcache-error-code'], key).toBe('OC_ERR_ACCESS_DENIED');
      }
      const put = await confined.send(new PutObjectCommand({ Bucket: bucket, Key: 'secret-😀/new', Body: 'x' })).then(
        () => 'OK',
        (e: S3ServiceException) => e.$response?.headers['x-objectcache-error-code'],
      );
      expect(put).toBe('OC_ERR_ACCESS_DENIED');
      expect(await exists('secret-😀/new')).toBe(false);
      await confined.send(new PutObjectCommand({ Bucket: bucket, Key: 'secret-😀😀/ok', Body: 'allowed' }));
      expect(await read(confined, 'secret-😀😀/ok')).toBe('allowed');
    } finally {
      confined.destroy();
    }
  });

  it('answers hostile DeleteObjects XML with 400 MalformedXML, megabytes of it at once', async () => {
    const admin_ = { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET };
    const bodies = [
      '<?xml version="1.0"?><!DOCTYPE Delete [<!ENTITY x SYSTEM "file:///etc/passwd">]><Delete><Object><Key>&x;</Key></Object></Delete>',
      '<!DOCTYPE Delete [<!ENTITY % p "x">]><Delete><Object><Key>k</Key></Object></Delete>',
      `<!DOCTYPE Delete [<!ENTITY x "${'a'.repeat(20_000)}">]><Delete><Object><Key>&x;</Key></Object></Delete>`,
      `<Delete>${'<a>'.repeat(200)}${'</a>'.repeat(200)}</Delete>`,
      '<Delete><__proto__>x</__proto__><Object><Key>k</Key></Object></Delete>',
      `<Delete>${'<a/>'.repeat(400_000)}</Delete>`,
    ];
    for (const xml of bodies) {
      const body = Buffer.from(xml);
      const answer = await send(admin_, 'POST', `/${bucket}`, { delete: '' }, body, { 'content-md5': md5(body), 'content-type': 'application/xml' });
      expect([answer.status, answer.code], xml.slice(0, 60)).toEqual([400, 'OC_ERR_REQUEST_MALFORMED_XML']);
      expect(answer.text).toContain('<Code>MalformedXML</Code>');
    }
    expect(await exists('src')).toBe(true);
  });

  // The embedded store's own XML readers (a passthrough's are MinIO's): defined on that backend only.
  if (backend === 'local')
    it('answers hostile CompleteMultipartUpload and CreateBucket XML with 400 MalformedXML', async () => {
      const admin_ = { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET };
      const complete = Buffer.from(
        '<!DOCTYPE CompleteMultipartUpload [<!ENTITY x SYSTEM "file:///etc/passwd">]><CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&x;</ETag></Part></CompleteMultipartUpload>',
      );
      const upload = await admin.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'big' }));
      const answer = await send(admin_, 'POST', `/${bucket}/big`, { uploadId: upload.UploadId as string }, complete);
      expect([answer.status, answer.code]).toEqual([400, 'OC_ERR_REQUEST_MALFORMED_XML']);
      const create = Buffer.from(`<CreateBucketConfiguration>${'<a>'.repeat(100)}</CreateBucketConfiguration>`);
      const created = await send(admin_, 'PUT', `/${uniqueBucket('harden-xml')}`, {}, create);
      expect([created.status, created.code]).toEqual([400, 'OC_ERR_REQUEST_MALFORMED_XML']);
    });

  it('refuses DeleteObjects before reading its body when the key could delete nothing in the bucket', async () => {
    const garbage = Buffer.from(`<Delete>${'<a/>'.repeat(400_000)}`);
    const headers = { 'content-md5': md5(garbage), 'content-type': 'application/xml' };
    for (const key of [NOBODY, READER]) {
      const answer = await send(key, 'POST', `/${bucket}`, { delete: '' }, garbage, headers);
      expect([answer.status, answer.code], key.accessKeyId).toEqual([403, 'OC_ERR_ACCESS_DENIED']);
      expect(answer.text).toContain(`may not s3:DeleteObject or s3:DeleteObjectVersion on any object of ${bucket}`);
    }
    // A key that may delete some objects there has its body read, and each key checked.
    const read_ = await send(DELETER, 'POST', `/${bucket}`, { delete: '' }, garbage, headers);
    expect([read_.status, read_.code]).toEqual([400, 'OC_ERR_REQUEST_MALFORMED_XML']);
    const other = Buffer.from('<Delete><Object><Key>src</Key></Object></Delete>');
    const refused = await send(DELETER, 'POST', `/${bucket}`, { delete: '' }, other, { 'content-md5': md5(other) });
    expect([refused.status, refused.code]).toEqual([403, 'OC_ERR_ACCESS_DENIED']);
    expect(refused.text).toContain(`arn:aws:s3:::${bucket}/src`);
    expect(await exists('src')).toBe(true);
  });
});
