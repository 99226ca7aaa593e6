/**
 * The `s3` backend: requests to MinIO (or any S3) over a keep-alive undici pool, signed with the
 * gateway's own backend credentials by the project's one SigV4 interceptor
 * (sigv4/signing-dispatcher.ts). Upstream failures are
 * mapped in one place (as fastify-reply-from does): unreachable is 503, too slow is 503 with
 * OC_ERR_BACKEND_TIMEOUT, always with `{ cause }`.
 */
import type { Readable } from 'node:stream';
import { escapeUri } from '@smithy/util-uri-escape';
import { Pool, errors as undiciErrors, type Dispatcher } from 'undici';
import { ObjectCacheError } from '../../schemas/errors.js';
import { EMPTY_PAYLOAD_SHA256 } from '../../sigv4/signer.js';
import { sigv4 } from '../../sigv4/signing-dispatcher.js';
import type { BackendStats } from '../common/observers.js';
import type { S3BackendOptions } from '../common/config.js';

export type { S3BackendOptions };

export { EMPTY_PAYLOAD_SHA256 };

/** Why `signal` aborted: its reason, or an Error saying so. */
function abortReason(signal: AbortSignal | undefined): unknown {
  return (signal?.reason as unknown) ?? new Error('aborted');
}

export interface BackendRequest {
  readonly method: string;
  /** Already S3-encoded path, `/bucket/key`. */
  readonly path: string;
  readonly query?: readonly (readonly [string, string])[];
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: Readable | Buffer;
  /** Hex SHA-256 of the body, or UNSIGNED-PAYLOAD; by default a buffer body is hashed, a stream is UNSIGNED-PAYLOAD, no body is the empty hash. */
  readonly payloadHash?: string;
  readonly signal?: AbortSignal;
}

function queryString(pairs: readonly (readonly [string, string])[]): string {
  return pairs.map(([k, v]) => `${escapeUri(k)}=${escapeUri(v)}`).join('&');
}

/** The request's headers, with its payload hash when the caller gave one (else the signer decides). */
function withPayloadHash(request: Omit<BackendRequest, 'signal'>): Record<string, string> {
  return request.payloadHash === undefined ? { ...request.headers } : { ...request.headers, 'x-amz-content-sha256': request.payloadHash };
}

/**
 * Retries of idempotent requests to the store (range reads of layerwise GETs, passthrough GETs
 * and HEADs): a request that failed with a retryable error (a 5xx answer, or a refused, broken
 * or timed-out connection: a server of a distributed store going away, a restart) before anything
 * reached the client is sent again, up to `attempts` times in all, after a pause of full jitter
 * under an exponential ceiling, and never past the backend timeout counted from the first attempt.
 * Requests with a body are never repeated.
 */
export const BACKEND_RETRY = { attempts: 3, baseDelayMs: 50 } as const;

/** The pause after failed attempt `attempt` (1-based). */
export function retryPauseMs(attempt: number): number {
  return Math.random() * BACKEND_RETRY.baseDelayMs * 2 ** (attempt - 1);
}

/** The one place where transport failures become gateway errors. */
export function mapBackendError(error: unknown, signal?: AbortSignal): unknown {
  if (signal?.aborted) return error; // The client went away; nobody is listening.
  if (error instanceof ObjectCacheError) return error;
  if (error instanceof undiciErrors.HeadersTimeoutError || error instanceof undiciErrors.BodyTimeoutError || error instanceof undiciErrors.ConnectTimeoutError) {
    return new ObjectCacheError('OC_ERR_BACKEND_TIMEOUT', 'The object store did not answer in time', { cause: error, retryable: true });
  }
  return new ObjectCacheError('OC_ERR_BACKEND_UNAVAILABLE', 'The object store behind the gateway is unavailable', { cause: error, retryable: true });
}

/** The keep-alive pool every undici client of the store uses: `connections`, and the backend timeout on connect, headers and between body bytes. */
export function storePoolOptions(connections: number, timeoutMs: number): Pool.Options {
  return { connections, connect: { timeout: timeoutMs }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, keepAliveTimeout: 30_000 };
}

/**
 * The pool's connections, taken before a request goes to undici. undici queues what finds no free
 * connection without a deadline, and a queued request it is told to abort leaves only once it
 * reaches a socket; here a request waits at most the backend timeout for its connection (then
 * OC_ERR_BACKEND_TIMEOUT, 503, retryable), and leaves at once when its client does.
 */
class Connections {
  #free: number;
  readonly #waiting = new Set<{ grant: () => void }>();

  constructor(
    count: number,
    readonly timeoutMs: number,
  ) {
    this.#free = count;
  }

  get waiting(): number {
    return this.#waiting.size;
  }

  /** Resolves with the connection's release (call it once) when one is free. */
  take(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve(this.#release());
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        grant: () => {
          leave();
          resolve(this.#release());
        },
      };
      const onAbort = (): void => {
        leave();
        reject(abortReason(signal));
      };
      const timer = setTimeout(() => {
        leave();
        reject(
          new ObjectCacheError('OC_ERR_BACKEND_TIMEOUT', `Every connection to the object store stayed busy for the backend timeout (${this.timeoutMs} ms); retry shortly`, {
            retryable: true,
          }),
        );
      }, this.timeoutMs);
      const leave = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#waiting.delete(waiter);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.add(waiter);
    });
  }

  #release(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiting.values().next();
      if (next.done) this.#free++;
      else next.value.grant(); // the connection passes straight on
    };
  }
}

