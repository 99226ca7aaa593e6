/**
 * Layerwise GET benchmark (issue: layerwise aggregated GET). Llama-3.1-8B layout, G in
 * {16, 64, 256}, 4K and 16K contexts at 87.5% hit, against one MinIO, in one run:
 *
 *   OC-LW  the gateway's layerwise GET (a separate `objectcache serve` process, POST form; on
 *          MinIO, or with --backend embedded on the gateway's own store)
 *   S3-LW  the client's own per-layer range GETs straight to MinIO (N per layer, 32 in flight)
 *   S3-CW  the client GETs whole chunk objects straight from MinIO (32 in flight)
 *
 * Reports delivered GB/s, backend reads per request, time to layer 0 (the median of the
 * repetitions) and the CPU-seconds per GiB of every process (client, gateway, MinIO, from /proc)
 * with the GB/s the CPU-sum model predicts from them; writes bench/results/layerwise-latest.json.
 *
 *   npm run bench:layerwise [-- --quick] [-- --reps 3 --contexts 4096,16384 --granularities 16,64,256]
 *   [-- --backend embedded]  (the gateway on its embedded store; baselines are its plain GETs)
 *   [-- --backend distributed]  (a 4-server, 8-drive erasure-coded MinIO; gateway and baselines
 *                               talk to its first server; "minio" CPU is all four servers)
 *   [-- --gateway-cli OTHER/dist/cli/main.js]  (another build's gateway, to compare builds)
 *   [-- --placement pinned]  (the gateway on the last core, MinIO and the load generator on the
 *                            others, as separate machines would be; placement.ts; default shared)
 *   (--gateway-args="--workers 2 ..." passes settings to the gateway; --profile-gateway DIR writes
 *   a V8 CPU profile of the gateway process)
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ObjectCacheClient } from '../client/client.js';
import { syntheticChunk } from '../client/kv-layout.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { PRESETS } from '../schemas/layouts.js';
import { directGetInto, directPut, directPutChunk, directS3, getWholeObjects, inParallel, type DirectS3 } from './direct-s3.js';
import { BENCH_CLIENT, startGatewayProcess } from './gateway-process.js';
import { installMinio, repoRoot, startDistributedMinio, startMinio } from '../test/helpers/minio.js';
import { choosePlacement, pinThisProcess } from './placement.js';
import { cpuMeter, formatCpu, memoryWatch, predictedGBps, type CpuPerGiB } from './process-usage.js';

const PRESET = PRESETS['llama-3.1-8b'] as NonNullable<(typeof PRESETS)[string]>;
const HIT = 0.875;
const CONCURRENCY = 32;

interface Sample {
  readonly seconds: number;
  /** CPU-seconds per GiB of each process, measured over this sample. */
  cpu?: CpuPerGiB;
  readonly firstLayerMs: number;
  readonly reads: number;
  /** Gateway-side: when the first layer group had been read (OC-LW only). */
  readonly serverFirstReadMs?: number;
  /** The gateway process's peak resident memory during the sample. */
  gatewayPeakRssBytes?: number;
}

/** S3-LW: per layer, N range GETs (the Table A3 loop of the paper, docs/references.md, done by the client). */
async function s3Layerwise(d: DirectS3, bucket: string, keys: readonly string[], S: number, L: number): Promise<Sample> {
  const started = performance.now();
  let firstLayerMs = 0;
  const target = new Uint8Array(keys.length * S * L);
  for (let l = 0; l < L; l++) {
    await inParallel(keys.length, CONCURRENCY, async (c) => {
      await directGetInto(d, `/${bucket}/${keys[c]}`, target, (l * keys.length + c) * S, [l * S, (l + 1) * S - 1]);
    });
    if (l === 0) firstLayerMs = performance.now() - started;
  }
  return { seconds: (performance.now() - started) / 1000, firstLayerMs, reads: keys.length * L };
}

/** S3-CW: every whole chunk object; layer 0 is usable only when all have arrived. */
async function s3Chunkwise(d: DirectS3, bucket: string, keys: readonly string[], target: Uint8Array, chunkBytes: number): Promise<Sample> {
  const started = performance.now();
  await getWholeObjects(d, bucket, keys, target, chunkBytes, CONCURRENCY);
  const seconds = (performance.now() - started) / 1000;
  return { seconds, firstLayerMs: seconds * 1000, reads: keys.length };
}

