/**
 * One `serve` on several processes (--processes; gateway/cluster/): the serving processes share
 * one S3 port and one view of admission, per-key limits, the byte budget and the bandwidth
 * scheduler, held by the primary; a serving process that dies is replaced and what it held is
 * given back; capacity and packed segments work across them; on the embedded store a store
 * process owns the data directory. Each test runs `objectcache serve` as a user does.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decode } from '@msgpack/msgpack';
import { Subscriber } from 'zeromq';
import { ObjectCacheClient, type FetchResult } from '../client/client.js';
import { chunkKeys } from '../client/keys.js';
import { freePort } from './helpers/minio.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { runCliAsync, startServe, type ServeProcess } from './helpers/cli.js';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { CLIENT_KEY, CLIENT_SECRET, metricValue, sdkClient, segmentEvents, uniqueBucket } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';

const minio = inject('minio');
const env = {
  OBJECTCACHE_ACCESS_KEY: CLIENT_KEY,
  OBJECTCACHE_SECRET_KEY: CLIENT_SECRET,
  OBJECTCACHE_BACKEND_ACCESS_KEY: minio.accessKey,
  OBJECTCACHE_BACKEND_SECRET_KEY: minio.secretKey,
};
const MiB = 1024 * 1024;

/** `objectcache serve` with two serving processes in front of the test MinIO, logging each request (its line names the process). */
function inFrontOfMinio(...more: string[]): Promise<ServeProcess> {
  return startServe(['--s3-endpoint', minio.endpoint, '--processes', '2', '--log-level', 'info', '--threshold', '0', ...more], env);
}

/** A client with its own connections (so that each lands on the next serving process in turn). */
function newClient(gw: ServeProcess, bucket: string): ObjectCacheClient {
  return new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET }, retries: 0 });
}

/** A fetch of `prefix` from a new client (a new connection, so the next process in turn), checked byte-exact. */
async function freshFetch(gw: ServeProcess, bucket: string, prefix: SeededPrefix): Promise<FetchResult> {
  const client = newClient(gw, bucket);
  try {
    const result = await client.fetch(descriptorOf(prefix));
    expectBytes(result, reference(prefix));
    return result;
  } finally {
    await client.close();
  }
}

function expectBytes(got: { readonly target: Uint8Array }, expected: Uint8Array): void {
  expect(Buffer.from(got.target).equals(Buffer.from(expected))).toBe(true);
}

/** The serving processes' pids, by number, from their start-up lines (the latest of each). */
function servingPids(gw: ServeProcess): Map<number, number> {
  const pids = new Map<number, number>();
  for (const line of gw.lines) if (line['msg'] === 'serving process listening') pids.set(Number(line['process']), Number(line['pid']));
  return pids;
}

/** The serving processes that logged layerwise GETs with `status` since line `from` (their request lines). */
function servedBy(gw: ServeProcess, from: number, status: number): number[] {
  return gw.lines
    .slice(from)
    .filter((l) => l['msg'] === 'request' && ['LayerwiseGet', 'ChunkwiseGet'].includes(String(l['operation'])) && l['status'] === status && l['tenant'] !== undefined)
    .map((l) => Number(l['process']));
}

/** The layerwise GETs each serving process serves now, by number (the primary's objectcache_serving_process_layerwise_requests). */
async function layerwiseByProcess(gw: ServeProcess): Promise<Map<number, number>> {
  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  const serving = new Map<number, number>();
  for (const [, process, value] of text.matchAll(/^objectcache_serving_process_layerwise_requests\{process="(\d+)"\} (\d+)$/gm)) {
    if (Number(value) > 0) serving.set(Number(process), Number(value));
  }
  return serving;
}

/** A credentials file with a second key of its own tenant that may do anything with the bucket. */
function credentialsFile(bucket: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'objectcache-cluster-keys-'));
  const file = join(dir, 'credentials.json');
  const policy = { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: 's3:*', Resource: [`arn:aws:s3:::${bucket}`, `arn:aws:s3:::${bucket}/*`] }] };
  writeFileSync(file, JSON.stringify([{ accessKeyId: 'tenant-b', secretAccessKey: 'tenant-b-secret', tenant: 'tenant-b', policy }]));
  return file;
}

