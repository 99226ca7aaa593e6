/**
 * What hostile clients cost the gateway, as reported figures (docs/reliability.md): one gateway
 * process, with its default limits, in front of one MinIO.
 *
 * 1. Unauthenticated connections: N connections that send nothing, N that stall inside their
 *    headers, and N browser-form POSTs that stall after 60 KiB of fields. For each group: the
 *    gateway's resident memory over idle while they are open, and how long after opening the
 *    gateway closed them (every one must be closed: a connection still open after 60 s is a
 *    failure of the run).
 * 2. A flood from other keys: team A's descriptor-GET latency (median, p99) alone, then while a
 *    key with no policy holds 64 stalled descriptor POSTs, a second key holds 200 stalled uploads,
 *    and a third sends descriptor GETs from many loops at once. Reports team A's refusals (there
 *    should be none) and the flooding key's (503 SlowDown beyond its share).
 *
 *   npm run bench:hostile [-- --connections 1000 --flood-loops 128 --samples 60]
 *
 * Writes bench/results/hostile-latest.json. Loopback only; bounded in count and time.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createHash } from 'node:crypto';
import { SignatureV4 } from '@smithy/signature-v4';
import { ObjectCacheClient } from '../client/client.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { NodeSha256 } from '../sigv4/signer.js';
import { BENCH_CLIENT, startGatewayProcess, type GatewayProcess } from './gateway-process.js';
import { installMinio, repoRoot, startMinio } from '../test/helpers/minio.js';
import { processUsage } from './process-usage.js';

const BUCKET = 'hostile-bench';
const MiB = 1024 * 1024;
const TEAM_A = { accessKeyId: 'team-a', secretAccessKey: 'team-a-secret-01' };
const FLOODER = { accessKeyId: 'flooder', secretAccessKey: 'flooder-secret-01' };
const NOBODY = { accessKeyId: 'nobody', secretAccessKey: 'nobody-secret-01' };
const STALLER = { accessKeyId: 'staller', secretAccessKey: 'staller-secret-01' };
const READ_WRITE = { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: ['s3:GetObject', 's3:PutObject'], Resource: `arn:aws:s3:::${BUCKET}/*` }] };
/** Connections still open this long after they were opened fail the run. */
const CLOSE_LIMIT_MS = 60_000;

type Key = { readonly accessKeyId: string; readonly secretAccessKey: string };

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

async function open(url: URL): Promise<Socket> {
  const socket = connect(Number(url.port), url.hostname);
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return socket;
}

