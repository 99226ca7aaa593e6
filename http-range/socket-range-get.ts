// Over 600 lines: one HTTP/1.1 response reader (status line, headers, bodies of every framing, errors) and its connection pool, kept together for the hot path.
/**
 * Range GETs whose bodies the kernel writes straight into the task buffer. Each connection is a
 * plain `net.Socket` with Node's `onread` option: before every socket read the connection names
 * the buffer to read into, which is the next free bytes of the range's destination while a body
 * is arriving. So a body byte is copied once, by the kernel, where undici copies it three times
 * (into a fresh 64 KiB buffer, into llhttp's wasm memory, then into the shared task buffer with
 * V8's relaxed atomics). What that saves is measured in docs/benchmarks.md (Layerwise GET
 * throughput).
 *
 * What it reads is a small subset of HTTP/1.1, enough for an S3 store's answers to a GET, also
 * through a proxy: a status line and headers, after any interim answers (1xx such as 100
 * Continue or 103 Early Hints, skipped), and a body framed by Content-Length or by chunked
 * transfer coding (Transfer-Encoding wins over Content-Length), on keep-alive connections, one
 * request at a time per connection. A chunked body's data is read straight into its place too,
 * each read bounded by what is left of its chunk: only the framing between chunks (size lines,
 * CRLFs, trailers) and the data bytes that come in the same read land in the scratch buffer and
 * are copied (few, except after small chunks, see SMALL_CHUNK_BYTES). Its chunk sizes must add
 * up to the length the destination expects, and what a store can make it hold or read as framing
 * is bounded (HEAD_LIMIT, SIZE_LINE_LIMIT, SIZE_DIGITS_LIMIT, TRAILER_LIMIT, INTERIM_LIMIT).
 * Anything else (101 Switching Protocols, a body with neither framing, a transfer coding other
 * than chunked, framing out of those bounds, bytes after the body) fails the read with
 * OC_ERR_BACKEND_PROTOCOL and drops the connection. A body can also go to a BodyTarget that
 * places it piece by piece and may have no place for a while (streamed chunk reads,
 * chunk-streams.ts): the connection then stops reading its socket until told to read on. Plain
 * `http:` endpoints only: behind TLS grouped range reads stay on undici (range-reader.ts) and
 * streamed reads are off (gateway/descriptor-get/reader-pool.ts).
 *
 * The TypeScript client reads a layerwise GET's stream the same way (client/client.ts, with
 * `peer` naming the gateway in its messages): its target (client/frame-decoder.ts) names each
 * read's place in the caller's buffer, and the body runs to its last chunk.
 */
import { createHash } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { escapeUri } from '@smithy/util-uri-escape';
import { boundReceiveBuffer } from '../native/socket-buffer.js';
import { RequestSigner } from '../sigv4/signer.js';
import { ReadError, cancelled } from './read-error.js';

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
   * the body's: its Content-Length, or a chunked body's Content-Range) or a target that places it
   * (a chunked body must then have a Content-Range, the length its chunks must add up to), or
   * `collect` to keep up to `limit` bytes of it (an error body), or a ReadError to fail the read
   * (the connection is then dropped, not drained), or `stream` for a target of a body whose
   * length only its framing gives (a chunked body then ends at its last chunk).
   */
  onHead(status: number, headers: Readonly<Record<string, string>>): readonly Uint8Array[] | BodyTarget | { collect: number } | { stream: BodyTarget } | ReadError;
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

/**
 * An error body: its first `limit` bytes kept, the rest read into DROPPED and forgotten, up to
 * DRAIN_LIMIT bytes (so that the connection can serve the next request). Past that, the body is
 * not read to its end: what was kept is the answer, and the connection is dropped (ENOUGH). As a
 * target, it goes through the same framing (Content-Length or chunked) as a range's body.
 */