async function waitFor(what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function refusal(work: Promise<unknown>): Promise<ObjectCacheError> {
  try {
    await work;
  } catch (error) {
    if (error instanceof ObjectCacheError) return error;
    throw error;
  }
  throw new Error('expected a refusal');
}

describe('one serve on two processes, in front of MinIO', () => {
  let gw: ServeProcess;
  const bucket = uniqueBucket('cluster');
  let seed: ObjectCacheClient;
  let prefix: SeededPrefix;
  let small: SeededPrefix;

  beforeAll(async () => {
    // Layerwise GETs paced at 16 MB/s in all, one per key at a time, at most four in the gateway.
    gw = await inFrontOfMinio(
      ...['--cap', '16MB/s', '--epoch-ms', '200', '--max-descriptor-gets', '4', '--max-descriptor-gets-per-key', '1'],
      ...['--max-requests-per-connection', '4', '--credentials', credentialsFile(bucket)],
    );
    seed = newClient(gw, bucket);
    await seed.ensureBucket();
    // 24 chunks of 8 layers of 64 KiB: 12 MiB, about 0.75 s at the whole cap.
    prefix = await seedPrefix(seed, { chunks: 24, layers: 8, layerBytes: 64 * 1024, layout: 'KV_L2TD' });
    small = await seedPrefix(seed, { chunks: 2, layers: 2, layerBytes: 1024, layout: 'KV_L2TD' });
  }, 120_000);

  afterAll(async () => {
    await seed?.close();
    expect(await gw?.stop()).toBe(0);
  });

  it('listens on one port with two serving processes and serves byte-exact from both', async () => {
    expect(servingPids(gw).size).toBe(2);
    expect(await metricValue(gw.adminUrl, 'objectcache_serving_processes')).toBe(2);
    const from = gw.lines.length;
    for (let i = 0; i < 6; i++) await freshFetch(gw, bucket, prefix);
    await waitFor('six request lines', () => servedBy(gw, from, 200).length === 6);
    // Connections go to the processes in turn.
    expect([...new Set(servedBy(gw, from, 200))].sort()).toEqual([1, 2]);
    // One scrape counts both processes' requests.
    expect(await metricValue(gw.adminUrl, 'objectcache_delivered_bytes_total')).toBeGreaterThanOrEqual(6 * prefix.keys.length * prefix.layers * prefix.layerBytes);
  }, 60_000);

  it('spreads a client with one keep-alive connection across both processes (--max-requests-per-connection)', async () => {
    // The clients' default retries: a GET that follows the one before it at once, on the new
    // connection to the other process, can find the key's slot not yet given back (the release
    // travels to the primary as the last bytes travel to the client) and be refused once with a
    // retryable 503 SlowDown, which a client repeats after its Retry-After.
    const client = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET } });
    try {
      const from = gw.lines.length;
      // One GET at a time: the client's one connection, closed by the gateway after every fourth answer.
      for (let i = 0; i < 10; i++) expectBytes(await client.fetch(descriptorOf(small)), reference(small));
      await waitFor('ten request lines', () => servedBy(gw, from, 200).length === 10);
      expect([...new Set(servedBy(gw, from, 200))].sort()).toEqual([1, 2]);
    } finally {
      await client.close();
    }
  }, 60_000);

  it('holds a key to its layerwise slots across processes (a second GET of the key is refused on either)', async () => {
    const holder = newClient(gw, bucket);
    const others: ObjectCacheClient[] = [];
    try {
      const held = holder.fetch(descriptorOf(prefix));
      await waitFor('the first GET holds its slot', async () => (await metricValue(gw.adminUrl, 'objectcache_layerwise_active_requests')) === 1);
      const from = gw.lines.length;
      for (let i = 0; i < 4; i++) {
        const other = newClient(gw, bucket);
        others.push(other);
        const refused = await refusal(other.fetch(descriptorOf(prefix)));
        expect(refused.code).toBe('OC_ERR_KEY_CONCURRENCY');
        expect(refused.retryable).toBe(true);
      }
      await waitFor('four request lines', () => servedBy(gw, from, 503).length === 4);
      // Refused by both processes: the slot the first GET took in one is seen by the other.
      expect([...new Set(servedBy(gw, from, 503))].sort()).toEqual([1, 2]);
      expectBytes(await held, reference(prefix));
      // Given back: the key may take its slot again.
      expectBytes(await others[0]!.fetch(descriptorOf(prefix)), reference(prefix));
    } finally {
      await holder.close();
      for (const other of others) await other.close();
    }
  }, 60_000);

  type Outcome = { ok: true; r: FetchResult } | { ok: false; error: unknown };
  const outcome = (fetching: Promise<FetchResult>): Promise<Outcome> =>
    fetching.then(
      (r) => ({ ok: true as const, r }),
      (error: unknown) => ({ ok: false as const, error }),
    );

  /**
   * Two clients, of two keys (and tenants), whose connections are on different processes: each
   * first reads a small prefix (its request line names the process); connections go to the
   * processes in turn, so a second client that landed beside the first is replaced after one more
   * connection. Their next GETs, sent together, are scheduled in the same epoch.
   */
  async function onBothProcesses(clients: ObjectCacheClient[]): Promise<{ a: ObjectCacheClient; b: ObjectCacheClient }> {
    const processOf = async (client: ObjectCacheClient, tenant: string): Promise<number> => {
      const from = gw.lines.length;
      expectBytes(await client.fetch(descriptorOf(small)), reference(small));
      let line: Record<string, unknown> | undefined;
      await waitFor('its request line', () => (line = gw.lines.slice(from).find((l) => l['msg'] === 'request' && l['tenant'] === tenant)) !== undefined);
      return Number(line?.['process']);
    };
    const a = newClient(gw, bucket);
    clients.push(a);
    const processOfA = await processOf(a, CLIENT_KEY);
    for (let tries = 0; tries < 4; tries++) {
      const b = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: 'tenant-b', secretAccessKey: 'tenant-b-secret' }, retries: 0 });
      clients.push(b);
      if ((await processOf(b, 'tenant-b')) !== processOfA) return { a, b };
      await fetch(`${gw.url}/`).then((r) => r.arrayBuffer());
    }
    throw new Error('the second client never landed on the other process');
  }

  it('shares one bandwidth cap between two tenants on different processes', async () => {
    const clients: ObjectCacheClient[] = [];
    try {
      const { a, b } = await onBothProcesses(clients);
      const started = performance.now();
      const done: Record<string, number> = {};
      // b (retries: 0, to stay on its process) just ended a GET: with one slot per key, its next may
      // reach the primary before that slot's release and be refused, retryably (docs/architecture.md,
      // Several serving processes); it is sent again then, on the same connection, every 100 ms for
      // up to 2 s (with one retry after 100 ms, a CI run under load still never saw both granted).
      const again = async (client: ObjectCacheClient): Promise<FetchResult> => {
        for (let attempt = 0; ; attempt++) {
          try {
            return await client.fetch(descriptorOf(prefix));
          } catch (error) {
            if (!(error instanceof ObjectCacheError) || !error.retryable || attempt >= 20) throw error;
            await new Promise((resolve) => setTimeout(resolve, 100));
          }
        }
      };
      const fetches = [a.fetch(descriptorOf(prefix)).finally(() => (done['a'] = performance.now() - started)), again(b).finally(() => (done['b'] = performance.now() - started))];
      for (const f of fetches) f.catch(() => {}); // awaited below, unless an assertion fails first
      // One scheduler granted both, from the one cap: each tenant half (the same load), together the cap.
      let granted = new Map<string, number>();
      await waitFor('both are granted', async () => {
        const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
        granted = new Map(
          [...text.matchAll(/^objectcache_scheduler_granted_rate_bytes_per_second\{tenant="([^"]+)"\} (\S+)$/gm)].map(([, tenant, rate]) => [String(tenant), Number(rate)]),
        );
        return granted.size === 2;
      });
      expect(granted.get(CLIENT_KEY)).toBeCloseTo(8e6, -5);
      expect(granted.get('tenant-b')).toBeCloseTo(8e6, -5);
      expect(await metricValue(gw.adminUrl, 'objectcache_scheduler_cap_bytes_per_second')).toBe(16e6);
      for (const r of await Promise.all(fetches)) expectBytes(r, reference(prefix));
      // Each tenant's 12 MiB at its half of the cap: about 1.6 s each (two schedulers, each
      // granting its tenant the whole cap, would end both in about 0.8 s).
      const seconds = Math.max(done['a'] as number, done['b'] as number) / 1000;
      expect((2 * prefix.keys.length * prefix.layers * prefix.layerBytes) / seconds).toBeLessThan(16e6 * 1.15);
      expect(Math.abs((done['a'] as number) - (done['b'] as number)) / 1000).toBeLessThan(0.3 * seconds);
    } finally {
      for (const c of clients) await c.close();
    }
  }, 60_000);

  it('replaces a serving process killed mid-stream: its GETs fail retryably, the others finish byte-exact, and what it held is given back', async () => {
    const before = servingPids(gw);
    const clients: ObjectCacheClient[] = [];
    try {
      // A GET of one key streams on one process, and one of another key on the other.
      const { a, b } = await onBothProcesses(clients);
      const from = gw.lines.length;
      const streaming = new Set<string>();
      const fetches = [a, b].map((c, i) => outcome(c.fetch(descriptorOf(prefix), { onLayerReady: () => streaming.add(String(i)) })));
      // Both answers have begun (a request cut before its answer is sent again by the client, to the other process).
      await waitFor('both stream', async () => streaming.size === 2 && (await layerwiseByProcess(gw)).size === 2);
      const victim = 1;
      process.kill(before.get(victim) as number, 'SIGKILL');
      const outcomes = await Promise.all(fetches);
      // The other process's GET finishes byte-exact; the killed one's is cut, and may be sent again.
      const completed = outcomes.flatMap((o) => (o.ok ? [o.r] : []));
      const failed = outcomes.flatMap((o) => (o.ok ? [] : [o.error as ObjectCacheError]));
      expect(completed).toHaveLength(1);
      expectBytes(completed[0] as FetchResult, reference(prefix));
      expect(failed).toHaveLength(1);
      expect(failed[0]).toBeInstanceOf(ObjectCacheError);
      expect(failed[0]?.code).toBe('OC_ERR_CLIENT_INCOMPLETE');
      expect(failed[0]?.retryable).toBe(true);
      await waitFor('the finished request line', () => servedBy(gw, from, 200).length === 1);
      expect(servedBy(gw, from, 200)).toEqual([2]);
      await waitFor('a new serving process', () => {
        const pid = servingPids(gw).get(victim);
        return pid !== undefined && pid !== before.get(victim);
      });
      await waitFor('two processes again', async () => (await metricValue(gw.adminUrl, 'objectcache_serving_processes')) === 2);
      expect(await metricValue(gw.adminUrl, 'objectcache_serving_process_restarts_total')).toBe(1);
      // Everything the dead process held is back: no slot, no buffered byte, no granted rate.
      await waitFor('nothing held', async () => (await metricValue(gw.adminUrl, 'objectcache_layerwise_active_requests')) === 0);
      expect(await metricValue(gw.adminUrl, 'objectcache_buffered_bytes')).toBe(0);
      expect(await metricValue(gw.adminUrl, 'objectcache_scheduler_cap_in_use_bytes_per_second')).toBe(0);
      // And both keys take their slots again, through both processes.
      const again = await Promise.all([clients[0]!.fetch(descriptorOf(prefix)), clients.at(-1)!.fetch(descriptorOf(prefix))]);
      for (const r of again) expectBytes(r, reference(prefix));
    } finally {
      for (const c of clients) await c.close();
    }
  }, 90_000);
});

