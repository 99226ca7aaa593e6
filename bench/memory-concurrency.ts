/**
 * Memory as a reported figure: C concurrent layerwise GETs of one 16K prefix (Llama-3.1-8B
 * layout, 87.5% hit, G=64: 224 chunks of 8 MiB, 1.75 GiB per GET) through one gateway process in
 * front of one MinIO, for C = 1, 4, 16. Reports the gateway's peak resident memory over its idle
 * resident memory, the kernel's TCP socket memory (machine-wide, /proc/net/sockstat) at its peak
 * over idle, the aggregate GB/s, and each request's layer-0 time. Writes
 * bench/results/memory-latest.json (memory-segments-latest.json with --repeated; -store-apart or
 * -pinned in place of -latest with --placement). Each level runs on a fresh gateway process: its idle resident
 * memory (after a two-chunk GET) is the baseline, then one whole GET warms the path, then the C
 * GETs are measured (peak resident memory over that baseline: the steady state's footprint).
 *
 *   npm run bench:memory [-- --concurrency 1,4,16] [-- --gateway-args="--read-ahead-bytes 268435456"]
 *   [-- --compare-cli OTHER/dist/cli/main.js]  (another build's gateway, run at every level too:
 *   before and after a change, in one run)  [-- --minio-args="--send-buf-size 262144"]
 *   [-- --compare-gateway-args="--budget memory-bench=1TiB"]  (this build again with other
 *   settings, at every level: a feature on and off, in one run)
 *   [-- --pairs 4]  (with a second build: each level run that many times, the builds' order
 *   alternated, MinIO settled before each build; a summary of each build's mean per level. One
 *   pair swings by about 15% on a shared machine; docs/benchmarks.md, House order, third pass)
 *   [-- --placement store-apart]  (MinIO on a core of its own, the gateway and the load generator
 *   on the others, as a store on machines of its own would be; `pinned` gives the gateway the
 *   core instead; placement.ts; default shared)
 *
 * Also reports every process's CPU-seconds per GiB delivered (gateway, MinIO, and this load
 * generator as `client`), and the gateway's split by thread: its main thread (which serves every
 * request: the part one core bounds) in user and system time, and its other threads by name.
 *
 * First and repeated reads of a prefix (packed segments, docs/segments.md): by default the C GETs
 * are of a prefix read once before (the warming GET), as the gateway's settings have them.
 * `--repeated` packs it first: the gateways run with --segments on --segment-after-reads 1
 * --segment-min-bytes 0. What packing costs the read that packs is measured R times (`--rounds`),
 * each a first read of the prefix with segments off, then one that packs it with
 * --segment-pack-from chunks and one that packs it from its frames, each on a gateway of its own
 * with MinIO settled before it (`packing.trials`). Every level's fresh gateway then finds the segment in the store at its warming GET, so the
 * warming GET and the C GETs are all served from it, and the peak memory is the segment reads' own;
 * `--direct` adds a row per level of C readers each GETting the whole chunk objects straight from
 * MinIO (8 in flight each), and one of readers doing the same with the gateway's socket range
 * reader (read in place): the whole-object cost the store's CPU and the GB/s are held against.
 * `--rounds R` (default 1) measures the last of R rounds of each level's C GETs (and of the direct
 * readers'): the earlier ones fault in the buffers a burst of C requests needs, which a gateway
 * pays once (docs/segments.md, Measured); the memory peak spans every round.
 *
 * The concurrent GETs write into one shared target (the same bytes at the same places), so the
 * load generator's memory stays one payload whatever C is.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ObjectCacheClient } from '../client/client.js';
import { syntheticChunk } from '../client/kv-layout.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { PRESETS } from '../schemas/layouts.js';
import { directPut, directPutChunk, directS3, getWholeObjects, getWholeObjectsInPlace, inParallel, inPlaceReader } from './direct-s3.js';
import { BENCH_CLIENT, segmentEvents, startGatewayProcess } from './gateway-process.js';
import { installMinio, repoRoot, startMinio } from '../test/helpers/minio.js';
import { cpuMeter, formatCpu, formatThreads, memoryWatch, processUsage, threadCpuMeter } from './process-usage.js';
import { choosePlacement, pinThisProcess, PLACEMENT_MODES, type PlacementMode } from './placement.js';

const PRESET = PRESETS['llama-3.1-8b'] as NonNullable<(typeof PRESETS)[string]>;
const BUCKET = 'memory-bench';
const MiB = 1024 * 1024;

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({
    options: {
      concurrency: { type: 'string', default: '1,4,16' },
      'gateway-args': { type: 'string', default: '' },
      G: { type: 'string', default: '64' },
      'compare-cli': { type: 'string' },
      'compare-gateway-args': { type: 'string' },
      'minio-args': { type: 'string', default: '' },
      repeated: { type: 'boolean', default: false },
      direct: { type: 'boolean', default: false },
      rounds: { type: 'string', default: '1' },
      pairs: { type: 'string', default: '1' },
      placement: { type: 'string', default: 'shared' },
    },
  });
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a whole number of at least 1, not ${values.rounds}`);
  const pairs = Number(values.pairs);
  if (!Number.isInteger(pairs) || pairs < 1) throw new Error(`--pairs must be a whole number of at least 1, not ${values.pairs}`);
  const repeated = values.repeated === true;
  if (!PLACEMENT_MODES.includes(values.placement as PlacementMode)) throw new Error(`--placement is one of ${PLACEMENT_MODES.join(', ')}, not ${values.placement}`);
  const placement = choosePlacement(values.placement as PlacementMode);
  const gatewayCpus = placement.gatewayCpus;
  const gatewayArgs = [
    ...(values['gateway-args'] ?? '').split(' ').filter((a) => a !== ''),
    ...(values.repeated ? ['--segments', 'on', '--segment-after-reads', '1', '--segment-min-bytes', '0'] : []),
  ];
  const compareArgs = values['compare-gateway-args']?.split(' ').filter((a) => a !== '');
  const builds: { name: string; cli: string | undefined; args: string[] }[] = [
    { name: 'this build', cli: undefined, args: gatewayArgs },
    ...(values['compare-cli'] ? [{ name: values['compare-cli'], cli: values['compare-cli'], args: gatewayArgs }] : []),
    ...(compareArgs ? [{ name: `this build ${compareArgs.join(' ')}`, cli: undefined, args: [...gatewayArgs, ...compareArgs] }] : []),
  ];
  const levels = (values.concurrency ?? '1,4,16').split(',').map(Number);
  const minioArgs = (values['minio-args'] ?? '').split(' ').filter((a) => a !== '');
  const G = Number(values.G);
  const N = Math.floor((16384 * 0.875) / G);
  const L = PRESET.layers;
  const S = G * PRESET.bytesPerTokenPerLayer;
  const payload = N * L * S;
  console.log(
    `node ${process.version}, ${cpus().length} cores; 16K G=${G}: N=${N}, S=${S / 1024} KiB, ${(payload / MiB).toFixed(0)} MiB per GET; C = ${levels.join(', ')}; gateway ${JSON.stringify(gatewayArgs)}; minio ${JSON.stringify(minioArgs)}; placement ${placement.description}`,
  );
  if (placement.othersCpus !== undefined) pinThisProcess(placement.othersCpus);

  const minio = await startMinio({
    binary: installMinio(),
    dataDir: mkdtempSync(join(tmpdir(), 'objectcache-bench-mem-')),
    extraArgs: minioArgs,
    ...(placement.storeCpus !== undefined ? { cpus: placement.storeCpus } : {}),
  });
  const direct = directS3(minio, 32);
  const rows: Record<string, unknown>[] = [];
  let packing: Packing | undefined;
  try {
    await directPut(direct, `/${BUCKET}`);
    const keys = Array.from({ length: N }, (_, c) => `kv/mem-g${G}/${String(c).padStart(5, '0')}`);
    await inParallel(N, 8, async (c) => directPutChunk(direct, `/${BUCKET}/${keys[c]}`, syntheticChunk(G, c, L * S), L, S));
    const descriptor: DescriptorInput = { version: 1, keys, layers: L, chunkTokens: G, layerBytes: S, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
    const warmUp: DescriptorInput = { ...descriptor, keys: keys.slice(0, 2) };
    const target = new Uint8Array(payload);
    // --repeated: one gateway packs the prefix (the read that packs, timed) and stops; every level's
    // fresh gateway then finds that segment in the store at its first read of the prefix.
    // Touched before any read (as the warming GETs find it): a fresh target's page faults are the client's, not the gateway's.
    target.fill(0);
    packing = repeated ? await firstReads(minio, gatewayCpus, builds[0]?.args ?? [], warmUp, descriptor, target, payload, rounds) : undefined;
    // What the seeding and a 1.75 GiB PUT leave MinIO doing (its scanner, its caches) is not the measurement's.
    await settled(minio.process.pid as number);
    for (const C of levels) {
      if (values.direct) rows.push(await wholeObjects(minio, keys, C, L * S, rounds, false), await wholeObjects(minio, keys, C, L * S, rounds, true));
      for (let pair = 0; pair < pairs; pair++) {
        // Alternated, so that neither build always runs right after the other's gateway stopped.
        for (const build of pair % 2 === 0 ? builds : [...builds].reverse()) {
          if (pairs > 1) await settled(minio.process.pid as number);
          // A fresh gateway per level: its idle memory is the baseline (a used gateway keeps its
          // buffers resident), warmed by a two-chunk GET (code compiled, connections open).
          const gateway = await startGatewayProcess({ minio, args: build.args, cli: build.cli, cpus: gatewayCpus });
          const client = new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: BENCH_CLIENT });
          try {
            await client.fetch(warmUp, { transport: 'post' });
            await new Promise((r) => setTimeout(r, 1000));
            // The baseline: the fresh gateway's idle memory. Then one whole GET warms the path (the
            // buffers it leaves resident are the steady state, and count against the baseline).
            const fresh = memoryWatch(gateway.pids()).stop();
            const discovered = await segmentEvents(gateway.adminUrl, 'discovered');
            const warmStarted = performance.now();
            // With --repeated (segments on) this GET finds the packed segment and is served from it.
            await client.fetch(descriptor, { transport: 'post', target });
            const warmSeconds = (performance.now() - warmStarted) / 1000;
            const packs = repeated && !build.args.join(' ').includes('--segments off');
            if (packs && (await segmentEvents(gateway.adminUrl, 'discovered')) !== discovered + 1) throw new Error('the warming GET did not find the packed segment');
            const watch = memoryWatch(gateway.pids());
            // One client per request, as C engines would be (one client queues beyond its 8 connections).
            const engines = Array.from({ length: C }, () => new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: BENCH_CLIENT }));
            // --rounds R: R-1 rounds of the C GETs first (the gateway's buffers for C requests faulted
            // in, as in a gateway that has served such a burst before); the memory peak spans them all.
            let meter = cpuMeter({ gateway: gateway.pids(), minio: minio.process.pid as number });
            let threads = threadCpuMeter(gateway.pids());
            let started = performance.now();
            let results: Awaited<ReturnType<ObjectCacheClient['fetch']>>[] = [];
            try {
              for (let round = 0; round < rounds; round++) {
                meter = cpuMeter({ gateway: gateway.pids(), minio: minio.process.pid as number });
                threads = threadCpuMeter(gateway.pids());
                started = performance.now();
                results = await Promise.all(engines.map((engine) => engine.fetch(descriptor, { transport: 'post', target })));
              }
            } finally {
              await Promise.all(engines.map((engine) => engine.close()));
            }
            const seconds = (performance.now() - started) / 1000;
            const memory = watch.stop();
            const cpuSecondsPerGiB = meter(C * payload);
            const gatewayThreads = threads(C * payload);
            const layer0 = results.map((r) => r.timeline[0]?.ms ?? NaN).sort((a, b) => a - b);
            const row = {
              build: build.name,
              reads: packs ? 'repeated' : 'first',
              concurrency: C,
              ...(pairs > 1 ? { pair } : {}),
              gbPerSec: (C * payload) / seconds / 1e9,
              seconds,
              gatewayIdleRssMiB: fresh.idleRssBytes / MiB,
              gatewayPeakRssOverIdleMiB: (memory.peakRssBytes - fresh.idleRssBytes) / MiB,
              tcpSocketPeakOverIdleMiB: (memory.peakTcpBytes - memory.idleTcpBytes) / MiB,
              layer0Ms: { min: layer0[0], median: layer0[Math.floor(layer0.length / 2)], max: layer0.at(-1) },
              backendReadsPerGet: results[0]?.summary.backendReads,
              warmGetSeconds: warmSeconds,
              cpuSecondsPerGiB,
              gatewayThreadsCpuSecondsPerGiB: gatewayThreads,
            };
            rows.push(row);
            console.log(
              `${builds.length > 1 ? `[${build.name}] ` : ''}C=${C}: ${row.gbPerSec.toFixed(2)} GB/s aggregate; gateway RSS idle ${row.gatewayIdleRssMiB.toFixed(0)} MiB, peak +${row.gatewayPeakRssOverIdleMiB.toFixed(0)} MiB; ` +
                `TCP socket memory peak +${row.tcpSocketPeakOverIdleMiB.toFixed(0)} MiB; warming GET ${row.warmGetSeconds.toFixed(2)} s; layer 0 at ${row.layer0Ms.min?.toFixed(0)} / ${row.layer0Ms.median?.toFixed(0)} / ${row.layer0Ms.max?.toFixed(0)} ms (min/median/max); ${row.backendReadsPerGet} backend reads per GET`,
            );
            console.log(`      ${formatCpu(cpuSecondsPerGiB, cpus().length)}`);
            console.log(`      gateway ${formatThreads(gatewayThreads)}`);
          } finally {
            await client.close();
            await gateway.stop();
          }
        }
      }
      if (pairs > 1)
        console.log(
          pairSummary(
            rows,
            C,
            builds.map((b) => b.name),
          ),
        );
    }
  } finally {
    await minio.destroy();
  }
  const out = join(repoRoot(), 'bench', 'results');
  mkdirSync(out, { recursive: true });
  // Another placement's figures sit beside the shared ones (memory-segments-store-apart.json ...).
  const file = `${repeated ? 'memory-segments' : 'memory'}${placement.mode === 'shared' ? '-latest' : `-${placement.mode}`}.json`;
  writeFileSync(
    join(out, file),
    `${JSON.stringify({ date: new Date().toISOString(), node: process.version, cores: cpus().length, G, chunks: N, payloadBytes: payload, gatewayArgs, minioArgs, rounds, placement: placement.description, ...(packing ? { packing } : {}), rows }, null, 2)}\n`,
  );
  console.log(`wrote bench/results/${file}`);
}

/** Each build's mean CPU-seconds per GiB (gateway, MinIO) and GB/s over the pairs of one level. */
function pairSummary(rows: readonly Record<string, unknown>[], C: number, names: readonly string[]): string {
  const lines = names.map((name) => {
    const mine = rows.filter((r) => r['build'] === name && r['concurrency'] === C && r['pair'] !== undefined);
    const mean = (of: (r: Record<string, unknown>) => number): string => (mine.reduce((sum, r) => sum + of(r), 0) / mine.length).toFixed(2);
    const cpu = (r: Record<string, unknown>, process: string): number => (r['cpuSecondsPerGiB'] as Record<string, number>)[process] ?? NaN;
    return `  [${name}] C=${C}, mean of ${mine.length}: gateway ${mean((r) => cpu(r, 'gateway'))}, MinIO ${mean((r) => cpu(r, 'minio'))} CPU-s/GiB; ${mean((r) => r['gbPerSec'] as number)} GB/s`;
  });
  return lines.join('\n');
}