async function ocLayerwise(client: ObjectCacheClient, descriptor: DescriptorInput, target: Uint8Array): Promise<Sample> {
  const started = performance.now();
  const cpu = process.cpuUsage();
  const result = await client.fetch(descriptor, { transport: 'post', target });
  const used = process.cpuUsage(cpu);
  if (process.env['OBJECTCACHE_BENCH_DEBUG'])
    console.log(`    client CPU ${((used.user + used.system) / 1000).toFixed(0)} ms of ${(performance.now() - started).toFixed(0)} ms wall`);
  return {
    seconds: (performance.now() - started) / 1000,
    firstLayerMs: result.timeline[0]?.ms ?? 0,
    reads: result.summary.backendReads,
    serverFirstReadMs: result.summary.timings.firstReadMs,
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      reps: { type: 'string' },
      contexts: { type: 'string' },
      granularities: { type: 'string', default: '16,64,256' },
      'gateway-args': { type: 'string', default: '' },
      'profile-gateway': { type: 'string' },
      'gateway-node-args': { type: 'string', default: '' },
      backend: { type: 'string', default: 'minio' },
      'gateway-cli': { type: 'string' },
      out: { type: 'string' },
      placement: { type: 'string', default: 'shared' },
    },
  });
  const quick = values.quick ?? false;
  const reps = Number(values.reps ?? (quick ? 1 : 3));
  const contexts = (values.contexts ?? (quick ? '4096' : '4096,16384')).split(',').map(Number);
  const granularities = (values.granularities ?? '16,64,256').split(',').map(Number);
  const gatewayArgs = (values['gateway-args'] ?? '').split(' ').filter((s) => s !== '');
  if (values.backend !== 'minio' && values.backend !== 'embedded' && values.backend !== 'distributed') throw new Error('--backend is minio, distributed or embedded');
  if (values.placement !== 'pinned' && values.placement !== 'shared') throw new Error('--placement is pinned or shared');
  if (values.placement === 'pinned' && values.backend === 'distributed') throw new Error('--placement pinned runs one MinIO (--backend minio or embedded)');
  const placement = choosePlacement(values.placement);
  const settings = {
    reps,
    contexts,
    granularities,
    hitRate: HIT,
    model: PRESET.modelId,
    clientConcurrency: CONCURRENCY,
    gatewayArgs,
    backend: values.backend,
    placement: placement.mode,
  };
  console.log(`node ${process.version}, ${cpus().length} cores; settings ${JSON.stringify(settings)}; placement ${placement.description}`);
  if (placement.othersCpus !== undefined) pinThisProcess(placement.othersCpus);

  const embedded = values.backend === 'embedded';
  const cluster = values.backend === 'distributed' ? await startDistributedMinio({ binary: installMinio(), nodes: 4, drivesPerNode: 2 }) : undefined;
  const single = cluster
    ? undefined
    : await startMinio({
        binary: installMinio(),
        dataDir: mkdtempSync(join(tmpdir(), 'objectcache-bench-lw-')),
        ...(placement.storeCpus !== undefined ? { cpus: placement.storeCpus } : {}),
      });
  const minio = cluster ?? (single as NonNullable<typeof single>);
  const minioPids = cluster ? cluster.nodes.map((n) => n.process.pid as number) : [single?.process.pid as number];
  const profileDir = values['profile-gateway'];
  const nodeArgs = (values['gateway-node-args'] ?? '').split(' ').filter((a) => a !== '');
  const gateway = await startGatewayProcess({
    ...(embedded ? { dataDir: mkdtempSync(join(tmpdir(), 'objectcache-bench-lw-store-')) } : { minio }),
    args: gatewayArgs,
    cli: values['gateway-cli'],
    cpus: placement.gatewayCpus,
    nodeArgs: [...nodeArgs, ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [])],
  });
  // The baselines read the same store the gateway serves: MinIO, or the embedded store through
  // the gateway's plain S3 GETs.
  const store = embedded ? { endpoint: gateway.url, accessKey: BENCH_CLIENT.accessKeyId, secretKey: BENCH_CLIENT.secretAccessKey } : minio;
  const direct = directS3(store, CONCURRENCY);
  const pids: Record<string, number | number[]> = { gateway: gateway.pids(), ...(embedded ? {} : { minio: minioPids }) };
  const cores = cpus().length;
  const client = new ObjectCacheClient({ endpoint: gateway.url, bucket: 'layerwise-bench', credentials: BENCH_CLIENT });
  const rows: Record<string, unknown>[] = [];
  const measured = async (bytes: number, run: () => Promise<Sample>): Promise<Sample> => {
    const meter = cpuMeter(pids);
    const memory = memoryWatch(gateway.pids());
    const sample = await run();
    sample.cpu = meter(bytes);
    sample.gatewayPeakRssBytes = memory.stop().peakRssBytes;
    return sample;
  };
  try {
    await directPut(direct, '/layerwise-bench');
    for (const context of contexts) {
      for (const G of granularities) {
        const N = Math.floor((context * HIT) / G);
        const S = G * PRESET.bytesPerTokenPerLayer;
        const L = PRESET.layers;
        const keys = Array.from({ length: N }, (_, c) => `kv/ctx${context}-g${G}/${String(c).padStart(5, '0')}`);
        const seedStart = performance.now();
        await inParallel(N, 8, async (c) => directPutChunk(direct, `/layerwise-bench/${keys[c]}`, syntheticChunk(G, c, L * S), L, S));
        const payload = N * L * S;
        process.stdout.write(
          `\n${context / 1024}K G=${G}: N=${N} chunks, S=${S / 1024} KiB, ${(payload / 1024 ** 2).toFixed(0)} MiB (seeded in ${((performance.now() - seedStart) / 1000).toFixed(1)} s)\n`,
        );
        const descriptor: DescriptorInput = { version: 1, keys, layers: L, chunkTokens: G, layerBytes: S, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
        const target = new Uint8Array(payload);
        const samples: Record<string, Sample[]> = { 'OC-LW': [], 'S3-LW': [], 'S3-CW': [] };
        await ocLayerwise(client, descriptor, target); // warm-up
        for (let r = 0; r < reps; r++) {
          samples['OC-LW']?.push(await measured(payload, () => ocLayerwise(client, descriptor, target)));
          samples['S3-LW']?.push(await measured(payload, () => s3Layerwise(direct, 'layerwise-bench', keys, S, L)));
          samples['S3-CW']?.push(await measured(payload, () => s3Chunkwise(direct, 'layerwise-bench', keys, target, L * S)));
        }
        for (const [method, list] of Object.entries(samples)) {
          const seconds = median(list.map((s) => s.seconds));
          const serverFirst = list[0]?.serverFirstReadMs;
          const cpu: CpuPerGiB = {};
          for (const name of Object.keys(list[0]?.cpu ?? {})) cpu[name] = median(list.map((s) => s.cpu?.[name] ?? NaN));
          // The baselines do not touch the gateway's layerwise path (on MinIO, not the gateway at all).
          if (method !== 'OC-LW' && !embedded) delete cpu['gateway'];
          const row = {
            context,
            G,
            N,
            S,
            method,
            gbPerSec: payload / seconds / 1e9,
            seconds,
            firstLayerMs: median(list.map((s) => s.firstLayerMs)),
            backendReads: list[0]?.reads ?? 0,
            cpuSecondsPerGiB: cpu,
            gatewayPeakRssMiB: Math.max(...list.map((x) => x.gatewayPeakRssBytes ?? NaN)) / 1024 ** 2,
            predictedGbPerSec: predictedGBps(cpu, cores),
            ...(serverFirst !== undefined ? { serverFirstReadMs: median(list.map((s) => s.serverFirstReadMs ?? 0)) } : {}),
          };
          rows.push(row);
          const extra = row.serverFirstReadMs !== undefined ? `  (gateway read layer 0 by ${row.serverFirstReadMs.toFixed(0)} ms)` : '';
          console.log(
            `  ${method.padEnd(6)} ${row.gbPerSec.toFixed(3)} GB/s  ${(seconds * 1000).toFixed(0).padStart(6)} ms  layer 0 at ${row.firstLayerMs.toFixed(0).padStart(5)} ms  backend reads ${row.backendReads}${extra}`,
          );
          console.log(`         ${formatCpu(cpu, cores)}${method === 'OC-LW' ? `; gateway peak RSS ${row.gatewayPeakRssMiB.toFixed(0)} MiB` : ''}`);
        }
        const get = (m: string): number => (rows.find((r) => r['context'] === context && r['G'] === G && r['method'] === m)?.['gbPerSec'] as number) ?? NaN;
        console.log(`  OC-LW / S3-LW = ${(get('OC-LW') / get('S3-LW')).toFixed(2)}x   OC-LW / S3-CW = ${(get('OC-LW') / get('S3-CW')).toFixed(2)}x`);
      }
    }
    const outDir = join(repoRoot(), 'bench', 'results');
    mkdirSync(outDir, { recursive: true });
    writeFileSync(
      resolve(outDir, values.out ?? (values.backend === 'minio' ? 'layerwise-latest.json' : `layerwise-${values.backend}-latest.json`)),
      `${JSON.stringify({ benchmark: 'layerwise-get', date: new Date().toISOString(), node: process.version, cores: cpus().length, settings, rows }, null, 2)}\n`,
    );
  } finally {
    await client.close();
    await direct.pool.close();
    await gateway.stop();
    await minio.destroy();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
