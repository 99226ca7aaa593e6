/**
 * Passthrough GET throughput: 1 MiB objects at 16 concurrent requests, MinIO direct vs through
 * the gateway (a separate `objectcache serve` process in front of the same MinIO), in one run,
 * alternating rounds so both see the same machine. Prints the ratio (target >= 0.9) and writes
 * JSON to bench/results/.
 *
 *   npm run bench:passthrough [-- --seconds 8 --rounds 3 --concurrency 16 --objects 64 --size 1048576]
 *   (--profile-gateway DIR writes a V8 CPU profile of the gateway process; --gateway-cli
 *   OTHER/dist/cli/main.js runs another build's gateway, to compare builds in one run)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Dispatcher, Pool } from 'undici';
import { signingPool } from '../sigv4/signing-dispatcher.js';
import { processUsage } from './process-usage.js';
import { BENCH_CLIENT, startGatewayProcess } from './gateway-process.js';
import { freePort, installMinio, repoRoot, startMinio } from '../test/helpers/minio.js';

interface Target {
  readonly name: string;
  readonly endpoint: URL;
  readonly pool: Pool;
  /** The pool, signing every request. */
  readonly http: Dispatcher.ComposedDispatcher;
}

async function signedRequest(target: Target, method: string, path: string, body?: Buffer): Promise<{ status: number; bytes: number }> {
  const headers: Record<string, string> = body ? { 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD', 'content-length': String(body.length) } : {};
  const res = await target.http.request({ method: method, path, headers, body: body ?? null });
  let bytes = 0;
  for await (const chunk of res.body) bytes += (chunk as Buffer).length;
  return { status: res.statusCode, bytes };
}

interface Measurement {
  bytes: number;
  requests: number;
  seconds: number;
  /** CPU seconds per GiB delivered, per process. */
  cpuPerGiB: Record<string, number>;
}

async function measure(target: Target, keys: readonly string[], concurrency: number, seconds: number, pids: Record<string, number> = {}): Promise<Measurement> {
  const cpuBefore = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, processUsage(pid).cpuSeconds]));
  const selfBefore = process.cpuUsage();
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  let bytes = 0;
  let requests = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < deadline) {
      const key = keys[next++ % keys.length] as string;
      const res = await signedRequest(target, 'GET', key);
      if (res.status !== 200) throw new Error(`${target.name} GET ${key} answered ${res.status}`);
      bytes += res.bytes;
      requests++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const gib = bytes / 1024 ** 3;
  const self = process.cpuUsage(selfBefore);
  const cpuPerGiB: Record<string, number> = { client: (self.user + self.system) / 1e6 / gib };
  for (const [name, pid] of Object.entries(pids)) cpuPerGiB[name] = (processUsage(pid).cpuSeconds - (cpuBefore[name] ?? 0)) / gib;
  return { bytes, requests, seconds: (performance.now() - started) / 1000, cpuPerGiB };
}

async function startRelay(targetPort: number): Promise<{ child: ChildProcess; url: string }> {
  const port = await freePort();
  const child = spawn(process.execPath, [join(repoRoot(), 'dist/bench/tcp-relay.js'), String(port), String(targetPort)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  await new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code) => reject(new Error(`tcp-relay exited with ${code}`)));
  });
  return { child, url: `http://127.0.0.1:${port}` };
}

