// Over 600 lines: one benchmark's matrix of engines, stores and sizes, run and reported as one command.
/**
 * The TTFT benchmark (docs/benchmarks.md; section 5.5 and figure 13 of the paper, docs/references.md): how close does KV
 * served from object storage come to KV already in memory?
 *
 * Llama-3.1-8B layout; G in {16, 64, 256}; 4K and 16K contexts (64K with --include-64k); hit
 * rates 50% and 87.5%; per-layer compute times from bench/data/table-a8.json. Against one MinIO:
 *
 *   S3-CW     the client GETs every chunk object (32 in flight), then computes
 *   S3-LW     the client issues its own per-layer range GETs (N per layer) and computes per layer
 *   OC-CW     the gateway, chunkwise delivery
 *   OC-LW     the gateway, layerwise delivery
 *   Local-LW  layer-major bytes already in memory (copied per layer): the floor
 *
 * TTFT is measured with the simulated compute of paper equation 3: a loop that waits for layer l
 * to be ready and then for c_l ms on a timer, so transfer and compute really overlap; the
 * equation-3 prediction from the method's measured throughput is reported beside it.
 *
 * The paper's result is about the ratio of link rate to compute rate (100 Gbps against an
 * A100). This machine's link is the loopback through MinIO on shared cores, 10-50x slower, so
 * with table A8's compute every remote method is transfer-bound. Two things restore the ratio:
 *
 *   --placement pinned (default)  the gateway on its own core, MinIO and the load generator on
 *                                 the other(s), as separate machines would be (placement.ts)
 *   --link-scale auto (default)   measure the rate whole-object GETs from MinIO reach here, R,
 *                                 and multiply every per-layer compute time by K = 12.5 GB/s / R
 *                                 (bytes unchanged); `--link-scale K` fixes K; `1` turns it off
 *
 * With K > 1 every configuration is measured twice in one run, interleaved method by method:
 * with the scaled compute (the headline) and with table A8's compute as it is (the raw table).
 *
 *   objectcache bench [--quick] [--include-64k] [--reps N] [--granularities 16,64,256]
 *                     [--placement pinned|shared] [--link-scale auto|K]
 *   npm run bench -- --quick
 */
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Writable } from 'node:stream';
import { ObjectCacheClient } from '../client/client.js';
import { syntheticChunk } from '../client/kv-layout.js';
import { ObjectCacheError } from '../schemas/errors.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { directGet, directPut, directS3, inParallel, type DirectS3 } from './direct-s3.js';
import { cpuMeter, processUsage, type CpuPerGiB } from './process-usage.js';
import { BENCH_CLIENT, segmentEvents, startGatewayProcess } from './gateway-process.js';
import { installMinio, repoRoot, startMinio } from '../test/helpers/minio.js';
import { choosePlacement, pinThisProcess, type Placement, type PlacementMode } from './placement.js';
import { groupedBarSvg } from './report/svg.js';
import { timelineSvg } from './report/timeline-svg.js';

export const METHODS = ['Local-LW', 'S3-CW', 'S3-LW', 'OC-CW', 'OC-LW'] as const;
/** With --segments: OC-LW again, every read a repeated one served from the prefix's packed segment (docs/segments.md). */
const SEGMENT_METHOD = 'OC-LW-SEG';
type Method = (typeof METHODS)[number] | typeof SEGMENT_METHOD;

const L = 32;
const BYTES_PER_TOKEN_PER_LAYER = 4096;
const CONCURRENCY = 32;
/** The paper's link: 100 Gbps. */
const PAPER_LINK_BYTES_PER_SEC = 100e9 / 8;
/** The link-rate probe: whole-object GETs of this many objects of this size, 32 in flight. */
const PROBE_OBJECTS = 32;
const PROBE_OBJECT_BYTES = 8 * 1024 * 1024;
const PROBE_ROUNDS = 3;

interface Config {
  readonly context: number;
  readonly hitRate: number;
  readonly G: number;
  readonly N: number;
  readonly S: number;
  /** Table A8's compute per layer, unscaled. */
  readonly msPerLayer: number;
}

interface Measurement {
  readonly method: Method;
  readonly ttftMs: number;
  /** Paper eq. 3 with X = s / (the method's measured throughput). */
  readonly predictedTtftMs: number;
  readonly gbPerSec: number;
  readonly backendReads: number;
  readonly firstLayerMs: number;
  /** CPU-seconds per GiB delivered of the load generator, the gateway and MinIO (not for Local-LW). */
  readonly cpu?: CpuPerGiB;
  readonly readyMs: readonly number[];
  readonly computeStartMs: readonly number[];
}

