// The TypeScript client's fetch from a plain-http: gateway (client/client.ts): the stream read
// with the kernel writing payload bytes straight into the target. Byte-exact however the answer
// is framed (a relay in front of the real gateway re-frames it: Content-Length, small chunks,
// extensions and trailers, after an interim answer), and every way it can go wrong has its code:
// a stream cut mid-body, bytes after END, a refused request, gateways that cannot be reached, and
// an idle connection the other end closes as the request goes out (tried again on a new one).
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { CLIENT_KEY, CLIENT_SECRET, startTestGateway, testClient, uniqueBucket, type TestGateway } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';
import { ReframingProxy, asIs, chunked, head, pieces, type Reframe, type Upstream } from './helpers/reframing-proxy.js';
import { answerWithoutEnd } from './helpers/endless.js';

const credentials = { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET };

/** The relay's answer with Content-Length framing and `body` in place of the gateway's. */
function withBody(answer: Upstream, body: Buffer, close = false): ReturnType<Reframe> {
  return { pieces: [head(answer.status, answer.reason, [...answer.headers, ['Content-Length', String(body.length)]]), body], close };
}

/** A refusal in place of the gateway's answer: an S3 error document with our code and Retry-After 0. */
function refusal(status: number, s3Code: string, code: string, retryable: boolean, message = 'refused by the test'): ReturnType<Reframe> {
  const body = Buffer.from(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${s3Code}</Code><Message>${message}</Message></Error>`);
  const headers: [string, string][] = [
    ['Content-Type', 'application/xml'],
    ['x-objectcache-error-code', code],
    ['x-objectcache-retryable', String(retryable)],
    ['Retry-After', '0'],
    ['x-amz-request-id', 'ABCDEF0123456789'],
  ];
  return { pieces: [head(status, 'Refused', [...headers, ['Content-Length', String(body.length)]]), body] };
}

async function failure(promise: Promise<unknown>): Promise<ObjectCacheError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ObjectCacheError);
  return error as ObjectCacheError;
}

/** A loopback port nothing listens on (a server opened and closed). */
async function closedPort(): Promise<string> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

describe('TypeScript client fetch, read in place', () => {
  let gw: TestGateway;
  let proxy: ReframingProxy;
  let viaProxy: ObjectCacheClient;
  let direct: ObjectCacheClient;
  let prefix: SeededPrefix;
  let bucket: string;

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 'local' });
    bucket = uniqueBucket('infetch');
    direct = testClient(gw, bucket);
    await direct.ensureBucket();
    prefix = await seedPrefix(direct, { chunks: 6, layers: 5, layerBytes: 48 * 1024 + 14, layout: 'KV_2LTD' });
    proxy = new ReframingProxy(new URL(gw.url));
    viaProxy = new ObjectCacheClient({ endpoint: (await proxy.listen()).origin, bucket, credentials });
  });
  afterAll(async () => {
    await viaProxy?.close();
    await direct?.close();
    await proxy?.close();
    await gw?.close();
  });

  const framings: readonly [string, Reframe][] = [
    ['Content-Length', asIs],
    [
      'chunks of 7, 4096 and 65,539 bytes',
      (a) => ({
        pieces: pieces(
          Buffer.concat([Buffer.from(head(a.status, a.reason, [...a.headers, ['Transfer-Encoding', 'chunked']])), chunked(a.body, { sizes: [7, 4096, 65_539] })]),
          10_000,
        ),
      }),
    ],
    [
      'chunks with extensions and a trailer',
      (a) => ({
        pieces: [
          head(a.status, a.reason, [...a.headers, ['Transfer-Encoding', 'chunked']]),
          chunked(a.body, { sizes: [100_000], extension: (i) => `;n=${i}`, trailer: 'x-checksum: none\r\n' }),
        ],
      }),
    ],
    ['an interim 100 Continue first', (a) => ({ pieces: ['HTTP/1.1 100 Continue\r\n\r\n', ...asIs(a).pieces] })],
  ];
  for (const [name, reframe] of framings) {
    it(`delivers the layer-major bytes exactly, layerwise and chunkwise, framed by ${name}`, async () => {
      proxy.reframe = reframe;
      for (const mode of ['layerwise', 'chunkwise'] as const) {
        const ready: number[] = [];
        const result = await viaProxy.fetch(descriptorOf(prefix, { mode, layerRange: [1, 5] }), { transport: 'get', onLayerReady: (layer) => ready.push(layer) });
        expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix, 1, 5)))).toBe(true);
        expect(ready).toEqual([1, 2, 3, 4]);
        expect(result.summary.mode).toBe(mode);
      }
    });
  }

  it('ends a stream cut short with OC_ERR_CLIENT_INCOMPLETE, naming the request: a whole body without END, or a connection closed mid-body', async () => {
    const cuts: Reframe[] = [
      (a) => withBody(a, a.body.subarray(0, Math.floor(a.body.length / 2))),
      (a) => ({ pieces: [head(a.status, a.reason, [...a.headers, ['Content-Length', String(a.body.length)]]), a.body.subarray(0, Math.floor(a.body.length / 2))], close: true }),
    ];
    for (const cut of cuts) {
      proxy.reframe = cut;
      const error = await failure(viaProxy.fetch(descriptorOf(prefix), { transport: 'get' }));
      expect(error.code).toBe('OC_ERR_CLIENT_INCOMPLETE');
      expect(String(error.details['RequestId'])).toMatch(/^[0-9A-F]{16,}$/);
    }
  });

  it('refuses bytes after the END frame with OC_ERR_CLIENT_PROTOCOL', async () => {
    proxy.reframe = (a) => withBody(a, Buffer.concat([a.body, Buffer.from('stray bytes')]));
    expect((await failure(viaProxy.fetch(descriptorOf(prefix), { transport: 'get' }))).code).toBe('OC_ERR_CLIENT_PROTOCOL');
  });

  it('refuses a payload changed on the way with OC_ERR_CLIENT_CRC', async () => {
    proxy.reframe = (a) => {
      const body = Buffer.from(a.body);
      const at = Math.floor(body.length / 2); // in layer 2's payload
      body[at] = (body[at] as number) ^ 0x01;
      return withBody(a, body);
    };
    const error = await failure(viaProxy.fetch(descriptorOf(prefix), { transport: 'get' }));
    expect(error.code).toBe('OC_ERR_CLIENT_CRC');
    proxy.reframe = asIs;
    const again = await viaProxy.fetch(descriptorOf(prefix), { transport: 'get' });
    expect(Buffer.from(again.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });

  it('tries a request again on a new connection when an idle one closes before the answer', async () => {
    proxy.reframe = asIs;
    await viaProxy.fetch(descriptorOf(prefix), { transport: 'get' }); // leaves an idle connection
    const accepted = proxy.accepted;
    let first = true;
    proxy.reframe = (a) => {
      if (!first) return asIs(a);
      first = false;
      return { pieces: [], close: true }; // as if the gateway closed the idle connection just then
    };
    const result = await viaProxy.fetch(descriptorOf(prefix), { transport: 'get' });
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(proxy.accepted).toBe(accepted + 1);
  });

  it('tries a retryable refusal again after its Retry-After, as often as `retries` says, and a final one never', async () => {
    let answers = 0;
    proxy.reframe = (a) => (++answers === 1 ? refusal(503, 'SlowDown', 'OC_ERR_ADMISSION_LIMIT', true) : asIs(a));
    const result = await viaProxy.fetch(descriptorOf(prefix), { transport: 'get' });
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(answers).toBe(2);

    const once = new ObjectCacheClient({ endpoint: viaProxy.endpoint, bucket, credentials, retries: 1 });
    try {
      answers = 0;
      proxy.reframe = () => (++answers, refusal(503, 'SlowDown', 'OC_ERR_ADMISSION_LIMIT', true));
      const busy = await failure(once.fetch(descriptorOf(prefix), { transport: 'get' }));
      expect([busy.code, busy.status, busy.details['RequestId'], answers]).toEqual(['OC_ERR_ADMISSION_LIMIT', 503, 'ABCDEF0123456789', 2]);
      answers = 0;
      proxy.reframe = () => (++answers, refusal(403, 'AccessDenied', 'OC_ERR_ACCESS_DENIED', false));
      const denied = await failure(once.fetch(descriptorOf(prefix), { transport: 'get' }));
      expect([denied.code, answers]).toEqual(['OC_ERR_ACCESS_DENIED', 1]);
    } finally {
      await once.close();
    }
  });

  it('asks a gateway older than sliceChecks again without them, once: the fetch is byte-exact, and later ones do not ask', async () => {
    const asked: (string | undefined)[] = [];
    // What a gateway before the field answers a descriptor that names it (schemas/descriptor.ts).
    proxy.reframe = (a) => {
      const header = a.request.headers['x-objectcache-descriptor'];
      const sliceChecks = header === undefined ? undefined : (JSON.parse(Buffer.from(header, 'base64url').toString('utf8')) as DescriptorInput).sliceChecks;
      asked.push(sliceChecks);
      return sliceChecks === undefined ? asIs(a) : refusal(400, 'InvalidArgument', 'OC_ERR_DESCRIPTOR_INVALID', false, 'Invalid descriptor: sliceChecks is not a descriptor field');
    };
    const older = new ObjectCacheClient({ endpoint: viaProxy.endpoint, bucket, credentials });
    try {
      for (let i = 0; i < 2; i++) {
        const result = await older.fetch(descriptorOf(prefix), { transport: 'get' });
        expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
      }
      expect(asked).toEqual(['client', undefined, undefined]);
      // Another refusal of the descriptor is the caller's, asked once, even one that names the field elsewhere.
      for (const problem of ['layers must be >= 1', 'target.sliceChecks is not a descriptor field']) {
        let refused = 0;
        proxy.reframe = () => {
          refused++;
          return refusal(400, 'InvalidArgument', 'OC_ERR_DESCRIPTOR_INVALID', false, `Invalid descriptor: ${problem}`);
        };
        expect((await failure(viaProxy.fetch(descriptorOf(prefix), { transport: 'get' }))).code).toBe('OC_ERR_DESCRIPTOR_INVALID');
        expect(refused, problem).toBe(1);
      }
    } finally {
      proxy.reframe = asIs;
      await older.close();
    }
  });

  it("keeps a refused request's code and request id (both transports)", async () => {
    const stranger = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: 'not-the-secret' } });
    try {
      for (const transport of ['get', 'post'] as const) {
        const error = await failure(stranger.fetch(descriptorOf(prefix), { transport }));
        expect(error.status).toBe(403);
        expect(error.details['S3Code']).toBe('SignatureDoesNotMatch');
        expect(String(error.details['RequestId'])).toMatch(/^[0-9A-F]{16,}$/);
      }
    } finally {
      await stranger.close();
    }
  });

  it('fails over to the next gateway when one cannot be reached, and says so when none can', async () => {
    const dead = await closedPort();
    const client = new ObjectCacheClient({ endpoint: [dead, gw.url], bucket, credentials });
    try {
      const result = await client.fetch(descriptorOf(prefix), { transport: 'post' });
      expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
      expect(client.endpoint).toBe(new URL(gw.url).origin);
    } finally {
      await client.close();
    }
    const nowhere = new ObjectCacheClient({ endpoint: [dead, await closedPort()], bucket, credentials });
    try {
      const error = await failure(nowhere.fetch(descriptorOf(prefix)));
      expect(error.code).toBe('OC_ERR_BACKEND_UNAVAILABLE');
      expect(error.message).toContain('cannot reach the gateway');
      expect(error.retryable).toBe(true);
    } finally {
      await nowhere.close();
    }
  });

  it('rejects with the abort reason and leaves the client usable', async () => {
    const controller = new AbortController();
    const reason = new Error('caller left');
    const fetched = direct.fetch(descriptorOf(prefix), {
      signal: controller.signal,
      onLayerReady: (layer) => {
        if (layer === 0) controller.abort(reason);
      },
    });
    await expect(fetched).rejects.toBe(reason);
    const again = await direct.fetch(descriptorOf(prefix));
    expect(Buffer.from(again.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });
});

describe('TypeScript client, a server that never stops answering', () => {
  let server: Server;
  const sockets = new Set<Socket>();
  let endpoint: string;
  /** What the server answers every request with: a status line and headers, then chunks of 64 KiB without end (until the client goes, or 20 s). */
  let status = 503;
  /** Instead: a Content-Length body of 100,000 bytes, closed after its first 10. */
  let cut = false;
  /** Instead: a 200 with this whole body. */
  let whole: string | undefined;

  beforeAll(async () => {
    server = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.once('data', () => {
        const headers =
          status === 200 ? 'Content-Type: application/json' : 'Content-Type: application/xml\r\nx-objectcache-error-code: OC_ERR_KEY_CONCURRENCY\r\nx-objectcache-retryable: true';
        if (whole !== undefined) {
          socket.end(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(whole)}\r\n\r\n${whole}`);
          return;
        }
        if (cut) {
          socket.end(`HTTP/1.1 ${status} X\r\n${headers}\r\nContent-Length: 100000\r\n\r\n<Error><Co`);
          return;
        }
        answerWithoutEnd(socket, `HTTP/1.1 ${status} X\r\n${headers}\r\nTransfer-Encoding: chunked\r\n\r\n`, status === 200 ? ' ' : '<', 20_000);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  it('answers a fetch refused with an endless error body, or one cut off, with the refusal', async () => {
    const client = new ObjectCacheClient({ endpoint, bucket: 'endless', credentials, retries: 0 });
    const descriptor: DescriptorInput = { version: 1, keys: ['a'], layers: 1, chunkTokens: 16, layerBytes: 16, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
    try {
      for (const how of ['endless', 'cut'] as const) {
        status = 503;
        cut = how === 'cut';
        const started = performance.now();
        const error = await failure(client.fetch(descriptor));
        expect(error.code).toBe('OC_ERR_KEY_CONCURRENCY');
        expect(error.details['Status']).toBe(503);
        expect(performance.now() - started).toBeLessThan(10_000);
      }
    } finally {
      cut = false;
      await client.close();
    }
  }, 30_000);

  it('refuses a lookup or pin answer that is not the JSON object it should be with OC_ERR_CLIENT_PROTOCOL', async () => {
    const client = new ObjectCacheClient({ endpoint, bucket: 'endless', credentials, retries: 0 });
    try {
      for (const [call, answers] of [
        [
          () => client.lookup(['a']),
          ['null', '[1]', '7', '{"matched":"x"}', '{}', 'not json', '{"matched":true}', '{"matched":-3}', '{"matched":1e9}', '{"matched":2}', '{"matched":0.5}'],
        ],
        [() => client.pin(['a'], null), ['null', '{"until":5}', '{"until":"never"}']],
      ] as const) {
        for (const answer of answers) {
          whole = answer;
          const error = await failure(call());
          expect(error.code, answer).toBe('OC_ERR_CLIENT_PROTOCOL');
        }
      }
    } finally {
      whole = undefined;
      await client.close();
    }
  });

  it('reads at most 64 KiB of an error answer or of a lookup or pin answer, and says what it was', async () => {
    const client = new ObjectCacheClient({ endpoint, bucket: 'endless', credentials, retries: 0 });
    try {
      status = 503;
      for (const call of [() => client.lookup(['a', 'b']), () => client.pin(['a'], null)]) {
        const started = performance.now();
        const error = await failure(call());
        // The refusal's own code, from its headers, long before the server's 20 s are up.
        expect(error.code).toBe('OC_ERR_KEY_CONCURRENCY');
        expect(performance.now() - started).toBeLessThan(10_000);
      }
      status = 200;
      for (const call of [() => client.lookup(['a', 'b']), () => client.pin(['a'], null)]) {
        const error = await failure(call());
        expect(error.code).toBe('OC_ERR_CLIENT_PROTOCOL');
        expect(error.message).toMatch(/longer than 65536 bytes/);
      }
    } finally {
      await client.close();
    }
  }, 30_000);
});

