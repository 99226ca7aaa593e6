/**
 * Hostile input (reliability suite, part 1): a generated corpus of malformed descriptors and
 * requests against the real gateway. Every one must get a 4xx S3 XML error whose
 * x-objectcache-error-code is a registered code; the gateway must keep serving, and its memory
 * must stay bounded.
 */
import { request as httpRequest } from 'node:http';
import fc from 'fast-check';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { ERRORS } from '../schemas/errors.js';
import { signedHeaders } from './helpers/signing.js';
import { startTestGateway, uniqueBucket, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, seedPrefix, type SeededPrefix } from './helpers/kv.js';

interface Answer {
  status: number;
  code: string | undefined;
  body: string;
  requestId?: string | undefined;
}

let cases = 0;

describe('hostile input', () => {
  let gw: TestGateway;
  let pool: Pool;
  let client: ObjectCacheClient;
  let prefix: SeededPrefix;
  let bucket: string;

  async function post(body: Buffer, headers: Record<string, string> = {}): Promise<Answer> {
    const signed = { headers: await signedHeaders(gw.url, { method: 'POST', path: `/${bucket}`, query: { objectcache: '' }, headers, body }) };
    const res = await pool.request({ method: 'POST', path: `/${bucket}?objectcache=`, headers: signed.headers, body });
    cases++;
    return { status: res.statusCode, code: res.headers['x-objectcache-error-code'] as string | undefined, body: await res.body.text() };
  }

  async function getWithHeader(value: string): Promise<Answer> {
    const path = `/${bucket}/${prefix.keys.at(-1)}`;
    const signed = { headers: await signedHeaders(gw.url, { method: 'GET', path, headers: { 'x-objectcache-descriptor': value } }) };
    const res = await pool.request({ method: 'GET', path, headers: signed.headers });
    cases++;
    return {
      status: res.statusCode,
      code: res.headers['x-objectcache-error-code'] as string | undefined,
      body: await res.body.text(),
      requestId: res.headers['x-amz-request-id'] as string | undefined,
    };
  }

  function expectClientError(answer: Answer, what: string): void {
    expect(answer.status, `${what}: ${answer.body.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
    expect(answer.status, what).toBeLessThan(500);
    expect(answer.body, what).toMatch(/^<\?xml[^>]*\?><Error><Code>[A-Za-z]+<\/Code><Message>/);
    expect(Object.keys(ERRORS), what).toContain(answer.code);
  }

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 'local', args: ['--max-descriptor-keys', '10000', '--max-layers', '512', '--max-header-bytes', '16384'] });
    pool = new Pool(gw.url, { connections: 8 });
    bucket = uniqueBucket('hostile');
    client = testClient(gw, bucket);
    await client.ensureBucket();
    prefix = await seedPrefix(client, { chunks: 3, layers: 4, layerBytes: 256, layout: 'KV_L2TD' });
  });

  afterAll(async () => {
    await pool?.close();
    await client?.close();
    await gw?.close();
  });

  const weird = fc.oneof(
    fc.constantFrom(null, true, false, '', 'text', -1, 0, 1.5, -0.5, 1e300, -1e300, 2 ** 53 + 1, Number.MAX_SAFE_INTEGER, [], {}, [1, 2, 3], { nested: { deeper: [] } }),
    fc.string(),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
  );
  const hostileKey = fc.constantFrom(
    '',
    '/abs',
    '../escape',
    'a/../b',
    './x',
    'nul\u0000byte',
    'x'.repeat(1025),
    'é'.repeat(600),
    '\u202Eevil',
    'zero\u200Bwidth',
    'a//b',
    '%2e%2e/x',
    'k\uD800',
  );

  it('answers every mutated descriptor with a 4xx S3 error naming a registered code', async () => {
    const base = (): Record<string, unknown> => ({ ...descriptorOf(prefix) });
    const fields = ['version', 'keys', 'keyPrefix', 'layers', 'chunkTokens', 'layerBytes', 'layout', 'delivery', 'layerRange', 'computeMsPerLayer', 'tenant', 'mode', 'target'];
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('delete'), field: fc.constantFrom('version', 'keys', 'layers', 'chunkTokens', 'layerBytes', 'layout', 'delivery') }),
      fc.record({ kind: fc.constant('replace'), field: fc.constantFrom(...fields), value: weird }),
      fc.record({ kind: fc.constant('extra'), field: fc.string({ minLength: 1 }).filter((f) => !fields.includes(f) && f !== '__proto__'), value: weird }),
      fc.record({ kind: fc.constant('key'), index: fc.nat(2), value: hostileKey }),
      fc.record({ kind: fc.constant('duplicate'), index: fc.nat(2) }),
      fc.record({ kind: fc.constant('overflow'), layers: fc.constantFrom(300, 512), layerBytes: fc.constantFrom(2 ** 40, 2 ** 45, 2 ** 52) }),
      fc.record({ kind: fc.constant('range'), value: fc.tuple(fc.integer({ min: -5, max: 10 }), fc.integer({ min: -5, max: 10 })) }),
    );
    await fc.assert(
      fc.asyncProperty(mutation, async (m) => {
        const d = base();
        const keys = [...(d['keys'] as string[])];
        switch (m.kind) {
          case 'delete':
            delete d[m.field];
            break;
          case 'replace':
          case 'extra':
            d[m.field] = m.value;
            break;
          case 'key':
            keys[m.index] = m.value;
            d['keys'] = keys;
            break;
          case 'duplicate':
            d['keys'] = [...keys, keys[m.index]];
            break;
          case 'overflow':
            d['layers'] = m.layers;
            d['layerBytes'] = m.layerBytes;
            break;
          case 'range':
            d['layerRange'] = m.value;
            break;
        }
        const answer = await post(Buffer.from(JSON.stringify(d)));
        if (answer.status === 200) {
          // A mutation that left a valid request (a new tenant name, a valid layer range) is served.
          const validRange = m.kind === 'range' && m.value[0] >= 0 && m.value[0] < m.value[1] && m.value[1] <= 4;
          expect(m.kind === 'replace' || validRange, JSON.stringify(m)).toBe(true);
          return;
        }
        expectClientError(answer, JSON.stringify(m).slice(0, 120));
      }),
      { numRuns: 420 },
    );
  });

  it('answers garbage bodies and headers with 4xx S3 errors', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
          fc.string().map((s) => Buffer.from(s)),
          fc.json().map((s) => Buffer.from(s)),
        ),
        async (body) => {
          expectClientError(await post(body), `body ${body.toString('hex').slice(0, 40)}`);
        },
      ),
      { numRuns: 60 },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ maxLength: 200 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
          fc.base64String({ maxLength: 200 }),
          fc.json().map((s) => Buffer.from(s).toString('base64url')),
        ),
        async (value) => {
          expectClientError(await getWithHeader(value), `header ${value.slice(0, 40)}`);
        },
      ),
      { numRuns: 40 },
    );
  });

  it('refuses deep nesting, huge bodies, a million keys and oversized headers', async () => {
    expectClientError(await post(Buffer.from(`${'['.repeat(100_000)}${']'.repeat(100_000)}`)), 'deep nesting');
    const million = Buffer.from(JSON.stringify({ ...descriptorOf(prefix), keys: Array.from({ length: 1_000_000 }, (_, i) => `k${i}`) }));
    const huge = await post(million);
    expectClientError(huge, 'a million keys');
    expect(huge.code).toBe('OC_ERR_REQUEST_TOO_LARGE');
    const overLimit = await post(Buffer.from(JSON.stringify({ ...descriptorOf(prefix), keys: Array.from({ length: 10_001 }, (_, i) => `k${i}`) })));
    expect(overLimit.code).toBe('OC_ERR_DESCRIPTOR_LIMIT');
    const bigHeader = await getWithHeader('A'.repeat(20_000));
    expect(bigHeader.status).toBe(400);
    expect(bigHeader.body).toContain('<Code>RequestHeaderSectionTooLarge</Code>');
    // Like every other error: the stable code, and the same request id in header and body.
    expect(bigHeader.code).toBe('OC_ERR_REQUEST_HEADER_TOO_LARGE');
    expect(bigHeader.requestId).toMatch(/^[0-9A-F]{16}$/);
    expect(bigHeader.body).toContain(`<RequestId>${bigHeader.requestId}</RequestId>`);
    cases += 1;
  });

  it('answers a body that trickles in a byte at a time', async () => {
    const url = new URL(gw.url);
    const body = Buffer.from(JSON.stringify({ ...descriptorOf(prefix), layers: -3 }));
    const signed = { headers: await signedHeaders(gw.url, { method: 'POST', path: `/${bucket}`, query: { objectcache: '' }, body }) };
    const answer = await new Promise<Answer>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, method: 'POST', path: `/${bucket}?objectcache=`, headers: signed.headers }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, code: res.headers['x-objectcache-error-code'] as string | undefined, body: text }));
      });
      req.on('error', reject);
      let at = 0;
      const drip = setInterval(() => {
        if (at >= body.length) {
          clearInterval(drip);
          req.end();
          return;
        }
        req.write(body.subarray(at, at + 1));
        at++;
      }, 2);
    });
    cases++;
    expectClientError(answer, 'trickled body');
    expect(answer.code).toBe('OC_ERR_DESCRIPTOR_INVALID');
  });

  it('kept serving with bounded memory through the whole corpus', async () => {
    expect(cases).toBeGreaterThanOrEqual(500);
    const result = await client.fetch(descriptorOf(prefix));
    expect(result.summary.chunks).toBe(3);
    const rssMiB = process.memoryUsage().rss / 1024 ** 2;
    console.log(`hostile corpus: ${cases} requests answered; test process RSS ${rssMiB.toFixed(0)} MiB`);
    expect(rssMiB).toBeLessThan(1536);
  });
});
