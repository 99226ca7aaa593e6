/**
 * How the gateway scales with its serving processes (--processes): for each N, a gateway with N
 * processes in front of one store, loaded by enough load-generator processes (each keeping a
 * number of layerwise GETs of one prefix in flight for a fixed time), reports the aggregate GB/s
 * and every role's CPU-seconds per GiB (the gateway's processes together, the store, the load
 * generators); in front of MinIO, the same load generators then read the same chunk objects whole
 * straight from MinIO with the gateway's own socket reader (into place), the yardstick. Writes
 * bench/results/scaling-latest.json (or --out).
 *
 *   npm run bench:scaling [-- --processes 1,2,4,8,16] [-- --seconds 10] [-- --generators N]
 *   [-- --in-flight 2] [-- --tokens 16384 --granularity 64] [-- --store minio|embedded]
 *   [-- --minio-binary PATH] [-- --gateway-args="--workers 2"]
 *
 * The store is MinIO when a binary is at hand (--minio-binary, or the pinned build that
 * scripts/install-minio.sh builds where Go is installed), else the gateway's embedded store.
 * Levels above the host's cores are skipped. --generators defaults to one per core: with one per
 * four cores, 8 GETs in flight were too few to spread over 8 and 16 processes (docs/benchmarks.md,
 * Serving processes). Every GET is checked whole by the client (its frame
 * CRCs); the load generators reuse one target each.
 */
import { fork } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ObjectCacheClient } from '../client/client.js';
import { syntheticChunk } from '../client/kv-layout.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { PRESETS } from '../schemas/layouts.js';
import { getWholeObjectsInPlace, inParallel, inPlaceReader } from './direct-s3.js';
import { BENCH_CLIENT, startGatewayProcess, type GatewayProcess } from './gateway-process.js';
import { cpuMeter, type CpuPerGiB } from './process-usage.js';
import { installMinio, repoRoot, startMinio, type MinioServer } from '../test/helpers/minio.js';

const PRESET = PRESETS['llama-3.1-8b'] as NonNullable<(typeof PRESETS)[string]>;
const BUCKET = 'scaling-bench';

/** What a load generator is told (as one JSON argument) and what it answers. */
interface Job {
  readonly kind: 'gateway' | 'minio';
  readonly endpoint: string;
  readonly descriptor: DescriptorInput;
  readonly inFlight: number;
  readonly seconds: number;
  readonly minio?: { endpoint: string; accessKey: string; secretKey: string };
}
interface Done {
  readonly bytes: number;
  readonly cpuSeconds: number;
  readonly gets: number;
}

/** One load generator (a process of its own): `inFlight` loops of GETs until `seconds` pass. */
async function generate(job: Job): Promise<Done> {
  const d = job.descriptor;
  const payload = d.keys.length * d.layers * d.layerBytes;
  const chunkBytes = d.layers * d.layerBytes;
  const cpu = process.cpuUsage();
  const until = performance.now() + job.seconds * 1000;
  let bytes = 0;
  let gets = 0;
  if (job.kind === 'gateway') {
    const client = new ObjectCacheClient({ endpoint: job.endpoint, bucket: BUCKET, credentials: BENCH_CLIENT, retries: 3 });
    await Promise.all(
      Array.from({ length: job.inFlight }, async () => {
        const target = new Uint8Array(payload).fill(0);
        // At least one GET each (a warming run asks for no time).
        do {
          await client.fetch(d, { transport: 'post', target });
          bytes += payload;
          gets++;
        } while (performance.now() < until);
      }),
    );
    await client.close();
  } else {
    const reader = inPlaceReader(job.minio as NonNullable<Job['minio']>, 8 * job.inFlight);
    await Promise.all(
      Array.from({ length: job.inFlight }, async () => {
        const target = new Uint8Array(payload).fill(0);
        do {
          await getWholeObjectsInPlace(reader, BUCKET, d.keys, target, chunkBytes, 8);
          bytes += payload;
          gets++;
        } while (performance.now() < until);
      }),
    );
    await reader.close();
  }
  const used = process.cpuUsage(cpu);
  return { bytes, cpuSeconds: (used.user + used.system) / 1e6, gets };
}

