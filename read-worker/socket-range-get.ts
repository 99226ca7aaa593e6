/**
 * Range GETs whose bodies the kernel writes straight into the task buffer. Each connection is a
 * plain `net.Socket` with Node's `onread` option: before every socket read the connection names
 * the buffer to read into, which is the next free bytes of the range's destination while a body
 * is arriving. So a body byte is copied once, by the kernel, where undici copies it three times
 * (into a fresh 64 KiB buffer, into llhttp's wasm memory, then into the shared task buffer with
 * V8's relaxed atomics). Measured on one connection pool reading the same 2.25 MiB ranges from
 * MinIO: 0.27 CPU-s/GiB against undici's 0.9-1.3 (README, Layerwise GET throughput).
 *
 * What it reads is a small subset of HTTP/1.1, enough for an S3 store's answers to a GET: a
 * status line, headers, and a body framed by Content-Length, on keep-alive connections, one
 * request at a time per connection. Anything else (a body without Content-Length, chunked
 * transfer coding, a 1xx answer, bytes after the body) fails the read with
 * OC_ERR_BACKEND_PROTOCOL and drops the connection. A body can also go to a BodyTarget that
 * places it piece by piece and may have no place for a while (streamed chunk reads,
 * chunk-streams.ts): the connection then stops reading its socket until told to read on. Plain
 * `http:` endpoints only: behind TLS grouped range reads stay on undici (range-reader.ts) and
 * streamed reads are off (gateway/read-pool/reader-pool.ts).
 */
import { connect, type Socket } from 'node:net';
import { boundReceiveBuffer } from '../backends/socket-buffer.js';
import { RequestSigner } from '../sigv4/signer.js';
import { ReadError, cancelled } from './read-errors.js';

/**
 * Where a body goes, piece by piece: a streamed chunk read's next layer may have no buffer yet.
 * While it has none the connection stops reading its socket (TCP flow control holds the rest)
 * and calls `paused`; the caller calls the function it was given once `next()` has a place again.
 */
export interface BodyTarget {
  /** The place for the body's next bytes (at least one byte), or undefined for none yet. */
  next(): Uint8Array | undefined;
  /** `n` bytes were written at the start of the place `next()` gave last. */
  wrote(n: number): void;
  paused(resume: () => void): void;
}

/** What a response's head says, and where its body goes. */
export interface RangeAnswerSink {
  /**
   * Called once the head is in: the views the body fills in order (their lengths must add up to
   * Content-Length) or a target that places it, or `collect` to keep up to `limit` bytes of it
   * (an error body), or a ReadError to fail the read (the connection is then dropped, not drained).
   */
  onHead(status: number, headers: Readonly<Record<string, string>>): readonly Uint8Array[] | BodyTarget | { collect: number } | ReadError;
}

/** A body into fixed views, in order. */
class ViewsTarget implements BodyTarget {
  readonly #views: readonly Uint8Array[];
  #view = 0;
  #offset = 0;
  constructor(views: readonly Uint8Array[]) {
    this.#views = views.filter((view) => view.byteLength > 0);
  }
  next(): Uint8Array | undefined {
    return this.#views[this.#view]?.subarray(this.#offset);
  }
  wrote(n: number): void {
    this.#offset += n;
    if (this.#offset === (this.#views[this.#view] as Uint8Array).byteLength) {
      this.#view++;
      this.#offset = 0;
    }
  }
  paused(): void {} // never: its views are all there
}

export interface RangeAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  /** The collected error body, when the sink asked for it. */
  readonly text?: string;
}

const HEAD_LIMIT = 64 * 1024;
/** The buffer of a stopped socket's next read (copied once it has a place). */
const STOPPED_READ_BYTES = 4096;

function protocol(message: string, retryable = false): ReadError {
  return new ReadError('OC_ERR_BACKEND_PROTOCOL', `the object store's answer: ${message}`, retryable);
}

