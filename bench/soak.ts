/**
 * Soak (reliability suite): mixed passthrough and layerwise traffic from many concurrent clients
 * against a gateway process and MinIO, on loopback only, for a bounded time. Samples the gateway's
 * RSS, open sockets and file descriptors, pending worker tasks and buffered bytes, counts
 * unexpected errors, and writes bench/results/soak-latest.json.
 *
 *   npm run bench:soak [-- --minutes 10 --clients 16]
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { ObjectCacheClient } from '../client/client.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { processUsage } from './process-usage.js';
import { BENCH_CLIENT, startGatewayProcess } from './gateway-process.js';
import { installMinio, repoRoot, startMinio } from '../test/helpers/minio.js';

function openFds(pid: number): { fds: number; sockets: number } {
  try {
    const entries = readdirSync(`/proc/${pid}/fd`);
    let sockets = 0;
    for (const fd of entries) {
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) sockets++;
      } catch {
        // closed while we looked
      }
    }
    return { fds: entries.length, sockets };
  } catch {
    return { fds: NaN, sockets: NaN };
  }
}

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({ options: { minutes: { type: 'string', default: '10' }, clients: { type: 'string', default: '16' } } });
  const minutes = Number(values.minutes);
  const clients = Number(values.clients);
  console.log(`node ${process.version}, ${cpus().length} cores; soak ${minutes} min, ${clients} clients (half passthrough, half layerwise), loopback only`);
  const minio = await startMinio({ binary: installMinio(), dataDir: mkdtempSync(join(tmpdir(), 'objectcache-soak-')) });
  const gateway = await startGatewayProcess({ minio, args: ['--threshold', '0'] });
  const pid = gateway.child.pid as number;
  const client = new ObjectCacheClient({ endpoint: gateway.url, bucket: 'soak', credentials: BENCH_CLIENT });
  await client.ensureBucket();
  const layers = 16;
  const layerBytes = 64 * 1024;
  const keys = Array.from({ length: 16 }, (_, i) => `kv/soak/${i}`);
  await client.putChunks(
    keys,
    keys.map(() => new Uint8Array(randomBytes(layers * layerBytes))),
    { layout: { layout: 'KV_L2TD', layers, layerBytes } },
  );
  const descriptor: DescriptorInput = { version: 1, keys, layers, chunkTokens: 16, layerBytes, layout: 'KV_L2TD', delivery: 'layer-major' };

  const end = Date.now() + minutes * 60_000;
  const counts = { passthrough: 0, layerwise: 0, errors: 0 };
  const errorSamples: string[] = [];
  const samples: { t: number; rssMiB: number; fds: number; sockets: number; buffered: number; queued: number; running: number }[] = [];
  const sample = async (): Promise<void> => {
    try {
      const metrics = await (await fetch(`${gateway.adminUrl}/metrics`)).text();
      const metric = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1] ?? NaN);
      const { fds, sockets } = openFds(pid);
      samples.push({
        t: Math.round((Date.now() - (end - minutes * 60_000)) / 1000),
        rssMiB: processUsage(pid).rssBytes / 1024 ** 2,
        fds,
        sockets,
        buffered: metric('objectcache_buffered_bytes'),
        queued: metric('objectcache_worker_pool_queued_tasks'),
        running: metric('objectcache_worker_pool_running_tasks'),
      });
    } catch (error) {
      errorSamples.push(`sampler: ${(error as Error).message}`);
    }
  };
  const sampler = setInterval(() => void sample(), 5000);

  const worker = async (id: number): Promise<void> => {
    let n = 0;
    while (Date.now() < end) {
      n++;
      try {
        if (id % 2 === 0) {
          const key = `plain/${id}/${n % 50}`;
          const body = randomBytes(1024 + ((n * 7919) % 262_144));
          await client.s3.send(new PutObjectCommand({ Bucket: 'soak', Key: key, Body: body }));
          const got = Buffer.from(await (await client.s3.send(new GetObjectCommand({ Bucket: 'soak', Key: key }))).Body!.transformToByteArray());
          if (!got.equals(body)) throw new Error(`GET ${key} returned different bytes`);
          if (n % 10 === 0) await client.s3.send(new ListObjectsV2Command({ Bucket: 'soak', Prefix: `plain/${id}/` }));
          counts.passthrough++;
        } else {
          const result = await client.fetch(
            { ...descriptor, layerRange: [0, 1 + (n % layers)], mode: n % 3 === 0 ? 'chunkwise' : 'layerwise' },
            { transport: n % 2 === 0 ? 'get' : 'post' },
          );
          if (!result.summary.verified) throw new Error('a layerwise GET was not verified');
          counts.layerwise++;
        }
      } catch (error) {
        counts.errors++;
        if (errorSamples.length < 20) errorSamples.push(`${id}: ${(error as Error).message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, i) => worker(i)));
  clearInterval(sampler);
  await new Promise((r) => setTimeout(r, 2000));
  const idle = openFds(pid);
  await client.close();
  const usage = processUsage(pid);
  const gatewayMemory = gateway.memory();
  await gateway.stop();
  await minio.destroy();

  const warm = samples.filter((s) => s.t >= 60);
  const first = warm[0];
  const last = warm.at(-1);
  const report = {
    benchmark: 'soak',
    date: new Date().toISOString(),
    node: process.version,
    settings: { minutes, clients },
    requests: counts,
    unexpectedErrors: errorSamples,
    gateway: { cpuSeconds: usage.cpuSeconds, peakRssMiB: usage.peakRssBytes / 1024 ** 2, idleAfter: idle },
    afterWarmup:
      first && last
        ? {
            rssMiB: [first.rssMiB, last.rssMiB],
            sockets: [first.sockets, last.sockets],
            fds: [first.fds, last.fds],
            maxQueued: Math.max(...warm.map((s) => s.queued)),
            maxBufferedMiB: Math.max(...warm.map((s) => s.buffered)) / 1024 ** 2,
          }
        : null,
    samples,
  };
  mkdirSync(join(repoRoot(), 'bench', 'results'), { recursive: true });
  writeFileSync(join(repoRoot(), 'bench', 'results', 'soak-latest.json'), `${JSON.stringify({ ...report, gatewayMemory }, null, 2)}\n`);
  console.log(JSON.stringify({ requests: counts, unexpectedErrors: errorSamples.length, afterWarmup: report.afterWarmup, gateway: report.gateway }, null, 2));
  if (counts.errors > 0) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