/** One first read of the prefix on a fresh gateway: its time and every process's CPU-seconds per GiB during it. */
interface FirstRead {
  readonly seconds: number;
  readonly cpuSecondsPerGiB: Record<string, number>;
}

type PackingRead = FirstRead & { readonly packedAfterSeconds: number; readonly reread: boolean };

interface Packing {
  /**
   * Each trial, on fresh gateways: a first read with segments off, the read that packs with
   * --segment-pack-from chunks, and the read that packs with the build's settings (frames).
   */
  readonly trials: readonly { readonly chunks: FirstRead; readonly packingFromChunks: PackingRead; readonly packing: PackingRead }[];
}

/**
 * What packing costs the read that packs (docs/segments.md, Packing): `trials` times, a first
 * read of the prefix with segments off, one that packs it (--segment-after-reads 1) with
 * --segment-pack-from chunks, and one that packs it from its frames (the build's settings), each
 * on a gateway of its own after a two-chunk warm-up, with MinIO settled before each (the
 * seeding's and the last pack's writes are not the read's). Every pack but the last trial's
 * frames pack goes to a segment bucket of its own, so each is a first; that last one's segment,
 * in the default bucket, is the one the levels find.
 */
async function firstReads(
  minio: Awaited<ReturnType<typeof startMinio>>,
  gatewayCpus: string | undefined,
  args: string[],
  warmUp: DescriptorInput,
  descriptor: DescriptorInput,
  target: Uint8Array,
  payload: number,
  trials: number,
): Promise<Packing> {
  const out: Packing['trials'][number][] = [];
  // MinIO's first read of the chunks since it started is slower (3.3-3.4 s, against 2.0-2.1 s for
  // the next ones, in one run): it is not a trial's.
  await firstRead(minio, gatewayCpus, [...args, '--segments', 'off'], warmUp, descriptor, target, payload, false);
  for (let trial = 0; trial < trials; trial++) {
    const bucket = trial === trials - 1 ? [] : ['--segment-bucket', `memory-bench-trial-${trial}`];
    await settled(minio.process.pid as number);
    const chunks = await firstRead(minio, gatewayCpus, [...args, '--segments', 'off'], warmUp, descriptor, target, payload, false);
    await settled(minio.process.pid as number);
    const packingFromChunks = await firstRead(
      minio,
      gatewayCpus,
      [...args, '--segment-pack-from', 'chunks', '--segment-bucket', `memory-bench-trial-chunks-${trial}`],
      warmUp,
      descriptor,
      target,
      payload,
      true,
    );
    await settled(minio.process.pid as number);
    const packing = await firstRead(minio, gatewayCpus, [...args, ...bucket], warmUp, descriptor, target, payload, true);
    const cores = cpus().length;
    const stored = (read: PackingRead): string => `segment stored after ${read.packedAfterSeconds.toFixed(2)} s${read.reread ? ', the rest read from the chunks' : ''}`;
    console.log(`first read ${trial + 1}/${trials}: from the chunks ${chunks.seconds.toFixed(2)} s, ${formatCpu(chunks.cpuSecondsPerGiB, cores)}`);
    console.log(
      `      packing from the chunks after it ${packingFromChunks.seconds.toFixed(2)} s (${stored(packingFromChunks)}), ${formatCpu(packingFromChunks.cpuSecondsPerGiB, cores)}`,
    );
    console.log(`      packing from its frames ${packing.seconds.toFixed(2)} s (${stored(packing)}), ${formatCpu(packing.cpuSecondsPerGiB, cores)}`);
    out.push({ chunks, packingFromChunks, packing });
  }
  return { trials: out };
}

