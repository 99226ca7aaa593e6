/**
 * Decoder for `Content-Encoding: aws-chunked` upload bodies, the streaming form current AWS SDKs,
 * boto3 and minio clients send by default:
 *
 *   <hex-size>[;chunk-signature=<sig>]\r\n<data>\r\n ... 0[;chunk-signature=<sig>]\r\n
 *   [<trailer-name>:<value>\r\n ... [x-amz-trailer-signature:<sig>\r\n]]\r\n
 *
 * Signed chunks (STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]) are verified before their data
 * is released: each chunk signature chains from the previous one, seeded by the request
 * signature (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html, and
 * sigv4-streaming-trailers.html). A chunk is held whole until verified, so a chunk's data is
 * bounded by MAX_CHUNK_BYTES. Trailer values are exposed for the body verifier.
 */
import { sameSignature } from '../auth/same-signature.js';
import { createHash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { ObjectCacheError } from '../../../schemas/errors.js';
import { EMPTY_SHA256 } from '../auth/request-verifier.js';

/** Largest single aws-chunked chunk accepted (SDKs send 64 KiB to 8 MiB). */
export const MAX_CHUNK_BYTES = 16 * 1024 * 1024;
const MAX_LINE_BYTES = 4096;
const MAX_TRAILER_LINES = 16;

export interface ChunkSigning {
  /** Signs a string with the client's key for the request's scope. */
  signString(stringToSign: string): Promise<string>;
  readonly seedSignature: string;
  /** `YYYYMMDDTHHMMSSZ` of the request. */
  readonly longDate: string;
  readonly scope: string;
}

export interface AwsChunkedOptions {
  /** Present for STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]; absent for unsigned chunks. */
  readonly signing?: ChunkSigning;
  /** Trailer names the client announced in x-amz-trailer (lowercase). */
  readonly expectedTrailers: readonly string[];
}

type State = 'size' | 'data' | 'data-crlf' | 'trailer' | 'done';

function chunkError(message: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_REQUEST_CHUNKED_ENCODING', message);
}

export class AwsChunkedDecoder extends Transform {
  /** Trailer values by lowercase name, filled when the body ends. */
  readonly trailers = new Map<string, string>();
  readonly #signing: ChunkSigning | undefined;
  readonly #expectedTrailers: readonly string[];
  #state: State = 'size';
  #pending: Buffer = Buffer.alloc(0);
  #chunkSize = 0;
  #chunkSignature = '';
  #chunkParts: Buffer[] = [];
  #chunkReceived = 0;
  #previousSignature: string;
  #trailerLines: string[] = [];

  constructor(options: AwsChunkedOptions) {
    super();
    this.#signing = options.signing;
    this.#expectedTrailers = options.expectedTrailers;
    this.#previousSignature = options.signing?.seedSignature ?? '';
  }

  override _transform(data: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#pending = this.#pending.length === 0 ? data : Buffer.concat([this.#pending, data]);
    this.#drain().then(() => callback(), callback);
  }

  override _flush(callback: TransformCallback): void {
    if (this.#state !== 'done') {
      callback(chunkError('The aws-chunked body ended before its final chunk and trailer'));
      return;
    }
    for (const name of this.#expectedTrailers) {
      if (!this.trailers.has(name)) {
        callback(chunkError(`The trailer ${name} announced in x-amz-trailer is missing`));
        return;
      }
    }
    callback();
  }

  #takeLine(): string | undefined {
    const end = this.#pending.indexOf('\r\n');
    if (end === -1) {
      if (this.#pending.length > MAX_LINE_BYTES) throw chunkError('An aws-chunked header line is too long');
      return undefined;
    }
    if (end > MAX_LINE_BYTES) throw chunkError('An aws-chunked header line is too long');
    const line = this.#pending.subarray(0, end).toString('latin1');
    this.#pending = this.#pending.subarray(end + 2);
    return line;
  }

  async #drain(): Promise<void> {
    for (;;) {
      switch (this.#state) {
        case 'size': {
          const line = this.#takeLine();
          if (line === undefined) return;
          this.#parseSizeLine(line);
          if (this.#chunkSize === 0) {
            await this.#verifyChunk(Buffer.alloc(0));
            this.#state = 'trailer';
          } else {
            this.#state = 'data';
          }
          break;
        }
        case 'data': {
          if (this.#pending.length === 0) return;
          const need = this.#chunkSize - this.#chunkReceived;
          const piece = this.#pending.subarray(0, need);
          this.#pending = this.#pending.subarray(piece.length);
          this.#chunkParts.push(piece);
          this.#chunkReceived += piece.length;
          if (this.#chunkReceived < this.#chunkSize) return;
          this.#state = 'data-crlf';
          break;
        }
        case 'data-crlf': {
          if (this.#pending.length < 2) return;
          if (this.#pending[0] !== 0x0d || this.#pending[1] !== 0x0a) throw chunkError('An aws-chunked chunk is longer than its declared size');
          this.#pending = this.#pending.subarray(2);
          const chunk = this.#chunkParts.length === 1 ? (this.#chunkParts[0] as Buffer) : Buffer.concat(this.#chunkParts);
          this.#chunkParts = [];
          this.#chunkReceived = 0;
          await this.#verifyChunk(chunk);
          this.push(chunk);
          this.#state = 'size';
          break;
        }
        case 'trailer': {
          const line = this.#takeLine();
          if (line === undefined) return;
          if (line === '') {
            await this.#verifyTrailer();
            this.#state = 'done';
            break;
          }
          if (this.#trailerLines.length >= MAX_TRAILER_LINES) throw chunkError('Too many aws-chunked trailer lines');
          this.#trailerLines.push(line);
          break;
        }
        case 'done':
          if (this.#pending.length > 0) throw chunkError('Data follows the end of the aws-chunked body');
          return;
      }
    }
  }

  #parseSizeLine(line: string): void {
    const semi = line.indexOf(';');
    const sizeText = semi === -1 ? line : line.slice(0, semi);
    if (!/^[0-9a-fA-F]{1,8}$/.test(sizeText)) throw chunkError(`Invalid aws-chunked chunk size ${JSON.stringify(sizeText.slice(0, 16))}`);
    const size = parseInt(sizeText, 16);
    if (size > MAX_CHUNK_BYTES) throw chunkError(`An aws-chunked chunk of ${size} bytes exceeds the ${MAX_CHUNK_BYTES}-byte limit`);
    this.#chunkSize = size;
    this.#chunkSignature = '';
    if (semi !== -1) {
      const ext = line.slice(semi + 1);
      const m = /^chunk-signature=([0-9a-f]{64})$/.exec(ext);
      if (!m) throw chunkError('Invalid aws-chunked chunk extension');
      this.#chunkSignature = m[1] as string;
    }
    if (this.#signing && this.#chunkSignature === '') throw chunkError('A signed aws-chunked body has a chunk without chunk-signature');
    if (!this.#signing && this.#chunkSignature !== '') throw chunkError('An unsigned aws-chunked body carries a chunk signature');
  }

  async #verifyChunk(chunk: Buffer): Promise<void> {
    const signing = this.#signing;
    if (!signing) return;
    const stringToSign = [
      'AWS4-HMAC-SHA256-PAYLOAD',
      signing.longDate,
      signing.scope,
      this.#previousSignature,
      EMPTY_SHA256,
      createHash('sha256').update(chunk).digest('hex'),
    ].join('\n');
    const expected = await signing.signString(stringToSign);
    if (!sameSignature(expected, this.#chunkSignature)) {
      throw new ObjectCacheError('OC_ERR_REQUEST_CHUNK_SIGNATURE', 'A chunk signature of the aws-chunked body does not match');
    }
    this.#previousSignature = expected;
  }

  async #verifyTrailer(): Promise<void> {
    let trailerSignature: string | undefined;
    const canonical: string[] = [];
    for (const line of this.#trailerLines) {
      const colon = line.indexOf(':');
      if (colon <= 0) throw chunkError('Invalid aws-chunked trailer line');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      if (name === 'x-amz-trailer-signature') {
        trailerSignature = value;
        continue;
      }
      if (!this.#expectedTrailers.includes(name)) throw chunkError(`The trailer ${name} was not announced in x-amz-trailer`);
      this.trailers.set(name, value);
      canonical.push(`${name}:${value}\n`);
    }
    const signing = this.#signing;
    if (!signing || this.#expectedTrailers.length === 0) return;
    if (trailerSignature === undefined) throw chunkError('The signed trailer has no x-amz-trailer-signature');
    const stringToSign = ['AWS4-HMAC-SHA256-TRAILER', signing.longDate, signing.scope, this.#previousSignature, createHash('sha256').update(canonical.join('')).digest('hex')].join(
      '\n',
    );
    const expected = await signing.signString(stringToSign);
    if (!sameSignature(expected, trailerSignature)) throw new ObjectCacheError('OC_ERR_REQUEST_CHUNK_SIGNATURE', 'The trailer signature of the aws-chunked body does not match');
  }
}