class CollectTarget implements BodyTarget {
  readonly #kept: Buffer;
  #bytes = 0;
  #dropped = 0;
  constructor(limit: number) {
    this.#kept = Buffer.allocUnsafe(limit);
  }
  next(): Uint8Array {
    return this.#bytes < this.#kept.byteLength ? this.#kept.subarray(this.#bytes) : DROPPED;
  }
  wrote(n: number): void {
    if (this.#bytes < this.#kept.byteLength) this.#bytes += n;
    else if ((this.#dropped += n) > DRAIN_LIMIT) throw ENOUGH;
  }
  paused(): void {} // never: it always has a place
  get text(): string {
    return this.#kept.toString('utf8', 0, this.#bytes);
  }
}

export interface RangeAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  /** The collected error body, when the sink asked for it. */
  readonly text?: string;
}

const HEAD_LIMIT = 64 * 1024;
/** Who answers, in messages: the object store (the gateway's reads), or the gateway (the TypeScript client's fetch). */
const STORE = 'the object store';
/** The buffer of a stopped socket's next read (copied once it has a place). */
const STOPPED_READ_BYTES = 4096;
/** The bytes of an error body read past what is kept, at most, before the connection is dropped instead. */
const DRAIN_LIMIT = 1024 * 1024;
/** Thrown by a CollectTarget that has read enough of an endless error body (Connection.#guarded). */
const ENOUGH = new Error('enough of the error body');
/** Where the bytes of an error body past what is kept go. */
const DROPPED = new Uint8Array(STOPPED_READ_BYTES);
/**
 * The read after a chunk's data, which brings the framing before the next chunk's data (its CRLF
 * and the next size line, about ten bytes): short, since the data bytes that come with it are
 * copied, where the rest of the chunk is read straight into its place.
 */
const FRAMING_READ_BYTES = 64;
/**
 * After a chunk smaller than this, the framing read is this long instead: a socket read costs
 * more than copying that many bytes, so small chunks are better read several at a time and copied.
 */
const SMALL_CHUNK_BYTES = 16 * 1024;
/** The longest chunk size line (the size and any extensions, which are ignored). */
const SIZE_LINE_LIMIT = 4096;
/** 15 hex digits reach 2^60 bytes, beyond any range: a longer size is garbage, or an attempt at an overflow. */
const SIZE_DIGITS_LIMIT = 15;
/** The longest trailer section after the last chunk (its fields are ignored). */
const TRAILER_LIMIT = 8192;
/** Interim answers skipped before a read fails: a store could otherwise keep it waiting with them forever. */
const INTERIM_LIMIT = 8;

const CR = 0x0d;
const LF = 0x0a;
const SP = 0x20;
const HTAB = 0x09;
const SEMICOLON = 0x3b;

/**
 * Where a body's bytes are in its framing. A Content-Length body is all 'data'. A chunked one
 * runs 'size' (hex digits) -> 'ext' (after the digits: extensions, ignored) -> 'size-lf' ->
 * 'data' (as many bytes as the size says) -> 'data-cr' -> 'data-lf' -> 'size' again, until the
 * zero-size last chunk, after which 'trailer' (a line's first byte) -> 'trailer-line' ->
 * 'trailer-lf' -> 'trailer' for each trailer field, and 'end-lf' (the empty line) -> 'done'.
 */
type Frame = 'data' | 'size' | 'ext' | 'size-lf' | 'data-cr' | 'data-lf' | 'trailer' | 'trailer-line' | 'trailer-lf' | 'end-lf' | 'done';

function protocol(message: string, readAgain = false, peer = STORE): ReadError {
  return new ReadError('OC_ERR_BACKEND_PROTOCOL', `${peer}'s answer: ${message}`, readAgain);
}

interface Head {
  readonly status: number;
  readonly http10: boolean;
  readonly headers: Record<string, string>;
}

/** A head's status line and header lines. `reused`: a bad one may be a stray byte of the connection's last answer. */
function parseHead(text: string, reused: boolean, peer: string): Head | ReadError {
  const lines = text.split('\r\n');
  const status = /^HTTP\/1\.([01]) (\d{3})/.exec(lines[0] ?? '');
  // On a reused connection, stray bytes after the last answer would land here: worth another try.
  if (!status) return protocol(`not an HTTP/1.1 status line: ${JSON.stringify((lines[0] ?? '').slice(0, 80))}`, reused, peer);
  const headers = Object.create(null) as Record<string, string>;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i] as string;
    const colon = line.indexOf(':');
    if (colon <= 0) return protocol(`a malformed header line: ${JSON.stringify(line.slice(0, 80))}`, reused, peer);
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const before = headers[name];
    headers[name] = before === undefined ? value : `${before}, ${value}`;
  }
  return { status: Number(status[2]), http10: status[1] === '0', headers };
}