async function firstRead(
  minio: Awaited<ReturnType<typeof startMinio>>,
  gatewayCpus: string | undefined,
  args: string[],
  warmUp: DescriptorInput,
  descriptor: DescriptorInput,
  target: Uint8Array,
  payload: number,
  packs: boolean,
): Promise<PackingRead> {
  const gateway = await startGatewayProcess({ minio, args, cpus: gatewayCpus });
  const client = new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: BENCH_CLIENT });
  try {
    await client.fetch(warmUp, { transport: 'post' });
    const meter = cpuMeter({ gateway: gateway.pids(), minio: minio.process.pid as number });
    const started = performance.now();
    await client.fetch(descriptor, { transport: 'post', target });
    const seconds = (performance.now() - started) / 1000;
    const cpuSecondsPerGiB = meter(payload);
    if (!packs) return { seconds, cpuSecondsPerGiB, packedAfterSeconds: NaN, reread: false };
    await segmentPacked(gateway.adminUrl, payload);
    const packedAfterSeconds = (performance.now() - started) / 1000;
    return { seconds, cpuSecondsPerGiB, packedAfterSeconds, reread: (await segmentEvents(gateway.adminUrl, 'reread')) > 0 };
  } finally {
    await client.close();
    await gateway.stop();
  }
}

