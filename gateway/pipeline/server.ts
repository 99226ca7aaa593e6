/**
 * The gateway process: makes what the routes serve with (the store, the read pool, the
 * scheduler, capacity management, packed segments, admission, metrics), listens on the S3 port
 * and the admin port, answers connection-level errors, and closes in order. What happens to one
 * request is routes.ts.
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { ObjectCacheError } from '../../schemas/errors.js';
import { Admission, KeyLimits } from '../admission/admission.js';

import { KvEvents } from '../kv-events/kv-events.js';
import { Capacity } from '../capacity/capacity.js';
import { isLoopback, type GatewayConfig } from '../common/config.js';
import { createLogger, type Logger } from '../common/logger.js';
import { createMetrics, type GatewayMetrics } from '../common/metrics.js';
import type { BackendStats, ReaderPoolStats, SchedulerSnapshot } from '../common/observers.js';
import { loadStateKey, type StateKey } from '../common/state-key.js';
import { ReaderPool } from '../descriptor-get/reader-pool.js';
import { Segments } from '../segments/segments.js';
import { tenantMayWrite } from '../s3/auth/access.js';
import { RequestVerifier } from '../s3/auth/request-verifier.js';
import { openBackend } from '../s3/backend.js';
import { newRequestId } from '../s3/respond.js';
import { errorXml } from '../s3/xml.js';
import { startAdminServer, type AdminServer } from './admin.js';
import { ConnectionGuard, CONNECTION_CHECK_INTERVAL_MS } from './connection-guard.js';
import type { WorkerBackend } from '../threads/protocol.js';
import { handleRequest, type Services } from './routes.js';
import { createShared, type SharedServices } from './shared.js';

export interface GatewayDependencies {
  readonly logger?: Logger;
  /** Clock for SigV4 (ms since the epoch); tests move it. */
  readonly now?: () => number;
  /** What the serving processes share (gateway/cluster/); default: this process's own (createShared). */
  readonly shared?: SharedServices;
  /** Whether this process serves the admin port (not a serving process of several, nor the store process: the primary does). */
  readonly admin?: boolean;
  /** What this process is, for its start-up line: the gateway (default), a serving process of several, or the store process under them. */
  readonly role?: 'gateway' | 'serving process' | 'store process';
  /** Share the S3 port with the other serving processes (gateway/cluster/). */
  readonly exclusive?: boolean;
  /** How the read workers reach the chunks, where not as the backend does (the embedded store's files under its store process: gateway/cluster/store-process.ts). */
  readonly workerBackend?: WorkerBackend;
  /** The state key, where the configured store is not the one this process reads (gateway/cluster/serving.ts). */
  readonly stateKey?: StateKey;
  /** Whether this process publishes the KV events --kv-events names (default: yes; of several serving processes, the first). */
  readonly kvEvents?: boolean;
}

export interface Gateway {
  /** `http://host:port` of the S3 endpoint. */
  readonly url: string;
  readonly port: number;
  /** `http://host:port` of the admin endpoint (/healthz, /readyz, /metrics); '' where the primary serves it. */
  readonly adminUrl: string;
  readonly metrics: GatewayMetrics;
  /** Whether the store answers (/readyz). */
  ready(): Promise<boolean>;
  /** Backend request counters; undefined on the embedded store. */
  backendStats(): BackendStats | undefined;
  /** Read-worker pool counters. */
  poolStats(): ReaderPoolStats;
  /** Bytes read by layerwise GETs and not yet sent (the shared budget's; NaN where the primary holds it). */
  bufferedBytes(): number;
  /** The read-worker pool (diagnostics and fault tests). */
  readonly readerPool: ReaderPool;
  /** The bandwidth scheduler's state; undefined when --cap is unlimited. */
  schedulerSnapshot(): SchedulerSnapshot | undefined;
  /** Capacity management; undefined when no bucket has a --budget. */
  readonly capacity: Capacity | undefined;
  /** Packed segments; undefined when --segments is off. */
  readonly segments: Segments | undefined;
  /** The KV events' sockets as bound; undefined when --kv-events is off (or another process publishes them). */
  readonly kvEvents: { readonly endpoint: string; readonly replayEndpoint: string | undefined; readonly firstSequence: bigint } | undefined;
  close(): Promise<void>;
}

const CLOSE_GRACE_MS = 5_000;

/** This process's soft limit on open files (Linux, /proc/self/limits), or undefined. */
function openFileLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    return soft === undefined || soft === 'unlimited' ? undefined : Number(soft);
  } catch {
    return undefined;
  }
}

function urlOf(address: AddressInfo): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

/** One serving process's task-buffer arena: the buffered-byte budget, or twice its share of it among `processes`. */
export function arenaBytes(maxBufferedBytes: number, processes: number): number {
  return Math.min(maxBufferedBytes, 2 * Math.ceil(maxBufferedBytes / processes));
}