async function signedHead(key: Key, url: URL, method: string, path: string, query: Record<string, string>, headers: Record<string, string>, payloadHash: string): Promise<string> {
  const signer = new SignatureV4({ credentials: key, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
  const signed = await signer.sign({
    method,
    protocol: 'http:',
    hostname: url.hostname,
    port: Number(url.port),
    path,
    query,
    headers: { host: url.host, 'x-amz-content-sha256': payloadHash, ...headers },
  });
  const q = new URLSearchParams(query).toString();
  return `${method} ${path}${q === '' ? '' : `?${q}`} HTTP/1.1\r\n${Object.entries(signed.headers)
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n')}\r\n\r\n`;
}

interface Group {
  readonly name: string;
  readonly connections: number;
  readonly rssOverIdleMiB: number;
  readonly closedMedianS: number;
  readonly closedMaxS: number;
  readonly stillOpen: number;
}

/** Opens `count` connections that each send `first` and then nothing; measures memory and closing times. */
async function stalledGroup(gateway: GatewayProcess, name: string, count: number, first: (i: number) => Promise<string | Buffer | undefined>): Promise<Group> {
  const url = new URL(gateway.url);
  const before = processUsage(gateway.child.pid as number).rssBytes;
  const opened = performance.now();
  const closedAfter: number[] = [];
  const sockets: Socket[] = [];
  for (let i = 0; i < count; i++) {
    const socket = await open(url);
    const bytes = await first(i);
    if (bytes !== undefined) socket.write(bytes);
    socket.resume();
    socket.once('close', () => closedAfter.push((performance.now() - opened) / 1000));
    sockets.push(socket);
  }
  // Memory while all of them are held (the gateway has read what each sent).
  await new Promise((r) => setTimeout(r, 1500));
  let peak = processUsage(gateway.child.pid as number).rssBytes;
  while (closedAfter.length < count && performance.now() - opened < CLOSE_LIMIT_MS) {
    peak = Math.max(peak, processUsage(gateway.child.pid as number).rssBytes);
    await new Promise((r) => setTimeout(r, 250));
  }
  const stillOpen = count - closedAfter.length;
  for (const socket of sockets) socket.destroy();
  const sorted = [...closedAfter].sort((a, b) => a - b);
  return { name, connections: count, rssOverIdleMiB: (peak - before) / MiB, closedMedianS: percentile(sorted, 50), closedMaxS: sorted.at(-1) ?? NaN, stillOpen };
}

async function latencies(
  client: ObjectCacheClient,
  descriptor: DescriptorInput,
  samples: number,
): Promise<{ medianMs: number; p99Ms: number; refused: number; codes: Record<string, number> }> {
  const ms: number[] = [];
  const codes: Record<string, number> = {};
  let refused = 0;
  for (let i = 0; i < samples; i++) {
    const started = performance.now();
    try {
      await client.fetch(descriptor);
      ms.push(performance.now() - started);
    } catch (error) {
      refused++;
      const code = (error as { code?: string }).code ?? 'unknown';
      codes[code] = (codes[code] ?? 0) + 1;
    }
  }
  ms.sort((a, b) => a - b);
  return { medianMs: percentile(ms, 50), p99Ms: percentile(ms, 99), refused, codes };
}

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({
    options: { connections: { type: 'string', default: '1000' }, 'flood-loops': { type: 'string', default: '128' }, samples: { type: 'string', default: '60' } },
  });
  const count = Number(values.connections);
  const floodLoops = Number(values['flood-loops']);
  const samples = Number(values.samples);
  console.log(`node ${process.version}, ${cpus().length} cores; ${count} connections per group; flood of ${floodLoops} loops; ${samples} samples`);

  const dir = mkdtempSync(join(tmpdir(), 'objectcache-bench-hostile-'));
  const credentials = join(dir, 'credentials.json');
  writeFileSync(credentials, JSON.stringify([{ ...TEAM_A, policy: READ_WRITE }, { ...FLOODER, policy: READ_WRITE }, { ...STALLER, policy: READ_WRITE }, { ...NOBODY }]));
  const minio = await startMinio({ binary: installMinio(), dataDir: join(dir, 'minio') });
  const gateway = await startGatewayProcess({ minio, args: ['--credentials', credentials] });
  const url = new URL(gateway.url);
  // retries 0: every refusal is counted, not tried again (client/client.ts ObjectCacheClientOptions.retries).
  const admin = new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: BENCH_CLIENT, retries: 0 });
  const teamA = new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: TEAM_A, retries: 0 });
  const flooder = new ObjectCacheClient({ endpoint: gateway.url, bucket: BUCKET, credentials: FLOODER, retries: 0 });
  try {
    await admin.ensureBucket();
    // A small prefix (8 chunks x 16 layers x 64 KiB = 8 MiB): latency, not bandwidth, is measured.
    const layers = 16;
    const layerBytes = 64 * 1024;
    const keys = Array.from({ length: 8 }, (_, i) => `kv/a/${String(i).padStart(5, '0')}`);
    await admin.putChunks(
      keys,
      keys.map((_, i) => new Uint8Array(layers * layerBytes).fill(i + 1)),
    );
    const descriptor: DescriptorInput = { version: 1, keys, layers, chunkTokens: 64, layerBytes, layout: 'KV_L2TD', delivery: 'layer-major', mode: 'layerwise' };
    await teamA.fetch(descriptor);
    const idle = processUsage(gateway.child.pid as number).rssBytes;

    // 1. Unauthenticated connections.
    const groups: Group[] = [];
    groups.push(await stalledGroup(gateway, 'silent (no byte sent)', count, async () => undefined));
    groups.push(await stalledGroup(gateway, 'headers stalled', count, async () => `GET /${BUCKET}/x HTTP/1.1\r\nhost: ${url.host}\r\nx-pad: ${'a'.repeat(4000)}\r\n`));
    const boundary = 'xBOUNDARYx';
    const field = `--${boundary}\r\ncontent-disposition: form-data; name="x-ignore-pad"\r\n\r\n${'a'.repeat(60 * 1024)}\r\n`;
    groups.push(
      await stalledGroup(
        gateway,
        'form POST stalled after 60 KiB of fields',
        count,
        async () =>
          `POST /${BUCKET} HTTP/1.1\r\nhost: ${url.host}\r\ncontent-type: multipart/form-data; boundary=${boundary}\r\ncontent-length: ${200 * field.length}\r\n\r\n${field}`,
      ),
    );
    for (const g of groups)
      console.log(
        `${g.name}: ${g.connections} connections, RSS +${g.rssOverIdleMiB.toFixed(1)} MiB, closed after ${g.closedMedianS.toFixed(1)} s (median) / ${g.closedMaxS.toFixed(1)} s (last), ${g.stillOpen} still open`,
      );

    // 2. Team A alone, then under a flood.
    const alone = await latencies(teamA, descriptor, samples);
    console.log(`team A alone: median ${alone.medianMs.toFixed(1)} ms, p99 ${alone.p99Ms.toFixed(1)} ms, ${alone.refused} refused`);
    const held: Socket[] = [];
    const body = Buffer.from(JSON.stringify(descriptor));
    const bodyHash = createHash('sha256').update(body).digest('hex');
    for (let i = 0; i < 64; i++) {
      const socket = await open(url);
      socket.write(await signedHead(NOBODY, url, 'POST', `/${BUCKET}`, { objectcache: '' }, { 'content-length': String(body.length) }, bodyHash));
      socket.write(body.subarray(0, 5));
      socket.resume();
      held.push(socket);
    }
    for (let i = 0; i < 200; i++) {
      const socket = await open(url);
      socket.write(await signedHead(STALLER, url, 'PUT', `/${BUCKET}/flood/${i}`, {}, { 'content-length': String(64 * MiB) }, 'UNSIGNED-PAYLOAD'));
      socket.write(Buffer.alloc(1024));
      socket.resume();
      held.push(socket);
    }
    let flooding = true;
    const flood = { sent: 0, refused: 0, codes: {} as Record<string, number> };
    const loops = Array.from({ length: floodLoops }, async () => {
      while (flooding) {
        flood.sent++;
        try {
          await flooder.fetch(descriptor);
        } catch (error) {
          flood.refused++;
          const code = (error as { code?: string }).code ?? 'unknown';
          flood.codes[code] = (flood.codes[code] ?? 0) + 1;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    });
    await new Promise((r) => setTimeout(r, 1000));
    const flooded = await latencies(teamA, descriptor, samples);
    flooding = false;
    await Promise.all(loops);
    for (const socket of held) socket.destroy();
    console.log(
      `team A under the flood: median ${flooded.medianMs.toFixed(1)} ms, p99 ${flooded.p99Ms.toFixed(1)} ms, ${flooded.refused} refused ${JSON.stringify(flooded.codes)}`,
    );
    console.log(
      `flooding key: ${flood.sent} descriptor GETs, ${flood.refused} refused ${JSON.stringify(flood.codes)}; meanwhile 64 stalled descriptor POSTs (a key with no policy) and 200 stalled uploads (a third key) held`,
    );

    const out = join(repoRoot(), 'bench', 'results');
    mkdirSync(out, { recursive: true });
    const result = {
      date: new Date().toISOString(),
      node: process.version,
      cores: cpus().length,
      idleRssMiB: idle / MiB,
      groups,
      teamA: { alone, flooded },
      flood,
      settings: { connections: count, floodLoops, samples },
    };
    writeFileSync(join(out, 'hostile-latest.json'), `${JSON.stringify(result, null, 2)}\n`);
    const failed = groups.some((g) => g.stillOpen > 0) || flooded.refused > 0;
    if (failed) {
      console.error('FAILED: a connection stayed open past the limit, or team A was refused under the flood');
      process.exitCode = 1;
    }
  } finally {
    await Promise.all([admin.close(), teamA.close(), flooder.close()]);
    await gateway.stop();
    await minio.destroy();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
