/**
 * What checking every chunk key of a descriptor against an access policy costs (docs/access-control.md). One MinIO and one gateway process; the same layerwise GETs, interleaved, signed by
 * the administrator key (no policy to check: the gateway skips the check) and by a fleet key
 * whose policy is checked key by key (a Deny first, then sixteen team prefixes, its own last):
 *
 *   16K context, G=64 (Llama-3.1-8B layout, 87.5% hit): 224 chunks of 8 MiB
 *   4,096 chunks of 32 layers x 4 KiB (the per-key cost at its largest relative to the bytes)
 *
 * Reports the gateway's, MinIO's and the client's CPU-seconds per GiB and GB/s, median of the repetitions, for
 * each key, and the check alone timed in-process (ns per key). Writes
 * bench/results/access-check-latest.json.
 *
 *   npm run bench:access [-- --reps 5]
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ObjectCacheClient } from '../client/client.js';
import { syntheticChunk } from '../client/kv-layout.js';
import { authorizeKeys } from '../gateway/s3/auth/access.js';
import { parseAccessPolicy } from '../gateway/common/access-policy.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { PRESETS } from '../schemas/layouts.js';
import { directPut, directS3, inParallel } from './direct-s3.js';
import { BENCH_CLIENT, startGatewayProcess } from './gateway-process.js';
import { installMinio, repoRoot, startMinio } from '../test/helpers/minio.js';
import { cpuMeter } from './process-usage.js';

const PRESET = PRESETS['llama-3.1-8b'] as NonNullable<(typeof PRESETS)[string]>;
const BUCKET = 'access-bench';
const FLEET = { accessKeyId: 'bench-fleet', secretAccessKey: 'bench-fleet-secret' };

/** A policy of realistic size whose Allow for the fleet's own prefix comes last. */
function fleetPolicy(): unknown {
  const teams = Array.from({ length: 16 }, (_, i) => ({ Effect: 'Allow', Action: ['s3:GetObject'], Resource: `arn:aws:s3:::${BUCKET}/team-${i}/*` }));
  return {
    Version: '2012-10-17',
    Statement: [
      { Sid: 'NoSecrets', Effect: 'Deny', Action: 's3:*', Resource: `arn:aws:s3:::${BUCKET}/secret/*` },
      ...teams,
      { Sid: 'Fleet', Effect: 'Allow', Action: ['s3:GetObject', 's3:PutObject'], Resource: `arn:aws:s3:::${BUCKET}/fleet/*` },
    ],
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({ options: { reps: { type: 'string', default: '5' } } });
  const reps = Number(values.reps);
  const cores = cpus().length;
  console.log(`node ${process.version}, ${cores} cores; ${reps} repetitions of each key, interleaved`);

  // The check alone, in this process: ns per key for 4,096 keys.
  const policy = parseAccessPolicy(fleetPolicy(), 'fleet');
  const credential = { accessKeyId: FLEET.accessKeyId, secretAccessKey: FLEET.secretAccessKey, tenant: 'fleet', access: policy };
  const keys4k = Array.from({ length: 4096 }, (_, c) => `fleet/kv/model@1@0@${c.toString(16).padStart(16, '0')}@bfloat16`);
  for (let i = 0; i < 50; i++) authorizeKeys(credential, 's3:GetObject', BUCKET, keys4k);
  const rounds = 500;
  const started = process.hrtime.bigint();
  for (let i = 0; i < rounds; i++) authorizeKeys(credential, 's3:GetObject', BUCKET, keys4k);
  const nsPerKey = Number(process.hrtime.bigint() - started) / (rounds * keys4k.length);
  console.log(`the check alone: ${nsPerKey.toFixed(0)} ns per key (${((nsPerKey * 4096) / 1e6).toFixed(2)} ms for 4,096 keys), 18 statements`);

  const dir = mkdtempSync(join(tmpdir(), 'objectcache-bench-access-'));
  writeFileSync(join(dir, 'credentials.json'), JSON.stringify([{ ...FLEET, tenant: 'fleet', policy: fleetPolicy() }]));
  const minio = await startMinio({ binary: installMinio(), dataDir: mkdtempSync(join(tmpdir(), 'objectcache-bench-access-store-')) });
  const gateway = await startGatewayProcess({ minio, args: ['--credentials', join(dir, 'credentials.json')] });
  const direct = directS3(minio, 32);
  const pids = { gateway: gateway.pids(), minio: minio.process.pid as number };
  const clients = {
    admin: new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: BENCH_CLIENT }),
    fleet: new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: FLEET }),
  };
  const cases = [
    { name: '16K G=64', N: Math.floor((16384 * 0.875) / 64), L: PRESET.layers, S: 64 * PRESET.bytesPerTokenPerLayer },
    { name: '4,096 keys', N: 4096, L: 32, S: 4096 },
  ];
  const rows: Record<string, unknown>[] = [];
  try {
    await directPut(direct, `/${BUCKET}`);
    for (const { name, N, L, S } of cases) {
      const keys = Array.from({ length: N }, (_, c) => `fleet/${name.replace(/\W+/g, '-')}/${String(c).padStart(5, '0')}`);
      await inParallel(N, 16, async (c) => directPut(direct, `/${BUCKET}/${keys[c]}`, syntheticChunk(S, c, L * S)));
      const payload = N * L * S;
      const descriptor: DescriptorInput = { version: 1, keys, layers: L, chunkTokens: 16, layerBytes: S, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
      const target = new Uint8Array(payload);
      const samples: Record<'admin' | 'fleet', { seconds: number; gateway: number; minio: number; client: number }[]> = { admin: [], fleet: [] };
      for (const who of ['admin', 'fleet'] as const) await clients[who].fetch(descriptor, { transport: 'post', target }); // warm-up
      for (let r = 0; r < reps; r++) {
        for (const who of r % 2 === 0 ? (['admin', 'fleet'] as const) : (['fleet', 'admin'] as const)) {
          const meter = cpuMeter(pids);
          const t0 = performance.now();
          await clients[who].fetch(descriptor, { transport: 'post', target });
          const seconds = (performance.now() - t0) / 1000;
          const cpu = meter(payload);
          samples[who].push({ seconds, gateway: cpu['gateway'] ?? NaN, minio: cpu['minio'] ?? NaN, client: cpu['client'] ?? NaN });
        }
      }
      console.log(`\n${name}: N=${N}, L=${L}, S=${S / 1024} KiB, ${(payload / 1024 ** 2).toFixed(0)} MiB per GET`);
      for (const who of ['admin', 'fleet'] as const) {
        const list = samples[who];
        const row = {
          case: name,
          key: who,
          chunks: N,
          payloadBytes: payload,
          checked: who === 'fleet',
          gbPerSec: payload / median(list.map((s) => s.seconds)) / 1e9,
          gatewayCpuSecondsPerGiB: median(list.map((s) => s.gateway)),
          minioCpuSecondsPerGiB: median(list.map((s) => s.minio)),
          clientCpuSecondsPerGiB: median(list.map((s) => s.client)),
        };
        rows.push(row);
        console.log(
          `  ${who === 'admin' ? 'administrator key (no check)' : 'fleet key (every key checked)'}: ${row.gbPerSec.toFixed(2)} GB/s, gateway ${row.gatewayCpuSecondsPerGiB.toFixed(3)} CPU s/GiB, MinIO ${row.minioCpuSecondsPerGiB.toFixed(3)}, client ${row.clientCpuSecondsPerGiB.toFixed(3)}`,
        );
      }
    }
  } finally {
    await clients.admin.close();
    await clients.fleet.close();
    await gateway.stop();
    await minio.destroy();
  }
  const out = join(repoRoot(), 'bench', 'results');
  mkdirSync(out, { recursive: true });
  writeFileSync(
    join(out, 'access-check-latest.json'),
    `${JSON.stringify({ date: new Date().toISOString(), node: process.version, cores, reps, statements: 18, checkNsPerKey: nsPerKey, rows }, null, 2)}\n`,
  );
  console.log('\nwrote bench/results/access-check-latest.json');
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
