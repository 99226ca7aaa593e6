// Over 600 lines: the range reader's conformance suite (HTTP/1.1 framings, faults), one fixture server.
// The socket range reader (http-range/socket-range-get.ts): byte-exact bodies straight into
// shared-memory views from a real MinIO, its error bodies, connection reuse; the same answers
// re-framed by a loopback relay in front of MinIO (test/helpers/reframing-proxy.ts) as a proxy
// might send them (chunked, after interim answers) and as a broken one might (bad framing); and,
// against a scripted loopback server, every answer it does not read refused with a stable code,
// the connection dropped and the next request served on a fresh one.
import { createServer, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { CreateBucketCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { SocketRangeClient, type BodyTarget, type RangeAnswer, type RangeAnswerSink } from '../http-range/socket-range-get.js';
import { ReadError } from '../http-range/read-error.js';
import { S3RangeReader, UndiciRangeClient } from '../gateway/worker/range-reader.js';
import { sdkClient, uniqueBucket } from './helpers/gateway.js';
import { ReframingProxy, asIs, chunked, head, pieces, type ChunkedOptions, type Reframe, type Upstream } from './helpers/reframing-proxy.js';
import { answerWithoutEnd } from './helpers/endless.js';

const live = new AbortController().signal;

/** Views of `bytes` bytes in total over shared memory, split at `cuts`. */
function views(memory: Uint8Array, at: number, cuts: readonly number[]): Uint8Array[] {
  const out: Uint8Array[] = [];
  let from = at;
  for (const cut of cuts) {
    out.push(memory.subarray(from, at + cut));
    from = at + cut;
  }
  return out;
}

const accept = (targets: readonly Uint8Array[]): RangeAnswerSink => ({
  onHead: (status) => (status === 206 || status === 200 ? targets : { collect: 16 * 1024 }),
});

/**
 * Reads all of `object` (at `path`) as four ranges in parallel through `client`, each into three
 * views of one shared buffer at offset 7, checks each answer (`check`: what else it must say),
 * then that the buffer holds the object byte-exact with nothing written around it.
 */
async function readWholeInRanges(client: SocketRangeClient, path: string, object: Buffer, second: number, check: (answer: RangeAnswer) => void = () => {}): Promise<void> {
  const memory = new Uint8Array(new SharedArrayBuffer(object.byteLength + 64));
  const ranges = [
    [0, 1],
    [1, second],
    [second, 1_000_000],
    [1_000_000, object.byteLength],
  ] as const;
  await Promise.all(
    ranges.map(async ([from, to]) => {
      const length = to - from;
      const cuts = length > 3 ? [Math.floor(length / 3), length - 1, length] : [length];
      const answer = await client.get(path, `bytes=${from}-${to - 1}`, accept(views(memory, from + 7, cuts)), live);
      expect(answer.status).toBe(206);
      expect(answer.headers['content-range']).toBe(`bytes ${from}-${to - 1}/${object.byteLength}`);
      check(answer);
    }),
  );
  expect(Buffer.from(memory.subarray(7, 7 + object.byteLength)).equals(object)).toBe(true);
  expect(memory[6]).toBe(0);
  expect(memory[7 + object.byteLength]).toBe(0);
}

describe('socket range reads from MinIO', () => {
  const minio = inject('minio');
  const bucket = uniqueBucket('sockrange');
  const object = randomBytes(3 * 1024 * 1024 + 123);
  let client: SocketRangeClient;

  beforeAll(async () => {
    const s3 = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'a/b c.bin', Body: object }));
    client = new SocketRangeClient({
      endpoint: new URL(minio.endpoint),
      connections: 2,
      timeoutMs: 10_000,
      accessKeyId: minio.accessKey,
      secretAccessKey: minio.secretKey,
      region: 'us-east-1',
    });
  });
  afterAll(() => client.close());

  it('writes each range byte-exact into its views of shared memory, many ranges on two connections', async () => {
    await readWholeInRanges(client, '/' + bucket + '/a/b%20c.bin', object, 65_537);
  });

  it('reads the same ranges through either transport of S3RangeReader (sockets; undici, as behind TLS), byte-exact, and names a missing chunk', async () => {
    const credentials = {
      accessKeyId: minio.accessKey,
      secretAccessKey: minio.secretKey,
      region: 'us-east-1',
      connections: 2,
      timeoutMs: 10_000,
      endpoint: new URL(minio.endpoint),
    };
    const readers = [new S3RangeReader(new SocketRangeClient(credentials), 10_000), new S3RangeReader(new UndiciRangeClient(credentials), 10_000)];
    for (const reader of readers) {
      const memory = new Uint8Array(new SharedArrayBuffer(3000));
      const targets = [
        { offset: 10, length: 1000, views: views(memory, 0, [400, 1000]) },
        { offset: object.byteLength - 2000, length: 2000, views: views(memory, 1000, [2000]) },
      ];
      const info = await reader.read({ bucket, key: 'a/b c.bin', targets, objectBytes: object.byteLength, codec: 'none', signal: live });
      expect(info.reads).toBe(2);
      expect(info.etag).toMatch(/^"/);
      expect(Buffer.from(memory.subarray(0, 1000)).equals(object.subarray(10, 1010))).toBe(true);
      expect(Buffer.from(memory.subarray(1000)).equals(object.subarray(object.byteLength - 2000))).toBe(true);
      const missing = await reader
        .read({ bucket, key: 'nope', targets: [{ offset: 0, length: 10, views: [new Uint8Array(10)] }], objectBytes: object.byteLength, codec: 'none', signal: live })
        .catch((e: unknown) => e);
      expect(missing).toMatchObject({ code: 'OC_ERR_CHUNK_MISSING' });
      await reader.close();
    }
  });

  it('collects an error body and keeps the connection for the next request', async () => {
    const missing = await client.get(`/${bucket}/nope`, 'bytes=0-9', accept([new Uint8Array(10)]), live);
    expect(missing.status).toBe(404);
    expect(missing.text).toContain('<Code>NoSuchKey</Code>');
    const target = new Uint8Array(10);
    const again = await client.get(`/${bucket}/a/b%20c.bin`, 'bytes=5-14', accept([target]), live);
    expect(again.status).toBe(206);
    expect(Buffer.from(target).equals(object.subarray(5, 15))).toBe(true);
  });

  it('fails a body longer than its views with OC_ERR_BACKEND_RANGE', async () => {
    const error = await client.get(`/${bucket}/a/b%20c.bin`, 'bytes=0-99', accept([new Uint8Array(50)]), live).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ReadError);
    expect((error as ReadError).code).toBe('OC_ERR_BACKEND_RANGE');
  });

  it('ends a cancelled read with the cancellation and serves the next one', async () => {
    const controller = new AbortController();
    const read = client.get(`/${bucket}/a/b%20c.bin`, `bytes=0-${object.byteLength - 1}`, accept([new Uint8Array(object.byteLength)]), controller.signal);
    controller.abort();
    await expect(read).rejects.toMatchObject({ code: 'OC_ERR_CANCELLED', message: 'the task was cancelled' });
    const target = new Uint8Array(4);
    await client.get(`/${bucket}/a/b%20c.bin`, 'bytes=0-3', accept([target]), live);
    expect(Buffer.from(target).equals(object.subarray(0, 4))).toBe(true);
  });
});