function target(name: string, endpoint: string, accessKeyId: string, secretAccessKey: string, connections: number): Target {
  return { name, endpoint: new URL(endpoint), ...signingPool({ endpoint, accessKeyId, secretAccessKey, pool: { connections } }) };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      seconds: { type: 'string', default: '8' },
      rounds: { type: 'string', default: '3' },
      concurrency: { type: 'string', default: '16' },
      objects: { type: 'string', default: '64' },
      size: { type: 'string', default: String(1024 * 1024) },
      'profile-gateway': { type: 'string' },
      'gateway-node-args': { type: 'string' },
      'gateway-cli': { type: 'string' },
    },
  });
  const seconds = Number(values.seconds);
  const rounds = Number(values.rounds);
  const concurrency = Number(values.concurrency);
  const objectCount = Number(values.objects);
  const size = Number(values.size);
  const settings = { seconds, rounds, concurrency, objects: objectCount, objectBytes: size };
  console.log(`node ${process.version}, ${cpus().length} cores; settings ${JSON.stringify(settings)}`);

  const minio = await startMinio({ binary: installMinio(), dataDir: mkdtempSync(join(tmpdir(), 'objectcache-bench-minio-')) });
  const profileDir = values['profile-gateway'];
  const nodeArgs = (values['gateway-node-args'] ?? '').split(' ').filter((a) => a !== '');
  const gateway = await startGatewayProcess({ minio, cli: values['gateway-cli'], nodeArgs: [...nodeArgs, ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [])] });
  const relay = await startRelay(minio.port);
  const direct = target('minio-direct', minio.endpoint, minio.accessKey, minio.secretKey, concurrency);
  const viaRelay = target('tcp-relay', relay.url, minio.accessKey, minio.secretKey, concurrency);
  const viaGateway = target('gateway', gateway.url, BENCH_CLIENT.accessKeyId, BENCH_CLIENT.secretAccessKey, concurrency);
  try {
    const bucket = '/passthrough-bench';
    await signedRequest(direct, 'PUT', bucket);
    const keys: string[] = [];
    for (let i = 0; i < objectCount; i++) {
      const key = `${bucket}/object-${i}`;
      const res = await signedRequest(direct, 'PUT', key, randomBytes(size));
      if (res.status !== 200) throw new Error(`seeding ${key} answered ${res.status}`);
      keys.push(key);
    }
    // Warm both paths (connections, MinIO caches, JIT).
    await measure(direct, keys, concurrency, 1);
    await measure(viaGateway, keys, concurrency, 1);
    await measure(viaRelay, keys, concurrency, 1);

    const pids = { minio: minio.process.pid as number, gateway: gateway.child.pid as number, relay: relay.child.pid as number };
    const results: { round: number; target: string; mibPerSec: number; requestsPerSec: number; cpuSecondsPerGiB: Record<string, number> }[] = [];
    for (let round = 1; round <= rounds; round++) {
      for (const t of round % 2 === 1 ? [direct, viaRelay, viaGateway] : [viaGateway, viaRelay, direct]) {
        const m = await measure(t, keys, concurrency, seconds, pids);
        const mibPerSec = m.bytes / 1024 / 1024 / m.seconds;
        results.push({ round, target: t.name, mibPerSec, requestsPerSec: m.requests / m.seconds, cpuSecondsPerGiB: m.cpuPerGiB });
        const cpu = Object.entries(m.cpuPerGiB)
          .map(([name, v]) => `${name} ${v.toFixed(2)}`)
          .join(', ');
        console.log(`round ${round} ${t.name.padEnd(12)} ${mibPerSec.toFixed(1)} MiB/s  ${(m.requests / m.seconds).toFixed(0)} req/s  CPU s/GiB: ${cpu}`);
      }
    }
    const mean = (name: string): number => {
      const rows = results.filter((r) => r.target === name);
      return rows.reduce((s, r) => s + r.mibPerSec, 0) / rows.length;
    };
    const ratio = mean('gateway') / mean('minio-direct');
    const relayRatio = mean('tcp-relay') / mean('minio-direct');
    console.log(`control: a zero-logic TCP relay reaches ${mean('tcp-relay').toFixed(1)} MiB/s, ratio relay/direct = ${relayRatio.toFixed(3)}`);
    const gatewayCpu = results.filter((r) => r.target === 'gateway').map((r) => r.cpuSecondsPerGiB['gateway'] ?? NaN);
    const gatewayCpuPerGiB = gatewayCpu.reduce((a, b) => a + b, 0) / gatewayCpu.length;
    console.log(`gateway CPU: ${gatewayCpuPerGiB.toFixed(2)} s per GiB proxied, i.e. one core proxies ~${(1024 / gatewayCpuPerGiB).toFixed(0)} MiB/s`);
    console.log(
      `mean: minio-direct ${mean('minio-direct').toFixed(1)} MiB/s, gateway ${mean('gateway').toFixed(1)} MiB/s, ratio gateway/direct = ${ratio.toFixed(3)} (target >= 0.9)`,
    );
    const outDir = join(repoRoot(), 'bench', 'results');
    mkdirSync(outDir, { recursive: true });
    const gatewayMemory = gateway.memory();
    console.log(`gateway RSS: ${gatewayMemory.idleRssMiB.toFixed(0)} MiB idle, ${gatewayMemory.peakRssMiB.toFixed(0)} MiB at its peak`);
    const report = {
      benchmark: 'passthrough-get',
      date: new Date().toISOString(),
      node: process.version,
      cores: cpus().length,
      settings,
      results,
      gatewayMemory,
      meanMiBps: { direct: mean('minio-direct'), relay: mean('tcp-relay'), gateway: mean('gateway') },
      ratio,
      relayRatio,
      gatewayCpuSecondsPerGiB: gatewayCpuPerGiB,
    };
    writeFileSync(join(outDir, 'passthrough-latest.json'), `${JSON.stringify(report, null, 2)}\n`);
  } finally {
    await direct.pool.close();
    await viaRelay.pool.close();
    relay.child.kill();
    await viaGateway.pool.close();
    await gateway.stop();
    await minio.destroy();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