/** Waits until a process spends under 5% of a core for a whole second (at most 60 s). */
async function settled(pid: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const before = processUsage(pid).cpuSeconds;
    await new Promise((r) => setTimeout(r, 1000));
    if (processUsage(pid).cpuSeconds - before < 0.05 || Date.now() > deadline) return;
  }
}

/** Waits until the gateway knows a packed segment of the whole prefix (its objectcache_segment_bytes gauge). */
async function segmentPacked(adminUrl: string, payload: number): Promise<void> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const text = await (await fetch(`${adminUrl}/metrics`)).text();
    const bytes = Number(/^objectcache_segment_bytes (\d+)/m.exec(text)?.[1] ?? 0);
    if (bytes >= payload) return;
    if (Date.now() > deadline) throw new Error('the prefix was not packed within 120 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * C readers, each GETting every chunk object whole straight from MinIO (8 in flight each): undici
 * streams copied into the target, or (`inPlace`) the gateway's own socket range reader
 * (http-range/socket-range-get.ts), whose kernel reads land in the target, as fast a reader
 * as the gateway's. MinIO's CPU per GiB depends on its reader's pace (docs/segments.md, Measured),
 * so the store's cost is held against both.
 */
async function wholeObjects(
  minio: Awaited<ReturnType<typeof startMinio>>,
  keys: readonly string[],
  C: number,
  chunkBytes: number,
  rounds: number,
  inPlace: boolean,
): Promise<Record<string, unknown>> {
  const target = new Uint8Array(keys.length * chunkBytes);
  const readers = Array.from({ length: C }, () => {
    if (inPlace) {
      const reader = inPlaceReader(minio, 8);
      return { read: () => getWholeObjectsInPlace(reader, BUCKET, keys, target, chunkBytes, 8), close: () => reader.close() };
    }
    const reader = directS3(minio, 8);
    return { read: () => getWholeObjects(reader, BUCKET, keys, target, chunkBytes, 8), close: () => reader.pool.close() };
  });
  const build = inPlace ? 'minio direct, whole objects, read in place' : 'minio direct, whole objects';
  try {
    // As for the gateway's rows: the last of `rounds` rounds is measured (the target and the
    // readers' connections warm).
    let meter = cpuMeter({ minio: minio.process.pid as number });
    let started = performance.now();
    for (let round = 0; round < rounds; round++) {
      meter = cpuMeter({ minio: minio.process.pid as number });
      started = performance.now();
      await Promise.all(readers.map((reader) => reader.read()));
    }
    const seconds = (performance.now() - started) / 1000;
    const bytes = C * keys.length * chunkBytes;
    const cpuSecondsPerGiB = meter(bytes);
    const row = { build, reads: 'whole-object', concurrency: C, gbPerSec: bytes / seconds / 1e9, seconds, backendReadsPerGet: keys.length, cpuSecondsPerGiB };
    console.log(`[${build}] C=${C}: ${row.gbPerSec.toFixed(2)} GB/s aggregate; ${keys.length} GETs per reader`);
    console.log(`      ${formatCpu(cpuSecondsPerGiB, cpus().length)}`);
    return row;
  } finally {
    await Promise.all(readers.map((reader) => reader.close()));
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