/** One keep-alive connection; `get` runs one request at a time. */
class Connection {
  readonly socket: Socket;
  readonly #scratch = Buffer.allocUnsafe(HEAD_LIMIT);
  /** Head bytes received so far (in #scratch). */
  #headBytes = 0;
  #state: 'idle' | 'head' | 'body' | 'collect' | 'closed' = 'idle';
  #sink: RangeAnswerSink | undefined;
  #target: BodyTarget | undefined;
  /** The place the last socket read was given, when it was the target's (else #scratch). */
  #place: Uint8Array | undefined;
  /** Body bytes that arrived with no place to go: kept while the socket is stopped. */
  #held: Uint8Array | undefined;
  #remaining = 0;
  #collected: Buffer[] = [];
  #collectLimit = 0;
  #answer: { status: number; headers: Record<string, string> } | undefined;
  #keepAlive = true;
  #settle: ((error: ReadError | undefined) => void) | undefined;
  /** Answers read whole on this connection: a bad head on a reused one may be a stray byte of the last. */
  #served = 0;

  readonly #timeoutMs: number;

  constructor(endpoint: URL, timeoutMs: number, receiveBufferBytes: number | undefined, onGone: (connection: Connection) => void) {
    this.#timeoutMs = timeoutMs;
    this.socket = connect({
      host: endpoint.hostname.replace(/^\[(.*)\]$/, '$1'), // an IPv6 literal without its brackets
      port: Number(endpoint.port || 80),
      noDelay: true,
      onread: {
        buffer: () => this.#nextBuffer(),
        // Returning false stops reading the socket (the body has no place to go).
        callback: (n: number, buffer: Uint8Array) => this.#guarded(() => this.#onRead(n, buffer)),
      },
    });
    // Bounded once connected, before the request (queued until then) is sent: what a stopped
    // read leaves unread waits in this buffer (socket-buffer.ts).
    if (receiveBufferBytes !== undefined) {
      this.socket.once('connect', () => {
        try {
          boundReceiveBuffer(this.socket, receiveBufferBytes);
        } catch {
          // Refused: the socket stays as it was (the kernel's default, autotuned).
        }
      });
    }
    // A request is written at once: the socket queues it until it connects, and a connection that
    // fails, times out or is closed first fails the request through the handlers below.
    // Also closes a connection idle that long (undici's pool closes them after 30 s).
    this.socket.setTimeout(timeoutMs);
    this.socket.on('timeout', () => this.#fail(new ReadError('OC_ERR_BACKEND_TIMEOUT', 'the object store did not answer in time', true)));
    this.socket.on('error', (error) => this.#fail(new ReadError('OC_ERR_BACKEND_UNAVAILABLE', `the object store connection failed: ${error.message}`, true)));
    this.socket.on('close', () => {
      this.#fail(new ReadError('OC_ERR_BACKEND_UNAVAILABLE', 'the object store connection closed before the answer ended', true));
      this.#state = 'closed';
      onGone(this);
    });
    this.socket.on('end', () => this.socket.destroy());
  }

  get usable(): boolean {
    return this.#state === 'idle' && !this.socket.destroyed;
  }

  /** Sends `head` (a whole request without a body) and reads the answer through `sink`. */
  get(head: string, sink: RangeAnswerSink, signal: AbortSignal): Promise<RangeAnswer> {
    this.#state = 'head';
    this.#sink = sink;
    this.#headBytes = 0;
    this.#answer = undefined;
    this.#collected = [];
    this.#collectLimit = 0;
    return new Promise<RangeAnswer>((resolve, reject) => {
      const onAbort = (): void => this.#fail(cancelled());
      signal.addEventListener('abort', onAbort, { once: true });
      this.#settle = (error) => {
        signal.removeEventListener('abort', onAbort);
        this.#settle = undefined;
        if (error) return reject(error);
        const answer = this.#answer as { status: number; headers: Record<string, string> };
        resolve(this.#collectLimit > 0 ? { ...answer, text: Buffer.concat(this.#collected).toString('utf8') } : answer);
      };
      if (signal.aborted) return this.#fail(cancelled());
      this.socket.write(head);
    });
  }

  /** Drops the connection (it may hold unread bytes) and ends the request in flight, if any, with `error`. */
  #fail(error: ReadError): void {
    if (this.#state === 'closed') return;
    this.socket.destroy();
    this.#settle?.(error);
  }

  #done(): void {
    this.#served++;
    this.#target = undefined;
    this.#held = undefined;
    this.#state = this.#keepAlive ? 'idle' : 'closed';
    if (!this.#keepAlive) this.socket.destroy();
    this.#settle?.(undefined);
  }

  /** Where the next socket read goes: the body's next free bytes, else the scratch buffer. */
  #nextBuffer(): Uint8Array {
    this.#place = undefined;
    if (this.#state === 'head') return this.#scratch.subarray(this.#headBytes);
    if (this.#state !== 'body' || this.#held) return this.#scratch;
    const place = (this.#target as BodyTarget).next();
    // No place (the socket has stopped, see #onRead): the first read once it reads again lands
    // here and is copied to its place, so keep that read small.
    if (!place) return this.#scratch.subarray(0, STOPPED_READ_BYTES);
    // Never past the body: what follows it belongs to no request.
    this.#place = place.byteLength > this.#remaining ? place.subarray(0, this.#remaining) : place;
    return this.#place;
  }

  /** Returns false to stop reading the socket. */
  #onRead(n: number, buffer: Uint8Array): boolean {
    if (this.#state === 'body') {
      if (this.#place) {
        const target = this.#target as BodyTarget;
        this.#remaining -= n;
        target.wrote(n);
        if (this.#remaining === 0) {
          this.#done();
          return true;
        }
        if (target.next() !== undefined) return true;
        // The next bytes have no place yet: stop reading before the socket hands over any.
        return this.#stop();
      }
      // Read into the scratch buffer: the target had no place when the read was set up.
      return this.#hold(buffer.subarray(0, n));
    }
    if (this.#state !== 'head' && this.#state !== 'collect') {
      this.#fail(protocol('bytes arrived with no request outstanding'));
      return true;
    }
    if (this.#state === 'collect') {
      this.#collect(buffer.subarray(0, n));
      return true;
    }
    this.#headBytes += n;
    const end = this.#scratch.subarray(0, this.#headBytes).indexOf('\r\n\r\n', Math.max(0, this.#headBytes - n - 3), 'latin1');
    if (end < 0) {
      if (this.#headBytes >= HEAD_LIMIT) this.#fail(protocol(`a head longer than ${HEAD_LIMIT} bytes`));
      return true;
    }
    return this.#onHead(this.#scratch.toString('latin1', 0, end), this.#scratch.subarray(end + 4, this.#headBytes));
  }

  /** Places body bytes that came in the scratch buffer; keeps what has no place and stops reading. */
  #hold(bytes: Uint8Array): boolean {
    if (bytes.byteLength > this.#remaining) {
      this.#fail(protocol('more bytes than its Content-Length'));
      return true;
    }
    this.#held = bytes;
    this.#drain();
    if (!this.#held) return true;
    this.#held = new Uint8Array(this.#held); // a copy: the scratch buffer takes the next read
    return this.#stop();
  }

  /** Copies held bytes to their places as far as there are places. */
  #drain(): void {
    const target = this.#target as BodyTarget;
    let held = this.#held as Uint8Array;
    while (held.byteLength > 0) {
      const place = target.next();
      if (!place) break;
      const n = Math.min(place.byteLength, held.byteLength);
      place.set(held.subarray(0, n));
      target.wrote(n);
      this.#remaining -= n;
      held = held.subarray(n);
    }
    this.#held = held.byteLength > 0 ? held : undefined;
    if (!this.#held && this.#remaining === 0) this.#done();
  }

  /** The target has a place again: place what is held, then read the socket again. */
  #resume(): void {
    this.#guarded(() => {
      if (this.#state !== 'body') return true;
      if (this.#held) {
        this.#drain();
        if (this.#held) return this.#stop();
      }
      this.socket.setTimeout(this.#timeoutMs);
      this.socket.resume();
      return true;
    });
  }

  /**
   * The body has no place to go: the read waits for the target, without a timeout (the wait is
   * the gateway's, not the store's; undici does not time a paused body either). Returns false,
   * which from the read callback stops reading the socket.
   */
  #stop(): false {
    this.socket.setTimeout(0);
    (this.#target as BodyTarget).paused(() => this.#resume());
    return false;
  }

  /**
   * Runs a step that calls the target from inside Node's socket read callback (or the target's
   * resume): a throw there would end the worker, so it fails the read instead.
   */
  #guarded(step: () => boolean): boolean {
    try {
      return step();
    } catch (error) {
      this.#fail(new ReadError('OC_ERR_INTERNAL', `placing the object store's answer: ${(error as Error).message}`));
      return true;
    }
  }

  #onHead(text: string, rest: Buffer): boolean {
    this.#onHeadParsed(text, rest);
    // Body bytes that came in with the head and found no place: the socket stops.
    return !(this.#state === 'body' && this.#held);
  }

  #onHeadParsed(text: string, rest: Buffer): void {
    const lines = text.split('\r\n');
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '');
    // On a reused connection, stray bytes after the last answer would land here: worth another try.
    if (!status) return this.#fail(protocol(`not an HTTP/1.1 status line: ${JSON.stringify((lines[0] ?? '').slice(0, 80))}`, this.#served > 0));
    const headers: Record<string, string> = Object.create(null);
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i] as string;
      const colon = line.indexOf(':');
      if (colon <= 0) return this.#fail(protocol(`a malformed header line: ${JSON.stringify(line.slice(0, 80))}`, this.#served > 0));
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      const before = headers[name];
      headers[name] = before === undefined ? value : `${before}, ${value}`;
    }
    const code = Number(status[1]);
    if (code < 200) return this.#fail(protocol(`an interim ${code} answer`));
    if (headers['transfer-encoding'] !== undefined) return this.#fail(protocol(`Transfer-Encoding ${headers['transfer-encoding']} (only Content-Length bodies are read)`));
    const length = /^\d+$/.test(headers['content-length'] ?? '') ? Number(headers['content-length']) : -1;
    if (length < 0) return this.#fail(protocol(`status ${code} without a Content-Length`));
    this.#keepAlive = (headers['connection'] ?? '').toLowerCase() !== 'close';
    this.#answer = { status: code, headers };
    let plan: ReturnType<RangeAnswerSink['onHead']>;
    try {
      plan = (this.#sink as RangeAnswerSink).onHead(code, headers);
    } catch (error) {
      // Thrown here, it would escape into Node's socket read callback and end the worker.
      return this.#fail(new ReadError('OC_ERR_INTERNAL', `checking the object store's answer: ${(error as Error).message}`));
    }
    if (plan instanceof ReadError) return this.#fail(plan);
    this.#remaining = length;
    if (rest.byteLength > length) return this.#fail(protocol('more bytes than its Content-Length'));
    if ('collect' in plan) {
      this.#state = 'collect';
      this.#collectLimit = plan.collect;
      if (length === 0) return this.#done();
      return this.#collect(rest);
    }
    this.#collectLimit = 0;
    if (Array.isArray(plan)) {
      const total = plan.reduce((sum: number, view: Uint8Array) => sum + view.byteLength, 0);
      if (total !== length) return this.#fail(new ReadError('OC_ERR_BACKEND_RANGE', `the range read answered ${length} bytes where ${total} were asked for`));
    }
    this.#target = Array.isArray(plan) ? new ViewsTarget(plan) : (plan as BodyTarget);
    this.#held = undefined;
    this.#state = 'body';
    if (length === 0) return this.#done();
    // Body bytes that came in with the head: copied once, the rest goes straight to its place.
    if (rest.byteLength > 0) {
      this.#held = rest;
      this.#drain();
      if (this.#held) {
        this.#held = new Uint8Array(this.#held);
        this.#stop();
      }
    }
  }