describe('a serve whose serving processes cannot start', () => {
  it('exits with the reason instead of waiting (the port is taken)', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-cluster-'));
    try {
      const port = (taken.address() as AddressInfo).port;
      const run = await runCliAsync(['serve', '--port', String(port), '--metrics-port', '0', '--data-dir', dataDir, '--processes', '2'], {
        env: { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET },
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain('EADDRINUSE');
      expect(run.stderr).toContain('exited before it listened');
    } finally {
      taken.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('one serve on two processes over the embedded store', () => {
  let gw: ServeProcess;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'objectcache-cluster-'));
    gw = await startServe(['--data-dir', dataDir, '--processes', '2', '--log-level', 'info', '--threshold', '0'], {
      OBJECTCACHE_ACCESS_KEY: CLIENT_KEY,
      OBJECTCACHE_SECRET_KEY: CLIENT_SECRET,
    });
  }, 60_000);

  afterAll(async () => {
    expect(await gw?.stop()).toBe(0);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('writes through one process and reads, lists and deletes through the other', async () => {
    const bucket = uniqueBucket('cluster-local');
    const writer = newClient(gw, bucket);
    const reader = newClient(gw, bucket);
    try {
      await writer.ensureBucket();
      const prefix = await seedPrefix(writer, { chunks: 6, layers: 4, layerBytes: 4096, layout: 'KV_L2TD' });
      const result = await reader.fetch(descriptorOf(prefix));
      expectBytes(result, reference(prefix));
      expect(result.summary.verified).toBe(true);
      expect(await reader.lookup(prefix.keys)).toBe(prefix.keys.length);
    } finally {
      await writer.close();
      await reader.close();
    }
    // One store process owns the directory.
    expect(gw.lines.filter((l) => l['msg'] === 'store process listening')).toHaveLength(1);
  }, 60_000);
});

describe('capacity, packed segments and KV events with two serving processes', () => {
  let gw: ServeProcess;
  let events: string;
  const bucket = uniqueBucket('cluster-cap');
  const segmentBucket = uniqueBucket('cluster-segs');
  const bigBucket = uniqueBucket('cluster-big');

  beforeAll(async () => {
    events = `tcp://127.0.0.1:${await freePort()}`;
    gw = await inFrontOfMinio(
      ...['--budget', `${bucket}=${4 * MiB},${bigBucket}=${4 * MiB}`, '--capacity-sync-ms', '200', '--kv-events', events],
      ...['--segments', 'on', '--segment-min-bytes', '0', '--segment-after-reads', '2', '--segment-bucket', segmentBucket],
    );
  }, 60_000);

  afterAll(async () => {
    expect(await gw?.stop()).toBe(0);
  });

  it('publishes the KV events of writes through either process from the first one', async () => {
    const sub = new Subscriber();
    sub.connect(events);
    sub.subscribe('');
    const seen: Record<string, unknown>[] = [];
    void (async () => {
      try {
        for await (const [, , payload] of sub) seen.push(...(decode(payload as Buffer, { useBigInt64: true }) as [number, Record<string, unknown>[]])[1]);
      } catch {
        // closed
      }
    })();
    const clients = [newClient(gw, bucket), newClient(gw, bucket)];
    try {
      await new Promise((r) => setTimeout(r, 300)); // ZeroMQ's slow joiner
      await clients[0]!.ensureBucket();
      const identity = { modelId: 'm', dtype: 'bfloat16', chunkTokens: 4, layers: 2, layerBytes: 1024, layout: 'KV_L2TD' } as const;
      const tokens = Array.from({ length: 24 }, (_, i) => 500 + i);
      const keys = chunkKeys(tokens, identity);
      // One chunk per request, each on a new connection: the two processes take turns.
      for (const [i, key] of keys.entries()) {
        await clients[i % 2]!.putChunks([key], [new Uint8Array(2048)], { tokens: [tokens.slice(i * 4, i * 4 + 4)], ...(i > 0 ? { after: keys[i - 1] as string } : {}) });
      }
      const writers = new Set(gw.lines.filter((l) => l['msg'] === 'request' && l['operation'] === 'PutObject' && l['status'] === 200).map((l) => l['process']));
      expect(writers.size).toBe(2);
      await waitFor(
        'a BlockStored with its tokens for each of the six chunks',
        () =>
          Promise.resolve(keys.every((_, i) => seen.some((e) => e['type'] === 'BlockStored' && JSON.stringify(e['token_ids']) === JSON.stringify(tokens.slice(i * 4, i * 4 + 4))))),
        15_000,
      );
    } finally {
      sub.close();
      for (const c of clients) await c.close();
    }
  });

  it('packs a prefix read through both processes and serves it from its segment', async () => {
    const segBucket = uniqueBucket('cluster-seg-src');
    const writer = newClient(gw, segBucket);
    try {
      await writer.ensureBucket();
      const prefix = await seedPrefix(writer, { chunks: 4, layers: 4, layerBytes: 8192, layout: 'KV_L2TD' });
      for (let i = 0; i < 4; i++) await freshFetch(gw, segBucket, prefix);
      await waitFor('a segment is packed', async () => (await segmentEvents(gw.adminUrl, 'packed')) >= 1);
      await waitFor('a GET is served from it', async () => {
        return (await freshFetch(gw, segBucket, prefix)).segmentChunks === prefix.keys.length;
      });
    } finally {
      await writer.close();
    }
  }, 60_000);

  it('keeps a budgeted bucket within its budget when writes come through both processes', async () => {
    const clients = [newClient(gw, bucket), newClient(gw, bucket)];
    try {
      await clients[0]!.ensureBucket();
      // 12 prefixes of 512 KiB (6 MiB) into a budget of 4 MiB, alternating processes.
      for (let i = 0; i < 12; i++) await seedPrefix(clients[i % 2]!, { chunks: 2, layers: 4, layerBytes: 64 * 1024, layout: 'KV_L2TD' });
      const s3 = sdkClient(gw.url);
      const stored = async (): Promise<number> => {
        const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
        return (listed.Contents ?? []).reduce((n, o) => n + (o.Size ?? 0), 0);
      };
      await waitFor('eviction brings the bucket within its budget', async () => (await stored()) <= 4 * MiB, 30_000);
      expect(await metricValue(gw.adminUrl, 'objectcache_evictions_total')).toBeGreaterThan(0);
    } finally {
      for (const c of clients) await c.close();
    }
  }, 90_000);

  it("keeps at most 15% of the budget free for the others' writes, however large one object is", async () => {
    // With other serving processes about, the low mark leaves room for one write as large as the
    // largest object present, but no more than 15% of the budget: one object of half the budget
    // must not make every trim drain the bucket to half of it.
    const clients = [newClient(gw, bigBucket), newClient(gw, bigBucket)];
    const s3 = sdkClient(gw.url);
    try {
      await clients[0]!.ensureBucket();
      await s3.send(new PutObjectCommand({ Bucket: bigBucket, Key: 'big-object', Body: Buffer.alloc(2 * MiB, 7) }));
      // The object is pinned, so it stays present. (Kept hot by reads instead, it would race the
      // trims: a read through the process that does not trim reaches the one that does a sync or
      // two later, after some of the prefixes written meanwhile, and those then outrank it.) Pinned
      // through both processes, then given five syncs to be known to both.
      for (const client of clients) await client.pin(['big-object'], new Date(Date.now() + 3_600_000));
      await new Promise((resolve) => setTimeout(resolve, 1000));
      // 12 prefixes of 512 KiB after it, alternating processes: 8 MiB into a budget of 4 MiB.
      for (let i = 0; i < 12; i++) await seedPrefix(clients[i % 2]!, { chunks: 2, layers: 4, layerBytes: 64 * 1024, layout: 'KV_L2TD' });
      const stored = async (): Promise<number> => {
        const listed = await s3.send(new ListObjectsV2Command({ Bucket: bigBucket }));
        return (listed.Contents ?? []).reduce((n, o) => n + (o.Size ?? 0), 0);
      };
      await waitFor('eviction brings the bucket within its budget', async () => (await stored()) <= 4 * MiB, 30_000);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      // Drained to at most 3.4 MiB (4 MiB less 15%), never to 2 MiB (4 MiB less the object).
      const listed = await s3.send(new ListObjectsV2Command({ Bucket: bigBucket }));
      expect(listed.Contents?.some((o) => o.Key === 'big-object')).toBe(true);
      expect(await stored()).toBeGreaterThan(3 * MiB);
      const read = await s3.send(new GetObjectCommand({ Bucket: bigBucket, Key: 'big-object' }));
      expect((await read.Body!.transformToByteArray()).length).toBe(2 * MiB);
    } finally {
      for (const c of clients) await c.close();
    }
  }, 90_000);
});
