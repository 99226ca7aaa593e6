/**
 * The capacity benchmark's trace replayed through a real gateway: `objectcache serve` as its own
 * process on its embedded store, one bucket budgeted, and this process acting as one engine. For
 * each request it looks the prompt up (one request, which also teaches the gateway the prompt's
 * chain), reads the hit chunks with one descriptor GET, and stores the chunks past the hit in
 * order. The gateway trims on its own (every 250 ms, at its default --evict-rate unless one is
 * given, from its high mark to its low one, faster while writes wait for room), so its hit rate differs a little from the simulation of its ChunkIndex, which trims
 * after every request (bench/capacity/policies.ts simulate()).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ObjectCacheClient } from '../../client/client.js';
import { syntheticChunk } from '../../client/kv-layout.js';
import type { DescriptorInput } from '../../schemas/descriptor-schema.js';
import { ObjectCacheError } from '../../schemas/errors.js';
import { PRESETS } from '../../schemas/layouts.js';
import { BENCH_CLIENT, startGatewayProcess, type GatewayProcess } from '../gateway-process.js';
import { processUsage } from '../process-usage.js';
import type { Trace } from './workload.js';

const BUCKET = 'capacity-replay';
/** Llama-3.1-8B's layer count: a chunk is read as that many layer slices, as an engine reads it. */
const LAYERS = (PRESETS['llama-3.1-8b'] as NonNullable<(typeof PRESETS)[string]>).layers;
/**
 * Lookups again after a fetch found a hit chunk gone (evicted between the lookup and the GET)
 * before giving up: a trimming pass deletes its victims one by one, so a prefix it is trimming
 * can lose more chunks between each lookup and the fetch that follows.
 */
const MAX_REFETCHES = 10;
/** Requests between two readings of the bucket's bytes (for the peak). */
const SAMPLE_EVERY = 10;

export interface ReplayOptions {
  /** Requests before this index warm the bucket up and are not counted. */
  readonly measureFrom: number;
  /** Trimming starts above budget x high and stops at budget x low (whole percents: the gateway's settings). */
  readonly high: number;
  readonly low: number;
  /** PUTs of one request's missing chunks at once (1: one after the other, in prompt order). */
  readonly putConcurrency: number;
  /** The gateway's --evict-rate; undefined: its default. */
  readonly evictRate?: number;
  /** Where the gateway's embedded store gets a directory of its own (removed afterwards). */
  readonly storeDir: string;
  /** Called after every `progressEvery` requests. */
  readonly onProgress?: (done: number, seconds: number) => void;
  readonly progressEvery?: number;
}

/** The bucket as the gateway's /capacity document reports it. */
export interface BucketReport {
  readonly budget: number;
  readonly bytes: number;
  readonly chunks: number;
  readonly highBytes: number;
  readonly lowBytes: number;
}

export interface ReplayResult {
  readonly requests: number;
  /** Tokens of the measured requests' whole chunks. */
  readonly prefixTokens: number;
  readonly hitTokens: number;
  readonly hitRate: number;
  /** Bytes of the hit chunks read (measured requests). */
  readonly bytesRead: number;
  /** Bytes stored (measured requests): every chunk past the lookup's hit. */
  readonly bytesWritten: number;
  /** Fetches that found a hit chunk evicted since the lookup, and looked up again. */
  readonly refetches: number;
  /** Of the tokens the first lookups matched (measured requests), those gone by the fetch: not in hitTokens. */
  readonly lostHitTokens: number;
  /** Wall time of the replay (the gateway's start and stop excluded). */
  readonly seconds: number;
  /** At the end, once a trimming pass has had time to run. */
  readonly bucket: BucketReport;
  /** The most the gateway counted in the bucket, read every SAMPLE_EVERY requests after their writes. */
  readonly peakBytes: number;
  /** The least it counted in those readings once the bucket had first reached its low mark (0: it never did). */
  readonly leastFullBytes: number;
  /** Those readings: [requests replayed, seconds since the replay began, bytes the gateway counted]. */
  readonly bytesOverTime: readonly (readonly [number, number, number])[];
  /** objectcache_evictions_total of the bucket, by reason. */
  readonly evictions: Readonly<Record<string, number>>;
  /** CPU time of the gateway's processes over the replay, per request replayed (ms): its lookups, reads, writes and trimming. */
  readonly gatewayCpuMsPerRequest: number;
}