/** Starts the gateway; resolves once both ports listen. */
export async function startGateway(config: GatewayConfig, deps: GatewayDependencies = {}): Promise<Gateway> {
  const logger = deps.logger ?? createLogger(config.logLevel);
  // Former setting names still work for one release; each use says what replaces it.
  for (const line of config.deprecatedSettings) logger.warn({ deprecated: true }, line);
  // Metrics need the backend's counters, and the backend reports retries to the metrics.
  let countRetry = (_kind: 'passthrough'): void => {};
  const backend = await openBackend(config.backend, (kind) => countRetry(kind), logger, config.multipartExpiryMs);
  const lw = config.descriptorGet;
  const pool = new ReaderPool({
    backend: deps.workerBackend ?? backend.workers,
    workers: lw.workers,
    logErrors: config.logLevel !== 'silent',
    maxQueue: lw.workerQueue,
    readConcurrency: lw.readConcurrency,
    tasksPerWorker: 4,
    // Task buffers live in shared memory, in blocks of a task's size: as much as may be buffered,
    // or with several serving processes (which share that budget) twice a process's share of it, so
    // what the processes keep resident stays near the budget (a task finding no block free gets a
    // buffer of its own).
    arenaBytes: arenaBytes(lw.maxBufferedBytes, config.processes),
    arenaBlockBytes: lw.taskBytes,
    maxChunkStreams: lw.maxChunkStreams,
    streamReceiveBufferBytes: lw.streamReceiveBufferBytes,
    // Slots for stream tasks only where streamed reads may run (else grouped tasks keep 4 a worker).
    streamTasksPerWorker: lw.chunkReads === 'auto' ? 16 : 0,
  });
  const shared = deps.shared ?? createShared(config);
  const { budget, firstLayers, scheduler } = shared;
  const metrics = createMetrics({
    backend: () => backend.stats(),
    pool: () => pool.stats(),
    ...(shared.sources ? { shared: shared.sources } : {}),
  });
  countRetry = (kind) => metrics.backendRetries.inc({ kind });
  // What the gateways in front of the store sign their own state with (gateway/common/state-key.ts).
  const stateKey = deps.stateKey ?? loadStateKey(config.stateKey, config.backend);
  const segments = config.segments
    ? new Segments({
        config: config.segments,
        key: stateKey,
        store: backend.capacity,
        workerEtag: (etag) => (backend.kind === 's3' ? `"${etag}"` : etag),
        logger,
        observer: metrics.segments,
        checks: backend,
        checkTimeoutMs: config.backend.kind === 's3' ? config.backend.timeoutMs : 30_000,
      })
    : undefined;
  metrics.watchSegments(segments);
  const kvEvents: KvEvents | undefined =
    config.kvEvents && config.capacity && deps.kvEvents !== false
      ? new KvEvents({
          config: config.kvEvents,
          store: backend.capacity,
          logger,
          observer: metrics.kvEvents,
          // Asked only once both exist (events come from capacity's index).
          present: (bucket: string, key: string): boolean => capacity?.chunk(bucket, key) !== undefined,
        })
      : undefined;
  const capacity: Capacity | undefined = config.capacity
    ? new Capacity({
        config: config.capacity,
        key: stateKey,
        mayWrite: (tenant, bucket, key) => tenantMayWrite(config.clientCredentials, tenant, bucket, key),
        store: backend.capacity,
        logger,
        observer: metrics.capacity,
        ...(segments ? { derived: segments } : {}),
        ...(kvEvents ? { changes: (bucket: string) => kvEvents.changes(bucket) } : {}),
      })
    : undefined;
  metrics.watchCapacity(capacity);
  const verifier = new RequestVerifier({
    credentials: config.clientCredentials,
    region: config.region,
    sigV2: config.sigV2,
    sigV2MaxExpiresSeconds: config.sigV2MaxExpiresSeconds,
    ...(deps.now ? { now: deps.now } : {}),
  });
  const admission = new Admission({
    keys: new KeyLimits(config.limits, config.backend.kind === 's3' ? config.backend.connections : 0),
    slots: shared.slots,
    poolSaturated: () => pool.saturated(),
  });

  const server: Server = createServer(
    {
      maxHeaderSize: config.maxHeaderBytes,
      requestTimeout: config.limits.requestTimeoutMs,
      headersTimeout: config.limits.headerTimeoutMs,
      connectionsCheckingInterval: CONNECTION_CHECK_INTERVAL_MS,
      keepAliveTimeout: 65_000,
    },
    (req, res) => {
      handleRequest(req, res, services).catch((error: unknown) => {
        logger.error({ error }, 'unhandled request failure');
        res.destroy();
      });
    },
  );
  // A connection's last answer says Connection: close (0: no limit): its client reconnects, to the next serving process.
  server.maxRequestsPerSocket = config.limits.maxRequestsPerConnection;
  const guard = new ConnectionGuard(server, config.limits, (kind) => metrics.connectionTimeouts.inc({ kind }));
  const services: Services = { config, logger, metrics, guard, verifier, admission, backend, pool, budget, scheduler, firstLayers, capacity, segments, now: deps.now ?? Date.now };
  /** Errors Node finds on a connection before (or instead of) a request handler, answered as S3 does. */
  const CLIENT_ERRORS: Readonly<Record<string, () => ObjectCacheError>> = {
    HPE_HEADER_OVERFLOW: () => new ObjectCacheError('OC_ERR_REQUEST_HEADER_TOO_LARGE', `Your request's headers exceed the maximum of ${config.maxHeaderBytes} bytes`),
    // --header-timeout-ms or --request-timeout-ms ran out (Node's own 408 would carry no S3 error).
    ERR_HTTP_REQUEST_TIMEOUT: () =>
      new ObjectCacheError('OC_ERR_REQUEST_TIMEOUT', 'Your socket connection to the server was not read from or written to within the timeout period; the connection is closed'),
  };
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    const known = CLIENT_ERRORS[error.code ?? ''];
    // Nothing of a response may have gone out on it yet (a request timeout can come mid-body).
    const answering = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
    if (known === undefined || !socket.writable || answering?.headersSent === true) {
      socket.destroy();
      return;
    }
    const failure = known();
    const requestId = newRequestId();
    const xml = errorXml({ code: failure.s3Code, message: failure.message, resource: '/', requestId });
    socket.end(
      `HTTP/1.1 ${failure.status} Bad Request\r\ncontent-type: application/xml\r\ncontent-length: ${Buffer.byteLength(xml)}\r\n` +
        `x-amz-request-id: ${requestId}\r\nx-objectcache-error-code: ${failure.code}\r\nx-objectcache-retryable: false\r\nserver: ObjectCache\r\nconnection: close\r\n\r\n${xml}`,
    );
  });

  let admin: AdminServer | undefined;
  let kvEventsBound: Gateway['kvEvents'];
  try {
    kvEventsBound = await kvEvents?.start();
    await capacity?.start();
    server.listen({ port: config.port, host: config.host, exclusive: deps.exclusive ?? true });
    await once(server, 'listening');
    if (deps.admin !== false)
      admin = await startAdminServer({
        host: config.metricsHost,
        port: config.metricsPort,
        registry: metrics.registry,
        ready: () => backend.ready(),
        ...(capacity ? { capacity: (top: number) => capacity.report(top) } : {}),
        token: config.adminToken,
        loopback: isLoopback(config.metricsHost),
      });
  } catch (error) {
    server.close();
    await capacity?.close();
    await kvEvents?.close();
    await pool.close();
    await backend.close();
    throw error;
  }
  const address = server.address() as AddressInfo;
  const role = deps.role ?? 'gateway';
  logger.info(
    { url: urlOf(address), admin: admin?.url, backend: backend.description, stateKey: stateKey.origin, ...(role === 'gateway' ? {} : { pid: process.pid }) },
    `${role} listening`,
  );
  const files = openFileLimit();
  const needed = config.limits.maxConnections + (config.backend.kind === 's3' ? config.backend.connections + lw.maxChunkStreams : 0) + 64;
  if (files !== undefined && files < needed) {
    // Past the limit every new file fails (EMFILE): another tenant's upload, a backend connection.
    logger.warn(
      { openFileLimit: files, needed },
      `the open-file limit (ulimit -n ${files}) is below what --max-connections and the backend connections may use (${needed}); lower --max-connections or raise the limit`,
    );
  }

  let closing: Promise<void> | undefined;
  const adminServer = admin;
  return {
    url: urlOf(address),
    port: address.port,
    adminUrl: adminServer?.url ?? '',
    metrics,
    ready: () => backend.ready(),
    backendStats: () => backend.stats(),
    poolStats: () => pool.stats(),
    readerPool: pool,
    bufferedBytes: () => shared.sources?.bufferedBytes() ?? Number.NaN,
    schedulerSnapshot: () => shared.sources?.scheduler(),
    capacity,
    segments,
    kvEvents: kvEventsBound,
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        // GETs still waiting for admission are refused now (503, retryable), not cut later.
        shared.close();
        server.closeIdleConnections();
        const timer = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
        await closed;
        clearTimeout(timer);
        await adminServer?.close();
        segments?.close();
        await capacity?.close();
        await kvEvents?.close();
        await pool.close();
        await backend.close();
      })();
      return closing;
    },
  };
}
