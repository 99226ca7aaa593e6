/**
 * The ObjectCache client a serving node uses: store a prefix's chunks, look up how much of a
 * prefix is cached in one round trip, and fetch the KV layer by layer into a target buffer with a
 * ready callback per layer (or as an async iterator).
 *
 * The augmented GET goes through @aws-sdk/client-s3 (`transport: 'get'`: a build-step middleware
 * adds the descriptor header before the request is signed) or, for descriptors too large for a
 * header, as the signed JSON body of `POST /{bucket}?objectcache` (`transport: 'post'`).
 */
import type { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, S3Client, S3ServiceException } from '@aws-sdk/client-s3';
import { escapeUriPath } from '@smithy/util-uri-escape';
import { XMLParser } from 'fast-xml-parser';
import type { Dispatcher, Pool } from 'undici';
import { DESCRIPTOR_HEADER, encodeDescriptorHeader, SEGMENT_CHUNKS_HEADER, MAX_HEADER_DESCRIPTOR_BYTES, parseDescriptor, type Descriptor } from '../schemas/descriptor.js';

export { DESCRIPTOR_HEADER };
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ERRORS, ObjectCacheError, type ErrorCode } from '../schemas/errors.js';
import type { EndSummary } from '../schemas/frames.js';
import { signingPool } from '../sigv4/signing-dispatcher.js';
import { encodeLayerCrcs, LAYER_CRC_META, layerCrcs, MAX_CHECKSUMMED_LAYERS } from '../schemas/integrity.js';
import { AFTER_META, recordableAfter } from '../schemas/chain.js';
import type { Layout } from '../schemas/layouts.js';
import { SocketRangeClient, type BodyTarget, type RangeAnswer, type RangeAnswerSink, type SocketRequest } from '../storage-worker/socket-range-get.js';
import { FrameDecoder } from './frame-decoder.js';
import { toCanonical } from './kv-layout.js';

export { MAX_HEADER_DESCRIPTOR_BYTES };

export interface ObjectCacheClientOptions {
  /**
   * Gateway URL, e.g. http://127.0.0.1:9080, or several gateways in front of the same store:
   * a request that cannot reach one (connection refused, reset, unreachable) goes to the next,
   * and the client keeps using the one that answered.
   */
  readonly endpoint: string | readonly string[];
  readonly bucket: string;
  readonly credentials: { readonly accessKeyId: string; readonly secretAccessKey: string };
  readonly region?: string;
  /**
   * How often a fetch from a plain-http: gateway is tried again when the gateway refuses it with
   * a retryable answer (a 503 SlowDown at its limits), before any byte is used: after the
   * answer's Retry-After (at most 30 s), else 0.2, 0.4, 0.8 s. Default 3, as the Python client.
   */
  readonly retries?: number;
  /**
   * The longest one call may take in all (connecting, waiting for the answer and for Retry-After,
   * reading it), in ms: past it the call is abandoned, its connection closed, and it fails with
   * OC_ERR_CLIENT_TIMEOUT, however the gateway trickles its bytes. Default 300,000 (5 minutes).
   */
  readonly deadlineMs?: number;
}

/** The default of `deadlineMs`. */
const DEFAULT_DEADLINE_MS = 300_000;

/**
 * One call's deadline: a signal that aborts at `ms` (or with the caller's `outer` signal), and
 * the error a call cut off by it fails with.
 */