/**
 * Replays the trace through a fresh gateway whose bucket has `budgetBytes`. Hits count as the
 * simulation counts them, over the measured requests: the leading chunks read (the lookup's
 * match, less what trimming took before the fetch could hold it).
 */
export async function replayThroughGateway(trace: Trace, budgetBytes: number, options: ReplayOptions): Promise<ReplayResult> {
  const layerBytes = trace.chunkBytes / LAYERS;
  if (!Number.isInteger(layerBytes)) throw new Error(`a chunk of ${trace.chunkBytes} bytes does not split into ${LAYERS} layers: choose another --replay-scale`);
  const highPercent = wholePercent(options.high);
  const lowPercent = wholePercent(options.low);
  if (highPercent === undefined || lowPercent === undefined)
    throw new Error(`the gateway takes whole percents: --high ${options.high} and --low ${options.low} must be hundredths to replay`);
  const dataDir = mkdtempSync(join(options.storeDir, 'objectcache-capacity-replay-'));
  let gateway: GatewayProcess | undefined;
  let client: ObjectCacheClient | undefined;
  try {
    gateway = await startGatewayProcess({
      dataDir,
      args: [
        '--budget',
        `${BUCKET}=${Math.floor(budgetBytes)}`,
        '--budget-high-percent',
        String(highPercent),
        '--budget-low-percent',
        String(lowPercent),
        ...(options.evictRate === undefined ? [] : ['--evict-rate', String(options.evictRate)]),
        '--capacity-sync-ms',
        '200',
        '--capacity-lease-ms',
        '1000',
      ],
    });
    client = new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: BENCH_CLIENT });
    await client.ensureBucket();
    await untilLeader(gateway.adminUrl);
    const running = gateway;
    const cpuSeconds = (): number => running.pids().reduce((total, pid) => total + processUsage(pid).cpuSeconds, 0);
    const cpuBefore = cpuSeconds();
    const result = await replay(trace, client, gateway.adminUrl, layerBytes, options);
    const gatewayCpuMsPerRequest = ((cpuSeconds() - cpuBefore) * 1000) / trace.requests.length;
    // The last writes may have passed the high mark: let one trimming pass (every 250 ms) run.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const bucket = await bucketReport(gateway.adminUrl);
    const evictions: Record<string, number> = {};
    for (const sample of metricSamples(await metricsText(gateway.adminUrl), 'objectcache_evictions_total')) {
      if (sample.labels['bucket'] === BUCKET) evictions[sample.labels['reason'] ?? ''] = sample.value;
    }
    return { ...result, bucket, evictions, gatewayCpuMsPerRequest };
  } finally {
    await client?.close();
    await gateway?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The share as a whole percent (0.95: 95), or undefined when it is not one. */
export function wholePercent(share: number): number | undefined {
  const percent = Math.round(share * 100);
  return Math.abs(share * 100 - percent) < 1e-9 ? percent : undefined;
}

async function replay(
  trace: Trace,
  client: ObjectCacheClient,
  adminUrl: string,
  layerBytes: number,
  options: ReplayOptions,
): Promise<Omit<ReplayResult, 'bucket' | 'evictions' | 'gatewayCpuMsPerRequest'>> {
  const chunk = syntheticChunk(trace.params.seed, 0, trace.chunkBytes);
  const longest = trace.requests.reduce((most, r) => Math.max(most, r.keys.length), 0);
  // One target for every fetch: what an engine reads into is its own (paged) memory.
  const target = new Uint8Array(longest * trace.chunkBytes);
  const geometry = { layout: 'KV_L2TD', layers: LAYERS, layerBytes } as const;
  const descriptor = (keys: readonly string[]): DescriptorInput => ({
    version: 1,
    keys: [...keys],
    layers: LAYERS,
    chunkTokens: trace.chunkTokens,
    layerBytes,
    layout: 'KV_L2TD',
    delivery: 'layer-major',
  });
  let prefixTokens = 0;
  let hitTokens = 0;
  let bytesRead = 0;
  let bytesWritten = 0;
  let refetches = 0;
  let lostHitTokens = 0;
  let peakBytes = 0;
  let leastFullBytes = Infinity;
  const bytesOverTime: [number, number, number][] = [];
  const lowBytes = (await bucketReport(adminUrl)).lowBytes;
  const started = performance.now();
  for (const [at, request] of trace.requests.entries()) {
    const keys = request.keys;
    const matched = keys.length === 0 ? 0 : await client.lookup(keys);
    let hits = matched;
    for (let attempt = 0; hits > 0; attempt++) {
      try {
        await client.fetch(descriptor(keys.slice(0, hits)), { transport: 'post', target });
        break;
      } catch (error) {
        // Trimming deleted a hit chunk after the lookup (a read holds its chunks only once it has
        // begun): look up again, as an engine whose load failed would.
        if (!(error instanceof ObjectCacheError && error.code === 'OC_ERR_CHUNK_MISSING') || attempt >= MAX_REFETCHES) throw error;
        refetches++;
        hits = await client.lookup(keys);
      }
    }
    const missing = keys.slice(hits);
    await client.putChunks(
      missing,
      missing.map(() => chunk),
      { concurrency: options.putConcurrency, layout: geometry },
    );
    if (at >= options.measureFrom) {
      prefixTokens += keys.length * trace.chunkTokens;
      hitTokens += hits * trace.chunkTokens;
      lostHitTokens += (matched - hits) * trace.chunkTokens;
      bytesRead += hits * trace.chunkBytes;
      bytesWritten += missing.length * trace.chunkBytes;
    }
    if ((at + 1) % SAMPLE_EVERY === 0) {
      for (const sample of metricSamples(await metricsText(adminUrl), 'objectcache_capacity_bytes')) {
        if (sample.labels['bucket'] !== BUCKET) continue;
        bytesOverTime.push([at + 1, Math.round(performance.now() - started) / 1000, sample.value]);
        peakBytes = Math.max(peakBytes, sample.value);
        if (peakBytes >= lowBytes) leastFullBytes = Math.min(leastFullBytes, sample.value);
      }
    }
    if (options.onProgress && options.progressEvery !== undefined && (at + 1) % options.progressEvery === 0) options.onProgress(at + 1, (performance.now() - started) / 1000);
  }
  const seconds = (performance.now() - started) / 1000;
  const requests = trace.requests.length - Math.min(options.measureFrom, trace.requests.length);
  return {
    requests,
    prefixTokens,
    hitTokens,
    hitRate: prefixTokens === 0 ? 0 : hitTokens / prefixTokens,
    bytesRead,
    bytesWritten,
    refetches,
    lostHitTokens,
    seconds,
    peakBytes,
    leastFullBytes: Number.isFinite(leastFullBytes) ? leastFullBytes : 0,
    bytesOverTime,
  };
}

/** Waits until the gateway holds the eviction lease (it trims only then). */
async function untilLeader(adminUrl: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!((await capacityDocument(adminUrl)) as { leader?: unknown }).leader) {
    if (Date.now() > deadline) throw new Error('the gateway did not take the eviction lease within 15 s');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function capacityDocument(adminUrl: string): Promise<unknown> {
  const response = await fetch(`${adminUrl}/capacity?top=0`);
  if (!response.ok) throw new Error(`${adminUrl}/capacity answered ${response.status}`);
  return response.json();
}

async function bucketReport(adminUrl: string): Promise<BucketReport> {
  const document = (await capacityDocument(adminUrl)) as { buckets?: (BucketReport & { bucket: string })[] };
  const bucket = document.buckets?.find((b) => b.bucket === BUCKET);
  if (!bucket) throw new Error(`the gateway's /capacity document does not name the bucket ${BUCKET}`);
  return { budget: bucket.budget, bytes: bucket.bytes, chunks: bucket.chunks, highBytes: bucket.highBytes, lowBytes: bucket.lowBytes };
}

async function metricsText(adminUrl: string): Promise<string> {
  const response = await fetch(`${adminUrl}/metrics`);
  if (!response.ok) throw new Error(`${adminUrl}/metrics answered ${response.status}`);
  return response.text();
}

/** The samples of one metric in Prometheus text format, with their labels. */
export function metricSamples(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  const samples: { labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== '{' && line[name.length] !== ' ')) continue;
    const close = line.lastIndexOf('}');
    const labels: Record<string, string> = {};
    if (line[name.length] === '{')
      for (const [, label, value] of line.slice(name.length + 1, close).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[label as string] = value as string;
    samples.push({
      labels,
      value: Number(
        line
          .slice(close === -1 ? name.length : close + 1)
          .trim()
          .split(' ')[0],
      ),
    });
  }
  return samples;
}
