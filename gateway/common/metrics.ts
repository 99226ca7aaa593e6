/**
 * The gateway's Prometheus metrics, made into an injected Registry (never the global one):
 * one instance per gateway, created at start-up, served on the admin port. Point-in-time values
 * (pool, buffers, scheduler shares) are read in collect(), not refreshed by timers.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { BackendStats, CapacityGauges, CapacityObserver, KvEventsObserver, ReaderPoolStats, SchedulerSnapshot, SegmentGauges, SegmentObserver } from './observers.js';

/** What serve-descriptor-get reports while it runs. */
export interface DescriptorGetObserver {
  mode(mode: 'layerwise' | 'chunkwise'): void;
  delivered(tenant: string, bytes: number): void;
  layerReady(secondsSinceRequest: number): void;
  admissionWait(seconds: number): void;
  taskDone(reads: number, readSeconds: number, retries: number): void;
  taskFailed(code: string): void;
}

/** Distinct tenant label values kept for delivered-bytes counters. */
export const MAX_TENANT_LABELS = 256;

export interface GatewayMetrics {
  readonly registry: Registry;
  readonly requests: Counter<'operation' | 'status'>;
  readonly requestDuration: Histogram<'operation'>;
  readonly authFailures: Counter<'code'>;
  /** Connections closed for a client too slow to send or to read (gateway/pipeline/connection-guard.ts), by kind. */
  readonly connectionTimeouts: Counter<'kind'>;
  /** Backend requests repeated after a retryable failure, by kind (range, passthrough). */
  readonly backendRetries: Counter<'kind'>;
  readonly descriptorGet: DescriptorGetObserver;
  /** What capacity management reports (evictions, sync failures). */
  readonly capacity: CapacityObserver;
  /** Gauges of usage against budgets and quotas, read from `capacity` at each scrape. */
  watchCapacity(capacity: CapacityGauges | undefined): void;
  /** Packed segments' events (gateway/segments/segments.ts). */
  readonly segments: SegmentObserver;
  /** Gauges of the packed segments known, read from `segments` at each scrape. */
  watchSegments(segments: SegmentGauges | undefined): void;
  /** What the KV events publisher reports (gateway/kv-events/). */
  readonly kvEvents: KvEventsObserver;
}

/** What the shared gauges read (registerSharedGauges). */
export interface SharedSources {
  readonly bufferedBytes: () => number;
  readonly scheduler: () => SchedulerSnapshot | undefined;
  readonly activeLayerwise: () => number;
}

export interface MetricSources {
  readonly backend: () => BackendStats | undefined;
  readonly pool: () => ReaderPoolStats;
  /** Absent in a serving process of several: the primary registers them (registerSharedGauges). */
  readonly shared?: SharedSources;
}