class Deadline {
  readonly signal: AbortSignal;
  readonly #timer: AbortSignal;
  readonly #ms: number;
  readonly #what: string;
  constructor(ms: number, what: string, outer?: AbortSignal) {
    this.#ms = ms;
    this.#what = what;
    this.#timer = AbortSignal.timeout(ms);
    this.signal = outer ? AbortSignal.any([outer, this.#timer]) : this.#timer;
  }

  get expired(): boolean {
    return this.#timer.aborted;
  }

  /** OC_ERR_CLIENT_TIMEOUT in place of whatever a call cut off by its deadline failed with. */
  error(cause?: unknown): ObjectCacheError {
    return new ObjectCacheError('OC_ERR_CLIENT_TIMEOUT', `${this.#what} did not finish within its deadline of ${this.#ms} ms`, cause !== undefined ? { cause } : {});
  }

  /** Runs `op`; a failure after the deadline passed is the deadline's. */
  async run<T>(op: (signal: AbortSignal) => Promise<T>): Promise<T> {
    try {
      return await op(this.signal);
    } catch (error) {
      if (this.expired) throw this.error(error);
      throw error;
    }
  }
}

export type Transport = 'auto' | 'get' | 'post';

export interface PutChunksOptions {
  readonly concurrency?: number;
  /** The stored layout of the objects; when given, per-layer checksums are recorded. */
  readonly layout?: { readonly layout: Layout; readonly layers: number; readonly layerBytes: number };
  /**
   * The keys are one prefix in order (default true): each chunk records the one before it
   * (`objectcache-after`), so a budgeted bucket trims the prefix from its tail.
   */
  readonly chain?: boolean;
}

export interface FetchOptions {
  /** Where the layers go; allocated when absent. Layer l lands at (l - layerStart) * layerStride. */
  readonly target?: Uint8Array;
  /** Defaults to the descriptor's target.layerStride, else chunks x layerBytes (packed). */
  readonly layerStride?: number;
  readonly onLayerReady?: (layer: number, view: Uint8Array) => void;
  readonly transport?: Transport;
  readonly signal?: AbortSignal;
  /** This fetch's deadline, in ms (default: the client's `deadlineMs`). */
  readonly deadlineMs?: number;
}

export interface FetchResult {
  readonly target: Uint8Array;
  readonly layerStride: number;
  readonly summary: EndSummary;
  /** Milliseconds from the request to each layer's ready notification. */
  readonly timeline: readonly { readonly layer: number; readonly ms: number }[];
  readonly transport: 'get' | 'post';
  /**
   * How many of the request's chunks (its first ones) the gateway read from a packed segment
   * (docs/segments.md), as its x-objectcache-segment-chunks header says; 0 for none.
   */
  readonly segmentChunks: number;
}

/** The x-objectcache-segment-chunks header as a count (0 when absent or not a count). */
function segmentChunksOf(value: string | string[] | undefined): number {
  return typeof value === 'string' && /^\d{1,9}$/.test(value) ? Number(value) : 0;
}

/** Adds the signed descriptor header to one GetObjectCommand (for callers using their own S3Client). */
export function withDescriptor(command: GetObjectCommand, descriptor: DescriptorInput): GetObjectCommand {
  const encoded = encodeDescriptorHeader(descriptor);
  command.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { headers?: Record<string, string> };
      if (request.headers) request.headers[DESCRIPTOR_HEADER] = encoded;
      return next(args);
    },
    { step: 'build', name: 'objectcacheDescriptorHeader' },
  );
  return command;
}

const errorXml = new XMLParser({ parseTagValue: false, processEntities: true });

/** The Code and Message of an S3 error document (absent when the body is not one). */
function parseErrorDocument(xml: string): { code?: string; message?: string } {
  try {
    const doc = errorXml.parse(xml) as { Error?: { Code?: unknown; Message?: unknown } };
    const text = (v: unknown): string | undefined => (typeof v === 'string' || typeof v === 'number' ? String(v) : undefined);
    const code = text(doc.Error?.Code);
    const message = text(doc.Error?.Message);
    return { ...(code !== undefined ? { code } : {}), ...(message !== undefined ? { message } : {}) };
  } catch {
    return {};
  }
}

/**
 * The gateway's answer to a refused request as an ObjectCacheError: its stable code (the
 * `x-objectcache-error-code` header, else the S3 code's), whether a retry may succeed (the
 * `x-objectcache-retryable` header, else the code's), and the request id (`x-amz-request-id`).
 */
