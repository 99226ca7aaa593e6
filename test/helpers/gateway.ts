/**
 * Starts a real gateway on port 0 for a test, in front of the embedded store (a fresh temporary
 * data directory) or the run's MinIO, with the same configuration path the CLI uses.
 */
import { ObjectCacheClient } from '../../client/client.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, inject } from 'vitest';
import { Client as MinioClient } from 'minio';
import { loadServeConfig } from '../../gateway/common/config.js';
import { createLogger } from '../../gateway/common/logger.js';
import { startGateway, type Gateway } from '../../gateway/pipeline/server.js';
import type { MinioInfo } from './minio.js';
import type { SegmentEvent } from '../../gateway/common/observers.js';

export const CLIENT_KEY = 'test-client';
export const CLIENT_SECRET = 'test-client-secret';

export type BackendKind = 'local' | 's3';

/**
 * A 64 MiB buffer arena (--max-buffered-bytes) for test gateways that read little: each gateway
 * reserves its whole arena as private memory for its life, and a test file that starts dozens of
 * them in one worker would otherwise pass the machine's memory in address space, where spawning a
 * process (a gateway of its own, MinIO) fails with ENOMEM under Linux's heuristic overcommit.
 */
export const SMALL_ARENA: readonly string[] = ['--max-buffered-bytes', String(64 * 1024 * 1024)];

/**
 * A budget of `bytes` on `bucket`, its state in `stateBucket`, syncing, leasing and evicting fast
 * (a test must not wait seconds for what a production gateway does over minutes).
 */
export function fastBudget(bucket: string, bytes: number, stateBucket = `${bucket}-state`): string[] {
  // Marks wide apart (the defaults are 99 and 97): a budget of a few test chunks trims by whole chunks.
  return [
    '--budget',
    `${bucket}=${bytes}`,
    '--capacity-state-bucket',
    stateBucket,
    '--capacity-sync-ms',
    '100',
    '--capacity-lease-ms',
    '1000',
    '--evict-rate',
    '1000',
    '--budget-high-percent',
    '95',
    '--budget-low-percent',
    '85',
  ];
}

export interface TestGateway {
  readonly gateway: Gateway;
  readonly url: string;
  readonly dataDir: string | undefined;
  close(): Promise<void>;
}

export interface TestGatewayOptions {
  readonly backend: BackendKind;
  readonly minio?: Pick<MinioInfo, 'endpoint' | 'accessKey' | 'secretKey'>;
  readonly args?: readonly string[];
  readonly now?: () => number;
  readonly dataDir?: string;
}

export async function startTestGateway(options: TestGatewayOptions): Promise<TestGateway> {
  const env: NodeJS.ProcessEnv = { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET };
  const args = ['--port', '0', '--metrics-port', '0', '--log-level', 'silent', ...(options.args ?? [])];
  let dataDir: string | undefined;
  if (options.backend === 's3') {
    if (!options.minio) throw new Error('an s3 test gateway needs the MinIO endpoint');
    args.push('--s3-endpoint', options.minio.endpoint);
    env['OBJECTCACHE_BACKEND_ACCESS_KEY'] = options.minio.accessKey;
    env['OBJECTCACHE_BACKEND_SECRET_KEY'] = options.minio.secretKey;
  } else {
    dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'objectcache-store-'));
    args.push('--data-dir', dataDir);
  }
  const config = loadServeConfig(args, env);
  // TEST_LOG=debug (or info, warn) prints the test gateways' log lines: what a failing test's gateway did.
  const logLevel = (process.env['TEST_LOG'] as 'debug' | 'info' | 'warn' | undefined) ?? 'silent';
  const gateway = await startGateway(config, { logger: createLogger(logLevel), ...(options.now ? { now: options.now } : {}) });
  return {
    gateway,
    url: gateway.url,
    dataDir,
    close: async () => {
      await gateway.close();
      if (dataDir && !options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface SdkOverrides {
  accessKeyId?: string;
  secretAccessKey?: string;
  systemClockOffset?: number;
  requestChecksumCalculation?: 'WHEN_SUPPORTED' | 'WHEN_REQUIRED';
}

export function sdkClient(endpoint: string, overrides: SdkOverrides = {}): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: overrides.accessKeyId ?? CLIENT_KEY, secretAccessKey: overrides.secretAccessKey ?? CLIENT_SECRET },
    ...(overrides.systemClockOffset !== undefined ? { systemClockOffset: overrides.systemClockOffset } : {}),
    ...(overrides.requestChecksumCalculation ? { requestChecksumCalculation: overrides.requestChecksumCalculation } : {}),
  });
}