/** Runs `generators` load-generator processes on `job` at once; resolves with their sums and the wall time. */
async function load(generators: number, job: Job): Promise<Done & { seconds: number; pids: number[] }> {
  const self = fileURLToPath(import.meta.url);
  const children = Array.from({ length: generators }, () =>
    fork(self, ['--generator', JSON.stringify(job)], { execArgv: ['--initial-old-space-size=64'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  const started = performance.now();
  const results = await Promise.all(
    children.map(
      (child) =>
        new Promise<Done>((resolve, reject) => {
          child.once('message', (m) => resolve(m as Done));
          child.once('exit', (code) => (code === 0 ? undefined : reject(new Error(`a load generator exited with ${code}`))));
        }),
    ),
  );
  const seconds = (performance.now() - started) / 1000;
  return {
    bytes: results.reduce((n, r) => n + r.bytes, 0),
    cpuSeconds: results.reduce((n, r) => n + r.cpuSeconds, 0),
    gets: results.reduce((n, r) => n + r.gets, 0),
    seconds,
    pids: children.map((c) => c.pid as number),
  };
}

interface Row {
  readonly what: string;
  readonly gbPerSec: number;
  readonly cpuSecondsPerGiB: CpuPerGiB;
  readonly gets: number;
}

/** One measured load: GB/s, and the CPU per GiB of `pids` and of the load generators (`client`), printed. */
async function measured(what: string, pids: Record<string, number | number[]>, generators: number, job: Job): Promise<Row> {
  const meter = cpuMeter(pids);
  const done = await load(generators, job);
  const cpu = meter(done.bytes);
  const row: Row = { what, gbPerSec: done.bytes / done.seconds / 1e9, cpuSecondsPerGiB: { ...cpu, client: done.cpuSeconds / (done.bytes / 2 ** 30) }, gets: done.gets };
  print(row);
  return row;
}

function print(row: Row): void {
  const cpu = Object.entries(row.cpuSecondsPerGiB)
    .map(([name, v]) => `${name} ${v.toFixed(2)}`)
    .join(', ');
  console.log(`${row.what.padEnd(34)} ${row.gbPerSec.toFixed(2).padStart(6)} GB/s   CPU s/GiB: ${cpu}   (${row.gets} GETs)`);
}

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({
    options: {
      processes: { type: 'string', default: '1,2,4,8,16' },
      seconds: { type: 'string', default: '10' },
      generators: { type: 'string' },
      'in-flight': { type: 'string', default: '2' },
      tokens: { type: 'string', default: '16384' },
      granularity: { type: 'string', default: '64' },
      store: { type: 'string' },
      'minio-binary': { type: 'string' },
      'gateway-args': { type: 'string', default: '' },
      out: { type: 'string' },
    },
  });
  const cores = availableParallelism();
  const levels = (values.processes ?? '').split(',').map(Number);
  const skipped = levels.filter((n) => n > cores);
  const run = levels.filter((n) => Number.isInteger(n) && n >= 1 && n <= cores);
  const seconds = Number(values.seconds);
  const generators = values.generators ? Number(values.generators) : cores;
  const inFlight = Number(values['in-flight']);
  const G = Number(values.granularity);
  const chunks = Math.floor((Number(values.tokens) * 0.875) / G);
  const S = G * PRESET.bytesPerTokenPerLayer;
  const L = PRESET.layers;
  const gatewayArgs = (values['gateway-args'] ?? '').split(' ').filter((a) => a !== '');
  let binary = values['minio-binary'];
  if (binary === undefined && values.store !== 'embedded') {
    try {
      binary = installMinio();
    } catch (error) {
      if (values.store === 'minio') throw error;
      console.log(`no MinIO binary (${(error as Error).message.split('\n')[0]}): the embedded store`);
    }
  }
  const store = binary ? 'minio' : 'embedded';
  console.log(
    `node ${process.version}, ${cores} cores; ${store}; ${values.tokens} tokens G=${G}: ${chunks} chunks of ${(L * S) / 2 ** 20} MiB, ${((chunks * L * S) / 2 ** 30).toFixed(2)} GiB per GET; ` +
      `${generators} load generators x ${inFlight} GETs in flight, ${seconds} s per level; --processes ${run.join(', ')}${skipped.length ? ` (${skipped.join(', ')} skipped: more than the cores)` : ''}`,
  );

  let minio: MinioServer | undefined;
  const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-scaling-'));
  const rows: Row[] = [];
  try {
    if (binary) minio = await startMinio({ binary, dataDir: join(dataDir, 'minio') });
    const gatewayFor = (n: number): Promise<GatewayProcess> =>
      startGatewayProcess({
        ...(minio ? { minio } : { dataDir: join(dataDir, 'store') }),
        args: ['--processes', String(n), '--threshold', '0', ...gatewayArgs],
      });
    const keys = Array.from({ length: chunks }, (_, c) => `kv/scaling-g${G}/${String(c).padStart(5, '0')}`);
    const descriptor: DescriptorInput = { version: 1, keys, layers: L, chunkTokens: G, layerBytes: S, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
    {
      // Seeded through a gateway (either store), with the writers' per-layer CRC32Cs.
      const seeding = await gatewayFor(1);
      const client = new ObjectCacheClient({ endpoint: seeding.url, bucket: BUCKET, credentials: BENCH_CLIENT });
      try {
        await client.ensureBucket();
        await inParallel(chunks, 8, (c) => client.putChunks([keys[c] as string], [syntheticChunk(G, c, L * S)], { layout: { layout: 'KV_L2TD', layers: L, layerBytes: S } }));
      } finally {
        await client.close();
        await seeding.stop();
      }
    }
    const storePid = minio?.process.pid;
    for (const n of run) {
      const gateway = await gatewayFor(n);
      try {
        // Warm: one GET from one generator.
        await load(1, { kind: 'gateway', endpoint: gateway.url, descriptor, inFlight: 1, seconds: 0 });
        rows.push(
          await measured(`gateway, --processes ${n}`, { gateway: gateway.pids(), ...(storePid ? { minio: storePid } : {}) }, generators, {
            kind: 'gateway',
            endpoint: gateway.url,
            descriptor,
            inFlight,
            seconds,
          }),
        );
      } finally {
        await gateway.stop();
      }
    }
    if (minio && storePid) {
      rows.push(await measured('MinIO direct, whole objects', { minio: storePid }, generators, { kind: 'minio', endpoint: minio.endpoint, descriptor, inFlight, seconds, minio }));
    }
  } finally {
    await minio?.destroy();
    rmSync(dataDir, { recursive: true, force: true });
  }
  const out = values.out ?? join(repoRoot(), 'bench', 'results', 'scaling-latest.json');
  mkdirSync(join(out, '..'), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify({ date: new Date().toISOString(), node: process.version, cores, store, tokens: Number(values.tokens), granularity: G, generators, inFlight, seconds, rows }, null, 2)}\n`,
  );
  console.log(`wrote ${out}`);
}

if (process.argv[2] === '--generator') {
  generate(JSON.parse(process.argv[3] as string) as Job).then(
    (done) => process.send?.(done, () => process.exit(0)),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
} else {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