function errorFromAnswer(status: number, parsed: { code?: string; message?: string }, header: (name: string) => string | undefined, cause?: unknown): ObjectCacheError {
  const s3Code = parsed.code ?? 'Unknown';
  const message = parsed.message ?? `the gateway answered ${status}`;
  const headerCode = header('x-objectcache-error-code');
  const code = headerCode !== undefined && headerCode in ERRORS ? (headerCode as ErrorCode) : codeForS3(s3Code, status);
  const retryable = header('x-objectcache-retryable');
  const requestId = header('x-amz-request-id');
  return new ObjectCacheError(code, message, {
    details: { S3Code: s3Code, Status: status, ...(requestId !== undefined ? { RequestId: requestId } : {}) },
    ...(retryable === 'true' || retryable === 'false' ? { retryable: retryable === 'true' } : {}),
    ...(cause !== undefined ? { cause } : {}),
  });
}

/** An error met while reading a stream (an ERROR frame, a broken stream), naming the request as an error answer does. */
function withRequestId(error: unknown, requestId: string | undefined): unknown {
  if (!(error instanceof ObjectCacheError) || requestId === undefined || error.details['RequestId'] !== undefined) return error;
  return new ObjectCacheError(error.code, error.message, { details: { ...error.details, RequestId: requestId }, retryable: error.retryable, cause: error.cause ?? error });
}

function codeForS3(s3Code: string, status: number): ErrorCode {
  const match = (Object.entries(ERRORS) as [ErrorCode, { status: number; s3Code: string }][]).find(([, spec]) => spec.s3Code === s3Code && spec.status === status);
  return match ? match[0] : status === 503 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_INTERNAL';
}

/** Errors that say the gateway could not be reached at all (so another one may be tried). */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_CLOSED']);

function unreachable(error: unknown): boolean {
  for (let e = error as { code?: unknown; cause?: unknown; errors?: unknown[] } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (typeof e.code === 'string' && UNREACHABLE.has(e.code)) return true;
    if (Array.isArray(e.errors) && e.errors.some(unreachable)) return true;
  }
  return false;
}

interface Endpoint {
  readonly url: URL;
  readonly s3: S3Client;
  readonly pool: Pool;
  /** The pool, signing every request. */
  readonly http: Dispatcher.ComposedDispatcher;
  /** Fetches from a plain-http: gateway: sockets whose reads land in the target (absent behind TLS). */
  readonly sockets: SocketRangeClient | undefined;
}

/** The object a header-form descriptor GET names: its last chunk key (the gateway checks it). */
function descriptorKey(input: DescriptorInput): string {
  return (input.keyPrefix ?? '') + (input.keys.at(-1) ?? '');
}

/** How long a fetch's connection may be idle: waiting for the answer, or between its bytes (undici's default). */
const FETCH_IDLE_TIMEOUT_MS = 300_000;
/** The part of an error answer's body that is read. */
const ERROR_BODY_LIMIT = 64 * 1024;
/** The longest answer to lookup or pin that is read (each is a few bytes of JSON). */
const ANSWER_BODY_LIMIT = 64 * 1024;

/**
 * Up to `limit` bytes of a body, as UTF-8; the rest is not read (the connection is closed), so
 * a broken or hostile server cannot make the client hold more. `whole` says whether that was all.
 */
async function readCapped(body: Readable, limit: number): Promise<{ text: string; whole: boolean }> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of body) {
    const b = chunk as Buffer;
    chunks.push(b.subarray(0, limit - bytes));
    bytes += b.byteLength;
    if (bytes > limit) {
      body.destroy();
      return { text: Buffer.concat(chunks).toString('utf8'), whole: false };
    }
  }
  return { text: Buffer.concat(chunks).toString('utf8'), whole: true };
}

/** The longest Retry-After a fetch waits for (the Python client's MAX_RETRY_AFTER_S). */
const MAX_RETRY_AFTER_MS = 30_000;

/** How long to wait before try `attempt` (1, 2, ...) after a refusal: its Retry-After, else doubling from 0.2 s. */
function retryDelayMs(retryAfter: string | undefined, attempt: number): number {
  const seconds = retryAfter !== undefined && /^\d+(\.\d+)?$/.test(retryAfter.trim()) ? Number(retryAfter) : 0.1 * 2 ** attempt;
  return Math.min(seconds * 1000, MAX_RETRY_AFTER_MS);
}

/**
 * The stream's body as the decoder places it: every socket read goes where `FrameDecoder.next()`
 * says, so payload bytes are written once, by the kernel, straight into the target. What the
 * decoder throws (a CRC, protocol or gateway error, or the caller's `onLayerReady`) is kept and
 * thrown from `wrote`, which fails the read.
 */