describe('socket range reads of MinIO answers re-framed by a relay (chunked, interim answers)', () => {
  const minio = inject('minio');
  const bucket = uniqueBucket('sockframe');
  const object = randomBytes(3 * 1024 * 1024 + 123);
  const path = `/${bucket}/a/b%20c.bin`;
  let relay: ReframingProxy;
  let endpoint: URL;
  const clients: SocketRangeClient[] = [];

  /** A client of MinIO through the relay; `secretAccessKey` another to have MinIO refuse it. */
  const client = (connections = 1, secretAccessKey = minio.secretKey): SocketRangeClient => {
    const c = new SocketRangeClient({ endpoint, connections, timeoutMs: 8_000, accessKeyId: minio.accessKey, secretAccessKey, region: 'us-east-1' });
    clients.push(c);
    return c;
  };

  /** Odd chunk sizes (1-byte chunks among them), sizes with leading zeros and in upper case, extensions and a trailer. */
  const ODD: ChunkedOptions = {
    sizes: [1, 1, 2, 4093, 7, 65_521, 1, 3, 16_411, 131_071, 1, 262_147],
    sizeText: (size, i) => (i % 2 === 0 ? size.toString(16).toUpperCase() : `00${size.toString(16)}`),
    extension: (i) => [';ext', ' ; name="v;al" ;x=1', '', '\t;a=b'][i % 4] as string,
    trailer: 'x-amz-checksum-crc32c: AAAAAA==\r\nX-Trailer-Two: two\r\n',
  };

  /** MinIO's answer as a chunked one (`headers` instead of the plain Transfer-Encoding: chunked). */
  const chunkedAnswer = (answer: Upstream, options: ChunkedOptions = ODD, headers: readonly (readonly [string, string])[] = [['Transfer-Encoding', 'chunked']]): Buffer =>
    Buffer.concat([Buffer.from(head(answer.status, answer.reason, [...answer.headers, ...headers])), chunked(answer.body, options)]);
  const asChunked =
    (options: ChunkedOptions = ODD, pieceBytes = 1 << 30): Reframe =>
    (answer) => ({ pieces: pieces(chunkedAnswer(answer, options), pieceBytes) });
  const EARLY_HINTS = 'HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload; as=style\r\nLink: </b.js>; rel=preload; as=script\r\n\r\n';

  beforeAll(async () => {
    const s3 = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'a/b c.bin', Body: object }));
    relay = new ReframingProxy(new URL(minio.endpoint));
    endpoint = await relay.listen();
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
    relay.reframe = asIs;
  });
  afterAll(() => relay.close());

  it(
    'reads chunked 206 answers byte-exact into views: odd chunk sizes, 1-byte chunks, extensions, a trailer, ranges in parallel on two connections',
    { timeout: 30_000 },
    async () => {
      const c = client(2);
      relay.reframe = asChunked(ODD, 65_519); // written in pieces that split chunks anywhere
      await readWholeInRanges(c, path, object, 70_001, (answer) => expect(answer.headers['transfer-encoding']).toBe('chunked'));
    },
  );

  it('reads a chunked answer written a byte at a time, after a 103, so every piece of framing is split across reads', { timeout: 30_000 }, async () => {
    const c = client();
    relay.reframe = (answer) => ({
      pieces: pieces(Buffer.concat([Buffer.from(EARLY_HINTS), chunkedAnswer(answer, { sizes: [1, 3, 1, 50], extension: (i) => (i % 2 ? ';e=1' : ''), trailer: 'x-t: 1\r\n' })]), 1),
    });
    const memory = new Uint8Array(302);
    const answer = await c.get(path, 'bytes=1000-1299', accept(views(memory, 1, [1, 150, 300])), live);
    expect(answer.status).toBe(206);
    expect(Buffer.from(memory.subarray(1, 301)).equals(object.subarray(1000, 1300))).toBe(true);
    expect([memory[0], memory[301]]).toEqual([0, 0]);
  });

  it('places a chunked body through a BodyTarget that pauses, byte-exact', { timeout: 30_000 }, async () => {
    const c = client();
    relay.reframe = asChunked({ sizes: [8191, 1, 250_000, 5, 77_777, 2], extension: (i) => (i % 3 ? '' : ';chunk-signature=abc') });
    const from = 123_457;
    const length = 1_000_000;
    const memory = new Uint8Array(new SharedArrayBuffer(length));
    let pos = 0;
    let allowed = 100_000; // grows by 100 KB each time the read pauses: places end mid-chunk and chunks mid-place
    let pauses = 0;
    const target: BodyTarget = {
      next: () => (pos < allowed ? memory.subarray(pos, allowed) : undefined),
      wrote: (n) => {
        pos += n;
      },
      paused: (readOn) => {
        pauses++;
        setTimeout(() => {
          allowed = Math.min(length, allowed + 100_000);
          readOn();
        }, 5);
      },
    };
    const answer = await c.get(path, `bytes=${from}-${from + length - 1}`, { onHead: (status) => (status === 206 ? target : { collect: 1024 }) }, live);
    expect(answer.status).toBe(206);
    expect(pos).toBe(length);
    expect(pauses).toBeGreaterThanOrEqual(5);
    expect(Buffer.from(memory).equals(object.subarray(from, from + length))).toBe(true);
  });

  it('skips a 100 Continue and a 103 Early Hints (with headers) before the 206, Content-Length or chunked, apart or in one piece', { timeout: 30_000 }, async () => {
    const c = client();
    const interim = ['HTTP/1.1 100 Continue\r\n\r\n', EARLY_HINTS];
    const shapes: Reframe[] = [
      (answer) => ({ pieces: [...interim, ...asIs(answer).pieces], pauseMs: 20 }),
      (answer) => ({ pieces: [Buffer.concat([Buffer.from(interim.join('')), chunkedAnswer(answer)])] }),
      (answer) => ({ pieces: [interim.join('') + 'HTTP/1.1 2', chunkedAnswer(answer).subarray(10)], pauseMs: 20 }),
    ];
    for (const shape of shapes) {
      relay.reframe = shape;
      const target = new Uint8Array(100_000);
      const answer = await c.get(path, 'bytes=5-100004', accept([target]), live);
      expect(answer.status).toBe(206);
      expect(answer.headers['content-range']).toBe(`bytes 5-100004/${object.byteLength}`);
      expect(answer.headers['link']).toBeUndefined(); // the 103's headers are not the answer's
      expect(Buffer.from(target).equals(object.subarray(5, 100_005))).toBe(true);
    }
  });

  it('collects chunked error answers (404 NoSuchKey, 403 SignatureDoesNotMatch) and reads on over the same connection', { timeout: 30_000 }, async () => {
    relay.reframe = asChunked({ sizes: [7, 1, 100], extension: () => ';x', trailer: 'x-t: 1\r\n' });
    const c = client();
    const before = relay.accepted;
    const missing = await c.get(`/${bucket}/nope`, 'bytes=0-9', accept([new Uint8Array(10)]), live);
    expect(missing.status).toBe(404);
    expect(missing.text).toContain('<Code>NoSuchKey</Code>');
    expect(missing.text).toMatch(/<\/Error>$/);
    const target = new Uint8Array(10);
    await c.get(path, 'bytes=5-14', accept([target]), live);
    expect(Buffer.from(target).equals(object.subarray(5, 15))).toBe(true);
    expect(relay.accepted - before).toBe(1);

    const refused = await client(1, 'not-the-secret').get(path, 'bytes=0-9', accept([new Uint8Array(10)]), live);
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('<Code>SignatureDoesNotMatch</Code>');
  });

  it('keeps the connection for the next request after chunked answers (the last chunk and trailers consumed)', { timeout: 30_000 }, async () => {
    const c = client();
    const before = relay.accepted;
    const reads = [asChunked(), asChunked({ sizes: [1, 65_536], trailer: 'x-a: 1\r\nx-b: 2\r\n' }), asIs];
    for (const [i, reframe] of reads.entries()) {
      relay.reframe = reframe;
      const target = new Uint8Array(200_000);
      const from = 10_000 * i;
      await c.get(path, `bytes=${from}-${from + 199_999}`, accept([target]), live);
      expect(Buffer.from(target).equals(object.subarray(from, from + 200_000))).toBe(true);
    }
    expect(relay.accepted - before).toBe(1);
  });

  it('reads a body with both Transfer-Encoding and Content-Length by its chunks, and trusts that connection with no other request', { timeout: 30_000 }, async () => {
    const c = client();
    const before = relay.accepted;
    relay.reframe = (answer) => ({
      pieces: [
        chunkedAnswer(answer, ODD, [
          ['Content-Length', '3'],
          ['Transfer-Encoding', 'chunked'],
        ]),
      ],
    });
    const target = new Uint8Array(300_000);
    await c.get(path, 'bytes=0-299999', accept([target]), live);
    expect(Buffer.from(target).equals(object.subarray(0, 300_000))).toBe(true);
    relay.reframe = asChunked();
    await c.get(path, 'bytes=0-9', accept([target.subarray(0, 10)]), live);
    expect(relay.accepted - before).toBe(2);
  });

  it('serves S3RangeReader (grouped reads) through a chunking proxy, byte-exact, and names a missing chunk', { timeout: 30_000 }, async () => {
    relay.reframe = asChunked();
    const reader = new S3RangeReader(
      new SocketRangeClient({ endpoint, connections: 2, timeoutMs: 8_000, accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey, region: 'us-east-1' }),
      8_000,
    );
    try {
      const memory = new Uint8Array(new SharedArrayBuffer(500_000));
      const targets = [
        { offset: 10, length: 300_000, views: views(memory, 0, [1, 100_000, 300_000]) },
        { offset: object.byteLength - 200_000, length: 200_000, views: views(memory, 300_000, [200_000]) },
      ];
      const info = await reader.read({ bucket, key: 'a/b c.bin', targets, objectBytes: object.byteLength, codec: 'none', signal: live });
      expect(info.reads).toBe(2);
      expect(Buffer.from(memory.subarray(0, 300_000)).equals(object.subarray(10, 300_010))).toBe(true);
      expect(Buffer.from(memory.subarray(300_000)).equals(object.subarray(object.byteLength - 200_000))).toBe(true);
      const missing = await reader
        .read({ bucket, key: 'nope', targets: [{ offset: 0, length: 10, views: [new Uint8Array(10)] }], objectBytes: object.byteLength, codec: 'none', signal: live })
        .catch((e: unknown) => e);
      expect(missing).toMatchObject({ code: 'OC_ERR_CHUNK_MISSING' });
    } finally {
      await reader.close();
    }
  });

  const chunkSize = (i: number, text: (size: number) => string): ChunkedOptions => ({ sizes: [1000], sizeText: (size, at) => (at === i ? text(size) : size.toString(16)) });
  it.each<[string, Reframe, RegExp]>([
    ['a chunk size that is not hex', asChunked(chunkSize(2, (size) => `z${size.toString(16)}`)), /not hex/],
    ['a chunk size followed by a stray character', asChunked(chunkSize(2, (size) => `${size.toString(16)}g`)), /not hex/],
    ['a chunk size of 16 hex digits', asChunked(chunkSize(1, (size) => size.toString(16).padStart(16, '0'))), /more than 15 hex digits/],
    ['a chunk size line over 4 KiB', asChunked({ sizes: [1000], extension: (i) => (i === 1 ? `;${'x'.repeat(5000)}` : '') }), /size line longer than 4096 bytes/],
    [
      'more bytes than the range (an extra chunk)',
      (answer) => ({ pieces: [chunkedAnswer({ ...answer, body: Buffer.concat([answer.body, Buffer.from('extra')]) }, { sizes: [1000] })] }),
      /more bytes than the range/,
    ],
    // Chunk i said one byte short, where the byte after that is not a CR (the data is random).
    [
      'a chunk longer than its size',
      (answer) => asChunked(chunkSize([0, 1, 2].find((i) => answer.body[i * 1000 + 999] !== 0x0d) ?? 0, (size) => (size - 1).toString(16)))(answer),
      /longer than its size/,
    ],
    [
      'fewer bytes than the range, the last chunk, then a close',
      (answer) => ({ pieces: [chunkedAnswer({ ...answer, body: answer.body.subarray(0, answer.body.length - 100) }, { sizes: [1000] })], close: true }),
      /the last chunk with 100 bytes of the body missing/,
    ],
    [
      'bytes after the last chunk',
      (answer) => ({ pieces: [Buffer.concat([chunkedAnswer(answer, { sizes: [40] }), Buffer.from('HTTP/1.1 200 OK\r\n\r\n')])] }),
      /bytes after the body/,
    ],
    ['a trailer section over 8 KiB', asChunked({ sizes: [1000], trailer: `x-pad: ${'p'.repeat(9000)}\r\n` }), /trailer section longer than 8192 bytes/],
    ['Transfer-Encoding: gzip', (answer) => ({ pieces: [chunkedAnswer(answer, { sizes: [1000] }, [['Transfer-Encoding', 'gzip']])] }), /Transfer-Encoding gzip \(/],
    [
      'Transfer-Encoding: gzip, chunked',
      (answer) => ({ pieces: [chunkedAnswer(answer, { sizes: [1000] }, [['Transfer-Encoding', 'gzip, chunked']])] }),
      /Transfer-Encoding gzip, chunked/,
    ],
    [
      '101 Switching Protocols',
      (answer) => ({ pieces: ['HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n', ...asIs(answer).pieces] }),
      /a 101 answer/,
    ],
    ['more than 8 interim answers', (answer) => ({ pieces: ['HTTP/1.1 100 Continue\r\n\r\n'.repeat(9), ...asIs(answer).pieces] }), /more than 8 interim answers/],
  ])('refuses %s with OC_ERR_BACKEND_PROTOCOL at once, then reads on, on a new connection', { timeout: 30_000 }, async (_name, reframe, message) => {
    const c = client();
    const before = relay.accepted;
    relay.reframe = reframe;
    const started = performance.now();
    const error = await c.get(path, 'bytes=100-2599', accept([new Uint8Array(2500)]), live).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ReadError);
    expect(error).toMatchObject({ code: 'OC_ERR_BACKEND_PROTOCOL', readAgain: false, message });
    expect(performance.now() - started).toBeLessThan(4_000); // refused, not timed out (8 s)
    relay.reframe = asChunked();
    const target = new Uint8Array(2500);
    await c.get(path, 'bytes=100-2599', accept([target]), live);
    expect(Buffer.from(target).equals(object.subarray(100, 2600))).toBe(true);
    expect(relay.accepted - before).toBe(2);
  });

  it('refuses a chunked body for a BodyTarget with no Content-Range to hold its length to', { timeout: 30_000 }, async () => {
    const c = client();
    relay.reframe = (answer) => ({ pieces: [chunkedAnswer({ ...answer, headers: answer.headers.filter(([name]) => name.toLowerCase() !== 'content-range') })] });
    const target: BodyTarget = { next: () => new Uint8Array(10), wrote: () => {}, paused: () => {} };
    const error = await c.get(path, 'bytes=0-9', { onHead: () => target }, live).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'OC_ERR_BACKEND_PROTOCOL', message: /without a Content-Range/ });
  });

  it('reports a chunked answer cut mid-chunk as retryable OC_ERR_BACKEND_UNAVAILABLE (as a Content-Length one)', { timeout: 30_000 }, async () => {
    const c = client();
    relay.reframe = (answer) => {
      const whole = chunkedAnswer(answer, { sizes: [1000] });
      return { pieces: [whole.subarray(0, whole.length - 700)], close: true };
    };
    const error = await c.get(path, 'bytes=0-2499', accept([new Uint8Array(2500)]), live).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'OC_ERR_BACKEND_UNAVAILABLE', readAgain: true });
  });
});

