/**
 * Turns an upload request into a verified byte stream, whichever way the client framed it
 * (plain body with a SHA-256 or UNSIGNED-PAYLOAD, or aws-chunked with signed chunks or an
 * unsigned trailer), checking length, x-amz-content-sha256, Content-MD5 and x-amz-checksum-*.
 *
 * Nothing unverified reaches the store: the verifier holds back the most recent piece of data
 * until the body has ended and every digest matched, so a store that commits on end-of-stream
 * never commits a body that fails verification (docs/reliability.md: nothing half-written).
 */
import { createHash, type Hash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { pipeline, type Readable, Transform, type TransformCallback, type Writable } from 'node:stream';
import { ObjectCacheError } from '../../../schemas/errors.js';
import { STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER, type AuthResult } from '../auth/request-verifier.js';
import { AwsChunkedDecoder } from './aws-chunked-decoder.js';
import { assertChecksumValue, checksumAlgorithmOf, createChecksum, type ChecksumAlgorithm, type IncrementalChecksum } from './checksum.js';

export interface ChecksumClaim {
  readonly algorithm: ChecksumAlgorithm;
  /** The value sent in a header, or undefined when it arrives in the aws-chunked trailer. */
  readonly headerValue: string | undefined;
}

export interface UploadBody {
  /** The decoded, verified bytes. Errors with an ObjectCacheError when verification fails. */
  readonly stream: Readable;
  /** Decoded length in bytes. */
  readonly length: number;
  /** The hex SHA-256 the client declared for the decoded body, if it declared one. */
  readonly sha256Hex: string | undefined;
  readonly contentMd5: string | undefined;
  readonly checksum: ChecksumClaim | undefined;
  /** Whether the client sent an aws-chunked body (its framing headers must not be forwarded). */
  readonly chunked: boolean;
  /** The checksum value once the stream has ended successfully (from the header or the trailer). */
  checksumValue(): string | undefined;
}

interface Expectations {
  readonly length: number;
  readonly sha256Hex: string | undefined;
  readonly contentMd5: string | undefined;
  readonly checksum: { readonly algorithm: ChecksumAlgorithm; readonly expected: () => string | undefined } | undefined;
  /** The checksum came in a presigned URL (its query), not from the uploader: the refusal says how that happens. */
  readonly presigned: boolean;
}

/**
 * What a presigned URL's checksum that the body does not match most likely is: the AWS SDK v3
 * presigner's checksum of an empty body (aws-sdk-js-v3 #6994; AWS S3 refuses such a PUT too).
 */
const PRESIGNED_CHECKSUM_HINT =
  ": the presigned URL carries it. The AWS SDK for JavaScript v3 puts the checksum of an empty body in the URLs it presigns unless its S3Client is made with requestChecksumCalculation: 'WHEN_REQUIRED' (AWS S3 refuses such a PUT as well); presign with that setting, or send the body's own checksum";

/** Counts, hashes and holds back the last piece until every check has passed at the end. */
class BodyVerifier extends Transform {
  readonly #expect: Expectations;
  readonly #sha256: Hash | undefined;
  readonly #md5: Hash | undefined;
  readonly #checksum: IncrementalChecksum | undefined;
  #received = 0;
  #held: Buffer | undefined;

  constructor(expect: Expectations) {
    super();
    this.#expect = expect;
    this.#sha256 = expect.sha256Hex === undefined ? undefined : createHash('sha256');
    this.#md5 = expect.contentMd5 === undefined ? undefined : createHash('md5');
    this.#checksum = expect.checksum === undefined ? undefined : createChecksum(expect.checksum.algorithm);
  }

  override _transform(data: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#received += data.length;
    if (this.#received > this.#expect.length) {
      callback(new ObjectCacheError('OC_ERR_REQUEST_CHUNKED_ENCODING', `The body is longer than the declared ${this.#expect.length} bytes`));
      return;
    }
    this.#sha256?.update(data);
    this.#md5?.update(data);
    this.#checksum?.update(data);
    if (this.#held !== undefined) this.push(this.#held);
    this.#held = data;
    callback();
  }

  override _flush(callback: TransformCallback): void {
    const e = this.#expect;
    if (this.#received !== e.length) {
      callback(new ObjectCacheError('OC_ERR_REQUEST_INCOMPLETE_BODY', `The body ended after ${this.#received} of ${e.length} bytes`));
      return;
    }
    if (this.#sha256 && this.#sha256.digest('hex') !== e.sha256Hex) {
      callback(new ObjectCacheError('OC_ERR_REQUEST_CONTENT_SHA256', 'The provided x-amz-content-sha256 does not match what was computed'));
      return;
    }
    if (this.#md5 && this.#md5.digest('base64') !== e.contentMd5) {
      callback(new ObjectCacheError('OC_ERR_REQUEST_BAD_DIGEST', 'The Content-MD5 you specified did not match what we received'));
      return;
    }
    if (this.#checksum && e.checksum) {
      const expected = e.checksum.expected();
      if (expected === undefined) {
        callback(new ObjectCacheError('OC_ERR_REQUEST_BAD_DIGEST', `No x-amz-checksum-${e.checksum.algorithm} value arrived`));
        return;
      }
      const algorithm = e.checksum.algorithm;
      this.#checksum.digestBase64().then(
        (actual) => {
          if (actual !== expected) {
            callback(
              new ObjectCacheError(
                'OC_ERR_REQUEST_BAD_DIGEST',
                `The x-amz-checksum-${algorithm} you specified did not match the calculated checksum${e.presigned ? PRESIGNED_CHECKSUM_HINT : ''}`,
              ),
            );
            return;
          }
          this.#release(callback);
        },
        (error: unknown) => callback(error as Error),
      );
      return;
    }
    this.#release(callback);
  }

  /** Every check passed: the held-back piece goes out, and the stream ends. */
  #release(callback: TransformCallback): void {
    if (this.#held !== undefined) this.push(this.#held);
    this.#held = undefined;
    callback();
  }
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

function parseLength(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d{1,16}$/.test(text.trim())) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `${name} must be a non-negative integer`);
  const value = Number(text.trim());
  if (!Number.isSafeInteger(value)) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `${name} is too large`);
  return value;
}