class DecoderTarget implements BodyTarget {
  failure: unknown;
  readonly #decoder: FrameDecoder;
  /** Where a read goes once the decoder has failed (it then fails the read). */
  readonly #spill = new Uint8Array(64);
  constructor(decoder: FrameDecoder) {
    this.#decoder = decoder;
  }
  next(): Uint8Array {
    // Called from the socket's read setup, where a throw would end the process: kept for wrote().
    if (this.failure === undefined) {
      try {
        return this.#decoder.next();
      } catch (error) {
        this.failure = error;
      }
    }
    return this.#spill;
  }
  wrote(n: number): void {
    if (this.failure !== undefined) throw this.failure;
    try {
      this.#decoder.wrote(n);
    } catch (error) {
      this.failure = error;
      throw error;
    }
  }
  paused(): void {} // never: the decoder always has a place
}

export class ObjectCacheClient {
  readonly bucket: string;
  readonly #endpoints: Endpoint[];
  readonly #retries: number;
  readonly #deadlineMs: number;
  /** The endpoint in use (the last one that answered). */
  #current = 0;

  constructor(options: ObjectCacheClientOptions) {
    this.bucket = options.bucket;
    this.#retries = options.retries ?? 3;
    if (!Number.isInteger(this.#retries) || this.#retries < 0) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', `retries must be a whole number of at least 0, got ${options.retries}`);
    this.#deadlineMs = deadlineOf(options.deadlineMs, DEFAULT_DEADLINE_MS);
    const region = options.region ?? 'us-east-1';
    const urls = typeof options.endpoint === 'string' ? [options.endpoint] : [...options.endpoint];
    if (urls.length === 0) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', 'the client needs at least one endpoint');
    this.#endpoints = urls.map((endpoint) => {
      const url = new URL(endpoint);
      const s3 = new S3Client({ endpoint, region, forcePathStyle: true, credentials: options.credentials, maxAttempts: 2 });
      const sockets = url.protocol === 'http:' ? new SocketRangeClient({ endpoint: url, connections: 8, timeoutMs: FETCH_IDLE_TIMEOUT_MS, ...options.credentials, region, peer: 'the gateway' }) : undefined;
      return { url, s3, sockets, ...signingPool({ endpoint: url, ...options.credentials, region, pool: { connections: 8 } }) };
    });
  }

