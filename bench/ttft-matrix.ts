/**
 * The TTFT benchmark of DESIGN.md section 10 (paper section 5.5, figure 13): how close does KV
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
 *   objectcache bench [--quick] [--include-64k] [--reps N] [--granularities 16,64,256]
 *   npm run bench -- --quick
 */
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Writable } from 'node:stream';
import { ObjectCacheClient } from '../client/client.js';
import { syntheticChunk } from '../client/kv-layout.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { directGet, directPut, directS3, inParallel, type DirectS3 } from './direct-s3.js';
import { processUsage } from './process-usage.js';
import { BENCH_CLIENT, startGatewayProcess } from './gateway-process.js';
import { installMinio, repoRoot, startMinio } from './minio.js';
import { groupedBarSvg } from './report/svg.js';

export const METHODS = ['Local-LW', 'S3-CW', 'S3-LW', 'OC-CW', 'OC-LW'] as const;
type Method = (typeof METHODS)[number];

const L = 32;
const BYTES_PER_TOKEN_PER_LAYER = 4096;
const CONCURRENCY = 32;

interface Config {
  readonly context: number;
  readonly hitRate: number;
  readonly G: number;
  readonly N: number;
  readonly S: number;
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
}

/** A simulated GPU: layer l computes for c ms once it is ready and layer l-1 is done. */
async function simulatedCompute(ready: readonly Promise<unknown>[], msPerLayer: number, start: number): Promise<number> {
  for (const layer of ready) {
    await layer;
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

async function measure(method: Method, cfg: Config, ctx: { direct: DirectS3; client: ObjectCacheClient; keys: string[]; local: Buffer; target: Uint8Array }): Promise<Measurement> {
  const s = cfg.N * cfg.S;
  const ready = Array.from({ length: L }, deferred);
  const start = performance.now();
  const compute = simulatedCompute(ready.map((d) => d.promise), cfg.msPerLayer, start);
  let lastArrival = 0;
  let firstLayerMs = 0;
  let backendReads = 0;
  const arrive = (l: number): void => {
    const t = performance.now() - start;
    if (l === 0) firstLayerMs = t;
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
    case 'OC-LW': {
      const descriptor: DescriptorInput = { version: 1, keys: ctx.keys, layers: L, chunkTokens: cfg.G, layerBytes: cfg.S, layout: 'KV_L2TD', delivery: 'layer-major', mode: method === 'OC-LW' ? 'layerwise' : 'chunkwise', computeMsPerLayer: cfg.msPerLayer };
      const result = await ctx.client.fetch(descriptor, { transport: 'post', target: ctx.target, onLayerReady: (l) => arrive(l) });
      backendReads = result.summary.backendReads;
      break;
    }
  }
  const ttftMs = await compute;
  const rate = (s * L) / (lastArrival / 1000);
  return { method, ttftMs, predictedTtftMs: predictTtft(method !== 'S3-CW' && method !== 'OC-CW', s, rate, cfg.msPerLayer), gbPerSec: rate / 1e9, backendReads, firstLayerMs };
}

export interface TtftBenchOptions {
  readonly quick: boolean;
  readonly include64k: boolean;
  readonly reps: number;
  readonly granularities: readonly number[];
}

function progress(out: Writable, done: number, total: number, label: string): void {
  const width = 30;
  const filled = Math.round((done / total) * width);
  out.write(`\r[${'='.repeat(filled)}${' '.repeat(width - filled)}] ${done}/${total} ${label.padEnd(36)}`);
}

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
  const settings = { ...options, contexts, granularities, hitRates, model: 'meta-llama/Llama-3.1-8B', clientConcurrency: CONCURRENCY };
  stdout.write(`objectcache bench: node ${process.version}, ${cpus().length} cores; settings ${JSON.stringify(settings)}\n`);

  const minio = await startMinio({ binary: installMinio(), dataDir: mkdtempSync(join(tmpdir(), 'objectcache-bench-ttft-')) });
  const gateway = await startGatewayProcess({ minio });
  const direct = directS3(minio, CONCURRENCY);
  const client = new ObjectCacheClient({ endpoint: gateway.url, bucket: 'ttft-bench', credentials: BENCH_CLIENT });
  const rows: (Measurement & { context: number; hitRate: number; G: number; N: number; overheadPct: number })[] = [];
  const gatewayUsage: { config: string; cpuSeconds: number }[] = [];
  const steps = configs.length * METHODS.length * options.reps;
  let done = 0;
  try {
    await directPut(direct, '/ttft-bench');
    for (const cfg of configs) {
      const label = `${cfg.context / 1024}K@${cfg.hitRate * 100}% G=${cfg.G}`;
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
      const ctx = { direct, client, keys, local, target };
      await measure('OC-LW', cfg, ctx); // warm the gateway path for this data set
      const results = new Map<Method, Measurement[]>();
      const cpuBefore = processUsage(gateway.child.pid as number).cpuSeconds;
      for (let r = 0; r < options.reps; r++) {
        for (const method of METHODS) {
          progress(stderr, done, steps, `${label} ${method}`);
          const m = await measure(method, cfg, ctx);
          results.set(method, [...(results.get(method) ?? []), m]);
          done++;
        }
      }
      gatewayUsage.push({ config: label, cpuSeconds: processUsage(gateway.child.pid as number).cpuSeconds - cpuBefore });
      const mean = (method: Method, pick: (m: Measurement) => number): number => {
        const list = results.get(method) ?? [];
        return list.reduce((sum, m) => sum + pick(m), 0) / list.length;
      };
      const localTtft = mean('Local-LW', (m) => m.ttftMs);
      for (const method of METHODS) {
        rows.push({
          context: cfg.context,
          hitRate: cfg.hitRate,
          G: cfg.G,
          N: cfg.N,
          method,
          ttftMs: mean(method, (m) => m.ttftMs),
          predictedTtftMs: mean(method, (m) => m.predictedTtftMs),
          gbPerSec: mean(method, (m) => m.gbPerSec),
          backendReads: mean(method, (m) => m.backendReads),
          firstLayerMs: mean(method, (m) => m.firstLayerMs),
          overheadPct: ((mean(method, (m) => m.ttftMs) - localTtft) / localTtft) * 100,
        });
      }
    }
    progress(stderr, done, steps, 'done');
    stderr.write('\n');
  } finally {
    await client.close();
    await direct.pool.close();
    const peak = processUsage(gateway.child.pid as number).peakRssBytes;
    gatewayUsage.push({ config: 'peak RSS (bytes)', cpuSeconds: peak });
    await gateway.stop();
    await minio.destroy();
  }
  const outDir = join(repoRoot(), 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  const peakRss = gatewayUsage.at(-1)?.cpuSeconds ?? NaN;
  const cpu = gatewayUsage.slice(0, -1);
  const result = { benchmark: 'ttft-matrix', date: new Date().toISOString(), node: process.version, cores: cpus().length, settings, rows, gateway: { cpuSecondsPerConfig: cpu, peakRssBytes: peakRss } };
  writeFileSync(join(outDir, 'ttft-latest.json'), `${JSON.stringify(result, null, 2)}\n`);
  const report = renderReport(result);
  writeFileSync(join(outDir, 'ttft-report.md'), report);
  const groups = [...new Set(rows.map((r) => `${r.context / 1024}K ${r.hitRate * 100}% G${r.G}`))];
  const svg = groupedBarSvg({
    title: 'TTFT overhead over Local-LW (Llama-3.1-8B, simulated A100 compute)',
    yLabel: 'TTFT overhead (%)',
    groups,
    series: METHODS.filter((m) => m !== 'Local-LW').map((method) => ({ name: method, values: groups.map((g) => rows.find((r) => `${r.context / 1024}K ${r.hitRate * 100}% G${r.G}` === g && r.method === method)?.overheadPct ?? null) })),
  });
  writeFileSync(join(outDir, 'ttft-overhead.svg'), svg);
  writeSchedulerFigure(outDir);
  stdout.write(report);
  return 0;
}

type Result = { date: string; node: string; settings: unknown; rows: (Measurement & { context: number; hitRate: number; G: number; N: number; overheadPct: number })[]; gateway: { cpuSecondsPerConfig: { config: string; cpuSeconds: number }[]; peakRssBytes: number } };

export function renderReport(result: Result): string {
  const lines: string[] = [];
  lines.push(`# TTFT benchmark (${result.date.slice(0, 10)}, Node ${result.node})`, '');
  lines.push(`Settings: \`${JSON.stringify(result.settings)}\``, '');
  lines.push('| context | hit | G | N | method | TTFT ms | eq. 3 ms | overhead vs Local-LW | GB/s | layer 0 ms | backend reads |', '|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of result.rows) {
    lines.push(`| ${r.context / 1024}K | ${r.hitRate * 100}% | ${r.G} | ${r.N} | ${r.method} | ${r.ttftMs.toFixed(0)} | ${r.predictedTtftMs.toFixed(0)} | ${r.method === 'Local-LW' ? '—' : `${r.overheadPct.toFixed(1)}%`} | ${r.gbPerSec.toFixed(3)} | ${r.firstLayerMs.toFixed(0)} | ${Math.round(r.backendReads)} |`);
  }
  lines.push('', 'Gateway CPU seconds per configuration (all repetitions of OC-CW and OC-LW, plus the others\u2019 idle time):', '');
  for (const u of result.gateway.cpuSecondsPerConfig) lines.push(`- ${u.config}: ${u.cpuSeconds.toFixed(2)} s`);
  lines.push(`- gateway peak RSS: ${(result.gateway.peakRssBytes / 1024 ** 2).toFixed(0)} MiB`, '');
  const find = (context: number, hit: number, G: number, method: Method): (typeof result.rows)[number] | undefined => result.rows.find((r) => r.context === context && r.hitRate === hit && r.G === G && r.method === method);
  lines.push('Targets:', '');
  for (const [context, hit] of [[16384, 0.5], [4096, 0.5]] as const) {
    const r = find(context, hit, 64, 'OC-LW');
    if (r) lines.push(`- OC-LW overhead over Local-LW at ${context / 1024}K, ${hit * 100}% hit, G=64: ${r.overheadPct.toFixed(1)}% (target <= 10%: ${r.overheadPct <= 10 ? 'met' : 'not met'})`);
  }
  for (const r of result.rows.filter((x) => x.context === 16384 && x.method === 'OC-LW')) {
    const cw = find(r.context, r.hitRate, r.G, 'S3-CW');
    if (cw) lines.push(`- 16K ${r.hitRate * 100}% G=${r.G}: OC-LW ${r.ttftMs.toFixed(0)} ms vs S3-CW ${cw.ttftMs.toFixed(0)} ms (${r.ttftMs < cw.ttftMs ? 'ahead' : 'behind'})`);
  }
  lines.push('', 'Figure: `ttft-overhead.svg` (paper figure 13 style); `scheduler-added-ttft.svg` (figure 16 style, from `npm run bench:scheduler`).', '');
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

export function parseBenchArgs(argv: readonly string[]): TtftBenchOptions {
  const { values } = parseArgs({
    args: [...argv],
    options: { quick: { type: 'boolean', default: false }, 'include-64k': { type: 'boolean', default: false }, reps: { type: 'string', default: '1' }, granularities: { type: 'string', default: '16,64,256' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
  });
  return { quick: values.quick ?? false, include64k: values['include-64k'] ?? false, reps: Math.max(1, Number(values.reps)), granularities: (values.granularities ?? '16,64,256').split(',').map(Number) };
}

export const BENCH_HELP = `Usage: objectcache bench [--quick] [--include-64k] [--reps N] [--granularities 16,64,256]

Runs the TTFT benchmark against a MinIO it builds and starts itself and a gateway process:
S3-CW, S3-LW, OC-CW, OC-LW and Local-LW for Llama-3.1-8B at 4K and 16K contexts (64K with
--include-64k), 50% and 87.5% hit, G = 16, 64, 256, with the simulated per-layer compute of the
paper's table A8. Writes bench/results/ttft-latest.json, ttft-report.md and SVG figures.
--quick runs 4K at G=64 only (a few minutes at most).`;

if (process.argv[1]?.endsWith('ttft-matrix.js')) {
  runTtftBench(parseBenchArgs(process.argv.slice(2)), process.stdout, process.stderr).catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
