/**
 * What KV events (docs/kv-events.md) cost the gateway, and what a subscriber that stops reading
 * makes it hold. The same writes (chunks with 256 token ids each, through the TypeScript client,
 * `--concurrency` at a time) go to a gateway on its embedded store:
 *   off         without --kv-events;
 *   subscribed  with one subscriber that reads every batch;
 *   stalled     with that one and another that connects, subscribes and never reads.
 * Prints, per mode, the writes a second, the gateway's CPU-seconds per thousand writes, its
 * resident memory a second after the writes and its peak, and the events the reading subscriber
 * got. One run of each mode, alternated `--rounds` times; the JSON goes to
 * bench/results/kv-events-stall.json.
 *
 * First the publisher alone is flooded (`flood` below).
 *
 *   npm run bench:kv-events -- [--writes 5000] [--concurrency 32] [--rounds 1] [--flood 20000]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { spawn } from 'node:child_process';
import { decode, encode } from '@msgpack/msgpack';
import { Subscriber } from 'zeromq';
import { ObjectCacheClient } from '../client/client.js';
import { chunkKeys } from '../client/keys.js';
import { freePort, repoRoot } from '../test/helpers/minio.js';
import { EventPublisher } from '../gateway/kv-events/publisher.js';
import { BENCH_CLIENT, startGatewayProcess } from './gateway-process.js';
import { processUsage } from './process-usage.js';

type Mode = 'off' | 'subscribed' | 'stalled';

interface Row {
  readonly mode: Mode;
  readonly writesPerSec: number;
  readonly cpuSecondsPer1kWrites: number;
  readonly rssAfterMiB: number;
  readonly peakRssMiB: number;
  readonly eventsReceived: number;
}

const { values } = parseArgs({
  options: {
    writes: { type: 'string', default: '5000' },
    concurrency: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '1' },
    flood: { type: 'string', default: '20000' },
  },
});
const WRITES = Number(values.writes);
const CONCURRENCY = Number(values.concurrency);
const ROUNDS = Number(values.rounds);
const G = 256;
const LAYERS = 2;
const LAYER_BYTES = 2048;

/** A subscriber that counts the events it reads (or, stalled, never reads). */
function subscriber(endpoint: string, reads: boolean): { socket: Subscriber; events: () => number } {
  const socket = new Subscriber();
  // The stalled one queues as little as it can itself: what it holds up is then the gateway's.
  if (!reads) socket.receiveHighWaterMark = 1;
  socket.connect(endpoint);
  socket.subscribe('');
  let events = 0;
  if (reads) {
    void (async () => {
      try {
        for await (const [, , payload] of socket) events += (decode(payload as Buffer, { useBigInt64: true }) as [number, unknown[]])[1].length;
      } catch {
        // closed
      }
    })();
  }
  return { socket, events: () => events };
}

