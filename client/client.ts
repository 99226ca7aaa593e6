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
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { escapeUriPath } from '@smithy/util-uri-escape';
import type { Dispatcher, Pool } from 'undici';
import { DESCRIPTOR_HEADER, encodeDescriptorHeader, SEGMENT_CHUNKS_HEADER, MAX_HEADER_DESCRIPTOR_BYTES, parseDescriptor, type Descriptor } from '../schemas/descriptor.js';

export { DESCRIPTOR_HEADER };
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { DEFAULT_RETRIES } from '../schemas/retry-policy.js';
import type { EndSummary } from '../schemas/frames.js';
import { signingPool } from '../sigv4/signing-dispatcher.js';
import { encodeLayerCrcs, LAYER_CRC_META, layerCrcs, MAX_CHECKSUMMED_LAYERS } from '../schemas/integrity.js';
import { AFTER_META, MAX_AFTER_KEY, recordableAfter } from '../schemas/chain.js';
import { encodeTokens, MAX_USER_METADATA_BYTES, MODEL_META, MODEL_NAME, TOKENS_META, userMetadataBytes } from '../schemas/kv-tokens.js';
import type { Layout } from '../schemas/layouts.js';
import { SocketRangeClient } from '../http-range/socket-range-get.js';
import { errorFromResponse, readCapped, toObjectCacheError, unreachable, withRequestId } from './answers.js';
import { Deadline, deadlineOf, DEFAULT_DEADLINE_MS } from './deadline.js';
import { FrameDecoder } from './frame-decoder.js';
import { retrying } from './retry.js';
import { descriptorKey, receive, segmentChunksOf, socketRequest } from './socket-fetch.js';
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
   * How often a call is tried again when the gateway refuses it with a retryable answer (a 503
   * SlowDown at its limits), before any byte of the answer is used, as the one retry policy of
   * schemas/retry-policy.ts says (after the answer's Retry-After, capped, else a doubling
   * backoff). Default DEFAULT_RETRIES (3), as the Python client. It is the only retry: the AWS
   * SDK's own are off.
   */
  readonly retries?: number;
  /**
   * The longest one call may take in all (connecting, waiting for the answer and for Retry-After,
   * reading it), in ms: past it the call is abandoned, its connection closed, and it fails with
   * OC_ERR_CLIENT_TIMEOUT, however the gateway trickles its bytes. Default 300,000 (5 minutes).
   */
  readonly deadlineMs?: number;
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
  /** The chunk before the first of `keys` (when they continue a prefix stored before), recorded with the first. */
  readonly after?: string;
  /**
   * Each chunk's token ids, one list per key: recorded with the chunk (`objectcache-tokens`,
   * schemas/kv-tokens.ts), so the gateway's KV events tell routers which tokens it holds
   * (docs/kv-events.md). A list too long for S3's metadata is not recorded.
   */
  readonly tokens?: readonly ArrayLike<number>[];
  /** The model the chunks belong to, recorded with each (`objectcache-model`: a KV events topic may name it). */
  readonly model?: string;
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

/**
 * Whether `error` is a gateway's refusal of the descriptor's sliceChecks as an unknown field (a
 * gateway older than it: schemas/descriptor.ts names each problem, joined by '; '), and no other.
 */