describe('the client against a gateway that redirects or trickles', () => {
  let server: Server;
  let endpoint: string;
  const sockets = new Set<Socket>();
  let mode: 'redirect' | 'trickle' = 'redirect';

  beforeAll(async () => {
    server = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.once('data', () => {
        if (mode === 'redirect') {
          socket.end('HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere.example/x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
          return;
        }
        // A stream's preamble, then zeros, one byte every 300 ms: each within any socket timeout.
        socket.write('HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n');
        const body = Buffer.concat([Buffer.from('OCKV\x01\x00\x00\x00', 'latin1'), Buffer.alloc(100)]);
        let at = 0;
        const timer = setInterval(() => {
          if (socket.destroyed || at >= body.length) return clearInterval(timer);
          socket.write(body.subarray(at, ++at));
        }, 300);
        socket.once('close', () => clearInterval(timer));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  it('never takes a redirect for a stored chunk or an answer', async () => {
    mode = 'redirect';
    const client = new ObjectCacheClient({ endpoint, bucket: 'b', credentials, retries: 0 });
    try {
      await expect(client.putChunks(['k'], [new Uint8Array(16)])).rejects.toThrow();
      expect((await failure(client.lookup(['k']))).details['Status']).toBe(307);
      const descriptor: DescriptorInput = { version: 1, keys: ['a'], layers: 1, chunkTokens: 16, layerBytes: 16, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
      expect((await failure(client.fetch(descriptor))).details['Status']).toBe(307);
    } finally {
      await client.close();
    }
  });

  it('refuses a deadline Node cannot time', () => {
    for (const deadlineMs of [0, -1, 1.5, 2 ** 31, Number.POSITIVE_INFINITY]) {
      expect(() => new ObjectCacheClient({ endpoint, bucket: 'b', credentials, deadlineMs })).toThrow(/deadlineMs/);
    }
  });

  it('ends a call at its deadline whatever the gateway still trickles', async () => {
    mode = 'trickle';
    const client = new ObjectCacheClient({ endpoint, bucket: 'b', credentials, retries: 0, deadlineMs: 1500 });
    const descriptor: DescriptorInput = { version: 1, keys: ['a', 'b'], layers: 2, chunkTokens: 16, layerBytes: 64, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
    try {
      for (const call of [
        () => client.fetch(descriptor),
        () => client.fetch(descriptor, { transport: 'post' }),
        () => client.lookup(['a']),
        () => client.fetch(descriptor, { deadlineMs: 500 }),
      ]) {
        const started = performance.now();
        const error = await failure(call());
        expect(error.code).toBe('OC_ERR_CLIENT_TIMEOUT');
        expect(performance.now() - started).toBeLessThan(5_000);
      }
    } finally {
      await client.close();
    }
  }, 30_000);
});
