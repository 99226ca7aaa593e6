/**
 * Clients aborting at every phase of a layerwise GET: while the descriptor body is still being
 * uploaded, while waiting for the epoch admission, before the first layer group has been read,
 * and mid-stream. Each test checks from the gateway's metrics that the abort landed in that phase
 * (no mode decided, never admitted, admitted with less than the load delivered, some layers
 * delivered). After each the gateway holds no worker tasks, no buffered bytes and no granted
 * rate, and serves the next request normally.
 */
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from './helpers/wait.js';
import { ObjectCacheClient } from '../client/client.js';
import { signedHeaders } from './helpers/signing.js';
import { metricValue, startTestGateway, uniqueBucket, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';

describe('clients aborting at every phase', () => {
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let prefix: SeededPrefix;

  const released = (): Promise<boolean> =>
    until(() => {
      const pool = gw.gateway.poolStats();
      const scheduler = gw.gateway.schedulerSnapshot();
      return pool.running === 0 && pool.queued === 0 && gw.gateway.bufferedBytes() === 0 && scheduler?.active.length === 0 && scheduler.pending === 0;
    });

  const metric = (name: string): Promise<number> => metricValue(gw.gateway.adminUrl, name);
  const delivered = (tenant: string): Promise<number> => metric(`objectcache_delivered_bytes_total{tenant="${tenant}"}`);
  const admissions = (): Promise<number> => metric('objectcache_scheduler_admission_wait_seconds_count');
  const TOTAL = 8 * 16 * 64 * 1024;
  const LAYER = 8 * 64 * 1024;

  const servesNormally = async (): Promise<void> => {
    const result = await client.fetch(descriptorOf(prefix, { layerRange: [0, 2] }));
    expect(Buffer.from(result.target).equals(Buffer.from(reference(prefix, 0, 2)))).toBe(true);
  };

  /** Opens a signed POST ?objectcache, lets `act` decide when to give up on it. */
  async function rawPost(body: Buffer, act: (req: ReturnType<typeof httpRequest>) => void): Promise<void> {
    const url = new URL(gw.url);
    const signed = { headers: await signedHeaders(gw.url, { method: 'POST', path: `/${client.bucket}`, query: { objectcache: '' }, body }) };
    await new Promise<void>((resolve) => {
      const req = httpRequest({ host: url.hostname, port: url.port, method: 'POST', path: `/${client.bucket}?objectcache=`, headers: signed.headers });
      req.on('error', () => resolve());
      req.on('close', () => resolve());
      act(req);
    });
  }

  beforeAll(async () => {
    // A long epoch, so a request can be caught waiting for its admission; paced at 20 MB/s.
    gw = await startTestGateway({ backend: 'local', args: ['--cap', '20MB/s', '--epoch-ms', '400', '--threshold', '0', '--read-bytes', '65536'] });
    client = testClient(gw, uniqueBucket('abort'));
    await client.ensureBucket();
    prefix = await seedPrefix(client, { chunks: 8, layers: 16, layerBytes: 64 * 1024, layout: 'KV_L2TD' }); // 8 MiB
  });

  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('while the descriptor body is still uploading', async () => {
    const body = Buffer.from(JSON.stringify(descriptorOf(prefix, { tenant: 'aborts-uploading' })));
    const modesBefore = await metric('objectcache_mode_decisions_total');
    await rawPost(body, (req) => {
      req.write(body.subarray(0, 20));
      setTimeout(() => req.destroy(), 100);
    });
    await released();
    // The descriptor was never complete: no delivery mode was chosen, nothing was sent.
    expect(await metric('objectcache_mode_decisions_total')).toBe(modesBefore);
    expect(await delivered('aborts-uploading')).toBe(0);
    await servesNormally();
  });

  it('while waiting for the epoch admission', async () => {
    const body = Buffer.from(JSON.stringify(descriptorOf(prefix, { tenant: 'aborts-pending' })));
    const admittedBefore = await admissions();
    let abortedWhilePending = false;
    await rawPost(body, (req) => {
      req.end(body);
      const poll = setInterval(() => {
        if ((gw.gateway.schedulerSnapshot()?.pending ?? 0) > 0) {
          clearInterval(poll);
          abortedWhilePending = true;
          req.destroy();
        }
      }, 2);
      req.on('close', () => clearInterval(poll));
    });
    expect(abortedWhilePending).toBe(true);
    await released();
    // Withdrawn from the queue: never admitted, nothing sent.
    expect(await admissions()).toBe(admittedBefore);
    expect(await delivered('aborts-pending')).toBe(0);
    await servesNormally();
  });

  it('right after admission, while the first layer group is read', async () => {
    const body = Buffer.from(JSON.stringify(descriptorOf(prefix, { tenant: 'aborts-admitted' })));
    const admittedBefore = await admissions();
    let abortedWhileAdmitted = false;
    await rawPost(body, (req) => {
      req.end(body);
      const poll = setInterval(() => {
        if ((gw.gateway.schedulerSnapshot()?.active.length ?? 0) > 0) {
          clearInterval(poll);
          abortedWhileAdmitted = true;
          req.destroy();
        }
      }, 1);
      req.on('close', () => clearInterval(poll));
    });
    // The whole 8 MiB load takes about 0.4 s at the paced 20 MB/s, so the abort lands in flight.
    expect(abortedWhileAdmitted).toBe(true);
    await released();
    expect(await admissions()).toBe(admittedBefore + 1);
    expect(await delivered('aborts-admitted')).toBeLessThan(TOTAL);
    await servesNormally();
  });

  it('mid-stream, after some layers were delivered', async () => {
    const controller = new AbortController();
    const failed = await client
      .fetch(descriptorOf(prefix, { tenant: 'aborts-mid-stream' }), { transport: 'post', signal: controller.signal, onLayerReady: (layer) => layer === 3 && controller.abort() })
      .then(
        () => false,
        () => true,
      );
    expect(failed).toBe(true);
    await released();
    // Layers 0-3 reached the client; the paced rest did not.
    const sent = await delivered('aborts-mid-stream');
    expect(sent).toBeGreaterThanOrEqual(4 * LAYER);
    expect(sent).toBeLessThan(TOTAL);
    await servesNormally();
  });
});