export interface Row {
  readonly context: number;
  readonly hitRate: number;
  readonly G: number;
  readonly N: number;
  readonly method: Method;
  /** The factor every per-layer compute time was multiplied by (1: table A8 as it is). */
  readonly linkScale: number;
  readonly msPerLayer: number;
  readonly ttftMs: number;
  readonly predictedTtftMs: number;
  readonly gbPerSec: number;
  readonly backendReads: number;
  readonly firstLayerMs: number;
  readonly overheadPct: number;
  readonly cpu?: CpuPerGiB;
}

/** A simulated GPU: layer l computes for c ms once it is ready and layer l-1 is done. */
async function simulatedCompute(ready: readonly Promise<unknown>[], msPerLayer: number, start: number, starts: number[]): Promise<number> {
  for (const layer of ready) {
    await layer;
    starts.push(performance.now() - start);
    await new Promise((r) => setTimeout(r, msPerLayer));
  }
  return performance.now() - start;
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Paper equation 3; layerwise when `layerwise`, else transfer then compute. */
function predictTtft(layerwise: boolean, bytesPerLayer: number, rateBytesPerSec: number, msPerLayer: number): number {
  const x = (bytesPerLayer / rateBytesPerSec) * 1000;
  if (!layerwise) return x * L + msPerLayer * L;
  return x + (L - 1) * Math.max(x, msPerLayer) + msPerLayer;
}

interface Context {
  readonly direct: DirectS3;
  readonly client: ObjectCacheClient;
  readonly keys: string[];
  readonly local: Buffer;
  readonly target: Uint8Array;
  readonly pids: Readonly<Record<string, number>>;
  /** With --segments: the client of the gateway that packs (OC-LW-SEG), and its processes. */
  readonly segClient?: ObjectCacheClient | undefined;
  readonly segPids?: Readonly<Record<string, number>> | undefined;
}

async function measure(method: Method, cfg: Config, msPerLayer: number, ctx: Context): Promise<Measurement> {
  const s = cfg.N * cfg.S;
  const ready = Array.from({ length: L }, deferred);
  const readyMs: number[] = [];
  const computeStartMs: number[] = [];
  const meter = method === 'Local-LW' ? undefined : cpuMeter(method === SEGMENT_METHOD ? (ctx.segPids ?? ctx.pids) : ctx.pids);
  const start = performance.now();
  const compute = simulatedCompute(
    ready.map((d) => d.promise),
    msPerLayer,
    start,
    computeStartMs,
  );
  let lastArrival = 0;
  let backendReads = 0;
  const arrive = (l: number): void => {
    const t = performance.now() - start;
    readyMs[l] = t;
    lastArrival = Math.max(lastArrival, t);
    ready[l]?.resolve();
  };
  switch (method) {
    case 'Local-LW':
      for (let l = 0; l < L; l++) {
        ctx.local.copy(ctx.target, l * s, l * s, (l + 1) * s);
        arrive(l);
        await new Promise((r) => setImmediate(r));
      }
      break;
    case 'S3-CW':
      await inParallel(cfg.N, CONCURRENCY, async (c) => (await directGet(ctx.direct, `/ttft-bench/${ctx.keys[c]}`)).length);
      for (let l = 0; l < L; l++) arrive(l);
      backendReads = cfg.N;
      break;
    case 'S3-LW':
      for (let l = 0; l < L; l++) {
        await inParallel(cfg.N, CONCURRENCY, async (c) => {
          (await directGet(ctx.direct, `/ttft-bench/${ctx.keys[c]}`, [l * cfg.S, (l + 1) * cfg.S - 1])).copy(ctx.target, l * s + c * cfg.S);
        });
        arrive(l);
      }
      backendReads = cfg.N * L;
      break;
    case 'OC-CW':
    case 'OC-LW':
    case SEGMENT_METHOD: {
      const descriptor: DescriptorInput = {
        version: 1,
        keys: ctx.keys,
        layers: L,
        chunkTokens: cfg.G,
        layerBytes: cfg.S,
        layout: 'KV_L2TD',
        delivery: 'layer-major',
        mode: method === 'OC-CW' ? 'chunkwise' : 'layerwise',
        computeMsPerLayer: msPerLayer,
      };
      const client = method === SEGMENT_METHOD ? (ctx.segClient as ObjectCacheClient) : ctx.client;
      const result = await client.fetch(descriptor, { transport: 'post', target: ctx.target, onLayerReady: (l) => arrive(l) });
      backendReads = result.summary.backendReads;
      break;
    }
  }
  // CPU up to the last byte, not through the simulated compute that follows.
  const cpu = meter?.(s * L);
  const ttftMs = await compute;
  const rate = (s * L) / (lastArrival / 1000);
  return {
    method,
    ttftMs,
    predictedTtftMs: predictTtft(method !== 'S3-CW' && method !== 'OC-CW', s, rate, msPerLayer),
    gbPerSec: rate / 1e9,
    backendReads,
    firstLayerMs: readyMs[0] ?? 0,
    readyMs,
    computeStartMs,
    ...(cpu ? { cpu } : {}),
  };
}

/** The rate whole-object GETs from MinIO reach on this machine and placement (median of rounds). */
async function probeLinkRate(direct: DirectS3): Promise<number> {
  const keys = Array.from({ length: PROBE_OBJECTS }, (_, i) => `/ttft-bench/probe/${String(i).padStart(3, '0')}`);
  await inParallel(keys.length, 8, async (i) => directPut(direct, keys[i] as string, syntheticChunk(7, i, PROBE_OBJECT_BYTES)));
  const rates: number[] = [];
  for (let round = 0; round < PROBE_ROUNDS + 1; round++) {
    const started = performance.now();
    await inParallel(keys.length, CONCURRENCY, async (i) => (await directGet(direct, keys[i] as string)).length);
    // The first round warms connections and caches; it is not counted.
    if (round > 0) rates.push((PROBE_OBJECTS * PROBE_OBJECT_BYTES) / ((performance.now() - started) / 1000));
  }
  return median(rates);
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

export interface TtftBenchOptions {
  readonly quick: boolean;
  readonly include64k: boolean;
  readonly reps: number;
  readonly granularities: readonly number[];
  readonly placement: PlacementMode;
  /** 'auto': K = the paper's link / the measured whole-object GET rate; a number: that K. */
  readonly linkScale: 'auto' | number;
  /** Also OC-LW-SEG: a second gateway with --segments on, each prefix packed by its first read. */
  readonly segments?: boolean;
}

function progress(out: Writable, done: number, total: number, label: string): void {
  const width = 30;
  const filled = Math.round((done / total) * width);
  out.write(`\r[${'='.repeat(filled)}${' '.repeat(width - filled)}] ${done}/${total} ${label.padEnd(40)}`);
}

const configLabel = (r: { context: number; hitRate: number; G: number }): string => `${r.context / 1024}K ${r.hitRate * 100}% G${r.G}`;

export async function runTtftBench(options: TtftBenchOptions, stdout: Writable, stderr: Writable): Promise<number> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const table = JSON.parse(readFileSync(join(repoRoot(), 'bench', 'data', 'table-a8.json'), 'utf8')) as { rows: { context: number; hitRate: number; msPerLayer: number }[] };
  const contexts = options.quick ? [4096] : options.include64k ? [4096, 16384, 65536] : [4096, 16384];
  const granularities = options.quick ? [64] : options.granularities;
  const hitRates = [0.5, 0.875];
  const configs: Config[] = [];
  for (const context of contexts) {
    for (const hitRate of hitRates) {
      for (const G of granularities) {
        const row = table.rows.find((r) => r.context === context && r.hitRate === hitRate);
        if (!row) throw new Error(`table A8 has no ${context}@${hitRate}`);
        configs.push({ context, hitRate, G, N: Math.floor((context * hitRate) / G), S: G * BYTES_PER_TOKEN_PER_LAYER, msPerLayer: row.msPerLayer });
      }
    }
  }
  const placement = choosePlacement(options.placement);
  const segments = options.segments === true;
  const methods: readonly Method[] = segments ? [...METHODS, SEGMENT_METHOD] : METHODS;
  const settings = {
    quick: options.quick,
    include64k: options.include64k,
    reps: options.reps,
    contexts,
    granularities,
    hitRates,
    model: 'meta-llama/Llama-3.1-8B',
    clientConcurrency: CONCURRENCY,
    placement: placement.mode,
    linkScale: options.linkScale,
    segments,
  };
  stdout.write(`objectcache bench: node ${process.version}, ${cpus().length} cores; settings ${JSON.stringify(settings)}\n`);
  stdout.write(`placement: ${placement.description}\n`);

  if (placement.othersCpus !== undefined) pinThisProcess(placement.othersCpus);
  const minio = await startMinio({
    binary: installMinio(),
    dataDir: mkdtempSync(join(tmpdir(), 'objectcache-bench-ttft-')),
    ...(placement.storeCpus !== undefined ? { cpus: placement.storeCpus } : {}),
  });
  const gateway = await startGatewayProcess({ minio, cpus: placement.gatewayCpus });
  const direct = directS3(minio, CONCURRENCY);
  const client = new ObjectCacheClient({ endpoint: gateway.url, bucket: 'ttft-bench', credentials: BENCH_CLIENT });
  const pids = { gateway: gateway.child.pid as number, minio: minio.process.pid as number };
  // --segments: a second gateway on the same core(s), packing each prefix at its first read.
  const segGateway = segments
    ? await startGatewayProcess({ minio, cpus: placement.gatewayCpus, args: ['--segments', 'on', '--segment-after-reads', '1', '--segment-min-bytes', '0'] })
    : undefined;
  const segClient = segGateway ? new ObjectCacheClient({ endpoint: segGateway.url, bucket: 'ttft-bench', credentials: BENCH_CLIENT }) : undefined;
  const segPids = segGateway ? { gateway: segGateway.child.pid as number, minio: minio.process.pid as number } : undefined;
  /** With --segments, each configuration's first read from the second gateway (the one that packs). */
  const firstReads: { config: string; ttftMs: number; firstLayerMs: number; gbPerSec: number; storedAfterMs: number }[] = [];
  const rows: Row[] = [];
  const gatewayUsage: { config: string; cpuSeconds: number }[] = [];
  let peakRss = NaN;
  let timeline: { config: string; linkScale: number; msPerLayer: number; panels: { method: Method; readyMs: readonly number[]; computeStartMs: readonly number[] }[] } | undefined;
  const timelineConfig = options.quick ? '4K 50% G64' : '16K 50% G64';
  let link: { bytesPerSec: number; scale: number; measured: boolean };
  try {
    await directPut(direct, '/ttft-bench');
    if (options.linkScale === 'auto') {
      stderr.write('measuring the whole-object GET rate from MinIO ...\n');
      const bytesPerSec = await probeLinkRate(direct);
      link = { bytesPerSec, scale: Math.max(1, Math.round((PAPER_LINK_BYTES_PER_SEC / bytesPerSec) * 10) / 10), measured: true };
    } else {
      link = { bytesPerSec: PAPER_LINK_BYTES_PER_SEC / options.linkScale, scale: options.linkScale, measured: false };
    }
    stdout.write(`link: ${link.measured ? `whole-object GETs from MinIO reach ${(link.bytesPerSec / 1e9).toFixed(3)} GB/s here; ` : ''}compute scaled by K = ${link.scale}\n`);
    const scales = link.scale === 1 ? [1] : [link.scale, 1];
    const steps = configs.length * methods.length * options.reps * scales.length;
    let done = 0;
    for (const cfg of configs) {
      const label = configLabel(cfg);
      const keys = Array.from({ length: cfg.N }, (_, c) => `kv/${cfg.context}-${cfg.hitRate}-${cfg.G}/${String(c).padStart(5, '0')}`);
      progress(stderr, done, steps, `${label} seeding`);
      const chunks = await inParallel(cfg.N, 8, async (c) => {
        const chunk = syntheticChunk(cfg.G * 7919 + cfg.context, c, L * cfg.S);
        await directPut(direct, `/ttft-bench/${keys[c]}`, chunk);
        return chunk;
      });
      // Local-LW's bytes: already layer-major, in memory.
      const s = cfg.N * cfg.S;
      const local = Buffer.allocUnsafe(s * L);
      chunks.forEach((chunk, c) => {
        for (let l = 0; l < L; l++) local.set(chunk.subarray(l * cfg.S, (l + 1) * cfg.S), l * s + c * cfg.S);
      });
      chunks.length = 0;
      const target = new Uint8Array(s * L);
      const ctx: Context = { direct, client, keys, local, target, pids, segClient, segPids };
      await measure('OC-LW', cfg, cfg.msPerLayer, ctx); // warm the gateway path for this data set
      if (segGateway) {
        // The first read packs the prefix (its TTFT is reported apart); the measured ones are repeated reads.
        const packed = await segmentEvents(segGateway.adminUrl, 'packed');
        const started = performance.now();
        const first = await measure(SEGMENT_METHOD, cfg, cfg.msPerLayer * (scales[0] ?? 1), ctx);
        const deadline = Date.now() + 180_000;
        while ((await segmentEvents(segGateway.adminUrl, 'packed')) <= packed) {
          if (Date.now() > deadline) throw new Error(`${label}: the prefix was not packed within 180 s`);
          await new Promise((r) => setTimeout(r, 100));
        }
        firstReads.push({ config: label, ttftMs: first.ttftMs, firstLayerMs: first.firstLayerMs, gbPerSec: first.gbPerSec, storedAfterMs: performance.now() - started });
      }
      const results = new Map<string, Measurement[]>();
      const cpuBefore = processUsage(pids.gateway).cpuSeconds;
      for (let r = 0; r < options.reps; r++) {
        for (const method of methods) {
          for (const scale of scales) {
            progress(stderr, done, steps, `${label} ${method}${scale === 1 ? '' : ` K=${scale}`}`);
            const m = await measure(method, cfg, cfg.msPerLayer * scale, ctx);
            results.set(`${scale} ${method}`, [...(results.get(`${scale} ${method}`) ?? []), m]);
            done++;
          }
        }
      }
      gatewayUsage.push({ config: label, cpuSeconds: processUsage(pids.gateway).cpuSeconds - cpuBefore });
      for (const scale of scales) {
        const list = (method: Method): Measurement[] => results.get(`${scale} ${method}`) ?? [];
        const mean = (method: Method, pick: (m: Measurement) => number): number => list(method).reduce((sum, m) => sum + pick(m), 0) / list(method).length;
        const localTtft = mean('Local-LW', (m) => m.ttftMs);
        for (const method of methods) {
          const cpuNames = Object.keys(list(method)[0]?.cpu ?? {});
          const cpu = cpuNames.length > 0 ? Object.fromEntries(cpuNames.map((name) => [name, median(list(method).map((m) => m.cpu?.[name] ?? NaN))])) : undefined;
          const ttftMs = mean(method, (m) => m.ttftMs);
          rows.push({
            context: cfg.context,
            hitRate: cfg.hitRate,
            G: cfg.G,
            N: cfg.N,
            method,
            linkScale: scale,
            msPerLayer: cfg.msPerLayer * scale,
            ttftMs,
            predictedTtftMs: mean(method, (m) => m.predictedTtftMs),
            gbPerSec: mean(method, (m) => m.gbPerSec),
            backendReads: mean(method, (m) => m.backendReads),
            firstLayerMs: mean(method, (m) => m.firstLayerMs),
            overheadPct: ((ttftMs - localTtft) / localTtft) * 100,
            ...(cpu ? { cpu } : {}),
          });
        }
        if (label === timelineConfig && scale === scales[0]) {
          const pick = (method: Method): { method: Method; readyMs: readonly number[]; computeStartMs: readonly number[] } => {
            const m = list(method).at(-1) as Measurement;
            return { method, readyMs: m.readyMs, computeStartMs: m.computeStartMs };
          };
          timeline = { config: label, linkScale: scale, msPerLayer: cfg.msPerLayer * scale, panels: [pick('S3-CW'), pick('S3-LW'), pick('OC-LW')] };
        }
      }
    }
    progress(stderr, done, steps, 'done');
    stderr.write('\n');
  } finally {
    await client.close();
    await segClient?.close();
    await segGateway?.stop();
    await direct.pool.close();
    peakRss = processUsage(pids.gateway).peakRssBytes;
    await gateway.stop();
    await minio.destroy();
  }
  const outDir = join(repoRoot(), 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  const result: Result = {
    benchmark: 'ttft-matrix',
    date: new Date().toISOString(),
    node: process.version,
    cores: cpus().length,
    settings,
    placement,
    link,
    rows,
    gateway: { cpuSecondsPerConfig: gatewayUsage, peakRssBytes: peakRss },
    ...(timeline ? { timeline } : {}),
    ...(segments ? { firstReads } : {}),
  };
  // A --segments run has its own files: the headline figures (docs/benchmarks.md) stay the plain run's.
  const name = segments ? 'ttft-segments' : 'ttft';
  writeFileSync(join(outDir, `${name}-latest.json`), `${JSON.stringify(result, null, 2)}\n`);
  const report = renderReport(result);
  writeFileSync(join(outDir, segments ? 'ttft-segments-report.md' : 'ttft-report.md'), report);
  if (segments) {
    stdout.write(report);
    return 0;
  }
  for (const scale of [...new Set(rows.map((r) => r.linkScale))]) {
    const scaled = rows.filter((r) => r.linkScale === scale);
    const groups = [...new Set(scaled.map(configLabel))];
    const svg = groupedBarSvg({
      title:
        scale === 1
          ? 'TTFT overhead over Local-LW, table A8 compute as is (Llama-3.1-8B)'
          : `TTFT overhead over Local-LW, compute x${scale} for this machine's link (Llama-3.1-8B)`,
      yLabel: 'TTFT overhead (%)',
      groups,
      series: METHODS.filter((m) => m !== 'Local-LW').map((method) => ({
        name: method,
        values: groups.map((g) => scaled.find((r) => configLabel(r) === g && r.method === method)?.overheadPct ?? null),
      })),
    });
    writeFileSync(join(outDir, scale === 1 && link.scale !== 1 ? 'ttft-overhead-unscaled.svg' : 'ttft-overhead.svg'), svg);
  }
  if (timeline) {
    const t = timeline;
    writeFileSync(
      join(outDir, 'ttft-timeline.svg'),
      timelineSvg({
        title: `Per-layer timeline, ${t.config}, compute ${t.msPerLayer.toFixed(0)} ms per layer (K = ${t.linkScale})`,
        panels: t.panels.map((p) => ({ name: p.method, readyMs: p.readyMs, computeStartMs: p.computeStartMs, computeMs: t.msPerLayer })),
      }),
    );
  }
  writeSchedulerFigure(outDir);
  stdout.write(report);
  return 0;
}

export interface Result {
  readonly benchmark?: string;
  readonly date: string;
  readonly node: string;
  readonly cores?: number;
  readonly settings: unknown;
  readonly placement: Placement;
  readonly link: { readonly bytesPerSec: number; readonly scale: number; readonly measured: boolean };
  readonly rows: readonly Row[];
  readonly gateway: { readonly cpuSecondsPerConfig: readonly { config: string; cpuSeconds: number }[]; readonly peakRssBytes: number };
  readonly timeline?: unknown;
  /** --segments: each configuration's first read from the gateway that packs, and when its segment was stored. */
  readonly firstReads?: readonly { config: string; ttftMs: number; firstLayerMs: number; gbPerSec: number; storedAfterMs: number }[];
}

/** Bytes per layer / compute per layer: the rate at which transfer just hides behind compute. */
function hidingGBps(r: Row): number {
  return (r.N * r.G * BYTES_PER_TOKEN_PER_LAYER) / (r.msPerLayer / 1000) / 1e9;
}

function cpuCell(cpu: CpuPerGiB | undefined): string {
  if (!cpu) return '—';
  const f = (name: string): string => (cpu[name] !== undefined && Number.isFinite(cpu[name]) ? cpu[name].toFixed(2) : '—');
  return `${f('client')} / ${f('gateway')} / ${f('minio')}`;
}

function rowsTable(rows: readonly Row[]): string[] {
  const lines = [
    '| context | hit | G | N | compute ms/layer | method | TTFT ms | eq. 3 ms | overhead vs Local-LW | GB/s | layer 0 ms | backend reads | CPU s/GiB client / gateway / MinIO |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.context / 1024}K | ${r.hitRate * 100}% | ${r.G} | ${r.N} | ${r.msPerLayer.toFixed(1)} | ${r.method} | ${r.ttftMs.toFixed(0)} | ${r.predictedTtftMs.toFixed(0)} | ${r.method === 'Local-LW' ? '—' : `${r.overheadPct.toFixed(1)}%`} | ${r.gbPerSec.toFixed(3)} | ${r.firstLayerMs.toFixed(0)} | ${Math.round(r.backendReads)} | ${r.method === 'Local-LW' ? '—' : cpuCell(r.cpu)} |`,
    );
  }
  return lines;
}

export function renderReport(result: Result): string {
  const lines: string[] = [];
  const scales = [...new Set(result.rows.map((r) => r.linkScale))].sort((a, b) => b - a);
  const K = scales[0] ?? 1;
  lines.push(`# TTFT benchmark (${result.date.slice(0, 10)}, Node ${result.node})`, '');
  lines.push(`Settings: \`${JSON.stringify(result.settings)}\``, '');
  lines.push(`**Placement**: ${result.placement.description}.`);
  if (result.placement.mode === 'pinned') {
    lines.push(
      "S3-CW and S3-LW never touch the gateway, so under this placement they run on the load generator's and MinIO's core(s) alone and the gateway's core idles; OC-CW and OC-LW have that core in addition, as a gateway on its own machine would. Local-LW runs on the load generator's core. `--placement shared` gives every method every core.",
    );
  }
  lines.push('');
  const link = result.link;
  lines.push(
    `**Link scale**: ${link.measured ? `whole-object GETs from MinIO reached ${(link.bytesPerSec / 1e9).toFixed(3)} GB/s here (${PROBE_OBJECTS} objects of ${PROBE_OBJECT_BYTES / 1024 ** 2} MiB, ${CONCURRENCY} in flight, median of ${PROBE_ROUNDS} rounds); the paper's link is 100 Gbps (12.5 GB/s), so` : 'fixed by --link-scale:'} K = ${link.scale}. Every per-layer compute time is multiplied by K, bytes are unchanged, so table A8's ratio of transfer to compute holds.`,
    '',
  );
  const computes = [...new Map(result.rows.filter((r) => r.linkScale === K).map((r) => [`${r.context / 1024}K ${r.hitRate * 100}%`, r.msPerLayer])).entries()];
  if (K !== 1) lines.push(`Compute per layer (table A8, then x${K}): ${computes.map(([c, ms]) => `${c} ${(ms / K).toFixed(2)} -> ${ms.toFixed(1)} ms`).join('; ')}.`, '');
  for (const scale of scales) {
    lines.push(scale === 1 ? "## Table A8's compute as it is (K = 1)" : `## Compute x${scale}: the paper's link-to-compute ratio`, '');
    lines.push(...rowsTable(result.rows.filter((r) => r.linkScale === scale)), '');
  }
  lines.push(
    'CPU per GiB is measured from the first byte requested to the last byte ready (client = the load generator, every thread; gateway and MinIO from /proc), the median over repetitions.',
    '',
  );
  lines.push('Gateway CPU seconds per configuration (every repetition and scale of OC-CW and OC-LW, plus the others\u2019 idle time):', '');
  for (const u of result.gateway.cpuSecondsPerConfig) lines.push(`- ${u.config}: ${u.cpuSeconds.toFixed(2)} s`);
  lines.push(`- gateway peak RSS: ${(result.gateway.peakRssBytes / 1024 ** 2).toFixed(0)} MiB`, '');

  const find = (r: Row, method: Method): Row | undefined =>
    result.rows.find((x) => x.context === r.context && x.hitRate === r.hitRate && x.G === r.G && x.linkScale === r.linkScale && x.method === method);
  const headline = result.rows.filter((r) => r.linkScale === K && r.method === 'OC-LW');
  lines.push(`## Targets (${K === 1 ? 'unscaled' : `compute x${K}`})`, '');
  if (!headline.some((r) => r.context === 16384)) lines.push('- The targets are stated for 16K contexts, and this run has none (run without --quick).');
  for (const r of headline.filter((x) => x.context === 16384 && x.G >= 64)) {
    lines.push(
      `- OC-LW overhead over Local-LW at 16K, ${r.hitRate * 100}% hit, G=${r.G}: ${r.overheadPct.toFixed(1)}% (target <= 10%: ${r.overheadPct <= 10 ? 'met' : 'not met'})`,
    );
  }
  for (const r of headline.filter((x) => x.context === 16384)) {
    const cw = find(r, 'S3-CW');
    const lw = find(r, 'S3-LW');
    if (!cw || !lw) continue;
    const ahead = r.ttftMs < cw.ttftMs && r.ttftMs < lw.ttftMs;
    const why = ahead
      ? ''
      : `; ${r.gbPerSec < hidingGBps(r) ? `OC-LW delivered ${r.gbPerSec.toFixed(2)} GB/s where hiding transfer behind this compute needs ${hidingGBps(r).toFixed(2)} GB/s` : `OC-LW's first layer came at ${r.firstLayerMs.toFixed(0)} ms`}`;
    lines.push(
      `- 16K ${r.hitRate * 100}% G=${r.G}: OC-LW ${r.ttftMs.toFixed(0)} ms vs S3-CW ${cw.ttftMs.toFixed(0)} ms and S3-LW ${lw.ttftMs.toFixed(0)} ms (${ahead ? 'ahead of both' : 'not ahead of both'}${why})`,
    );
  }
  lines.push('', '## What holds on this machine', '');
  const hidden = headline.filter((r) => r.gbPerSec >= hidingGBps(r));
  const within = headline.filter((r) => r.overheadPct <= 10);
  lines.push(
    `- OC-LW delivered at least the rate that hides transfer behind compute in ${hidden.length} of ${headline.length} configurations${K === 1 ? '' : ` under compute x${K}`}, and is within 10% of Local-LW in ${within.length} of them.`,
  );
  const short = headline.filter((r) => r.gbPerSec < hidingGBps(r));
  if (short.length > 0)
    lines.push(
      `- Needs a faster link (or gateway) than this machine's: ${short.map((r) => `${configLabel(r)} (needs ${hidingGBps(r).toFixed(2)} GB/s, got ${r.gbPerSec.toFixed(2)})`).join('; ')}.`,
    );
  const beatsCw = headline.filter((r) => {
    const cw = find(r, 'S3-CW');
    return cw !== undefined && r.ttftMs < cw.ttftMs;
  });
  lines.push(
    `- OC-LW ahead of S3-CW in ${beatsCw.length} of ${headline.length} configurations, of S3-LW in ${
      headline.filter((r) => {
        const lw = find(r, 'S3-LW');
        return lw !== undefined && r.ttftMs < lw.ttftMs;
      }).length
    }.`,
  );
  if (K !== 1) {
    const raw = result.rows.filter((r) => r.linkScale === 1 && r.method === 'OC-LW');
    lines.push(
      `- With table A8's compute as it is (K = 1), OC-LW is within 10% of Local-LW in ${raw.filter((r) => r.overheadPct <= 10).length} of ${raw.length} configurations: at an A100's compute speed this machine's link is the bottleneck for every remote method.`,
    );
  }
  lines.push(
    '',
    'Figures: `ttft-overhead.svg` (paper figure 13 style, the headline scale), `ttft-overhead-unscaled.svg` (K = 1, when scaled), `ttft-timeline.svg` (per-layer ready and compute times for one configuration), `scheduler-added-ttft.svg` (figure 16 style, from `npm run bench:scheduler`).',
    '',
  );
  if (result.firstReads) {
    lines.push(
      '',
      '## OC-LW-SEG: the read that packs each prefix (its first read, at the first scale)',
      '',
      '| configuration | TTFT ms | layer 0 ms | GB/s | segment stored after ms |',
      '|---|---|---|---|---|',
    );
    for (const f of result.firstReads)
      lines.push(`| ${f.config} | ${f.ttftMs.toFixed(0)} | ${f.firstLayerMs.toFixed(0)} | ${f.gbPerSec.toFixed(3)} | ${f.storedAfterMs.toFixed(0)} |`);
    lines.push('', 'Against OC-LW, repeated reads (OC-LW-SEG over OC-LW, TTFT and layer 0):', '');
    for (const r of result.rows.filter((x) => x.method === SEGMENT_METHOD)) {
      const lw = find(r, 'OC-LW');
      if (lw)
        lines.push(
          `- ${configLabel(r)} K=${r.linkScale}: TTFT ${(r.ttftMs / lw.ttftMs).toFixed(2)}x, layer 0 ${(r.firstLayerMs / lw.firstLayerMs).toFixed(2)}x, backend reads ${Math.round(r.backendReads)} against ${Math.round(lw.backendReads)}`,
        );
    }
  }
  return `${lines.join('\n')}\n`;
}

/** Figure 16 style: added TTFT per policy per workload, from the latest scheduler benchmark. */
function writeSchedulerFigure(outDir: string): void {
  let scheduler: { results: { workload: string; policy: string; meanAddedTtftMs: number }[] };
  try {
    scheduler = JSON.parse(readFileSync(join(outDir, 'scheduler-latest.json'), 'utf8')) as typeof scheduler;
  } catch {
    return;
  }
  const workloads = [...new Set(scheduler.results.map((r) => r.workload))];
  const policies = [...new Set(scheduler.results.map((r) => r.policy))];
  writeFileSync(
    join(outDir, 'scheduler-added-ttft.svg'),
    groupedBarSvg({
      title: 'Added TTFT over the unthrottled run, by policy (paper workloads, scaled)',
      yLabel: 'mean added TTFT (ms)',
      groups: workloads.map((w) => `workload ${w}`),
      series: policies.map((p) => ({ name: p, values: workloads.map((w) => scheduler.results.find((r) => r.workload === w && r.policy === p)?.meanAddedTtftMs ?? null) })),
    }),
  );
}

const usage = (message: string): ObjectCacheError => new ObjectCacheError('OC_ERR_CLIENT_USAGE', message);

export function parseBenchArgs(argv: readonly string[]): TtftBenchOptions {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: {
        quick: { type: 'boolean', default: false },
        'include-64k': { type: 'boolean', default: false },
        reps: { type: 'string', default: '1' },
        granularities: { type: 'string', default: '16,64,256' },
        placement: { type: 'string', default: 'pinned' },
        'link-scale': { type: 'string', default: 'auto' },
        segments: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    });
  } catch (error) {
    throw usage((error as Error).message);
  }
  const { values } = parsed;
  const placement = values.placement;
  if (placement !== 'pinned' && placement !== 'shared') throw usage(`--placement is pinned or shared, not ${String(placement)}`);
  const scale = values['link-scale'] ?? 'auto';
  const linkScale = scale === 'auto' ? 'auto' : Number(scale);
  if (linkScale !== 'auto' && !(Number.isFinite(linkScale) && linkScale >= 1)) throw usage(`--link-scale is auto or a number >= 1, not ${scale}`);
  const reps = Number(values.reps);
  if (!Number.isInteger(reps) || reps < 1) throw usage(`--reps is a whole number >= 1, not ${String(values.reps)}`);
  const granularities = (values.granularities ?? '16,64,256').split(',').map(Number);
  if (granularities.some((g) => !Number.isInteger(g) || g < 1))
    throw usage(`--granularities is a comma-separated list of chunk sizes in tokens, not ${String(values.granularities)}`);
  return { quick: values.quick ?? false, include64k: values['include-64k'] ?? false, reps, granularities, placement, linkScale, segments: values.segments ?? false };
}