function refusesSliceChecks(error: unknown): boolean {
  if (!(error instanceof ObjectCacheError) || error.code !== 'OC_ERR_DESCRIPTOR_INVALID') return false;
  const at = error.message.indexOf('Invalid descriptor: ');
  return (
    at >= 0 &&
    error.message
      .slice(at + 'Invalid descriptor: '.length)
      .split('; ')
      .includes('sliceChecks is not a descriptor field')
  );
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

interface Endpoint {
  readonly url: URL;
  readonly s3: S3Client;
  readonly pool: Pool;
  /** The pool, signing every request. */
  readonly http: Dispatcher.ComposedDispatcher;
  /** Fetches from a plain-http: gateway: sockets whose reads land in the target (absent behind TLS). */
  readonly sockets: SocketRangeClient | undefined;
}

/** How long a fetch's connection may be idle: waiting for the answer, or between its bytes (undici's default). */
const FETCH_IDLE_TIMEOUT_MS = 300_000;
/** The longest answer to lookup or pin that is read (each is a few bytes of JSON). */
const ANSWER_BODY_LIMIT = 64 * 1024;

export class ObjectCacheClient {
  readonly bucket: string;
  readonly #endpoints: Endpoint[];
  readonly #retries: number;
  readonly #deadlineMs: number;
  /** The endpoint in use (the last one that answered). */
  #current = 0;
  /** Whether a gateway refused the descriptor's sliceChecks (one older than the field): not sent again. */
  #sliceChecksRefused = false;

  constructor(options: ObjectCacheClientOptions) {
    this.bucket = options.bucket;
    this.#retries = options.retries ?? DEFAULT_RETRIES;
    if (!Number.isInteger(this.#retries) || this.#retries < 0)
      throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', `retries must be a whole number of at least 0, got ${options.retries}`);
    this.#deadlineMs = deadlineOf(options.deadlineMs, DEFAULT_DEADLINE_MS);
    const region = options.region ?? 'us-east-1';
    const urls = typeof options.endpoint === 'string' ? [options.endpoint] : [...options.endpoint];
    if (urls.length === 0) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', 'the client needs at least one endpoint');
    this.#endpoints = urls.map((endpoint) => {
      const url = new URL(endpoint);
      // maxAttempts 1: the SDK's own retries are off, the client's one policy decides (client/retry.ts).
      const s3 = new S3Client({ endpoint, region, forcePathStyle: true, credentials: options.credentials, maxAttempts: 1 });
      const sockets =
        url.protocol === 'http:'
          ? new SocketRangeClient({ endpoint: url, connections: 8, timeoutMs: FETCH_IDLE_TIMEOUT_MS, ...options.credentials, region, peer: 'the gateway' })
          : undefined;
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

  /**
   * Runs `op` on the endpoint in use; when that gateway cannot be reached, on the next ones in
   * turn; when none can, fails with OC_ERR_BACKEND_UNAVAILABLE (not a refusal: never retried).
   */
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
    throw this.#unreachable(last);
  }

  #unreachable(last: unknown): ObjectCacheError {
    return new ObjectCacheError('OC_ERR_BACKEND_UNAVAILABLE', `cannot reach the gateway at ${this.#endpoints.map((e) => e.url.origin).join(', ')}: ${(last as Error).message}`, {
      cause: last,
      retryable: true,
    });
  }

  /**
   * One call through the AWS SDK on the endpoints in turn: what it fails with as an
   * ObjectCacheError (an S3ServiceException by its code and status, the original as `cause`).
   */
  async #sdkSend<T>(what: string, send: (s3: S3Client) => Promise<T>): Promise<T> {
    try {
      return await this.#failover((e) => send(e.s3));
    } catch (error) {
      throw toObjectCacheError(error, what);
    }
  }

  /** One call through the AWS SDK under the retry policy and the call's deadline. */
  #sdk<T>(what: string, send: (s3: S3Client, signal: AbortSignal) => Promise<T>): Promise<T> {
    return retrying(this.#retries, new Deadline(this.#deadlineMs, what), (signal) => this.#sdkSend(what, (s3) => send(s3, signal)));
  }

  /** Creates the bucket unless it exists. */
  async ensureBucket(): Promise<void> {
    try {
      await this.#sdk('CreateBucket', (s3, abortSignal) => s3.send(new CreateBucketCommand({ Bucket: this.bucket }), { abortSignal }));
    } catch (error) {
      const s3Code = (error as ObjectCacheError).details['S3Code'];
      if (s3Code !== 'BucketAlreadyOwnedByYou' && s3Code !== 'BucketAlreadyExists') throw error;
    }
  }

  /**
   * Writes chunk objects (each already in its stored layout), `concurrency` at a time. Given the
   * layout, it records each layer's CRC32C in the object's metadata, so the gateway verifies every
   * slice it serves (up to 256 layers; beyond that S3's metadata size does not allow it).
   */
  async putChunks(keys: readonly string[], objects: readonly Uint8Array[], options: PutChunksOptions = {}): Promise<void> {
    if (keys.length !== objects.length) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', 'putChunks needs one object per key');
    if (options.tokens && options.tokens.length !== keys.length) throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', 'putChunks needs one token list per key');
    if (options.model !== undefined && !MODEL_NAME.test(options.model))
      throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', 'putChunks: model must be 1 to 256 printable ASCII characters, without spaces or @');
    if (options.after !== undefined && options.chain !== false && !recordableAfter(options.after))
      throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', `putChunks: after must be a key of at most ${MAX_AFTER_KEY} printable ASCII characters`);
    const concurrency = options.concurrency ?? 8;
    const geometry = options.layout;
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < keys.length) {
        const i = next++;
        const object = objects[i] as Uint8Array;
        const metadata: Record<string, string> = {};
        if (geometry && geometry.layers <= MAX_CHECKSUMMED_LAYERS) {
          if (object.byteLength !== geometry.layers * geometry.layerBytes)
            throw new ObjectCacheError('OC_ERR_CLIENT_USAGE', `chunk ${i} has ${object.byteLength} bytes, not layers x layerBytes`);
          metadata[LAYER_CRC_META] = encodeLayerCrcs(layerCrcs(toCanonical(object, geometry.layout, geometry.layers, geometry.layerBytes), geometry.layers, geometry.layerBytes));
        }
        const after = options.chain === false ? undefined : i > 0 ? (keys[i - 1] as string) : options.after;
        // The chunk before it in its prefix, for a budgeted bucket's chains (docs/capacity.md).
        // A key of the batch that cannot be recorded (long, or not ASCII) starts no chain; `after` was checked above.
        if (after !== undefined && recordableAfter(after)) metadata[AFTER_META] = after;
        if (options.model !== undefined) metadata[MODEL_META] = options.model;
        const tokens = options.tokens?.[i];
        const encoded = tokens === undefined ? undefined : encodeTokens(tokens);
        // Tokens serve KV events only: left out where they would take the metadata past S3's 2 KB.
        if (encoded !== undefined && userMetadataBytes({ ...metadata, [TOKENS_META]: encoded }) <= MAX_USER_METADATA_BYTES) metadata[TOKENS_META] = encoded;
        const command = new PutObjectCommand({ Bucket: this.bucket, Key: keys[i], Body: object, ContentType: 'application/octet-stream', Metadata: metadata });
        await this.#sdk(`PutObject ${keys[i] as string}`, (s3, abortSignal) => s3.send(command, { abortSignal }));
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, keys.length) }, lane));
  }

  /**
   * A signed POST of `?{query}` on the endpoints in turn: its response when the gateway answered
   * 200, else its refusal (or the failure to reach it) as an ObjectCacheError.
   */
  async #signedPost(query: string, body: Buffer, signal: AbortSignal): Promise<{ headers: Record<string, string | string[] | undefined>; body: Readable }> {
    const path = escapeUriPath(`/${this.bucket}`);
    let response: Dispatcher.ResponseData;
    try {
      response = await this.#failover((e) =>
        e.http.request({ method: 'POST', path: `${path}?${query}=`, headers: { 'content-type': 'application/json', 'content-length': String(body.length) }, body, signal }),
      );
    } catch (error) {
      throw signal.aborted ? error : toObjectCacheError(error, query);
    }
    if (response.statusCode !== 200) throw await errorFromResponse(response);
    return { headers: response.headers, body: response.body };
  }

  /** A POST of JSON to `?{query}` and its JSON answer, under the retry policy and the call's deadline. */
  #postJson<T>(query: string, document: unknown): Promise<T> {
    const body = Buffer.from(JSON.stringify(document));
    return retrying(this.#retries, new Deadline(this.#deadlineMs, query), async (signal) => this.#answer<T>((await this.#signedPost(query, body, signal)).body, query));
  }

  /**
   * How many leading chunks of `keys` the store holds (one round trip). With the geometry, a
   * chunk counts only when it is exactly `layers x layerBytes` bytes (what a fetch accepts).
   */
  async lookup(keys: readonly string[], keyPrefix = '', geometry?: { readonly layers: number; readonly layerBytes: number }): Promise<number> {
    const body = { keys, keyPrefix, ...(geometry ? { layers: geometry.layers, layerBytes: geometry.layerBytes } : {}) };
    const { matched } = await this.#postJson<{ matched?: unknown }>('objectcache-lookup', body);
    // A count of what was asked: a whole number from 0 to the keys named.
    if (typeof matched !== 'number' || !Number.isInteger(matched) || matched < 0 || matched > keys.length)
      throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to objectcache-lookup has no matched count between 0 and ${keys.length}: ${JSON.stringify(matched)}`);
    return matched;
  }

  /**
   * Retains `keys` of a budgeted bucket until `until` (eviction never takes them before then), or
   * removes their pins with `null`. Needs objectcache:PinObject on each key. Resolves to the time
   * the pins hold until, or null.
   */
  async pin(keys: readonly string[], until: Date | null): Promise<Date | null> {
    const body = { keys, until: until === null ? null : until.toISOString() };
    const answer = await this.#postJson<{ until?: unknown }>('objectcache-pin', body);
    if (answer.until !== null && (typeof answer.until !== 'string' || Number.isNaN(Date.parse(answer.until))))
      throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to objectcache-pin has no time: ${JSON.stringify(answer.until)}`);
    return answer.until === null ? null : new Date(answer.until);
  }

  /** A JSON answer of at most ANSWER_BODY_LIMIT bytes; anything else is the gateway's protocol error. */
  async #answer<T>(body: Readable, what: string): Promise<T> {
    let read: { text: string; whole: boolean };
    try {
      read = await readCapped(body, ANSWER_BODY_LIMIT);
    } catch (error) {
      throw new ObjectCacheError('OC_ERR_CLIENT_INCOMPLETE', `the answer to ${what} broke off: ${(error as Error).message}`, { cause: error });
    }
    const { text, whole } = read;
    if (!whole) throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to ${what} is longer than ${ANSWER_BODY_LIMIT} bytes`);
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to ${what} is not JSON: ${JSON.stringify(text.slice(0, 200))}`);
    }
    if (typeof answer !== 'object' || answer === null || Array.isArray(answer))
      throw new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', `the answer to ${what} is not a JSON object: ${JSON.stringify(text.slice(0, 200))}`);
    return answer as T;
  }

  /**
   * One try at opening a layerwise GET through undici or the AWS SDK (behind TLS): the response
   * body, the gateway's id of the request, and its segment header; or the refusal.
   */
  async #open(input: DescriptorInput, transport: 'get' | 'post', signal: AbortSignal): Promise<{ body: Readable; requestId: string | undefined; segmentChunks: number }> {
    if (transport === 'post') {
      const response = await this.#signedPost('objectcache', Buffer.from(JSON.stringify(input)), signal);
      const requestId = response.headers['x-amz-request-id'];
      return { body: response.body, requestId: typeof requestId === 'string' ? requestId : undefined, segmentChunks: segmentChunksOf(response.headers[SEGMENT_CHUNKS_HEADER]) };
    }
    // The SDK's output has no field for the gateway's own headers: taken from the raw response.
    let segmentChunks = 0;
    const command = withDescriptor(new GetObjectCommand({ Bucket: this.bucket, Key: descriptorKey(input) }), input);
    command.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        segmentChunks = segmentChunksOf((out.response as { headers?: Record<string, string> } | undefined)?.headers?.[SEGMENT_CHUNKS_HEADER]);
        return out;
      },
      { step: 'deserialize', name: 'objectcacheSegmentChunks' },
    );
    const output = await this.#sdkSend('the descriptor GET', (s3) => s3.send(command, { abortSignal: signal }));
    return { body: output.Body as Readable, requestId: output.$metadata.requestId, segmentChunks };
  }

  /** Fetches the prefix's KV: every layer lands in the target, each announced when ready. */
  async fetch(input: DescriptorInput, options: FetchOptions = {}): Promise<FetchResult> {
    // This client checks every frame's CRC32C (FrameDecoder): the gateway may leave the slice
    // checks to it (schemas/wire-format.md section 2), unless the caller's descriptor says otherwise.
    if (input.sliceChecks !== undefined || this.#sliceChecksRefused) return this.#fetch(input, options);
    const deadlineMs = deadlineOf(options.deadlineMs, this.#deadlineMs);
    const started = performance.now();
    try {
      return await this.#fetch({ ...input, sliceChecks: 'client' }, options);
    } catch (error) {
      // A gateway older than the field refuses it before the stream begins: the same fetch
      // without it, within what is left of the deadline; once that succeeds, the field is not sent again.
      if (!refusesSliceChecks(error)) throw error;
      const left = Math.max(1, Math.floor(deadlineMs - (performance.now() - started)));
      const result = await this.#fetch(input, { ...options, deadlineMs: left });
      this.#sliceChecksRefused = true;
      return result;
    }
  }

  async #fetch(input: DescriptorInput, options: FetchOptions): Promise<FetchResult> {
    const descriptor: Descriptor = parseDescriptor(input, {
      maxKeys: Number.MAX_SAFE_INTEGER,
      maxLayers: Number.MAX_SAFE_INTEGER,
      maxLayerBytes: Number.MAX_SAFE_INTEGER,
      maxTotalBytes: Number.MAX_SAFE_INTEGER,
    });
    // Encoded chunks are decoded by the Python client (objectcache.codecs); this one reads raw streams.
    if (descriptor.codecs !== undefined)
      throw new ObjectCacheError(
        'OC_ERR_CLIENT_USAGE',
        'the TypeScript client reads raw chunks only: drop "codecs", or fetch encoded chunks with the Python client (docs/compression.md)',
      );
    const layers = descriptor.layerEnd - descriptor.layerStart;
    const layerStride = options.layerStride ?? descriptor.target?.layerStride ?? descriptor.layerPayloadBytes;
    const target = options.target ?? new Uint8Array((layers - 1) * layerStride + descriptor.layerPayloadBytes);
    const transport =
      options.transport === 'get' || options.transport === 'post' ? options.transport : encodeDescriptorHeader(input).length > MAX_HEADER_DESCRIPTOR_BYTES ? 'post' : 'get';
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
    if (this.#endpoints.every((e) => e.sockets !== undefined)) {
      const request = socketRequest(this.bucket, input, transport);
      const sockets = this.#endpoints.map((e) => e.sockets as SocketRangeClient);
      const tries = { first: () => this.#current, answered: (index: number) => (this.#current = index), unreachable: (last: unknown) => this.#unreachable(last) };
      const { summary, segmentChunks } = await retrying(this.#retries, deadline, (signal) => receive(sockets, tries, request, decoder, signal));
      return { target, layerStride, summary, timeline, transport, segmentChunks };
    }
    const { body, requestId, segmentChunks } = await retrying(this.#retries, deadline, (signal) => this.#open(input, transport, signal));
    return deadline.run(async (signal) => {
      // Whether a failure is the decoder's (or the caller's onLayerReady, passed on as it is), not the connection's.
      let decoding = false;
      try {
        for await (const chunk of body) {
          decoding = true;
          decoder.push(chunk as Uint8Array);
          decoding = false;
        }
        decoding = true;
        return { target, layerStride, summary: decoder.finish(), timeline, transport, segmentChunks };
      } catch (error) {
        body.destroy();
        if (decoding || signal.aborted) throw withRequestId(error, requestId);
        // A connection that broke once the answer had begun: the stream is incomplete.
        throw withRequestId(
          // Retryable (schemas/errors.ts), and not tried again here: layers were announced.
          new ObjectCacheError('OC_ERR_CLIENT_INCOMPLETE', `the stream broke after ${decoder.layersReady} layers: ${(error as Error).message}`, { cause: error }),
          requestId,
        );
      }
    });
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
      if (failure !== undefined) throw failure as unknown; // whatever the download threw, as it was thrown
    } finally {
      // The caller broke out early (or the fetch ended): stop the download either way.
      if (!finished) controller.abort();
      outer?.removeEventListener('abort', forward);
      await run;
    }
  }

  async close(): Promise<void> {
    for (const e of this.#endpoints) e.s3.destroy();
    await Promise.all(this.#endpoints.flatMap((e) => [e.pool.close(), ...(e.sockets ? [e.sockets.close()] : [])]));
  }
}
