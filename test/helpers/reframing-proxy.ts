/**
 * A loopback HTTP relay in front of MinIO for the socket range reader's tests
 * (test/socket-range-get.test.ts): it forwards each request as it came, Host header included (so
 * a SigV4 signature made for the relay's address still holds at MinIO), reads MinIO's real answer
 * whole, and writes it back framed the way the test says: as it was (Content-Length), chunked with
 * chosen chunk sizes, extensions and trailers, after interim answers, or wrong on purpose; written
 * in pieces with pauses between them, so that the reader meets framing split across reads.
 * Requests on one client connection are answered one after another (keep-alive).
 */
import { request } from 'node:http';
import { createServer, type Server, type Socket } from 'node:net';

/** MinIO's answer, without its framing headers (Content-Length, Transfer-Encoding, Connection). */
export interface Upstream {
  readonly status: number;
  readonly reason: string;
  readonly headers: readonly (readonly [string, string])[];
  readonly body: Buffer;
  /** The request it answers, as it came (header names in lower case). */
  readonly request: { readonly method: string; readonly path: string; readonly headers: Readonly<Record<string, string>> };
}

/** What the relay writes back: `pieces` in order, each once the last is out; then whether it closes. */
export interface Reframed {
  readonly pieces: readonly (Buffer | string)[];
  /** Wait this long between pieces (default: one turn of the event loop). */
  readonly pauseMs?: number;
  readonly close?: boolean;
}

export type Reframe = (answer: Upstream) => Reframed;

/** Hop-by-hop and framing headers: the relay's answer frames the body its own way. */
const FRAMING = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive']);

/** A head: status line and header lines, then the empty line. */
export function head(status: number, reason: string, headers: readonly (readonly [string, string])[]): string {
  return `HTTP/1.1 ${status} ${reason}\r\n${headers.map(([name, value]) => `${name}: ${value}\r\n`).join('')}\r\n`;
}

/** MinIO's answer as it was: Content-Length framing. */
export const asIs: Reframe = (answer) => ({ pieces: [head(answer.status, answer.reason, [...answer.headers, ['Content-Length', String(answer.body.length)]]), answer.body] });

export interface ChunkedOptions {
  /** Chunk sizes, used in turn (the last chunk may be shorter). */
  readonly sizes: readonly number[];
  /** The text after chunk i's size (an extension such as `;name=value`), if any. */
  readonly extension?: (i: number) => string;
  /** Chunk i's size as written (default: lower-case hex). */
  readonly sizeText?: (size: number, i: number) => string;
  /** Trailer field lines, each ending with CRLF. */
  readonly trailer?: string;
}

/** `body` in chunked coding: its chunks, the zero-size last chunk, the trailer section and the final CRLF. */
export function chunked(body: Buffer, options: ChunkedOptions): Buffer {
  const parts: Buffer[] = [];
  for (let at = 0, i = 0; at < body.length; i++) {
    const size = Math.min(options.sizes[i % options.sizes.length] as number, body.length - at);
    parts.push(Buffer.from(`${options.sizeText?.(size, i) ?? size.toString(16)}${options.extension?.(i) ?? ''}\r\n`), body.subarray(at, at + size), Buffer.from('\r\n'));
    at += size;
  }
  parts.push(Buffer.from(`0\r\n${options.trailer ?? ''}\r\n`));
  return Buffer.concat(parts);
}

/** `bytes` cut into pieces of `size` bytes (the last may be shorter). */
export function pieces(bytes: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(bytes.subarray(at, at + size));
  return out;
}

export class ReframingProxy {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  readonly #upstream: URL;
  /** How the next answers are framed. */
  reframe: Reframe = asIs;
  /** Client connections accepted so far. */
  accepted = 0;

  constructor(upstream: URL) {
    this.#upstream = upstream;
    this.#server = createServer((client) => this.#serve(client));
  }

  async listen(): Promise<URL> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    return new URL(`http://127.0.0.1:${(this.#server.address() as { port: number }).port}`);
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  #serve(client: Socket): void {
    this.accepted++;
    this.#sockets.add(client);
    client.setNoDelay(true);
    client.on('close', () => this.#sockets.delete(client));
    client.on('error', () => {}); // the reader drops connections mid-answer on purpose
    let received = '';
    let busy = Promise.resolve();
    client.on('data', (data) => {
      received += data.toString('latin1');
      for (let end = received.indexOf('\r\n\r\n'); end >= 0; end = received.indexOf('\r\n\r\n')) {
        const text = received.slice(0, end);
        received = received.slice(end + 4);
        // One answer at a time, in order, each framed as the test says when its turn comes.
        busy = busy.then(() => this.#answer(client, text)).catch(() => void client.destroy());
      }
    });
  }

  async #answer(client: Socket, text: string): Promise<void> {
    if (client.destroyed) return;
    const [line = '', ...lines] = text.split('\r\n');
    const [method = 'GET', path = '/'] = line.split(' ');
    const headers: Record<string, string> = {};
    for (const l of lines) {
      const colon = l.indexOf(':');
      headers[l.slice(0, colon).trim().toLowerCase()] = l.slice(colon + 1).trim();
    }
    const upstream = await this.#fetch(method, path, headers);
    const reframed = this.reframe(upstream);
    for (const piece of reframed.pieces) {
      if (client.destroyed) return;
      await new Promise<void>((resolve) => client.write(piece, () => resolve()));
      await new Promise((resolve) => (reframed.pauseMs ? setTimeout(resolve, reframed.pauseMs) : setImmediate(resolve)));
    }
    if (reframed.close) client.end();
  }

  /** The request as it came, to MinIO (Host included: the signature covers it); its answer whole. */
  #fetch(method: string, path: string, headers: Record<string, string>): Promise<Upstream> {
    return new Promise((resolve, reject) => {
      const req = request({ host: this.#upstream.hostname, port: Number(this.#upstream.port), method, path, headers, agent: false }, (res) => {
        const body: Buffer[] = [];
        res.on('data', (data: Buffer) => body.push(data));
        res.on('error', reject);
        res.on('end', () => {
          const pairs: [string, string][] = [];
          for (let i = 0; i < res.rawHeaders.length; i += 2) {
            const name = res.rawHeaders[i] as string;
            if (!FRAMING.has(name.toLowerCase())) pairs.push([name, res.rawHeaders[i + 1] as string]);
          }
          resolve({ status: res.statusCode ?? 0, reason: res.statusMessage ?? '', headers: pairs, body: Buffer.concat(body), request: { method, path, headers } });
        });
      });
      req.on('error', reject);
      req.setTimeout(10_000, () => req.destroy(new Error('MinIO did not answer the relay in time')));
      req.end();
    });
  }
}