export function minioClient(endpoint: string): MinioClient {
  const url = new URL(endpoint);
  return new MinioClient({ endPoint: url.hostname, port: Number(url.port), useSSL: false, accessKey: CLIENT_KEY, secretKey: CLIENT_SECRET, region: 'us-east-1', pathStyle: true });
}

let bucketCounter = 0;

/**
 * A client of `gateway` with the test credentials, on `bucket` (not created yet: ensureBucket).
 * It does not try refusals again (`retries: 0`): the tests see each of the gateway's answers.
 */
export function testClient(gateway: { readonly url: string }, bucket: string): ObjectCacheClient {
  return new ObjectCacheClient({ endpoint: gateway.url, bucket, credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET }, retries: 0 });
}

/** A bucket name unique within the run. */
export function uniqueBucket(prefix = 'test'): string {
  bucketCounter++;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${bucketCounter}`.toLowerCase();
}

/** Reads a metric's summed value from the admin endpoint's Prometheus text. */
/** A packed-segment event (gateway/segments/segments.ts). */
export type { SegmentEvent };

/** How often `event` happened at the gateway whose admin endpoint is `adminUrl` (objectcache_segment_events_total). */
export function segmentEvents(adminUrl: string, event: SegmentEvent): Promise<number> {
  return metricValue(adminUrl, `objectcache_segment_events_total{event="${event}"}`);
}

export async function metricValue(adminUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

/**
 * Where a compatibility test sends its S3 requests: the gateway on either backend, or MinIO itself
 * as the reference the gateway must match.
 */
export type CompatTarget = BackendKind | 'minio-direct';
export const COMPAT_TARGETS: readonly CompatTarget[] = ['local', 's3', 'minio-direct'];

export interface CompatEndpoint {
  readonly url: string;
  readonly credentials: { readonly accessKeyId: string; readonly secretAccessKey: string };
  /** An SDK client for `url` with `credentials`. */
  readonly s3: S3Client;
  close(): Promise<void>;
}

export async function compatEndpoint(target: CompatTarget, minio: Pick<MinioInfo, 'endpoint' | 'accessKey' | 'secretKey'>): Promise<CompatEndpoint> {
  if (target === 'minio-direct') {
    const credentials = { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey };
    const s3 = sdkClient(minio.endpoint, credentials);
    return { url: minio.endpoint, credentials, s3, close: async () => s3.destroy() };
  }
  const gw = await startTestGateway({ backend: target, minio });
  const s3 = sdkClient(gw.url);
  return {
    url: gw.url,
    credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET },
    s3,
    close: async () => {
      s3.destroy();
      await gw.close();
    },
  };
}

export interface CompatSuite {
  /** Known at once: usable while the suite is being collected. */
  readonly bucket: string;
  /** Set by the suite's beforeAll: read them inside tests and hooks. */
  readonly endpoint: CompatEndpoint;
  readonly s3: S3Client;
}

/**
 * The setup every compatibility suite shares: before its tests, open `target` and create a fresh
 * bucket (then run `prepare`); after them, close the endpoint. Call it in a describe block.
 */
export function compatSuite(target: CompatTarget, bucketPrefix: string, prepare?: (s3: S3Client, bucket: string) => Promise<void>): CompatSuite {
  const suite = { bucket: uniqueBucket(bucketPrefix) } as { bucket: string; endpoint: CompatEndpoint; s3: S3Client };
  beforeAll(async () => {
    suite.endpoint = await compatEndpoint(target, inject('minio'));
    suite.s3 = suite.endpoint.s3;
    await suite.s3.send(new CreateBucketCommand({ Bucket: suite.bucket }));
    await prepare?.(suite.s3, suite.bucket);
  });
  afterAll(async () => {
    await suite.endpoint?.close();
  });
  return suite;
}