export class S3Backend {
  readonly endpoint: URL;
  readonly #pool: Pool;
  readonly #connections: Connections;
  readonly #http: Dispatcher.ComposedDispatcher;
  readonly #timeoutMs: number;
  #requests = 0;
  #inflight = 0;
  #errors = 0;

  constructor(options: S3BackendOptions) {
    this.endpoint = options.endpoint;
    this.#timeoutMs = options.timeoutMs;
    this.#pool = new Pool(options.endpoint.origin, storePoolOptions(options.connections, options.timeoutMs));
    this.#connections = new Connections(options.connections, options.timeoutMs);
    this.#http = this.#pool.compose(sigv4({ endpoint: options.endpoint, accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey, region: options.region }));
  }

  stats(): BackendStats {
    return { requests: this.#requests, inflight: this.#inflight, errors: this.#errors, waiting: this.#connections.waiting };
  }

  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /** Signs and sends one request; the caller consumes or dumps the response body. */
  async request(request: BackendRequest): Promise<Dispatcher.ResponseData> {
    const headers = withPayloadHash(request);
    const qs = queryString(request.query ?? []);
    let release: () => void;
    try {
      release = await this.#connections.take(request.signal);
    } catch (error) {
      if (!request.signal?.aborted) this.#errors++;
      throw mapBackendError(error, request.signal);
    }
    this.#requests++;
    this.#inflight++;
    let settled = false;
    const done = (): void => {
      if (!settled) {
        settled = true;
        this.#inflight--;
        release();
      }
    };
    try {
      const response = await this.#http.request({
        method: request.method,
        path: qs === '' ? request.path : `${request.path}?${qs}`,
        headers,
        body: request.body ?? null,
        signal: request.signal ?? null,
        headersTimeout: this.#timeoutMs,
        bodyTimeout: this.#timeoutMs,
      });
      response.body.once('close', done);
      response.body.once('error', () => {
        if (!request.signal?.aborted) this.#errors++;
      });
      return response;
    } catch (error) {
      done();
      if (!request.signal?.aborted) this.#errors++;
      throw mapBackendError(error, request.signal);
    }
  }

  /**
   * Signs and sends one request whose response goes to `handler` (undici's handler interface,
   * for callers that move the body themselves); counted like `request`. `signal` (the client's)
   * only ends the wait for a connection; once the request is sent, the handler aborts through its
   * controller.
   */
  dispatch(request: BackendRequest, handler: Dispatcher.DispatchHandler): void {
    const headers = withPayloadHash(request);
    const qs = queryString(request.query ?? []);
    const path = qs === '' ? request.path : `${request.path}?${qs}`;
    this.#connections.take(request.signal).then(
      (release) => {
        this.#requests++;
        this.#inflight++;
        const counted = new CountedHandler(handler, (failed) => {
          this.#inflight--;
          release();
          if (failed) this.#errors++;
        });
        try {
          this.#http.dispatch({ method: request.method, path, headers, body: request.body ?? null, headersTimeout: this.#timeoutMs, bodyTimeout: this.#timeoutMs }, counted);
        } catch (error) {
          // Refused before it was sent (a signing interceptor that throws): answered, and the
          // connection given back, like any failure.
          counted.onResponseError(undefined, error as Error);
        }
      },
      (error: unknown) => {
        if (!request.signal?.aborted) this.#errors++;
        handler.onResponseError?.(undefined as unknown as Dispatcher.DispatchController, mapBackendError(error, request.signal) as Error);
      },
    );
  }

  /** True when the endpoint answers HTTP at all (any status): used by /readyz. */
  async reachable(timeoutMs: number): Promise<boolean> {
    try {
      const response = await this.#http.request({ method: 'HEAD', path: '/', headersTimeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs) });
      await response.body.dump();
      return true;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.#pool.close();
  }
}

/** Forwards to a handler and reports once when the exchange is over (for the backend's counters). */
class CountedHandler implements Dispatcher.DispatchHandler {
  readonly #inner: Dispatcher.DispatchHandler;
  #done: ((failed: boolean) => void) | undefined;

  constructor(inner: Dispatcher.DispatchHandler, done: (failed: boolean) => void) {
    this.#inner = inner;
    this.#done = done;
  }

  #finish(failed: boolean): void {
    const done = this.#done;
    this.#done = undefined;
    done?.(failed);
  }

  onRequestStart(controller: Dispatcher.DispatchController, context: unknown): void {
    this.#inner.onRequestStart?.(controller, context);
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>, statusMessage?: string): void {
    this.#inner.onResponseStart?.(controller, statusCode, headers, statusMessage);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#inner.onResponseData?.(controller, chunk);
  }

  onResponseEnd(controller: Dispatcher.DispatchController, trailers: Record<string, string | string[] | undefined>): void {
    this.#finish(false);
    this.#inner.onResponseEnd?.(controller, trailers);
  }

  onResponseError(controller: Dispatcher.DispatchController | undefined, error: Error): void {
    // Before the connection is made (refused, a failing request body) there is no controller yet.
    this.#finish(controller?.aborted !== true);
    this.#inner.onResponseError?.(controller as Dispatcher.DispatchController, error);
  }
}