function checksumClaim(req: IncomingMessage, trailerNames: readonly string[]): ChecksumClaim | undefined {
  const claims: ChecksumClaim[] = [];
  for (const [name, value] of Object.entries(req.headers)) {
    if (!name.startsWith('x-amz-checksum-') || name === 'x-amz-checksum-mode' || name === 'x-amz-checksum-type' || name === 'x-amz-checksum-algorithm') continue;
    const algorithm = checksumAlgorithmOf(name);
    const text = Array.isArray(value) ? value.join(',') : (value ?? '');
    assertChecksumValue(algorithm, text, name);
    claims.push({ algorithm, headerValue: text });
  }
  for (const name of trailerNames) {
    if (!name.startsWith('x-amz-checksum-')) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', `x-amz-trailer names ${name}, which is not a checksum`);
    claims.push({ algorithm: checksumAlgorithmOf(name), headerValue: undefined });
  }
  if (claims.length > 1) throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'Only one x-amz-checksum-* value may be sent with a request');
  return claims[0];
}

/**
 * Feeds the request into the first decoding stage with `pipe`, not `pipeline`: a verification
 * error must not destroy the request, because destroying a half-read request destroys its socket
 * and the client would never see the XML error. Node's server discards the unread rest of the
 * body after the response. A client that goes away mid-body fails the stage instead.
 */
function connectRequest(req: IncomingMessage, first: Writable): void {
  req.pipe(first);
  const cut = (): void => {
    if (!req.complete && !first.destroyed) first.destroy(new ObjectCacheError('OC_ERR_REQUEST_INCOMPLETE_BODY', 'The client closed the connection before the body was complete'));
  };
  req.once('close', cut);
  // A request whose response has already finished (a timeout answered it) is never closed by
  // Node when its socket goes: the socket's closing is the end of its body too.
  const socket = req.socket;
  socket.once('close', cut);
  req.once('end', () => socket.off('close', cut));
}

