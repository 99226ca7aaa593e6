/**
 * Raw HTTP for tests that act as a hostile client: requests signed by any key, sockets that send
 * part of a request and stall, and what the gateway answered before it closed one.
 */
import { SignatureV4 } from '@smithy/signature-v4';
import { createHash } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { request as httpRequest } from 'undici';
import { NodeSha256 } from '../../sigv4/signer.js';

export interface Key {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
}

function signer(key: Key): SignatureV4 {
  return new SignatureV4({ credentials: { ...key }, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
}

export interface RawRequest {
  readonly method: string;
  readonly path: string;
  readonly query?: Record<string, string>;
  readonly headers?: Record<string, string>;
  readonly body?: Buffer;
  /** x-amz-content-sha256 (default: the body's SHA-256). */
  readonly payloadHash?: string;
}

/** The signed headers of a request by `key` to `origin`. */
export async function sign(key: Key, origin: string, request: RawRequest): Promise<Record<string, string>> {
  const url = new URL(origin);
  const headers: Record<string, string> = {
    host: url.host,
    'x-amz-content-sha256':
      request.payloadHash ??
      createHash('sha256')
        .update(request.body ?? Buffer.alloc(0))
        .digest('hex'),
    ...request.headers,
  };
  if (request.body && headers['content-length'] === undefined) headers['content-length'] = String(request.body.length);
  const signed = await signer(key).sign({
    method: request.method,
    protocol: 'http:',
    hostname: url.hostname,
    port: Number(url.port),
    path: request.path,
    query: request.query ?? {},
    headers,
  });
  return signed.headers;
}

export interface Answer {
  readonly status: number;
  readonly code: string | undefined;
  readonly body: string;
  readonly headers: Record<string, string | string[] | undefined>;
}

export async function send(key: Key, origin: string, request: RawRequest): Promise<Answer> {
  const headers = await sign(key, origin, request);
  const query = new URLSearchParams(request.query ?? {}).toString();
  const res = await httpRequest(`${origin}${request.path}${query === '' ? '' : `?${query}`}`, {
    method: request.method as 'GET',
    headers,
    ...(request.body ? { body: request.body } : {}),
  });
  const body = await res.body.text();
  return { status: res.statusCode, code: res.headers['x-objectcache-error-code'] as string | undefined, body, headers: res.headers };
}

/** A raw connection to `origin`; resolves once connected. */
export async function rawSocket(origin: string): Promise<Socket> {
  const url = new URL(origin);
  const socket = connect(Number(url.port), url.hostname);
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return socket;
}

/** What the server sent before it closed `socket`, and how long after `since` it closed it (ms). */
export function closed(socket: Socket, since: number, limitMs: number): Promise<{ text: string; ms: number }> {
  let text = '';
  socket.on('data', (data: Buffer) => {
    text += data.toString('latin1');
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the gateway kept the connection open for ${limitMs} ms; received: ${text.slice(0, 200)}`));
    }, limitMs);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve({ text, ms: performance.now() - since });
    });
  });
}

/** The head of the gateway's answer on `socket` (the connection may stay open). */
export function answered(socket: Socket, limitMs: number): Promise<string> {
  let text = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${limitMs} ms`)), limitMs);
    socket.on('data', (data: Buffer) => {
      text += data.toString('latin1');
      if (text.includes('\r\n\r\n')) {
        clearTimeout(timer);
        resolve(text);
      }
    });
  });
}

/** The raw request head of a signed request (for sockets that then stall). */
export function head(method: string, path: string, headers: Record<string, string>): string {
  return `${method} ${path} HTTP/1.1\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n')}\r\n\r\n`;
}