  #collect(bytes: Uint8Array): void {
    if (bytes.byteLength > this.#remaining) return this.#fail(protocol('more bytes than its Content-Length'));
    const kept = this.#collected.reduce((sum, b) => sum + b.byteLength, 0);
    if (kept < this.#collectLimit) this.#collected.push(Buffer.from(bytes.subarray(0, this.#collectLimit - kept)));
    this.#remaining -= bytes.byteLength;
    if (this.#remaining === 0) this.#done();
  }
}

/**
 * Up to `connections` keep-alive connections to one plain-HTTP store, signing each request with
 * the project's SigV4 signer. A request waits for a free connection in arrival order.
 */
export class SocketRangeClient {
  readonly #endpoint: URL;
  readonly #timeoutMs: number;
  readonly #limit: number;
  readonly #receiveBufferBytes: number | undefined;
  readonly #signer: RequestSigner;
  readonly #all = new Set<Connection>();
  readonly #idle: Connection[] = [];
  readonly #waiting: ((connection: Connection | undefined) => void)[] = [];
  #closed = false;

  constructor(options: { endpoint: URL; connections: number; timeoutMs: number; accessKeyId: string; secretAccessKey: string; region: string; receiveBufferBytes?: number | undefined }) {
    if (options.endpoint.protocol !== 'http:') throw new TypeError('SocketRangeClient reads plain http: endpoints only');
    this.#endpoint = options.endpoint;
    this.#timeoutMs = options.timeoutMs;
    this.#limit = options.connections;
    this.#receiveBufferBytes = options.receiveBufferBytes;
    this.#signer = new RequestSigner(options);
  }

  /** GET `path` (already S3-encoded) with `range`, its answer read through `sink`. */
  async get(path: string, range: string, sink: RangeAnswerSink, signal: AbortSignal): Promise<RangeAnswer> {
    const headers = this.#signer.sign({ method: 'GET', path, headers: { host: this.#endpoint.host, range } });
    let head = `GET ${path} HTTP/1.1\r\n`;
    for (const name in headers) head += `${name}: ${headers[name]}\r\n`;
    head += '\r\n';
    const connection = await this.#take(signal);
    try {
      return await connection.get(head, sink, signal);
    } finally {
      this.#give(connection);
    }
  }

  #take(signal: AbortSignal): Promise<Connection> {
    if (this.#closed) return Promise.reject(closedError());
    if (signal.aborted) return Promise.reject(cancelled());
    for (let idle = this.#idle.pop(); idle; idle = this.#idle.pop()) if (idle.usable) return Promise.resolve(idle);
    if (this.#all.size < this.#limit) {
      const connection = new Connection(this.#endpoint, this.#timeoutMs, this.#receiveBufferBytes, (gone) => this.#gone(gone));
      this.#all.add(connection);
      return Promise.resolve(connection);
    }
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        const at = this.#waiting.indexOf(waiter);
        if (at >= 0) this.#waiting.splice(at, 1);
        reject(cancelled());
      };
      const waiter = (connection: Connection | undefined): void => {
        signal.removeEventListener('abort', onAbort);
        if (connection) return resolve(connection);
        this.#take(signal).then(resolve, reject); // a connection closed: open another (or the client did)
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(waiter);
    });
  }

  #give(connection: Connection): void {
    if (!connection.usable || this.#closed) return; // #gone hands its slot on
    const waiter = this.#waiting.shift();
    if (waiter) return waiter(connection);
    this.#idle.push(connection);
  }

  #gone(connection: Connection): void {
    this.#all.delete(connection);
    const at = this.#idle.indexOf(connection);
    if (at >= 0) this.#idle.splice(at, 1);
    this.#waiting.shift()?.(undefined);
  }

  /** Closes every connection; reads in flight or waiting fail, and no read starts after. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const waiter of this.#waiting.splice(0)) waiter(undefined);
    const closing = [...this.#all].map((connection) => new Promise((resolve) => (connection.socket.closed ? resolve(undefined) : connection.socket.once('close', resolve))));
    for (const connection of this.#all) connection.socket.destroy();
    await Promise.all(closing);
  }
}

function closedError(): ReadError {
  return new ReadError('OC_ERR_INTERNAL', 'the range reader was closed');
}