describe('socket range reads refuse what they do not read', () => {
  let server: Server;
  let endpoint: URL;
  /** What the server answers to the next request, raw; then whether it closes. */
  let script: { answer: (socket: Socket) => void } = { answer: () => {} };
  const connections = new Set<Socket>();
  let accepted = 0;

  beforeAll(async () => {
    server = createServer((socket) => {
      accepted++;
      connections.add(socket);
      socket.on('close', () => connections.delete(socket));
      socket.on('error', () => {}); // the reader drops connections mid-answer on purpose
      let head = '';
      socket.on('data', (data) => {
        head += data.toString('latin1');
        if (!head.includes('\r\n\r\n')) return;
        head = '';
        script.answer(socket);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    endpoint = new URL(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
  });
  afterAll(async () => {
    for (const socket of connections) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  const client = (): SocketRangeClient => new SocketRangeClient({ endpoint, connections: 1, timeoutMs: 1_000, accessKeyId: 'k', secretAccessKey: 's', region: 'us-east-1' });
  const ok = (body: string): string => `HTTP/1.1 206 Partial Content\r\nContent-Length: ${body.length}\r\nContent-Range: bytes 0-${body.length - 1}/100\r\n\r\n${body}`;

  it.each([
    ['a transfer coding other than chunked', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n'],
    ['no Content-Length nor chunked coding', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nConnection: close\r\n\r\nhello'],
    ['101 Switching Protocols', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n'],
    ['a 101 after a 100 Continue', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n'],
    ['a chunk size line ended by a bare LF', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n'],
    ['a chunk size line without a size', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n;x\r\nhello\r\n0\r\n\r\n'],
    ['chunk data not followed by CRLF', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n'],
    ['a trailer line ended by a bare LF', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx: 1\n\r\n'],
    ['bytes after the last chunk', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nEXTRA'],
    ['not HTTP', 'OC_ERR_BACKEND_PROTOCOL', 'SSH-2.0-OpenSSH\r\n\r\n'],
    ['a malformed header', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nno colon here\r\n\r\n'],
    ['bytes after the body', 'OC_ERR_BACKEND_PROTOCOL', `${ok('hello')}EXTRA`],
    ['a head over 64 KiB', 'OC_ERR_BACKEND_PROTOCOL', `HTTP/1.1 206 Partial Content\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`],
  ])('refuses %s with %s, then reads the next answer on a new connection', async (_name, code, raw) => {
    const c = client();
    script = { answer: (socket) => socket.write(raw) };
    const error = await c.get('/b/k', 'bytes=0-4', accept([new Uint8Array(5)]), live).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ReadError);
    expect((error as ReadError).code).toBe(code);
    expect((error as ReadError).readAgain).toBe(false);
    script = { answer: (socket) => socket.write(ok('world')) };
    const target = new Uint8Array(5);
    await c.get('/b/k', 'bytes=0-4', accept([target]), live);
    expect(Buffer.from(target).toString()).toBe('world');
    await c.close();
  });

  it('reports a connection cut mid-body as retryable OC_ERR_BACKEND_UNAVAILABLE', async () => {
    const c = client();
    script = { answer: (socket) => socket.end('HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\nhalf') };
    const error = (await c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), live).catch((e: unknown) => e)) as ReadError;
    expect(error.code).toBe('OC_ERR_BACKEND_UNAVAILABLE');
    expect(error.readAgain).toBe(true);
    await c.close();
  });

  it('keeps the first bytes of an error body that never ends, drops that connection, and reads the next answer on a new one', async () => {
    const c = client();
    // 64 KiB chunks of 'x' without end, until the reader goes (or 10 s).
    script = { answer: (socket) => answerWithoutEnd(socket, 'HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n', 'x') };
    const before = accepted;
    const started = performance.now();
    const answer = await c.get('/b/k', 'bytes=0-4', accept([new Uint8Array(5)]), live);
    expect(answer.status).toBe(500);
    expect(answer.text).toBe('x'.repeat(16 * 1024));
    expect(performance.now() - started).toBeLessThan(5_000);
    script = { answer: (socket) => socket.write(ok('world')) };
    const target = new Uint8Array(5);
    await c.get('/b/k', 'bytes=0-4', accept([target]), live);
    expect(Buffer.from(target).toString()).toBe('world');
    expect(accepted).toBe(before + 2);
    await c.close();
  });

  it('names a missing chunk from a 404 whose body never ends, through either transport of S3RangeReader', async () => {
    const start = '<Error><Code>NoSuchKey</Code>';
    const head = `HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n${start.length.toString(16)}\r\n${start}\r\n`;
    script = { answer: (socket) => answerWithoutEnd(socket, head, ' ') };
    const options = { endpoint, connections: 1, timeoutMs: 8_000, accessKeyId: 'k', secretAccessKey: 's', region: 'us-east-1' };
    for (const reader of [new S3RangeReader(new SocketRangeClient(options), 8_000), new S3RangeReader(new UndiciRangeClient(options), 8_000)]) {
      const started = performance.now();
      const error = await reader
        .read({ bucket: 'b', key: 'k', targets: [{ offset: 0, length: 10, views: [new Uint8Array(10)] }], objectBytes: 10, codec: 'none', signal: live })
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'OC_ERR_CHUNK_MISSING' });
      expect(performance.now() - started).toBeLessThan(5_000);
      await reader.close();
    }
  });

  it('reports silence past the timeout as retryable OC_ERR_BACKEND_TIMEOUT', async () => {
    const c = client();
    script = { answer: (socket) => socket.write('HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\nhal') };
    const started = performance.now();
    const error = (await c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), live).catch((e: unknown) => e)) as ReadError;
    expect(error.code).toBe('OC_ERR_BACKEND_TIMEOUT');
    expect(error.readAgain).toBe(true);
    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    await c.close();
  });

  it('opens a new connection after the store answers Connection: close, and queues requests beyond the limit', async () => {
    const c = client();
    let n = 0;
    script = { answer: (socket) => socket.write(`HTTP/1.1 206 Partial Content\r\nContent-Length: 2\r\nConnection: close\r\n\r\n${String(n++).padStart(2, '0')}`) };
    const targets = Array.from({ length: 4 }, () => new Uint8Array(2));
    await Promise.all(targets.map((t) => c.get('/b/k', 'bytes=0-1', accept([t]), live)));
    expect(targets.map((t) => Buffer.from(t).toString()).sort()).toEqual(['00', '01', '02', '03']);
    await c.close();
  });

  it('reads exact chunked answers after interim ones, and reads on over the same connection', async () => {
    const c = client();
    const before = accepted;
    const answers = [
      'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
      'HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\nHTTP/1.1 206 Partial Content\r\nTransfer-Encoding: Chunked\r\n\r\n1;a=b\r\nw\r\n0004 \r\norld\r\n000\r\nx-t: 1\r\n\r\n',
      ok('again'),
    ];
    const read: string[] = [];
    for (const answer of answers) {
      script = { answer: (socket) => socket.write(answer) };
      const target = new Uint8Array(5);
      await c.get('/b/k', 'bytes=0-4', accept([target]), live);
      read.push(Buffer.from(target).toString());
    }
    expect(read).toEqual(['hello', 'world', 'again']);
    expect(accepted - before).toBe(1);
    await c.close();
  });

  it('serves one request after another on one keep-alive connection', async () => {
    const c = client();
    const before = accepted;
    script = { answer: (socket) => socket.write(ok('kept!')) };
    for (let i = 0; i < 3; i++) {
      const target = new Uint8Array(5);
      await c.get('/b/k', 'bytes=0-4', accept([target]), live);
      expect(Buffer.from(target).toString()).toBe('kept!');
    }
    expect(accepted - before).toBe(1);
    await c.close();
  });

  it('ends a read cancelled mid-body, and a read cancelled while it waits for a connection', async () => {
    const c = client();
    script = { answer: (socket) => socket.write('HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\nhal') };
    const first = new AbortController();
    const inFlight = c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), first.signal);
    const second = new AbortController();
    const queued = c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), second.signal); // one connection: waits
    await new Promise((resolve) => setTimeout(resolve, 100));
    second.abort();
    await expect(queued).rejects.toMatchObject({ code: 'OC_ERR_CANCELLED', message: 'the task was cancelled' });
    first.abort();
    await expect(inFlight).rejects.toMatchObject({ code: 'OC_ERR_CANCELLED', message: 'the task was cancelled' });
    script = { answer: (socket) => socket.write(ok('after')) };
    const target = new Uint8Array(5);
    await c.get('/b/k', 'bytes=0-4', accept([target]), live);
    expect(Buffer.from(target).toString()).toBe('after');
    await c.close();
  });

  it('fails reads in flight and waiting when closed, connecting or not, and refuses reads after', async () => {
    const c = client();
    script = { answer: () => {} }; // never answers
    const connecting = c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), live).catch((e: unknown) => e);
    const waiting = c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), live).catch((e: unknown) => e);
    await c.close();
    expect(await connecting).toMatchObject({ code: 'OC_ERR_BACKEND_UNAVAILABLE' });
    expect(await waiting).toMatchObject({ code: 'OC_ERR_INTERNAL', readAgain: false, message: 'the range reader was closed' });
    await expect(c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), live)).rejects.toMatchObject({ message: 'the range reader was closed' });
  });

  it('stops reading while the body has no place, and places every byte once it has', async () => {
    const c = client();
    const body = randomBytes(300_000);
    script = { answer: (socket) => socket.write(Buffer.concat([Buffer.from(`HTTP/1.1 206 Partial Content\r\nContent-Length: ${body.length}\r\n\r\n`), body])) };
    const memory = new Uint8Array(new SharedArrayBuffer(body.length));
    let pos = 0;
    let allowed = 100_000; // the rest has no place until resumed
    const pauses: (() => void)[] = [];
    const target: BodyTarget = {
      next: () => (pos < allowed ? memory.subarray(pos, allowed) : undefined),
      wrote: (n) => {
        pos += n;
      },
      paused: (readOn) => {
        pauses.push(readOn);
      },
    };
    const read = c.get('/b/k', 'bytes=0-299999', { onHead: () => target }, live);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(pos).toBe(100_000); // stopped at the end of its place, nothing lost
    expect(pauses).toHaveLength(1);
    allowed = body.length;
    pauses.shift()?.();
    await read;
    expect(Buffer.from(memory).equals(body)).toBe(true);
    await c.close();
  });

  it("does not time a read stopped for want of a place (the wait is the reader's, not the store's)", async () => {
    const c = client(); // timeoutMs 1000
    const body = randomBytes(200_000);
    script = { answer: (socket) => socket.write(Buffer.concat([Buffer.from(`HTTP/1.1 206 Partial Content\r\nContent-Length: ${body.length}\r\n\r\n`), body])) };
    const memory = new Uint8Array(body.length);
    let pos = 0;
    let allowed = 50_000;
    let readOn: (() => void) | undefined;
    const read = c.get(
      '/b/k',
      'bytes=0-199999',
      {
        onHead: () => ({
          next: () => (pos < allowed ? memory.subarray(pos, allowed) : undefined),
          wrote: (n: number) => void (pos += n),
          paused: (r: () => void) => void (readOn = r),
        }),
      },
      live,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(readOn).toBeDefined();
    allowed = body.length;
    readOn?.();
    await read;
    expect(Buffer.from(memory).equals(body)).toBe(true);
    await c.close();
  });

  it('refuses an endpoint behind TLS (those reads stay on undici)', () => {
    expect(() => new SocketRangeClient({ endpoint: new URL('https://127.0.0.1:1'), connections: 1, timeoutMs: 1, accessKeyId: 'k', secretAccessKey: 's', region: 'r' })).toThrow(
      /http: endpoints only/,
    );
  });

  it('reports a refused connection as retryable OC_ERR_BACKEND_UNAVAILABLE', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    const c = new SocketRangeClient({ endpoint: new URL(`http://127.0.0.1:${port}`), connections: 1, timeoutMs: 1_000, accessKeyId: 'k', secretAccessKey: 's', region: 'r' });
    const error = (await c.get('/b/k', 'bytes=0-1', accept([new Uint8Array(2)]), live).catch((e: unknown) => e)) as ReadError;
    expect(error.code).toBe('OC_ERR_BACKEND_UNAVAILABLE');
    expect(error.readAgain).toBe(true);
  });
});