export interface UploadBodyOptions {
  readonly maxBytes: number;
}

/** Builds the verified body stream of a PUT or POST request that has just been authenticated. */
export function uploadBody(req: IncomingMessage, auth: AuthResult, options: UploadBodyOptions): UploadBody {
  const payloadHash = auth.payloadHash;
  const chunked = payloadHash === STREAMING_SIGNED || payloadHash === STREAMING_SIGNED_TRAILER || payloadHash === STREAMING_UNSIGNED_TRAILER;
  const encodings = (header(req, 'content-encoding') ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '');
  if (encodings.includes('aws-chunked') && !chunked) {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'Content-Encoding aws-chunked needs x-amz-content-sha256 set to a STREAMING-* value');
  }
  const trailerNames = (header(req, 'x-amz-trailer') ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '');
  if (trailerNames.length > 0 && payloadHash !== STREAMING_UNSIGNED_TRAILER && payloadHash !== STREAMING_SIGNED_TRAILER) {
    throw new ObjectCacheError('OC_ERR_REQUEST_INVALID_ARGUMENT', 'x-amz-trailer needs a STREAMING-*-TRAILER payload');
  }

  const contentLength = parseLength(header(req, 'content-length'), 'Content-Length');
  const decodedLength = parseLength(header(req, 'x-amz-decoded-content-length'), 'x-amz-decoded-content-length');
  const length = chunked ? decodedLength : contentLength;
  if (length === undefined) {
    throw new ObjectCacheError('OC_ERR_REQUEST_MISSING_LENGTH', chunked ? 'An aws-chunked upload must send x-amz-decoded-content-length' : 'The upload must send Content-Length');
  }
  if (length > options.maxBytes) {
    throw new ObjectCacheError('OC_ERR_REQUEST_TOO_LARGE', `The body of ${length} bytes exceeds the maximum of ${options.maxBytes} bytes`);
  }

  const contentMd5 = header(req, 'content-md5');
  if (contentMd5 !== undefined) assertChecksumValue('md5', contentMd5, 'Content-MD5');
  const claim = checksumClaim(req, trailerNames);
  const sha256Hex = /^[0-9a-f]{64}$/.test(payloadHash) ? payloadHash : undefined;

  const decoder = chunked
    ? new AwsChunkedDecoder({
        expectedTrailers: trailerNames,
        ...(payloadHash === STREAMING_UNSIGNED_TRAILER
          ? {}
          : {
              signing: {
                signString: auth.signString,
                seedSignature: auth.signature,
                longDate: auth.signingDate
                  .toISOString()
                  .replace(/[-:]/g, '')
                  .replace(/\.\d{3}/, ''),
                scope: auth.scope,
              },
            }),
      })
    : undefined;
  const expected = (): string | undefined =>
    claim?.headerValue !== undefined ? claim.headerValue : claim ? decoder?.trailers.get(`x-amz-checksum-${claim.algorithm}`) : undefined;
  const verifier = new BodyVerifier({
    length,
    sha256Hex,
    contentMd5,
    checksum: claim === undefined ? undefined : { algorithm: claim.algorithm, expected },
    presigned: auth.mode === 'presigned' && claim?.headerValue !== undefined,
  });
  const stream = decoder ? pipeline(decoder, verifier, () => {}) : verifier;
  connectRequest(req, decoder ?? verifier);
  // Consumers see the error through their own pipeline or iterator; this listener only keeps an
  // error on a stream whose consumer already gave up (the backend refused the request) from
  // becoming an uncaught exception.
  stream.on('error', () => {});
  return { stream, length, sha256Hex, contentMd5, checksum: claim, chunked, checksumValue: expected };
}

/** A small verified body read whole (XML documents, descriptors), at most `maxBytes`. */
export async function readWholeBody(req: IncomingMessage, auth: AuthResult, maxBytes: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of uploadBody(req, auth, { maxBytes }).stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}
