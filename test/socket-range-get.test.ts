// The socket range reader (read-worker/socket-range-get.ts): byte-exact bodies straight into
// shared-memory views from a real MinIO, its error bodies, connection reuse; and, against a
// scripted loopback server, every answer it does not read refused with a stable code, the
// connection dropped and the next request served on a fresh one.
import { createServer, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CreateBucketCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { SocketRangeClient, type BodyTarget, type RangeAnswerSink } from '../read-worker/socket-range-get.js';
import { ReadError } from '../read-worker/read-errors.js';
import { S3RangeReader, UndiciRangeClient } from '../read-worker/range-reader.js';
import { sdkClient, uniqueBucket } from './helpers/gateway.js';

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

describe('socket range reads from MinIO', () => {
  const minio = inject('minio');
  const bucket = uniqueBucket('sockrange');
  const object = randomBytes(3 * 1024 * 1024 + 123);
  let client: SocketRangeClient;

  beforeAll(async () => {
    const s3 = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'a/b c.bin', Body: object }));
    client = new SocketRangeClient({ endpoint: new URL(minio.endpoint), connections: 2, timeoutMs: 10_000, accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey, region: 'us-east-1' });
  });
  afterAll(() => client.close());

  it('writes each range byte-exact into its views of shared memory, many ranges on two connections', async () => {
    const memory = new Uint8Array(new SharedArrayBuffer(object.byteLength + 64));
    const ranges = [
      [0, 1],
      [1, 65_537],
      [65_537, 1_000_000],
      [1_000_000, object.byteLength],
    ] as const;
    await Promise.all(
      ranges.map(async ([from, to]) => {
        const length = to - from;
        const cuts = length > 3 ? [Math.floor(length / 3), length - 1, length] : [length];
        const answer = await client.get('/' + bucket + '/a/b%20c.bin', `bytes=${from}-${to - 1}`, accept(views(memory, from + 7, cuts)), live);
        expect(answer.status).toBe(206);
        expect(answer.headers['content-range']).toBe(`bytes ${from}-${to - 1}/${object.byteLength}`);
      }),
    );
    expect(Buffer.from(memory.subarray(7, 7 + object.byteLength)).equals(object)).toBe(true);
    expect(memory[6]).toBe(0);
    expect(memory[7 + object.byteLength]).toBe(0);
  });

  it('reads the same ranges through either transport of S3RangeReader (sockets; undici, as behind TLS), byte-exact, and names a missing chunk', async () => {
    const credentials = { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey, region: 'us-east-1', connections: 2, timeoutMs: 10_000, endpoint: new URL(minio.endpoint) };
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
      const missing = await reader.read({ bucket, key: 'nope', targets: [{ offset: 0, length: 10, views: [new Uint8Array(10)] }], objectBytes: object.byteLength, codec: 'none', signal: live }).catch((e: unknown) => e);
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
    ['chunked transfer coding', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'],
    ['no Content-Length', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 206 Partial Content\r\nConnection: close\r\n\r\nhello'],
    ['an interim answer', 'OC_ERR_BACKEND_PROTOCOL', 'HTTP/1.1 100 Continue\r\n\r\n'],
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
    expect((error as ReadError).retryable).toBe(false);
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
    expect(error.retryable).toBe(true);
    await c.close();
  });

  it('reports silence past the timeout as retryable OC_ERR_BACKEND_TIMEOUT', async () => {
    const c = client();
    script = { answer: (socket) => socket.write('HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\nhal') };
    const started = performance.now();
    const error = (await c.get('/b/k', 'bytes=0-9', accept([new Uint8Array(10)]), live).catch((e: unknown) => e)) as ReadError;
    expect(error.code).toBe('OC_ERR_BACKEND_TIMEOUT');
    expect(error.retryable).toBe(true);
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
    expect(await waiting).toMatchObject({ code: 'OC_ERR_INTERNAL', retryable: false, message: 'the range reader was closed' });
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

  it('does not time a read stopped for want of a place (the wait is the reader\'s, not the store\'s)', async () => {
    const c = client(); // timeoutMs 1000
    const body = randomBytes(200_000);
    script = { answer: (socket) => socket.write(Buffer.concat([Buffer.from(`HTTP/1.1 206 Partial Content\r\nContent-Length: ${body.length}\r\n\r\n`), body])) };
    const memory = new Uint8Array(body.length);
    let pos = 0;
    let allowed = 50_000;
    let readOn: (() => void) | undefined;
    const read = c.get('/b/k', 'bytes=0-199999', { onHead: () => ({ next: () => (pos < allowed ? memory.subarray(pos, allowed) : undefined), wrote: (n: number) => void (pos += n), paused: (r: () => void) => void (readOn = r) }) }, live);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(readOn).toBeDefined();
    allowed = body.length;
    readOn?.();
    await read;
    expect(Buffer.from(memory).equals(body)).toBe(true);
    await c.close();
  });

  it('refuses an endpoint behind TLS (those reads stay on undici)', () => {
    expect(() => new SocketRangeClient({ endpoint: new URL('https://127.0.0.1:1'), connections: 1, timeoutMs: 1, accessKeyId: 'k', secretAccessKey: 's', region: 'r' })).toThrow(/http: endpoints only/);
  });

  it('reports a refused connection as retryable OC_ERR_BACKEND_UNAVAILABLE', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as { port: number }).port;
    await new Promise((resolve) => closed.close(resolve));
    const c = new SocketRangeClient({ endpoint: new URL(`http://127.0.0.1:${port}`), connections: 1, timeoutMs: 1_000, accessKeyId: 'k', secretAccessKey: 's', region: 'r' });
    const error = (await c.get('/b/k', 'bytes=0-1', accept([new Uint8Array(2)]), live).catch((e: unknown) => e)) as ReadError;
    expect(error.code).toBe('OC_ERR_BACKEND_UNAVAILABLE');
    expect(error.retryable).toBe(true);
  });
});