export function createMetrics(sources: MetricSources): GatewayMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'objectcache_process_' });
  const registers = [registry];
  const requests = new Counter({
    name: 'objectcache_http_requests_total',
    help: 'S3 requests answered, by operation and HTTP status.',
    labelNames: ['operation', 'status'] as const,
    registers,
  });
  const requestDuration = new Histogram({
    name: 'objectcache_http_request_duration_seconds',
    help: 'Time from request to the end of the response, by operation.',
    labelNames: ['operation'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const authFailures = new Counter({
    name: 'objectcache_auth_failures_total',
    help: 'Requests rejected by authentication before reaching the backend, by error code.',
    labelNames: ['code'] as const,
    registers,
  });

  // --- backend ---
  new Counter({
    name: 'objectcache_backend_requests_total',
    help: 'Passthrough and lookup requests sent to the S3 backend by the main thread.',
    registers,
    collect() {
      const stats = sources.backend();
      if (!stats) return;
      this.reset();
      this.inc(stats.requests);
    },
  });
  new Counter({
    name: 'objectcache_backend_errors_total',
    help: 'Main-thread backend requests that failed in transport (unreachable, timeout, reset).',
    registers,
    collect() {
      const stats = sources.backend();
      if (!stats) return;
      this.reset();
      this.inc(stats.errors);
    },
  });
  new Gauge({
    name: 'objectcache_backend_inflight_requests',
    help: 'Main-thread backend requests whose response has not finished.',
    registers,
    collect() {
      this.set(sources.backend()?.inflight ?? 0);
    },
  });
  new Gauge({
    name: 'objectcache_backend_waiting_requests',
    help: 'Main-thread backend requests waiting for a free connection to the store (each for at most --backend-timeout-ms).',
    registers,
    collect() {
      this.set(sources.backend()?.waiting ?? 0);
    },
  });
  const backendReads = new Counter({ name: 'objectcache_backend_reads_total', help: 'Range reads issued by layerwise and chunkwise GETs.', registers });
  const backendRetries = new Counter({
    name: 'objectcache_backend_retries_total',
    help: 'Backend requests repeated after a retryable failure (5xx, connection or timeout), by kind: range reads of layerwise GETs, passthrough GETs and HEADs.',
    labelNames: ['kind'] as const,
    registers,
  });
  const backendReadErrors = new Counter({
    name: 'objectcache_backend_read_errors_total',
    help: 'Read tasks that failed, by error code.',
    labelNames: ['code'] as const,
    registers,
  });
  const taskSeconds = new Histogram({
    name: 'objectcache_backend_read_task_seconds',
    help: 'Time a read task took for its range reads (one layer group of a run of chunks).',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });

  // --- worker pool and buffers ---
  new Gauge({
    name: 'objectcache_worker_pool_utilization_ratio',
    aggregator: 'average',
    help: 'Share of the read workers\u2019 capacity in use (piscina utilization).',
    registers,
    collect() {
      this.set(sources.pool().utilization);
    },
  });
  new Gauge({
    name: 'objectcache_worker_pool_queued_tasks',
    help: 'Read tasks waiting for a worker.',
    registers,
    collect() {
      this.set(sources.pool().queued);
    },
  });
  new Gauge({
    name: 'objectcache_worker_pool_running_tasks',
    help: 'Read tasks running in the workers.',
    registers,
    collect() {
      this.set(sources.pool().running);
    },
  });

  // --- layerwise GETs and the scheduler ---
  const modes = new Counter({ name: 'objectcache_mode_decisions_total', help: 'Layerwise GETs by the delivery mode chosen.', labelNames: ['mode'] as const, registers });
  const delivered = new Counter({
    name: 'objectcache_delivered_bytes_total',
    help: 'KV payload bytes delivered by layerwise and chunkwise GETs, by tenant.',
    labelNames: ['tenant'] as const,
    registers,
  });
  const layerReady = new Histogram({
    name: 'objectcache_layer_ready_seconds',
    help: 'Time from a layerwise GET\u2019s arrival to each layer frame being sent.',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const admissionWait = new Histogram({
    name: 'objectcache_scheduler_admission_wait_seconds',
    help: 'Time a layerwise GET waited for its epoch admission.',
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers,
  });

  if (sources.shared) registerSharedGauges(registry, sources.shared);

  // Tenants come from descriptors; the label set is bounded so no client can grow the registry
  // without limit. Tenants beyond the first MAX_TENANT_LABELS are counted as "other".
  const tenants = new Set<string>();
  const tenantLabel = (tenant: string): string => {
    if (tenants.has(tenant)) return tenant;
    if (tenants.size >= MAX_TENANT_LABELS) return 'other';
    tenants.add(tenant);
    return tenant;
  };
  const descriptorGet: DescriptorGetObserver = {
    mode: (mode) => modes.inc({ mode }),
    delivered: (tenant, bytes) => delivered.inc({ tenant: tenantLabel(tenant) }, bytes),
    layerReady: (seconds) => layerReady.observe(seconds),
    admissionWait: (seconds) => admissionWait.observe(seconds),
    taskDone: (reads, seconds, retries) => {
      backendReads.inc(reads);
      if (retries > 0) backendRetries.inc({ kind: 'range' }, retries);
      taskSeconds.observe(seconds);
    },
    taskFailed: (code) => backendReadErrors.inc({ code }),
  };
  const connectionTimeouts = new Counter({
    name: 'objectcache_connection_timeouts_total',
    help: 'Connections closed because the client was too slow: headers (never sent a request in time), body-idle (paused its request body), client-stall (stopped reading its response).',
    labelNames: ['kind'] as const,
    registers,
  });

  // --- capacity (gateway/capacity/) ---
  let watched: CapacityGauges | undefined;
  const evictions = new Counter({
    name: 'objectcache_evictions_total',
    help: 'Chunks evicted, by bucket and reason: lru (the budget, coldest tail first), idle (--evict-idle), dead (a chunk whose predecessor was gone), quota (a tenant\u2019s write past its quota).',
    labelNames: ['bucket', 'reason'] as const,
    registers,
  });
  const evictedBytes = new Counter({ name: 'objectcache_evicted_bytes_total', help: 'Bytes evicted, by bucket and reason.', labelNames: ['bucket', 'reason'] as const, registers });
  const capacitySyncFailures = new Counter({
    name: 'objectcache_capacity_sync_failures_total',
    help: 'Capacity-management operations against the store that failed and will be retried, by what (sync, trim, head).',
    labelNames: ['what'] as const,
    registers,
  });
  new Gauge({
    name: 'objectcache_capacity_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Bytes stored in each budgeted bucket, as this gateway knows them, its packed segments included (docs/segments.md).',
    labelNames: ['bucket'] as const,
    registers,
    collect() {
      this.reset();
      for (const u of watched?.usage() ?? []) this.set({ bucket: u.bucket }, u.bytes);
    },
  });
  new Gauge({
    name: 'objectcache_capacity_budget_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'The --budget of each budgeted bucket.',
    labelNames: ['bucket'] as const,
    registers,
    collect() {
      this.reset();
      for (const u of watched?.usage() ?? []) this.set({ bucket: u.bucket }, u.budget);
    },
  });
  new Gauge({
    name: 'objectcache_capacity_chunks',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Objects in each budgeted bucket.',
    labelNames: ['bucket'] as const,
    registers,
    collect() {
      this.reset();
      for (const u of watched?.usage() ?? []) this.set({ bucket: u.bucket }, u.chunks);
    },
  });
  new Gauge({
    name: 'objectcache_capacity_pinned_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Bytes of each budgeted bucket pinned now.',
    labelNames: ['bucket'] as const,
    registers,
    collect() {
      this.reset();
      for (const u of watched?.usage() ?? []) this.set({ bucket: u.bucket }, u.pinnedBytes);
    },
  });
  new Gauge({
    name: 'objectcache_capacity_tenant_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Bytes each tenant stores in the budgeted buckets together (tenants with a quota, and up to 256 others).',
    labelNames: ['tenant'] as const,
    registers,
    collect() {
      this.reset();
      if (!watched) return;
      let others = 0;
      for (const [tenant, bytes] of watched.tenants()) {
        if (watched.quota(tenant) !== undefined || others++ < MAX_TENANT_LABELS) this.set({ tenant }, bytes);
      }
    },
  });
  new Gauge({
    name: 'objectcache_capacity_quota_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'The --tenant-quota of each tenant that has one.',
    labelNames: ['tenant'] as const,
    registers,
    collect() {
      this.reset();
      for (const [tenant, bytes] of watched?.quotas ?? []) this.set({ tenant }, bytes);
    },
  });
  const capacityRejected = new Counter({
    name: 'objectcache_capacity_rejected_total',
    help: 'Shared capacity state read from the store and not applied, by what: journal, snapshot or lease (not signed with the state key, or a journal too large), event (a line out of shape or bounds), unauthorized (a write journalled for a tenant none of whose keys may write the chunk).',
    labelNames: ['what'] as const,
    registers,
  });
  const uploadsExpired = new Counter({
    name: 'objectcache_multipart_expired_total',
    help: 'Unfinished multipart uploads of budgeted buckets aborted for --multipart-expiry, by bucket.',
    labelNames: ['bucket'] as const,
    registers,
  });
  new Gauge({
    name: 'objectcache_capacity_upload_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Bytes of the parts of unfinished multipart uploads in each budgeted bucket (counted against its budget and their tenants\u2019 quotas).',
    labelNames: ['bucket'] as const,
    registers,
    collect() {
      this.reset();
      for (const u of watched?.usage() ?? []) this.set({ bucket: u.bucket }, u.uploadBytes);
    },
  });
  const capacityRoomWaits = new Counter({
    name: 'objectcache_capacity_write_waits_total',
    help: 'Writes that would have taken a budgeted bucket past its budget and waited for eviction to make room: admitted, or refused with OC_ERR_CAPACITY_FULL after the wait.',
    labelNames: ['bucket', 'outcome'] as const,
    registers,
  });
  const capacityHintsDropped = new Counter({
    name: 'objectcache_capacity_hints_dropped_total',
    help: 'Accesses and chains not journalled because their access key passed its share of the journal this sync period (they still count at this gateway).',
    registers,
  });
  new Gauge({
    name: 'objectcache_capacity_unchecked_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Bytes each budgeted bucket holds as other gateways journalled them, not yet checked against the store by the lease holder (eviction does not act on them until then).',
    labelNames: ['bucket'] as const,
    registers,
    collect() {
      this.reset();
      for (const u of watched?.usage() ?? []) this.set({ bucket: u.bucket }, u.uncheckedBytes);
    },
  });
  new Gauge({
    name: 'objectcache_capacity_leader',
    help: '1 while this gateway holds the eviction lease (one gateway over a store evicts at a time).',
    registers,
    collect() {
      this.set(watched?.isLeader ? 1 : 0);
    },
  });
  const capacity: CapacityObserver = {
    evicted: (bucket, reason, bytes) => {
      evictions.inc({ bucket, reason });
      evictedBytes.inc({ bucket, reason }, bytes);
    },
    syncFailed: (what) => capacitySyncFailures.inc({ what }),
    rejected: (what, count) => capacityRejected.inc({ what }, count),
    hintsDropped: (count) => capacityHintsDropped.inc(count),
    uploadExpired: (bucket) => uploadsExpired.inc({ bucket }),
    waitedForRoom: (bucket, outcome) => capacityRoomWaits.inc({ bucket, outcome }),
  };

  // --- packed segments (gateway/segments/segments.ts) ---
  let watchedSegments: SegmentGauges | undefined;
  const segmentEvents = new Counter({
    name: 'objectcache_segment_events_total',
    help: 'Packed segments, by event: packed (a manifest written), discovered (a segment found in the store, packed by another gateway or before a restart: at a read of its run, or by the sweep), reread (a pack that fell behind its read reads the layers it missed from the chunks), abandoned (a pack given up: the store too slow, the request failed, a chunk written meanwhile), served (a descriptor GET read from one), stale (a covered chunk changed: dropped), rejected (a manifest not signed with the state key, or a segment whose CRC32Cs are not those its chunks\u2019 writers recorded: not used, and dropped), dropped (one this gateway knew, removed for any reason), evicted (for a budget or --max-segment-bytes, including segments this gateway did not know, deleted by the sweep), swept (a data object no manifest names, deleted by the hourly sweep).',
    labelNames: ['event'] as const,
    registers,
  });
  new Gauge({
    name: 'objectcache_segments',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Packed segments this gateway knows.',
    registers,
    collect() {
      this.set(watchedSegments?.count ?? 0);
    },
  });
  new Gauge({
    name: 'objectcache_segment_bytes',
    // Each serving process's view of the same store: the largest, not their sum.
    aggregator: 'max',
    help: 'Bytes of the packed segments this gateway knows.',
    registers,
    collect() {
      this.set(watchedSegments?.knownBytes ?? 0);
    },
  });
  const segments: SegmentObserver = { event: (event) => segmentEvents.inc({ event }) };

  // --- KV events (gateway/kv-events/) ---
  const kvBatches = new Counter({ name: 'objectcache_kv_event_batches_total', help: 'KV event batches handed to ZeroMQ (--kv-events).', registers });
  const kvEvents = new Counter({ name: 'objectcache_kv_events_total', help: 'KV events published, by kind (stored, removed).', labelNames: ['kind'] as const, registers });
  const kvDropped = new Counter({
    name: 'objectcache_kv_events_dropped_total',
    help: 'KV events not published, by reason: queue (more batches waiting for the socket than it holds; their sequence numbers are skipped, so subscribers see the gap), encode.',
    labelNames: ['reason'] as const,
    registers,
  });
  const kvWithoutTokens = new Counter({
    name: 'objectcache_kv_events_without_tokens_total',
    help: 'BlockStored events published without token ids, by reason: none (the writer sent none), unverified (they did not hash to the chunk key), head (the chunk\u2019s metadata could not be read).',
    labelNames: ['reason'] as const,
    registers,
  });
  const kvReplays = new Counter({ name: 'objectcache_kv_event_replays_total', help: 'Replay requests answered on --kv-events-replay.', registers });
  const kvSubscribers = new Gauge({ name: 'objectcache_kv_event_subscribers', help: 'Connections to the KV events socket.', registers });
  const kvEventsObserver: KvEventsObserver = {
    published: (batches, stored, removed) => {
      kvBatches.inc(batches);
      if (stored > 0) kvEvents.inc({ kind: 'stored' }, stored);
      if (removed > 0) kvEvents.inc({ kind: 'removed' }, removed);
    },
    dropped: (reason, events) => kvDropped.inc({ reason }, events),
    withoutTokens: (reason) => kvWithoutTokens.inc({ reason }),
    replayed: () => kvReplays.inc(),
    subscribers: (delta) => kvSubscribers.inc(delta),
  };
  return {
    kvEvents: kvEventsObserver,
    registry,
    requests,
    requestDuration,
    authFailures,
    connectionTimeouts,
    backendRetries,
    descriptorGet,
    capacity,
    segments,
    watchCapacity(c) {
      watched = c;
    },
    watchSegments(s) {
      watchedSegments = s;
    },
  };
}

/**
 * Gauges of what the serving processes share (gateway/cluster/): the buffered-byte budget, the
 * layerwise slots and the scheduler. Registered where those live: in the one process's registry,
 * or in the primary's with several (so one scrape counts each once).
 */
export function registerSharedGauges(registry: Registry, sources: SharedSources): void {
  const registers = [registry];
  new Gauge({
    name: 'objectcache_buffered_bytes',
    help: 'Bytes read by layerwise GETs and not yet sent.',
    registers,
    collect() {
      this.set(sources.bufferedBytes());
    },
  });
  new Gauge({
    name: 'objectcache_layerwise_active_requests',
    help: 'Layerwise and chunkwise GETs being served.',
    registers,
    collect() {
      this.set(sources.activeLayerwise());
    },
  });
  new Gauge({
    name: 'objectcache_scheduler_queued_requests',
    help: 'Layerwise GETs waiting for an epoch admission.',
    registers,
    collect() {
      this.set(sources.scheduler()?.pending ?? 0);
    },
  });
  new Gauge({
    name: 'objectcache_scheduler_cap_bytes_per_second',
    help: 'The bandwidth cap B shared by layerwise GETs (0 when unlimited).',
    registers,
    collect() {
      this.set(sources.scheduler()?.capBytesPerSec ?? 0);
    },
  });
  new Gauge({
    name: 'objectcache_scheduler_cap_in_use_bytes_per_second',
    help: 'Sum of the rates granted to layerwise GETs in flight.',
    registers,
    collect() {
      this.set(sources.scheduler()?.capInUseBytesPerSec ?? 0);
    },
  });
  new Counter({
    name: 'objectcache_scheduler_epochs_total',
    help: 'Scheduling epochs that have passed.',
    registers,
    collect() {
      this.reset();
      this.inc(sources.scheduler()?.epoch ?? 0);
    },
  });
  new Gauge({
    name: 'objectcache_scheduler_granted_rate_bytes_per_second',
    help: 'Rate granted to the layerwise GETs in flight, summed by tenant.',
    labelNames: ['tenant'] as const,
    registers,
    collect() {
      this.reset();
      for (const a of sources.scheduler()?.active ?? []) this.inc({ tenant: a.tenant }, a.rateBytesPerSec);
    },
  });
  new Gauge({
    name: 'objectcache_scheduler_predicted_stall_seconds',
    help: 'Predicted stall per layer at the granted rate (docs/scheduler.md), summed over the tenant\u2019s GETs in flight.',
    labelNames: ['tenant'] as const,
    registers,
    collect() {
      this.reset();
      for (const a of sources.scheduler()?.active ?? []) this.inc({ tenant: a.tenant }, a.predictedStallMsPerLayer / 1000);
    },
  });
}
