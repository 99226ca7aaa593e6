/**
 * The gateway's Prometheus metrics, made into an injected Registry (never the global one):
 * one instance per gateway, created at start-up, served on the admin port.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { BackendStats } from '../storage-worker/s3-backend.js';

export interface GatewayMetrics {
  readonly registry: Registry;
  readonly requests: Counter<'operation' | 'status'>;
  readonly requestDuration: Histogram<'operation'>;
  readonly authFailures: Counter<'code'>;
  readonly layerwiseReads: Counter;
}

export function createMetrics(backendStats: () => BackendStats | undefined): GatewayMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'objectcache_process_' });
  const registers = [registry];
  const requests = new Counter({ name: 'objectcache_http_requests_total', help: 'S3 requests answered, by operation and HTTP status.', labelNames: ['operation', 'status'] as const, registers });
  const requestDuration = new Histogram({
    name: 'objectcache_http_request_duration_seconds',
    help: 'Time from request to the end of the response, by operation.',
    labelNames: ['operation'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const authFailures = new Counter({ name: 'objectcache_auth_failures_total', help: 'Requests rejected by authentication before reaching the backend, by error code.', labelNames: ['code'] as const, registers });
  const layerwiseReads = new Counter({ name: 'objectcache_layerwise_backend_reads_total', help: 'Range reads issued by layerwise and chunkwise GETs.', registers });
  new Counter({
    name: 'objectcache_backend_requests_total',
    help: 'Requests sent to the S3 backend.',
    registers,
    collect() {
      const stats = backendStats();
      if (stats) this.reset(), this.inc(stats.requests);
    },
  });
  new Counter({
    name: 'objectcache_backend_errors_total',
    help: 'Backend requests that failed in transport (unreachable, timeout, reset).',
    registers,
    collect() {
      const stats = backendStats();
      if (stats) this.reset(), this.inc(stats.errors);
    },
  });
  new Gauge({
    name: 'objectcache_backend_inflight_requests',
    help: 'Backend requests whose response has not finished.',
    registers,
    collect() {
      this.set(backendStats()?.inflight ?? 0);
    },
  });
  return { registry, requests, requestDuration, authFailures, layerwiseReads };
}