  /** The AWS SDK client of the endpoint in use (for plain S3 calls). */
  get s3(): S3Client {
    return (this.#endpoints[this.#current] as Endpoint).s3;
  }

  /** The endpoint in use. */
  get endpoint(): string {
    return (this.#endpoints[this.#current] as Endpoint).url.origin;
  }

  /** Runs `op` on the endpoint in use; when that gateway cannot be reached, on the next ones in turn. */
  async #failover<T>(op: (endpoint: Endpoint) => Promise<T>): Promise<T> {
    let last: unknown;
    for (let tried = 0; tried < this.#endpoints.length; tried++) {
      const index = (this.#current + tried) % this.#endpoints.length;
      try {
        const result = await op(this.#endpoints[index] as Endpoint);
        this.#current = index;
        return result;
      } catch (error) {
        if (!unreachable(error)) throw error;
        last = error;
      }
    }
    throw last;
  }

  /** Creates the bucket unless it exists. */
  async ensureBucket(): Promise<void> {
    const deadline = new Deadline(this.#deadlineMs, 'CreateBucket');
    try {
      await deadline.run((signal) => this.#failover((e) => e.s3.send(new CreateBucketCommand({ Bucket: this.bucket }), { abortSignal: signal })));
    } catch (error) {
      const name = (error as S3ServiceException).name;
      if (name !== 'BucketAlreadyOwnedByYou' && name !== 'BucketAlreadyExists') throw error;
    }
  }

  /**
   * Writes chunk objects (each already in its stored layout), `concurrency` at a time. Given the
   * layout, it records each layer's CRC32C in the object's metadata, so the gateway verifies every
   * slice it serves (up to 256 layers; beyond that S3's metadata size does not allow it).
   */
  async putChunks(keys: readonly string[], objects: readonly Uint8Array[], options: PutChunksOptions = {}): Promise<void> {
    if (keys.length !== objects.length) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', 'putChunks needs one object per key');
    const concurrency = options.concurrency ?? 8;
    const geometry = options.layout;
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < keys.length) {
        const i = next++;
        const object = objects[i] as Uint8Array;
        const metadata: Record<string, string> = {};
        if (geometry && geometry.layers <= MAX_CHECKSUMMED_LAYERS) {
          if (object.byteLength !== geometry.layers * geometry.layerBytes) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', `chunk ${i} has ${object.byteLength} bytes, not layers x layerBytes`);
          metadata[LAYER_CRC_META] = encodeLayerCrcs(layerCrcs(toCanonical(object, geometry.layout, geometry.layers, geometry.layerBytes), geometry.layers, geometry.layerBytes));
        }
        const after = i > 0 && options.chain !== false ? (keys[i - 1] as string) : undefined;
        // The chunk before it in its prefix, for a budgeted bucket's chains (docs/capacity.md).
        if (after !== undefined && recordableAfter(after)) metadata[AFTER_META] = after;
        const deadline = new Deadline(this.#deadlineMs, `PutObject ${keys[i] as string}`);
        await deadline.run((signal) => this.#failover((e) => e.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: keys[i] as string, Body: object, ContentType: 'application/octet-stream', Metadata: metadata }), { abortSignal: signal })));
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, keys.length) }, lane));
  }

  async #signedPost(query: string, body: Buffer, signal?: AbortSignal): Promise<{ statusCode: number; headers: Record<string, string | string[] | undefined>; body: Readable }> {
    const path = escapeUriPath(`/${this.bucket}`);
    const response = await this.#failover((e) => e.http.request({ method: 'POST', path: `${path}?${query}=`, headers: { 'content-type': 'application/json', 'content-length': String(body.length) }, body, signal: signal ?? null }));
    return { statusCode: response.statusCode, headers: response.headers, body: response.body };
  }

  async #failure(response: { statusCode: number; headers: Record<string, string | string[] | undefined>; body: Readable }): Promise<ObjectCacheError> {
    let text = '';
    try {
      ({ text } = await readCapped(response.body, ERROR_BODY_LIMIT));
    } catch {
      // Cut off: the status and headers still say what went wrong.
    }
    return errorFromAnswer(response.statusCode, parseErrorDocument(text), (name) => {
      const value = response.headers[name];
      return typeof value === 'string' ? value : undefined;
    });
  }

  /**
   * How many leading chunks of `keys` the store holds (one round trip). With the geometry, a
   * chunk counts only when it is exactly `layers x layerBytes` bytes (what a fetch accepts).
   */
  async lookup(keys: readonly string[], keyPrefix = '', geometry?: { readonly layers: number; readonly layerBytes: number }): Promise<number> {
    const body = { keys, keyPrefix, ...(geometry ? { layers: geometry.layers, layerBytes: geometry.layerBytes } : {}) };
    return new Deadline(this.#deadlineMs, 'objectcache-lookup').run(async (signal) => {
      const response = await this.#signedPost('objectcache-lookup', Buffer.from(JSON.stringify(body)), signal);
      if (response.statusCode !== 200) throw await this.#failure(response);
      const { matched } = await this.#answer<{ matched?: unknown }>(response.body, 'objectcache-lookup');
      // A count of what was asked: a whole number from 0 to the keys named.
      if (typeof matched !== 'number' || !Number.isInteger(matched) || matched < 0 || matched > keys.length) throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to objectcache-lookup has no matched count between 0 and ${keys.length}: ${JSON.stringify(matched)}`);
      return matched;
    });
  }

  /**
   * Retains `keys` of a budgeted bucket until `until` (eviction never takes them before then), or
   * removes their pins with `null`. Needs objectcache:PinObject on each key. Resolves to the time
   * the pins hold until, or null.
   */
  async pin(keys: readonly string[], until: Date | null): Promise<Date | null> {
    const body = { keys, until: until === null ? null : until.toISOString() };
    return new Deadline(this.#deadlineMs, 'objectcache-pin').run(async (signal) => {
      const response = await this.#signedPost('objectcache-pin', Buffer.from(JSON.stringify(body)), signal);
      if (response.statusCode !== 200) throw await this.#failure(response);
      const answer = await this.#answer<{ until?: unknown }>(response.body, 'objectcache-pin');
      if (answer.until !== null && (typeof answer.until !== 'string' || Number.isNaN(Date.parse(answer.until)))) throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to objectcache-pin has no time: ${JSON.stringify(answer.until)}`);
      return answer.until === null ? null : new Date(answer.until);
    });
  }

  /** A JSON answer of at most ANSWER_BODY_LIMIT bytes; anything else is the gateway's protocol error. */
  async #answer<T>(body: Readable, what: string): Promise<T> {
    const { text, whole } = await readCapped(body, ANSWER_BODY_LIMIT);
    if (!whole) throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to ${what} is longer than ${ANSWER_BODY_LIMIT} bytes`);
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to ${what} is not JSON: ${JSON.stringify(text.slice(0, 200))}`);
    }
    if (typeof answer !== 'object' || answer === null || Array.isArray(answer)) throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to ${what} is not a JSON object: ${JSON.stringify(text.slice(0, 200))}`);
    return answer as T;
  }

  /** The response body of a layerwise GET, the gateway's id of the request, and its segment header. */
  async #open(input: DescriptorInput, transport: 'get' | 'post', signal?: AbortSignal): Promise<{ body: Readable; requestId: string | undefined; segmentChunks: number }> {
    if (transport === 'post') {
      const response = await this.#signedPost('objectcache', Buffer.from(JSON.stringify(input)), signal);
      if (response.statusCode !== 200) throw await this.#failure(response);
      const requestId = response.headers['x-amz-request-id'];
      return { body: response.body, requestId: typeof requestId === 'string' ? requestId : undefined, segmentChunks: segmentChunksOf(response.headers[SEGMENT_CHUNKS_HEADER]) };
    }
    const key = descriptorKey(input);
    try {
      // The SDK's output has no field for the gateway's own headers: taken from the raw response.
      let segmentChunks = 0;
      const command = withDescriptor(new GetObjectCommand({ Bucket: this.bucket, Key: key }), input);
      command.middlewareStack.add(
        (next) => async (args) => {
          const out = await next(args);
          segmentChunks = segmentChunksOf((out.response as { headers?: Record<string, string> } | undefined)?.headers?.[SEGMENT_CHUNKS_HEADER]);
          return out;
        },
        { step: 'deserialize', name: 'objectcacheSegmentChunks' },
      );
      const output = await this.#failover((e) => e.s3.send(command, signal ? { abortSignal: signal } : {}));
      return { body: output.Body as Readable, requestId: output.$metadata.requestId, segmentChunks };
    } catch (error) {
      if (error instanceof S3ServiceException) {
        const headers = (error.$response?.headers ?? {}) as Record<string, string | undefined>;
        const status = error.$metadata.httpStatusCode ?? 0;
        throw errorFromAnswer(status, { code: error.name, message: error.message }, (name) => headers[name] ?? (name === 'x-amz-request-id' ? error.$metadata.requestId : undefined), error);
      }
      throw error;
    }
  }

  /** Fetches the prefix's KV: every layer lands in the target, each announced when ready. */
  async fetch(input: DescriptorInput, options: FetchOptions = {}): Promise<FetchResult> {
    const descriptor: Descriptor = parseDescriptor(input, { maxKeys: Number.MAX_SAFE_INTEGER, maxLayers: Number.MAX_SAFE_INTEGER, maxLayerBytes: Number.MAX_SAFE_INTEGER, maxTotalBytes: Number.MAX_SAFE_INTEGER });
    // Encoded chunks are decoded by the Python client (objectcache.codecs); this one reads raw streams.
    if (descriptor.codecs !== undefined) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', 'the TypeScript client reads raw chunks only: drop "codecs", or fetch encoded chunks with the Python client (docs/compression.md)');
    const layers = descriptor.layerEnd - descriptor.layerStart;
    const layerStride = options.layerStride ?? descriptor.target?.layerStride ?? descriptor.layerPayloadBytes;
    const target = options.target ?? new Uint8Array((layers - 1) * layerStride + descriptor.layerPayloadBytes);
    const transport = options.transport === 'get' || options.transport === 'post' ? options.transport : encodeDescriptorHeader(input).length > MAX_HEADER_DESCRIPTOR_BYTES ? 'post' : 'get';
    const started = performance.now();
    const timeline: { layer: number; ms: number }[] = [];
    const decoder = new FrameDecoder({
      layerStart: descriptor.layerStart,
      layerEnd: descriptor.layerEnd,
      chunks: descriptor.chunks,
      layerBytes: descriptor.layerBytes,
      target,
      layerStride,
      onLayerReady: (layer, view) => {
        timeline.push({ layer, ms: performance.now() - started });
        options.onLayerReady?.(layer, view);
      },
    });
    const deadline = new Deadline(deadlineOf(options.deadlineMs, this.#deadlineMs), 'the descriptor GET', options.signal);
    return deadline.run(async (signal) => {
      if (this.#endpoints.every((e) => e.sockets !== undefined)) {
        const { summary, segmentChunks } = await this.#receive(input, transport, decoder, signal);
        return { target, layerStride, summary, timeline, transport, segmentChunks };
      }
      const { body, requestId, segmentChunks } = await this.#open(input, transport, signal);
      try {
        for await (const chunk of body) decoder.push(chunk as Uint8Array);
        return { target, layerStride, summary: decoder.finish(), timeline, transport, segmentChunks };
      } catch (error) {
        body.destroy();
        throw withRequestId(error, requestId);
      }
    });
  }

  /**
   * A fetch from plain-http: gateways: the stream is read with the kernel writing each payload
   * byte straight into its place in the target (as the gateway reads the store,
   * storage-worker/socket-range-get.ts), where a stream of network chunks costs a fresh buffer and
   * a copy per socket read (measured in docs/clients.md). A gateway that cannot be reached before
   * it answers is tried once more on a new connection (an idle one may have been closing), then
   * the next one; a retryable refusal is tried again after its Retry-After (`retries`); once the
   * answer has begun, a broken connection ends the fetch.
   */
  async #receive(input: DescriptorInput, transport: 'get' | 'post', decoder: FrameDecoder, signal: AbortSignal | undefined): Promise<{ summary: EndSummary; segmentChunks: number }> {
    const request: SocketRequest =
      transport === 'post'
        ? { method: 'POST', path: escapeUriPath(`/${this.bucket}`), query: [['objectcache', '']], headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify(input)) }
        : { method: 'GET', path: escapeUriPath(`/${this.bucket}/${descriptorKey(input)}`), headers: { [DESCRIPTOR_HEADER]: encodeDescriptorHeader(input) } };
    const live = signal ?? new AbortController().signal;
    for (let attempt = 1; ; attempt++) {
      const outcome = await this.#receiveOnce(request, decoder, live);
      if ('summary' in outcome) return outcome;
      if (!outcome.refused.retryable || attempt > this.#retries) throw outcome.refused;
      try {
        await sleep(retryDelayMs(outcome.retryAfter, attempt), undefined, { signal: live });
      } catch {
        throw live.reason;
      }
    }
  }

  /** One try of a fetch, on the endpoint in use and then the others: the END summary, or the gateway's refusal. */
  async #receiveOnce(request: SocketRequest, decoder: FrameDecoder, live: AbortSignal): Promise<{ summary: EndSummary; segmentChunks: number } | { refused: ObjectCacheError; retryAfter: string | undefined }> {
    let last: unknown;
    for (let tried = 0; tried < this.#endpoints.length; tried++) {
      const index = (this.#current + tried) % this.#endpoints.length;
      const endpoint = this.#endpoints[index] as Endpoint;
      for (const fresh of [false, true]) {
        const target = new DecoderTarget(decoder);
        let answered: Readonly<Record<string, string>> | undefined;
        let answeredStatus = 0;
        const sink: RangeAnswerSink = {
          onHead: (status, headers) => {
            answered = headers;
            answeredStatus = status;
            return status === 200 ? { stream: target } : { collect: ERROR_BODY_LIMIT };
          },
        };
        let answer: RangeAnswer;
        try {
          answer = await (endpoint.sockets as SocketRangeClient).send(request, sink, live, fresh);
        } catch (error) {
          if (live.aborted) throw live.reason;
          const requestId = answered?.['x-amz-request-id'];
          if (target.failure !== undefined) throw withRequestId(target.failure, requestId);
          // A refusal whose body was cut off: its status and headers still say what went wrong.
          if (answered !== undefined && answeredStatus !== 200) {
            const headers = answered;
            return { refused: errorFromAnswer(answeredStatus, {}, (name) => headers[name], error), retryAfter: headers['retry-after'] };
          }
          if (answered !== undefined) throw withRequestId(new ObjectCacheError('OC_ERR_CLIENT_INCOMPLETE', `the stream broke after ${decoder.layersReady} layers: ${(error as Error).message}`, { cause: error }), requestId);
          // Not reached (refused, reset or closed before any answer): again, then the next gateway.
          if (!(error instanceof ObjectCacheError) || error.code !== 'OC_ERR_BACKEND_UNAVAILABLE') throw error;
          last = error;
          continue;
        }
        this.#current = index;
        if (answer.status !== 200) return { refused: errorFromAnswer(answer.status, parseErrorDocument(answer.text ?? ''), (name) => answer.headers[name]), retryAfter: answer.headers['retry-after'] };
        try {
          return { summary: decoder.finish(), segmentChunks: segmentChunksOf(answer.headers[SEGMENT_CHUNKS_HEADER]) };
        } catch (error) {
          throw withRequestId(error, answer.headers['x-amz-request-id']);
        }
      }
    }
    throw new ObjectCacheError('OC_ERR_BACKEND_UNAVAILABLE', `cannot reach the gateway at ${this.#endpoints.map((e) => e.url.origin).join(', ')}: ${(last as Error).message}`, { cause: last, retryable: true });
  }

  /** The same fetch as an async iterator of ready layers; leaving the loop early cancels it. */
  async *layers(input: DescriptorInput, options: Omit<FetchOptions, 'onLayerReady'> = {}): AsyncGenerator<{ layer: number; view: Uint8Array }> {
    const controller = new AbortController();
    const outer = options.signal;
    const forward = (): void => controller.abort(outer?.reason);
    if (outer?.aborted) forward();
    outer?.addEventListener('abort', forward, { once: true });
    const ready: { layer: number; view: Uint8Array }[] = [];
    let notify: (() => void) | undefined;
    let finished = false;
    let failure: unknown;
    const run = this.fetch(input, {
      ...options,
      signal: controller.signal,
      onLayerReady: (layer, view) => {
        ready.push({ layer, view });
        notify?.();
      },
    }).then(
      () => {
        finished = true;
        notify?.();
      },
      (error: unknown) => {
        failure = error;
        finished = true;
        notify?.();
      },
    );
    try {
      while (!finished || ready.length > 0) {
        const next = ready.shift();
        if (next) {
          yield next;
          continue;
        }
        await new Promise<void>((resolve) => {
          notify = resolve;
        });
        notify = undefined;
      }
      await run;
      if (failure !== undefined) throw failure;
    } finally {
      // The caller broke out early (or the fetch ended): stop the download either way.
      if (!finished) controller.abort();
      outer?.removeEventListener('abort', forward);
      await run;
    }
  }

  async close(): Promise<void> {
    for (const e of this.#endpoints) e.s3.destroy();
    await Promise.all(this.#endpoints.flatMap((e) => [e.pool.close(), e.sockets?.close()]));
  }
}

/** A deadline in ms, checked: `given` when set, else `fallback`. */
function deadlineOf(given: number | undefined, fallback: number): number {
  if (given === undefined) return fallback;
  // Node's timers take whole milliseconds up to 2^31 - 1 (24.8 days); past that one fires at once.
  if (!Number.isSafeInteger(given) || given <= 0 || given > 2 ** 31 - 1) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', `deadlineMs must be a whole number of milliseconds from 1 to 2147483647, got ${given}`);
  return given;
}