export const BENCH_HELP = `Usage: objectcache bench [--quick] [--include-64k] [--reps N] [--granularities 16,64,256]
                        [--placement pinned|shared] [--link-scale auto|K] [--segments]

Runs the TTFT benchmark against a MinIO it builds and starts itself and a gateway process:
S3-CW, S3-LW, OC-CW, OC-LW and Local-LW for Llama-3.1-8B at 4K and 16K contexts (64K with
--include-64k), 50% and 87.5% hit, G = 16, 64, 256, with the simulated per-layer compute of the
paper's table A8.

  --placement pinned   the gateway on its own core, MinIO and the load generator on the others
                       (taskset; the default, falls back to shared where it cannot pin)
  --link-scale auto    measure whole-object GETs from MinIO and multiply the compute by
                       K = 12.5 GB/s (the paper's 100 Gbps) / that rate (default); K: a fixed
                       factor; 1: table A8 as it is. With K > 1 both are measured, interleaved.

  --segments           also OC-LW-SEG: OC-LW through a second gateway with packed segments on,
                       each prefix packed by a first read (reported apart), then every measured
                       read served from its segment (docs/segments.md). Writes
                       ttft-segments-latest.json and ttft-segments-report.md instead.

Writes bench/results/ttft-latest.json, ttft-report.md and SVG figures.
--quick runs 4K at G=64 only (a few minutes at most).`;

if (process.argv[1]?.endsWith('ttft-matrix.js')) {
  runTtftBench(parseBenchArgs(process.argv.slice(2)), process.stdout, process.stderr).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