async function run(mode: Mode): Promise<Row> {
  const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-kv-bench-'));
  const endpoint = `tcp://127.0.0.1:${await freePort()}`;
  const gw = await startGatewayProcess({ dataDir, args: ['--budget', 'kvcache=1TiB', ...(mode === 'off' ? [] : ['--kv-events', endpoint])] });
  const subscribers = mode === 'off' ? [] : mode === 'subscribed' ? [subscriber(endpoint, true)] : [subscriber(endpoint, true), subscriber(endpoint, false)];
  try {
    await new Promise((r) => setTimeout(r, 500)); // the subscriptions reach the gateway
    const client = new ObjectCacheClient({ endpoint: gw.url, bucket: 'kvcache', credentials: BENCH_CLIENT });
    await client.ensureBucket();
    const tokens = Array.from({ length: WRITES * G }, (_, i) => (i * 7919) % 150_000);
    const keys = chunkKeys(tokens, { modelId: 'bench/model', dtype: 'bfloat16', chunkTokens: G, layers: LAYERS, layerBytes: LAYER_BYTES, layout: 'KV_L2TD' });
    const objects = keys.map(() => new Uint8Array(LAYERS * LAYER_BYTES));
    const perChunk = keys.map((_, i) => tokens.slice(i * G, (i + 1) * G));
    const pids = gw.pids();
    const cpu = (): number => pids.reduce((n, pid) => n + processUsage(pid).cpuSeconds, 0);
    const before = cpu();
    const started = performance.now();
    await client.putChunks(keys, objects, { tokens: perChunk, model: 'bench/model', concurrency: CONCURRENCY });
    const seconds = (performance.now() - started) / 1000;
    const spent = cpu() - before;
    await new Promise((r) => setTimeout(r, 1000));
    const rssAfterMiB = pids.reduce((n, pid) => n + processUsage(pid).rssBytes, 0) / 1024 ** 2;
    return {
      mode,
      writesPerSec: WRITES / seconds,
      cpuSecondsPer1kWrites: (spent / WRITES) * 1000,
      rssAfterMiB,
      peakRssMiB: gw.memory().peakRssMiB,
      eventsReceived: subscribers[0]?.events() ?? 0,
    };
  } finally {
    for (const s of subscribers) s.socket.close();
    await gw.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * The publisher alone, flooded: `batches` batches of about 80 KB (64 events of 256 tokens, the
 * most a batch holds) to a subscriber in another process that connects and never reads. What this
 * process holds for it stays within the high-water mark (1,000 batches) however many are sent, and
 * no publish waits.
 */
async function flood(batches: number): Promise<{ batches: number; handed: number; queueDrops: number; seconds: number; rssGrowthMiB: number; boundMiB: number }> {
  const endpoint = `tcp://127.0.0.1:${await freePort()}`;
  const stalled = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { Subscriber } from 'zeromq'; const s = new Subscriber(); s.receiveHighWaterMark = 1; s.connect(${JSON.stringify(endpoint)}); s.subscribe(''); setInterval(() => {}, 1000);`,
    ],
    { cwd: repoRoot(), stdio: 'ignore' },
  );
  const quiet = { warn: () => {}, error: () => {}, info: () => {} };
  let handed = 0;
  let queueDrops = 0;
  const publisher = new EventPublisher({
    endpoint,
    replayEndpoint: undefined,
    history: 1,
    highWaterMark: 1000,
    logger: quiet,
    observer: { published: () => handed++, dropped: () => queueDrops++, replayed: () => {}, subscribers: () => {} },
  });
  await publisher.start();
  await new Promise((r) => setTimeout(r, 1000));
  const payload = encode([Date.now() / 1000, Array.from({ length: 64 }, () => ({ type: 'BlockStored', token_ids: Array.from({ length: 256 }, (_, i) => 100_000 + i) })), 0]);
  globalThis.gc?.();
  const before = process.memoryUsage().rss;
  const started = performance.now();
  for (let i = 0; i < batches; i++) {
    publisher.publish('', payload.slice(), 64, 0); // each batch its own bytes, as the gateway's are
    // Paced so that the publisher's own queue drains: every batch reaches ZeroMQ, which holds
    // what the stalled subscriber cannot take up to the high-water mark and drops the rest.
    if (i % 8 === 7) await new Promise((r) => setImmediate(r));
  }
  const seconds = (performance.now() - started) / 1000;
  await new Promise((r) => setTimeout(r, 2000));
  globalThis.gc?.();
  const rssGrowthMiB = (process.memoryUsage().rss - before) / 1024 ** 2;
  await publisher.close();
  stalled.kill();
  return { batches, handed, queueDrops, seconds, rssGrowthMiB, boundMiB: (1000 * payload.byteLength) / 1024 ** 2 };
}

const flooded = await flood(Number(values.flood));
console.log(
  `flood      ${flooded.batches} batches of 64 events (${flooded.handed} handed to ZeroMQ, ${flooded.queueDrops} dropped before) in ${flooded.seconds.toFixed(2)} s to a subscriber that never reads: this process grew ${flooded.rssGrowthMiB.toFixed(0)} MiB (the high-water mark's worth: ${flooded.boundMiB.toFixed(0)} MiB)`,
);
const rows: Row[] = [];
for (let round = 0; round < ROUNDS; round++) {
  for (const mode of ['off', 'subscribed', 'stalled'] as const) {
    const row = await run(mode);
    rows.push(row);
    console.log(
      `${row.mode.padEnd(10)} ${row.writesPerSec.toFixed(0).padStart(6)} writes/s  ${row.cpuSecondsPer1kWrites.toFixed(3)} CPU-s per 1k writes  RSS ${row.rssAfterMiB.toFixed(0)} MiB after, ${row.peakRssMiB.toFixed(0)} MiB peak  ${row.eventsReceived} events read`,
    );
  }
}
const out = join(repoRoot(), 'bench/results/kv-events-stall.json');
writeFileSync(
  out,
  `${JSON.stringify({ writes: WRITES, concurrency: CONCURRENCY, chunkTokens: G, node: process.version, date: new Date().toISOString(), flood: flooded, rows }, null, 2)}\n`,
);
console.log(`wrote ${out}`);