/** `bytes 0-99/1000` → [0, 99, 1000]. */
export function parseContentRange(value: string | string[] | undefined): [number, number, number] | undefined {
  const m = typeof value === 'string' ? /^bytes (\d+)-(\d+)\/(\d+)$/.exec(value.trim()) : null;
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** The length a Content-Range spans (`bytes 0-99/1000`: 100), if it is one. */
function rangeLength(value: string | undefined): number | undefined {
  const range = parseContentRange(value);
  return range && range[1] >= range[0] ? range[1] - range[0] + 1 : undefined;
}

/** The value of a hex digit's byte, or -1. */
function hexDigit(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

interface ConnectionOptions {
  /** How long the socket may be idle: waiting for an answer, between its bytes, or between requests. */
  readonly timeoutMs: number;
  readonly receiveBufferBytes?: number | undefined;
  /** Who answers, in error messages (default: the object store). */
  readonly peer?: string | undefined;
}

/** One keep-alive connection; `send` runs one request at a time. */
class Connection {
  readonly socket: Socket;
  readonly #scratch = Buffer.allocUnsafe(HEAD_LIMIT);
  /** The buffers of a read that brings a chunked body's framing: after a large chunk, after a small one. */
  readonly #framingRead = this.#scratch.subarray(0, FRAMING_READ_BYTES);
  readonly #smallChunksRead = this.#scratch.subarray(0, SMALL_CHUNK_BYTES);
  /** Head bytes received so far (in #scratch). */
  #headBytes = 0;
  /** Interim (1xx) answers skipped for the request in flight. */
  #interim = 0;
  #state: 'idle' | 'head' | 'body' | 'closed' = 'idle';
  #sink: RangeAnswerSink | undefined;
  #target: BodyTarget | undefined;
  /** The place the last socket read was given, when it was the target's (else #scratch). */
  #place: Uint8Array | undefined;
  /** Bytes that arrived with no place to go (data, and with chunked coding, framing): kept while the socket is stopped. */
  #held: Uint8Array | undefined;
  /** Body bytes the destination still expects (Infinity for a chunked error body: nothing says its length). */
  #remaining = 0;
  /** Data bytes before the next framing: the rest of the chunk, or of a Content-Length body. */
  #dataLeft = 0;
  #chunked = false;
  #frame: Frame = 'data';
  /** The size of the last chunk whose data began (Infinity before the first). */
  #lastChunk = Infinity;
  /** The chunk size line being read: the size so far, its hex digits and its bytes. */
  #chunkSize = 0;
  #sizeDigits = 0;
  #lineBytes = 0;
  #trailerBytes = 0;
  /** The error body being kept, when the sink asked for it. */
  #collector: CollectTarget | undefined;
  #answer: { status: number; headers: Record<string, string> } | undefined;
  #keepAlive = true;
  #settle: ((error: ReadError | undefined) => void) | undefined;
  /** Answers read whole on this connection: a bad head on a reused one may be a stray byte of the last. */
  #served = 0;

  readonly #timeoutMs: number;
  readonly #peer: string;

  constructor(endpoint: URL, options: ConnectionOptions, onGone: (connection: Connection) => void) {
    const { timeoutMs, receiveBufferBytes } = options;
    this.#timeoutMs = timeoutMs;
    this.#peer = options.peer ?? STORE;
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
    this.socket.on('timeout', () => this.#fail(new ReadError('OC_ERR_BACKEND_TIMEOUT', `${this.#peer} did not answer in time`, true)));
    this.socket.on('error', (error) => this.#fail(new ReadError('OC_ERR_BACKEND_UNAVAILABLE', `the connection to ${this.#peer} failed: ${error.message}`, true, { cause: error })));
    this.socket.on('close', () => {
      this.#fail(new ReadError('OC_ERR_BACKEND_UNAVAILABLE', `the connection to ${this.#peer} closed before the answer ended`, true));
      this.#state = 'closed';
      onGone(this);
    });
    this.socket.on('end', () => this.socket.destroy());
  }

  get usable(): boolean {
    return this.#state === 'idle' && !this.socket.destroyed;
  }

  /** Sends `head` (a whole request's head) and `body`, and reads the answer through `sink`. */
  send(head: string, body: Uint8Array | undefined, sink: RangeAnswerSink, signal: AbortSignal): Promise<RangeAnswer> {
    this.#state = 'head';
    this.#sink = sink;
    this.#headBytes = 0;
    this.#interim = 0;
    this.#answer = undefined;
    this.#collector = undefined;
    return new Promise<RangeAnswer>((resolve, reject) => {
      const onAbort = (): void => this.#fail(cancelled());
      signal.addEventListener('abort', onAbort, { once: true });
      this.#settle = (error) => {
        signal.removeEventListener('abort', onAbort);
        this.#settle = undefined;
        if (error) return reject(error);
        const answer = this.#answer as { status: number; headers: Record<string, string> };
        resolve(this.#collector ? { ...answer, text: this.#collector.text } : answer);
      };
      if (signal.aborted) return this.#fail(cancelled());
      if (!body || body.byteLength === 0) return void this.socket.write(head);
      this.socket.cork();
      this.socket.write(head);
      this.socket.write(body);
      this.socket.uncork();
    });
  }

  /**
   * Drops the connection (it may hold unread bytes) and ends the request in flight, if any, with
   * `error`. Closed at once, so that nothing of the failed answer is read or placed after.
   */
  #fail(error: ReadError): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#held = undefined;
    this.socket.destroy();
    this.#settle?.(error);
  }

  /** An error body too long to read to its end: the answer is what was kept, and the connection is dropped. */
  #cutShort(): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#held = undefined;
    this.socket.destroy();
    this.#settle?.(undefined);
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
    // A chunk's framing comes next: read into the scratch buffer, with few data bytes after it
    // (or, after a small chunk, the next small chunks whole).
    if (this.#frame !== 'data') return this.#lastChunk < SMALL_CHUNK_BYTES ? this.#smallChunksRead : this.#framingRead;
    const place = (this.#target as BodyTarget).next();
    // No place (the socket has stopped, see #onRead): the first read once it reads again lands
    // here and is copied to its place, so keep that read small.
    if (!place) return this.#scratch.subarray(0, STOPPED_READ_BYTES);
    // Never past the body or the chunk: what follows is framing, or belongs to no request.
    this.#place = place.byteLength > this.#dataLeft ? place.subarray(0, this.#dataLeft) : place;
    return this.#place;
  }

  /** Returns false to stop reading the socket. */
  #onRead(n: number, buffer: Uint8Array): boolean {
    if (this.#state === 'body') {
      if (this.#place) {
        this.#placed(n);
        // The end of a chunk's data: its framing is read next, into the scratch buffer.
        if (this.#frame !== 'data') return true;
        // A Content-Length body's end (a chunked body ends with its framing).
        if (this.#remaining === 0) {
          this.#done();
          return true;
        }
        if ((this.#target as BodyTarget).next() !== undefined) return true;
        // The next bytes have no place yet: stop reading before the socket hands over any.
        return this.#stop();
      }
      // Read into the scratch buffer: framing, or the target had no place when the read was set up.
      return this.#hold(buffer.subarray(0, n));
    }
    if (this.#state !== 'head') {
      this.#fail(this.#protocol('bytes arrived with no request outstanding'));
      return true;
    }
    this.#headBytes += n;
    return this.#readHead(Math.max(0, this.#headBytes - n - 3));
  }

  /** Looks for the end of the head from `from` on; skips interim answers. Returns false to stop reading the socket. */
  #readHead(from: number): boolean {
    for (;;) {
      const end = this.#scratch.subarray(0, this.#headBytes).indexOf('\r\n\r\n', from, 'latin1');
      if (end < 0) {
        if (this.#headBytes >= HEAD_LIMIT) this.#fail(this.#protocol(`a head longer than ${HEAD_LIMIT} bytes`));
        return true;
      }
      const head = parseHead(this.#scratch.toString('latin1', 0, end), this.#served > 0, this.#peer);
      if (head instanceof ReadError) {
        this.#fail(head);
        return true;
      }
      // Anything but an interim answer (100 Continue, 103 Early Hints) is the answer (101
      // Switching Protocols is refused there): an interim one has no body, the answer follows it.
      if (head.status < 100 || head.status >= 200 || head.status === 101) return this.#onHead(head, this.#scratch.subarray(end + 4, this.#headBytes));
      if (++this.#interim > INTERIM_LIMIT) {
        this.#fail(this.#protocol(`more than ${INTERIM_LIMIT} interim answers`));
        return true;
      }
      this.#scratch.copyWithin(0, end + 4, this.#headBytes);
      this.#headBytes -= end + 4;
      from = 0;
    }
  }

  /** `n` body bytes were written at the target's place. */
  #placed(n: number): void {
    (this.#target as BodyTarget).wrote(n);
    this.#remaining -= n;
    this.#dataLeft -= n;
    if (this.#dataLeft === 0 && this.#chunked) this.#frame = 'data-cr';
  }

  /** Takes bytes that came in the scratch buffer; keeps what has no place and stops reading. */
  #hold(bytes: Uint8Array): boolean {
    if (!this.#chunked && bytes.byteLength > this.#remaining) {
      this.#fail(this.#protocol('more bytes than its Content-Length'));
      return true;
    }
    this.#held = bytes;
    this.#drain();
    if (!this.#held) return true; // all placed, or the read ended (done or failed)
    this.#held = new Uint8Array(this.#held); // a copy: the scratch buffer takes the next read
    return this.#stop();
  }

  /** Copies held bytes to their places as far as there are places, reading chunked framing among them. */
  #drain(): void {
    const target = this.#target as BodyTarget;
    let held = this.#held as Uint8Array;
    while (held.byteLength > 0) {
      if (this.#frame !== 'data') {
        if (this.#frame === 'done') return this.#fail(this.#protocol('bytes after the body'));
        held = held.subarray(this.#unframe(held));
        if (this.#state !== 'body') return; // bad framing: failed
        continue;
      }
      const place = target.next();
      if (!place) break;
      const n = Math.min(place.byteLength, held.byteLength, this.#dataLeft);
      place.set(held.subarray(0, n));
      this.#placed(n);
      held = held.subarray(n);
    }
    this.#held = held.byteLength > 0 ? held : undefined;
    if (!this.#held && (this.#chunked ? this.#frame === 'done' : this.#remaining === 0)) this.#done();
  }

  /**
   * Reads chunked framing from the start of `bytes` up to the next chunk's data or the end of the
   * message, and returns how many bytes that took; fails the read on wrong or overlong framing.
   */
  #unframe(bytes: Uint8Array): number {
    let i = 0;
    while (i < bytes.byteLength && this.#frame !== 'data' && this.#frame !== 'done') {
      if (!this.#frameByte(bytes[i] as number)) return i;
      i++;
    }
    return i;
  }

  /** One byte of chunked framing; false once it has failed the read. */
  #frameByte(byte: number): boolean {
    switch (this.#frame) {
      case 'size':
      case 'ext':
      case 'size-lf':
        if (++this.#lineBytes > SIZE_LINE_LIMIT) return this.#badFraming(`a chunk size line longer than ${SIZE_LINE_LIMIT} bytes`);
        return this.#sizeLineByte(byte);
      case 'data-cr':
        this.#frame = 'data-lf';
        return byte === CR || this.#badFraming('a chunk longer than its size');
      case 'data-lf':
        this.#frame = 'size';
        this.#chunkSize = 0;
        this.#sizeDigits = 0;
        this.#lineBytes = 0;
        return byte === LF || this.#badFraming('a chunk longer than its size');
      default:
        if (++this.#trailerBytes > TRAILER_LIMIT) return this.#badFraming(`a trailer section longer than ${TRAILER_LIMIT} bytes`);
        return this.#trailerByte(byte);
    }
  }

  /** One byte of a chunk size line: hex digits, then extensions (ignored), then CRLF. */
  #sizeLineByte(byte: number): boolean {
    if (this.#frame === 'size-lf') return byte === LF ? this.#chunkStart() : this.#badFraming('a chunk size line not ended by CRLF');
    if (this.#frame === 'ext') {
      if (byte === CR) this.#frame = 'size-lf';
      return byte !== LF || this.#badFraming('a chunk size line not ended by CRLF');
    }
    const digit = hexDigit(byte);
    if (digit >= 0) {
      // A size past 2^53 is no longer exact as a number, but it is larger than any range and fails in #chunkStart.
      if (++this.#sizeDigits > SIZE_DIGITS_LIMIT) return this.#badFraming(`a chunk size of more than ${SIZE_DIGITS_LIMIT} hex digits`);
      this.#chunkSize = this.#chunkSize * 16 + digit;
      return true;
    }
    if (this.#sizeDigits > 0 && byte === CR) this.#frame = 'size-lf';
    else if (this.#sizeDigits > 0 && (byte === SEMICOLON || byte === SP || byte === HTAB)) this.#frame = 'ext';
    else return this.#badFraming(`a chunk size that is not hex (byte ${byte})`);
    return true;
  }

  /** A chunk's size line is in: its data follows, or after the last chunk, the trailer section. */
  #chunkStart(): boolean {
    const size = this.#chunkSize;
    if (size > this.#remaining) return this.#badFraming(`a chunk of ${size} bytes where the body has ${this.#remaining} left (more bytes than the range)`);
    if (size > 0) {
      this.#dataLeft = size;
      this.#lastChunk = size;
      this.#frame = 'data';
      return true;
    }
    if (this.#remaining > 0 && this.#remaining !== Infinity) return this.#badFraming(`the last chunk with ${this.#remaining} bytes of the body missing`);
    this.#frame = 'trailer';
    this.#trailerBytes = 0;
    return true;
  }

  /** One byte of the trailer section: field lines (ignored), then the empty line that ends the message. */
  #trailerByte(byte: number): boolean {
    if (byte === LF) {
      if (this.#frame === 'trailer-lf') this.#frame = 'trailer';
      else if (this.#frame === 'end-lf') this.#frame = 'done';
      else return this.#badFraming('a trailer line not ended by CRLF');
      return true;
    }
    if (this.#frame === 'trailer-lf' || this.#frame === 'end-lf') return this.#badFraming('a trailer line not ended by CRLF');
    if (byte === CR) this.#frame = this.#frame === 'trailer' ? 'end-lf' : 'trailer-lf';
    else this.#frame = 'trailer-line';
    return true;
  }

  #protocol(message: string): ReadError {
    return protocol(message, false, this.#peer);
  }

  #badFraming(message: string): false {
    this.#fail(this.#protocol(`chunked coding: ${message}`));
    return false;
  }

  /** The target has a place again: place what is held, then read the socket again. */
  #resume(): void {
    this.#guarded(() => {
      if (this.#state !== 'body') return true;
      if (this.#held) {
        this.#drain();
        if (this.#held) return this.#stop();
      }
      if (this.socket.destroyed) return true; // the held bytes failed the read, or ended it on a closing connection
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
      if (error === ENOUGH) this.#cutShort();
      else this.#fail(new ReadError('OC_ERR_INTERNAL', `placing ${this.#peer}'s answer: ${(error as Error).message}`, false, { cause: error }));
      return true;
    }
  }

  #onHead(head: Head, rest: Buffer): boolean {
    this.#onHeadParsed(head, rest);
    // Body bytes that came in with the head and found no place: the socket stops.
    return !(this.#state === 'body' && this.#held);
  }

  #onHeadParsed({ status: code, http10, headers }: Head, rest: Buffer): void {
    if (code < 200) return this.#fail(this.#protocol(`a ${code} answer`)); // 101 Switching Protocols, or no status at all
    // Transfer-Encoding overrides Content-Length (RFC 9112 section 6.3).
    const coding = headers['transfer-encoding'];
    const chunked = coding !== undefined;
    if (chunked && coding.toLowerCase() !== 'chunked') return this.#fail(this.#protocol(`Transfer-Encoding ${coding} (only chunked is read)`));
    const length = !chunked && /^\d+$/.test(headers['content-length'] ?? '') ? Number(headers['content-length']) : -1;
    if (!chunked && length < 0) return this.#fail(this.#protocol(`status ${code} with neither Content-Length nor chunked coding`));
    // A chunked body with a Content-Length as well may be an attempt at response splitting (RFC
    // 9112 section 6.3), and HTTP/1.0 has no chunked coding: such a body is read as chunked, but
    // the connection is not trusted with another request.
    this.#keepAlive = (headers['connection'] ?? '').toLowerCase() !== 'close' && !(chunked && (http10 || headers['content-length'] !== undefined));
    this.#answer = { status: code, headers };
    let plan: ReturnType<RangeAnswerSink['onHead']>;
    try {
      plan = (this.#sink as RangeAnswerSink).onHead(code, headers);
    } catch (error) {
      // Thrown here, it would escape into Node's socket read callback and end the worker.
      return this.#fail(new ReadError('OC_ERR_INTERNAL', `checking ${this.#peer}'s answer: ${(error as Error).message}`, false, { cause: error }));
    }
    if (plan instanceof ReadError) return this.#fail(plan);
    if (!chunked && rest.byteLength > length) return this.#fail(this.#protocol('more bytes than its Content-Length'));
    // The body's length as the head gives it: Content-Length, or what a chunked body's Content-Range spans.
    const declared = chunked ? rangeLength(headers['content-range']) : length;
    if ('stream' in plan) {
      this.#target = plan.stream;
      this.#remaining = chunked ? Infinity : length;
    } else if ('collect' in plan) {
      this.#collector = new CollectTarget(plan.collect);
      this.#target = this.#collector;
      // A chunked error body is read to its last chunk, whatever its length.
      this.#remaining = chunked ? Infinity : length;
    } else if (Array.isArray(plan)) {
      const views = plan as readonly Uint8Array[];
      const total = views.reduce((sum, view) => sum + view.byteLength, 0);
      if (declared !== undefined && total !== declared)
        return this.#fail(new ReadError('OC_ERR_BACKEND_RANGE', `the range read answered ${declared} bytes where ${total} were asked for`));
      this.#target = new ViewsTarget(views);
      this.#remaining = total;
    } else {
      if (declared === undefined) return this.#fail(this.#protocol('a chunked body without a Content-Range to hold its length to'));
      this.#target = plan as BodyTarget;
      this.#remaining = declared;
    }
    this.#chunked = chunked;
    this.#frame = chunked ? 'size' : 'data';
    this.#lastChunk = Infinity;
    this.#dataLeft = chunked ? 0 : length;
    this.#chunkSize = 0;
    this.#sizeDigits = 0;
    this.#lineBytes = 0;
    this.#held = undefined;
    this.#state = 'body';
    if (!chunked && length === 0) return this.#done();
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
}

export interface SocketClientOptions extends ConnectionOptions {
  readonly endpoint: URL;
  readonly connections: number;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly region: string;
}

/** A request to sign and send: `path` already S3-encoded, header names in lower case. */
export interface SocketRequest {
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly query?: readonly (readonly [string, string])[];
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: Uint8Array;
}

/**
 * Up to `connections` keep-alive connections to one plain-HTTP server (a store, or for the client a
 * gateway), signing each request with the project's SigV4 signer. A request waits for a free
 * connection in arrival order.
 */
export class SocketRangeClient {
  readonly #endpoint: URL;
  readonly #connection: ConnectionOptions;
  readonly #limit: number;
  readonly #signer: RequestSigner;
  readonly #all = new Set<Connection>();
  readonly #idle: Connection[] = [];
  readonly #waiting: ((connection: Connection | undefined) => void)[] = [];
  #closed = false;

  constructor(options: SocketClientOptions) {
    if (options.endpoint.protocol !== 'http:') throw new TypeError('SocketRangeClient reads plain http: endpoints only');
    this.#endpoint = options.endpoint;
    this.#connection = { timeoutMs: options.timeoutMs, receiveBufferBytes: options.receiveBufferBytes, peer: options.peer };
    this.#limit = options.connections;
    this.#signer = new RequestSigner(options);
  }

  /** GET `path` (already S3-encoded) with `range`, its answer read through `sink`. */
  get(path: string, range: string, sink: RangeAnswerSink, signal: AbortSignal): Promise<RangeAnswer> {
    return this.send({ method: 'GET', path, headers: { range } }, sink, signal);
  }

  /**
   * Sends a signed request and reads its answer through `sink`. `fresh`: on a new connection, not
   * an idle one (which the other end may be closing as the request goes out); when every
   * connection is busy it waits for one like any request.
   */
  async send(request: SocketRequest, sink: RangeAnswerSink, signal: AbortSignal, fresh = false): Promise<RangeAnswer> {
    const query = request.query ?? [];
    const target = query.length === 0 ? request.path : `${request.path}?${query.map(([name, value]) => `${escapeUri(name)}=${escapeUri(value)}`).join('&')}`;
    const body = request.body;
    const headers = this.#signer.sign({
      method: request.method,
      path: request.path,
      query,
      headers: { ...request.headers, host: this.#endpoint.host, ...(body ? { 'content-length': String(body.byteLength) } : {}) },
      ...(body ? { payloadHash: createHash('sha256').update(body).digest('hex') } : {}),
    });
    let head = `${request.method} ${target} HTTP/1.1\r\n`;
    for (const name in headers) head += `${name}: ${headers[name]}\r\n`;
    head += '\r\n';
    const connection = await this.#take(signal, fresh);
    try {
      return await connection.send(head, body, sink, signal);
    } finally {
      this.#give(connection);
    }
  }

  #take(signal: AbortSignal, fresh = false): Promise<Connection> {
    if (this.#closed) return Promise.reject(closedError());
    if (signal.aborted) return Promise.reject(cancelled());
    if (!fresh) for (let idle = this.#idle.pop(); idle; idle = this.#idle.pop()) if (idle.usable) return Promise.resolve(idle);
    if (this.#all.size < this.#limit || (fresh && this.#closeIdle())) {
      const connection = new Connection(this.#endpoint, this.#connection, (gone) => this.#gone(gone));
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

  /** Closes an idle connection to make room for a fresh one; false when none is idle. */
  #closeIdle(): boolean {
    const idle = this.#idle.shift();
    if (!idle) return false;
    this.#all.delete(idle);
    idle.socket.destroy();
    return true;
  }

  #gone(connection: Connection): void {
    if (!this.#all.delete(connection)) return; // closed to make room: its slot is taken already
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
