/**
 * The scheduler in the real gateway: layerwise GETs are paced at their granted rates over real
 * sockets (reported as a measurement with generous bounds), concurrent grants never exceed the
 * cap, /metrics carries the scheduler and pool series while requests run, and `objectcache plan`
 * answers in input order.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { runCli } from './helpers/cli.js';
import { until } from './helpers/wait.js';
import { startTestGateway, uniqueBucket, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';

const CAP = 40_000_000; // bytes per second

describe('a gateway shutting down while a layerwise GET waits for its epoch', () => {
  it('answers the waiting GET 503 OC_ERR_SCHEDULER_CLOSED, retryable, instead of cutting it', async () => {
    // A 10 s epoch: the GET waits for the first boundary when the gateway is asked to close.
    const gw = await startTestGateway({ backend: 'local', args: ['--cap', '40MB/s', '--epoch-ms', '10000', '--threshold', '0'] });
    const client = testClient(gw, uniqueBucket('closing'));
    let clientOpen = true;
    try {
      await client.ensureBucket();
      const prefix = await seedPrefix(client, { chunks: 2, layers: 2, layerBytes: 4096, layout: 'KV_L2TD' });
      const waiting = client.fetch(descriptorOf(prefix), { transport: 'post' }).catch((e: unknown) => e);
      await until(async () => gw.gateway.schedulerSnapshot()?.pending === 1, 5000);
      const closing = gw.close();
      const refused = await waiting;
      expect(refused).toBeInstanceOf(ObjectCacheError);
      expect(refused).toMatchObject({ code: 'OC_ERR_SCHEDULER_CLOSED', retryable: true });
      expect((refused as ObjectCacheError).details['Status']).toBe(503);
      clientOpen = false;
      await client.close(); // its keep-alive connection would hold the close for the grace period
      await closing;
    } finally {
      if (clientOpen) await client.close();
    }
  });
});

describe('paced layerwise delivery (embedded store)', () => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let prefix: SeededPrefix;

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 'local', args: ['--cap', '40MB/s', '--policy', 'cal-stall-opt', '--margin', '0', '--epoch-ms', '20', '--threshold', '0'] });
    client = testClient(gw, uniqueBucket('sched'));
    await client.ensureBucket();
    prefix = await seedPrefix(client, { chunks: 8, layers: 16, layerBytes: 128 * 1024, layout: 'KV_L2TD' }); // 16 MiB
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('delivers a lone bandwidth-hungry request at the whole cap, byte-exact', async () => {
    const started = performance.now();
    const result = await client.fetch(descriptorOf(prefix, { tenant: 'solo' }));
    const seconds = (performance.now() - started) / 1000;
    const bytes = result.summary.bytes;
    const expected = bytes / CAP;
    console.log(
      `paced: ${(bytes / 2 ** 20).toFixed(1)} MiB in ${seconds.toFixed(3)} s = ${(bytes / seconds / 1e6).toFixed(1)} MB/s at a granted ${(result.summary.rateBytesPerSec ?? 0) / 1e6} MB/s (expected ${expected.toFixed(3)} s)`,
    );
    expect(result.summary.rateBytesPerSec).toBe(CAP);
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    // Generous bounds: never meaningfully faster than the rate, and not wildly slower.
    expect(seconds).toBeGreaterThan(expected * 0.8);
    expect(seconds).toBeLessThan(expected * 4 + 2);
  });

  it('splits the cap among concurrent requests by Calibrated Stall-opt and never exceeds it', async () => {
    // A bandwidth-hungry request holds the whole cap; the two requests sent while it runs wait
    // for its rate to return and are then admitted together, in one batch.
    let blockerAdmitted: () => void = () => {};
    const admitted = new Promise<void>((resolve) => (blockerAdmitted = resolve));
    const blocker = client.fetch(descriptorOf(prefix, { tenant: 'blocker' }), { onLayerReady: (layer) => layer === 0 && blockerAdmitted() });
    await admitted;
    // Zero-stall rates: 1 MiB per layer / 100 ms = ~10.5 MB/s, and 1 MiB / 20 ms = ~52 MB/s (over the cap).
    const slow = client.fetch(descriptorOf(prefix, { tenant: 'patient', computeMsPerLayer: 100 }));
    const fast = client.fetch(descriptorOf(prefix, { tenant: 'eager', computeMsPerLayer: 20 }));
    const [first, a, b] = await Promise.all([blocker, slow, fast]);
    expect(first.summary.rateBytesPerSec).toBe(CAP);
    const rates = [a.summary.rateBytesPerSec ?? 0, b.summary.rateBytesPerSec ?? 0] as [number, number];
    console.log(`granted: patient ${rates[0] / 1e6} MB/s, eager ${rates[1] / 1e6} MB/s of ${CAP / 1e6}`);
    // The patient request gets exactly its zero-stall rate, the eager one the rest of the cap.
    expect(rates[0]).toBe(Math.floor((1024 * 1024) / 0.1));
    expect(rates[0] + rates[1]).toBeLessThanOrEqual(CAP);
    expect(rates[0] + rates[1]).toBeGreaterThan(CAP * 0.99);
    expect(Buffer.from(b.target).equals(Buffer.from(reference(prefix)))).toBe(true);
  });

  it('exposes the scheduler, pool and delivery series on /metrics while a request runs', async () => {
    const running = client.fetch(descriptorOf(prefix, { tenant: 'metered' }));
    let text = '';
    await until(async () => {
      text = await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text();
      return /objectcache_scheduler_granted_rate_bytes_per_second\{tenant="metered"\} [1-9]/.test(text);
    });
    await running;
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      // Values as Prometheus parses them (Go's ParseFloat: NaN and Inf in any case; prom-client
      // writes an empty event-loop-lag histogram's mean as "Nan"); the alternation is grouped so
      // every line must be a whole sample.
      expect(line).toMatch(/^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? (-?[0-9.e+-]+|[Nn][Aa][Nn]|[+-]Inf)$/);
    }
    expect(text).toMatch(/objectcache_scheduler_granted_rate_bytes_per_second\{tenant="metered"\} 40000000/);
    expect(text).toMatch(/objectcache_scheduler_cap_bytes_per_second 40000000/);
    expect(text).toMatch(/objectcache_scheduler_cap_in_use_bytes_per_second 40000000/);
    expect(text).toMatch(/objectcache_scheduler_predicted_stall_seconds\{tenant="metered"\}/);
    expect(text).toMatch(/objectcache_layerwise_active_requests 1/);
    const after = await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text();
    // Series that exist once bytes have flowed: checked after the request completed.
    for (const name of ['objectcache_delivered_bytes_total{tenant="metered"}', 'objectcache_layer_ready_seconds_bucket', 'objectcache_mode_decisions_total{mode="layerwise"}']) {
      expect(after, name).toContain(name);
    }
    for (const name of [
      'objectcache_scheduler_epochs_total',
      'objectcache_scheduler_admission_wait_seconds_bucket',
      'objectcache_scheduler_queued_requests',
      'objectcache_backend_reads_total',
      'objectcache_backend_read_task_seconds_bucket',
      'objectcache_worker_pool_utilization_ratio',
      'objectcache_worker_pool_queued_tasks',
      'objectcache_worker_pool_running_tasks',
      'objectcache_buffered_bytes',
      'objectcache_http_requests_total',
    ]) {
      expect(text, name).toContain(name);
    }
    expect(after).toMatch(/objectcache_scheduler_cap_in_use_bytes_per_second 0/);
  });
});

describe('objectcache plan', () => {
  const dir = mkdtempSync(join(tmpdir(), 'objectcache-plan-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('prints the allocation in input order, with Gbps and predicted stall', () => {
    // The paper's (docs/references.md) workload A (table A8: Llama 3.1 8B, 16K/64K at 50% and 87.5% hit) under an 80 Gbps cap.
    const file = join(dir, 'workload-a.json');
    writeFileSync(
      file,
      JSON.stringify([
        { id: '64K-87.5', bytesPerLayer: 57344 * 4096, computeMsPerLayer: 75.75 },
        { id: '16K-50', bytesPerLayer: 8192 * 4096, computeMsPerLayer: 29.87 },
        { id: '16K-87.5', bytesPerLayer: 14336 * 4096, computeMsPerLayer: 8.8 },
        { id: '64K-50', bytesPerLayer: 32768 * 4096, computeMsPerLayer: 271.02 },
      ]),
    );
    const run = runCli(['plan', '--cap', '80Gbps', '--policy', 'cal-stall-opt', '--margin', '5Gbps', file]);
    expect(run.status, run.stderr).toBe(0);
    const out = JSON.parse(run.stdout) as { id: string; rateBytesPerSec: number; rateGbps: number; predictedStallMsPerLayer: number }[];
    expect(out.map((r) => r.id)).toEqual(['64K-87.5', '16K-50', '16K-87.5', '64K-50']);
    expect(out.reduce((sum, r) => sum + r.rateGbps, 0)).toBeCloseTo(80, 3);
    // 16K-50 needs 8.99 Gbps: it gets that plus the 5 Gbps margin, and no stall.
    expect(out[1]?.rateGbps).toBeCloseTo(8.987 + 5, 2);
    expect(out[1]?.predictedStallMsPerLayer).toBe(0);
    // 16K-87.5 needs 53.4 Gbps and gets the rest: it is the one that stalls.
    expect(out[2]?.predictedStallMsPerLayer).toBeGreaterThan(0);
    const stdin = runCli(['plan', '--cap', '10GB/s', '--policy', 'equal', '-'], {
      input: JSON.stringify([
        { id: 'x', bytesPerLayer: 1e6 },
        { id: 'y', bytesPerLayer: 2e6, computeMsPerLayer: 1 },
      ]),
    });
    expect(JSON.parse(stdin.stdout)).toEqual([
      { id: 'x', rateBytesPerSec: 5e9, rateGbps: 40, predictedStallMsPerLayer: 0.2 },
      { id: 'y', rateBytesPerSec: 5e9, rateGbps: 40, predictedStallMsPerLayer: 0 },
    ]);
  });

  it('rejects bad input with exit code 2 and a message that names it', () => {
    const cases: [string[], string, string][] = [
      [['plan', '-'], '[]', '--cap'],
      [['plan', '--cap', 'fast', '-'], '[]', 'cap'],
      [['plan', '--cap', '1Gbps', '--policy', 'random', '-'], '[]', 'policy'],
      [['plan', '--cap', '1Gbps', '-'], '{"id": 1}', 'array'],
      [['plan', '--cap', '1Gbps', '-'], '[{"id": "a", "bytesPerLayer": -1}]', 'bytesPerLayer'],
      [['plan', '--cap', '1Gbps', '-'], '[{"id": "a", "bytesPerLayer": 10, "computeMsPerLayer": "soon"}]', 'computeMsPerLayer'],
    ];
    for (const [args, input, word] of cases) {
      const run = runCli(args, { input });
      expect(run.status, args.join(' ')).toBe(2);
      expect(run.stderr).toContain(word);
    }
  });
});
