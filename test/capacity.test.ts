// Over 600 lines: one suite of capacity management against a real MinIO, its fixtures shared.
/**
 * Budgets, eviction, pins and quotas against the real gateway on both backends (MinIO built and
 * started by the test setup): writes past a bucket's budget evict the coldest prefix from its
 * tail and keep the hot ones; pins hold; a chunk being read is not deleted under its reader; a
 * chunk rewritten after it was chosen is not deleted; one tenant's quota never evicts another
 * tenant's chunks, and a write it cannot make room for is refused with nothing stored; what the
 * gateway knows survives a restart.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, inject, it, vi } from 'vitest';
import {
  AbortMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListPartsCommand,
  PutObjectCommand,
  UploadPartCommand,
  type S3Client,
  type S3ServiceException,
} from '@aws-sdk/client-s3';
import { createPresignedPost } from '@aws-sdk/s3-presigned-post';
import { ObjectCacheClient } from '../client/client.js';
import { Capacity, ROOM_WAIT_MS } from '../gateway/capacity/capacity.js';
import { ChunkIndex } from '../gateway/capacity/chunk-index.js';
import { ObjectCacheError } from '../schemas/errors.js';
import {
  CLIENT_KEY,
  CLIENT_SECRET,
  fastBudget,
  metricValue,
  sdkClient,
  SMALL_ARENA,
  startTestGateway,
  testClient,
  uniqueBucket,
  type BackendKind,
  type TestGateway,
} from './helpers/gateway.js';
import { waitFor } from './helpers/wait.js';

const CHUNK = 64 * 1024;
const open: TestGateway[] = [];
afterEach(async () => {
  for (const gw of open.splice(0)) await gw.close();
});

/** A gateway whose bucket has a budget of `chunks` chunks, syncing fast (tests must not wait seconds). */
async function budgeted(backend: BackendKind, bucket: string, chunks: number, extra: string[] = [], dataDir?: string, stateBucket = `${bucket}-state`): Promise<TestGateway> {
  const gw = await startTestGateway({
    backend,
    minio: inject('minio'),
    ...(dataDir ? { dataDir } : {}),
    args: [...fastBudget(bucket, chunks * CHUNK, stateBucket), ...SMALL_ARENA, ...extra],
  });
  open.push(gw);
  return gw;
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function read(s3: S3Client, bucket: string, key: string): Promise<Buffer> {
  const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from(await got.Body!.transformToByteArray());
}

/** How many leading keys exist, asked without reading them (a lookup would count as an access). */
async function present(s3: S3Client, bucket: string, keys: readonly string[]): Promise<number> {
  let n = 0;
  while (n < keys.length && (await exists(s3, bucket, keys[n] as string))) n++;
  return n;
}

/** Writes a prefix of `n` chunks (each CHUNK bytes) and names its chain with a lookup, as an engine does. */
async function storePrefix(client: ObjectCacheClient, name: string, n: number): Promise<{ keys: string[]; data: Buffer[] }> {
  const keys = Array.from({ length: n }, (_, i) => `${name}/${String(i).padStart(3, '0')}`);
  const data = keys.map(() => randomBytes(CHUNK));
  await client.lookup(keys); // a miss: the engine then stores
  for (let i = 0; i < n; i++) await client.putChunks([keys[i] as string], [data[i] as Buffer]);
  await pause(5);
  return { keys, data };
}

/**
 * A credentials file in a fresh temporary directory (remove `dir` after): for each tenant a key
 * `<tenant>-key` / `<tenant>-secret` that may do anything, pins included.
 */
function tenantKeys(tenants: readonly string[]): { dir: string; credentials: string } {
  const dir = mkdtempSync(join(tmpdir(), 'oc-tenants-'));
  const credentials = join(dir, 'credentials.json');
  const allow = { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: ['s3:*', 'objectcache:PinObject'], Resource: ['arn:aws:s3:::*'] }] };
  writeFileSync(credentials, JSON.stringify(tenants.map((tenant) => ({ accessKeyId: `${tenant}-key`, secretAccessKey: `${tenant}-secret`, tenant, policy: allow }))));
  return { dir, credentials };
}

/** A client of `gw` signing with the key `tenantKeys` made for `tenant`. */
const clientAs = (gw: TestGateway, bucket: string, tenant: string): ObjectCacheClient =>
  new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: `${tenant}-key`, secretAccessKey: `${tenant}-secret` } });

/**
 * Runs `body` against a gateway with a fresh bucket of 100 chunks' budget whose keys are
 * `tenantKeys(tenants)`'s; `as(tenant)` gives an S3 client signing with the tenant's key. The
 * clients and the keys' directory go after (the gateway with the others, after each test).
 */
async function withTenants(
  backend: BackendKind,
  tenants: readonly string[],
  extra: string[],
  body: (gw: TestGateway, bucket: string, as: (tenant: string) => S3Client) => Promise<void>,
): Promise<void> {
  const bucket = uniqueBucket('cap');
  const { dir, credentials } = tenantKeys(tenants);
  const clients: S3Client[] = [];
  try {
    const gw = await budgeted(backend, bucket, 100, ['--credentials', credentials, ...extra]);
    await testClient(gw, bucket).ensureBucket();
    await body(gw, bucket, (tenant) => {
      const client = sdkClient(gw.url, { accessKeyId: `${tenant}-key`, secretAccessKey: `${tenant}-secret` });
      clients.push(client);
      return client;
    });
  } finally {
    for (const client of clients) client.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function exists(s3: S3Client, bucket: string, key: string): Promise<boolean> {
  try {
    await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    return true;
  } catch {
    return false;
  }
}

async function quietly<T>(p: Promise<T>): Promise<T | ObjectCacheError> {
  try {
    return await p;
  } catch (error) {
    if (error instanceof ObjectCacheError) return error;
    throw error;
  }
}

describe.each(['local', 's3'] as const)('capacity on the %s backend', (backend) => {
  it('trims the coldest prefix from its tail and keeps the hot ones', async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted(backend, bucket, 16);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const a = await storePrefix(client, 'a', 6);
    const b = await storePrefix(client, 'b', 6);
    // A is read again (one descriptor GET, or its lookup): hotter than B.
    expect(await client.lookup(a.keys)).toBe(6);
    await pause(5);
    const c = await storePrefix(client, 'c', 4); // 16 chunks: past 95%; trimmed to 85% (13.6)
    await waitFor('the bucket is trimmed', () => (gw.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 13.6 * CHUNK);
    expect(await client.lookup(a.keys)).toBe(6);
    expect(await client.lookup(c.keys)).toBe(4);
    // B lost its last three chunks, never its first ones: its prefix is shorter, not broken.
    expect(await client.lookup(b.keys)).toBe(3);
    const s3 = sdkClient(gw.url);
    expect(await Promise.all(b.keys.map((k) => exists(s3, bucket, k)))).toEqual([true, true, true, false, false, false]);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_evictions_total')).toBe(3);
    // What is left is byte for byte what was written.
    expect(await read(s3, bucket, b.keys[2] as string)).toEqual(b.data[2]);
    s3.destroy();
  });

  it("learns a prefix's chain from its writes alone, and trims it from its tail", async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted(backend, bucket, 16);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const write = async (name: string, n: number): Promise<string[]> => {
      const keys = Array.from({ length: n }, (_, i) => `${name}/${String(i).padStart(3, '0')}`);
      await client.putChunks(
        keys,
        keys.map(() => randomBytes(CHUNK)),
        { concurrency: 1 },
      ); // no lookup first
      await pause(5);
      return keys;
    };
    const a = await write('a', 8);
    await write('b', 8); // 16 chunks: past 95%, trimmed to 85%
    await waitFor('the bucket is trimmed', () => (gw.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 13.6 * CHUNK);
    expect(gw.gateway.capacity?.chunk(bucket, a[1] as string)?.pred).toBe(a[0]);
    const s3 = sdkClient(gw.url);
    // The oldest prefix lost its tail; its head, written first of all, is there.
    expect(await present(s3, bucket, a)).toBe(5);
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: a[1] }));
    expect(head.Metadata?.['objectcache-after']).toBe(a[0]);
    s3.destroy();
  });

  it('keeps the bucket within its budget under writes faster than --evict-rate: they wait for room, or are refused retryably with nothing stored', async () => {
    const bucket = uniqueBucket('cap');
    // Eviction paced at 2 deletes a second: 24 chunks written at 8 at once into 16 chunks' budget.
    const gw = await budgeted(backend, bucket, 16, ['--evict-rate', '2']);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    let most = 0;
    const watch = setInterval(() => (most = Math.max(most, gw.gateway.capacity?.usage()[0]?.bytes ?? 0)), 2);
    try {
      const keys = Array.from({ length: 24 }, (_, i) => `burst/${String(i).padStart(3, '0')}`);
      const data = keys.map(() => randomBytes(CHUNK));
      await client.putChunks(keys, data, { concurrency: 8 });
      // Every write was stored, none past the budget: the late ones waited while eviction went at full speed.
      expect(most).toBeLessThanOrEqual(16 * CHUNK);
      expect(await metricValue(gw.gateway.adminUrl, 'objectcache_capacity_write_waits_total{bucket="' + bucket + '",outcome="admitted"}')).toBeGreaterThan(0);
      const s3 = sdkClient(gw.url);
      expect(await read(s3, bucket, keys[23] as string)).toEqual(data[23]);

      s3.destroy();
    } finally {
      clearInterval(watch);
    }
    // A bucket full to its budget (no trimming below 100%) and all of it pinned: a write waits out
    // its time, then is refused (retryable), with nothing stored; one larger than the whole budget at once.
    const full = uniqueBucket('cap');
    const gw2 = await budgeted(backend, full, 4, ['--budget-high-percent', '100', '--budget-low-percent', '90']);
    const c2 = testClient(gw2, full);
    await c2.ensureBucket();
    const four = ['p/0', 'p/1', 'p/2', 'p/3'];
    await c2.putChunks(
      four,
      four.map(() => randomBytes(CHUNK)),
    );
    expect(await c2.pin(four, new Date(Date.now() + 3_600_000))).toBeTruthy();
    const s3 = sdkClient(gw2.url);
    const started = Date.now();
    const refused = await s3.send(new PutObjectCommand({ Bucket: full, Key: 'late', Body: randomBytes(CHUNK) })).catch((e: S3ServiceException) => e);
    expect(refused).toMatchObject({ name: 'SlowDown', $metadata: { httpStatusCode: 503 } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(ROOM_WAIT_MS - 100);
    expect(await exists(s3, full, 'late')).toBe(false);
    const huge = await s3.send(new PutObjectCommand({ Bucket: full, Key: 'huge', Body: randomBytes(5 * CHUNK) })).catch((e: S3ServiceException) => e);
    expect(huge).toMatchObject({ name: 'EntityTooLarge', $metadata: { httpStatusCode: 400 } });
    expect(await metricValue(gw2.gateway.adminUrl, 'objectcache_capacity_write_waits_total{bucket="' + full + '",outcome="refused"}')).toBe(1);
    s3.destroy();
  }, 30_000);

  it('holds 97-99% of its budget once full at marks 99 and 97 (the defaults)', async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted(backend, bucket, 100, ['--budget-high-percent', '99', '--budget-low-percent', '97']);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const keys = Array.from({ length: 110 }, (_, i) => `fill/${String(i).padStart(3, '0')}`);
    await client.putChunks(
      keys,
      keys.map(() => randomBytes(CHUNK)),
      { chain: false, concurrency: 4 },
    );
    const used = (): number => gw.gateway.capacity?.usage()[0]?.bytes ?? Infinity;
    await waitFor('the bucket is trimmed below its high mark', () => used() <= 99 * CHUNK);
    await pause(600); // two more trimming passes
    expect(used()).toBeGreaterThanOrEqual(97 * CHUNK);
    expect(used()).toBeLessThanOrEqual(99 * CHUNK);
    const s3 = sdkClient(gw.url);
    expect(await exists(s3, bucket, keys[0] as string)).toBe(false); // the least recently written went
    expect(await exists(s3, bucket, keys[109] as string)).toBe(true);
    s3.destroy();
  });

  it('makes room for a write in a bucket full of chunks whose predecessor is missing, though they were just written', async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted(backend, bucket, 4, ['--evict-rate', '1']);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    // A chain whose head never came (evicted before its next chunk landed, or named by a writer
    // that never stores it): dead, though written a moment ago, when the predecessor may still
    // be on its way. A write that finds the budget full of them still gets its room, at once.
    const orphans = ['o/1', 'o/2', 'o/3', 'o/4'];
    await client.putChunks(
      orphans,
      orphans.map(() => randomBytes(CHUNK)),
      { after: 'o/0', concurrency: 1 },
    );
    const started = Date.now();
    const late = randomBytes(CHUNK);
    await client.putChunks(['late'], [late]);
    expect(Date.now() - started).toBeLessThan(ROOM_WAIT_MS);
    const s3 = sdkClient(gw.url);
    expect(await read(s3, bucket, 'late')).toEqual(late);
    expect(await present(s3, bucket, ['o/1'])).toBe(0); // the oldest of them went first
    expect(gw.gateway.capacity?.usage()[0]?.bytes).toBeLessThanOrEqual(4 * CHUNK);
    s3.destroy();
  });

  it('never evicts pinned chunks before their time', async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted(backend, bucket, 16);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const cold = await storePrefix(client, 'paid', 6);
    const warm = await storePrefix(client, 'free', 6);
    const hour = new Date(Date.now() + 3_600_000);
    expect((await client.pin(cold.keys, hour))?.toISOString()).toBe(hour.toISOString());
    await storePrefix(client, 'new', 4);
    await waitFor('the bucket is trimmed', () => (gw.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 13.6 * CHUNK);
    const s3 = sdkClient(gw.url);
    expect(await present(s3, bucket, cold.keys)).toBe(6); // the coldest, but pinned
    expect(await present(s3, bucket, warm.keys)).toBe(3);
    expect(gw.gateway.capacity?.usage()[0]?.pinnedBytes).toBe(6 * CHUNK);
    // Unpinned, it goes next.
    expect(await client.pin(cold.keys, null)).toBeNull();
    await storePrefix(client, 'more', 3);
    await waitFor('the paid prefix is trimmed', async () => (await present(s3, bucket, cold.keys)) < 6);
    expect(await present(s3, bucket, cold.keys)).toBeGreaterThan(0); // from its tail
    s3.destroy();
  });

  it('refuses pins it cannot hold, with their codes', async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted(backend, bucket, 16);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const other = testClient(gw, uniqueBucket('nobudget'));
    await other.ensureBucket();
    expect(await quietly(other.pin(['x'], new Date(Date.now() + 1000)))).toMatchObject({ code: 'OC_ERR_CAPACITY_UNMANAGED' });
    const bad = await fetch(`${gw.url}/${bucket}?objectcache-pin`, { method: 'POST', body: '{}' });
    expect(bad.status).toBe(403); // unsigned: refused before the body is read
    const raw = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: CLIENT_KEY, secretAccessKey: CLIENT_SECRET } });
    expect(await quietly(raw.pin([], new Date()))).toMatchObject({ code: 'OC_ERR_PIN_INVALID' });
    // The bounds of what one pin may ask: 8192 keys, 366 days.
    const many = Array.from({ length: 8193 }, (_, i) => `k/${i}`);
    expect(await quietly(raw.pin(many, new Date(Date.now() + 60_000)))).toMatchObject({ code: 'OC_ERR_PIN_INVALID' });
    expect(await quietly(raw.pin(['k/0'], new Date(Date.now() + 367 * 86_400_000)))).toMatchObject({ code: 'OC_ERR_PIN_INVALID' });
    expect(await raw.pin(many.slice(0, 8192), new Date(Date.now() + 60_000))).toBeInstanceOf(Date);
  });

  it('does not delete a chunk while it is being read', async () => {
    const bucket = uniqueBucket('cap');
    const big = 8 * 1024 * 1024;
    const gw = await budgeted(backend, bucket, 256); // 16 MiB
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const payload = randomBytes(big);
    await client.putChunks(['held/000'], [payload]);
    await pause(5);
    // A plain GET whose client reads nothing yet: its response stays in flight.
    const s3 = sdkClient(gw.url);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'held/000' }));
    await pause(20);
    // Past the budget: the held chunk is the coldest, but it is being read.
    await client.putChunks(['fill/000', 'fill/001'], [randomBytes(big / 2), randomBytes(big / 2)]);
    await pause(400);
    expect(await exists(s3, bucket, 'held/000')).toBe(true);
    const body = Buffer.from(await got.Body!.transformToByteArray());
    expect(body.equals(payload)).toBe(true);
    // Read to its end, it is the coldest chunk that may go: the next trim takes it.
    await pause(50);
    await client.putChunks(['fill/002'], [randomBytes(big / 2)]);
    await waitFor('the chunk read is evicted', async () => !(await exists(s3, bucket, 'held/000')));
    s3.destroy();
  });

  it('does not delete a chunk rewritten after it was chosen for eviction', async () => {
    const bucket = uniqueBucket('cap');
    // One delete a second: the second victim waits a second after the first is deleted.
    const gw = await budgeted(backend, bucket, 10, ['--evict-rate', '1']);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const old = await storePrefix(client, 'old', 5);
    await storePrefix(client, 'hot', 5); // 10 chunks: trimmed to 8.5: old loses two, tail first
    const s3 = sdkClient(gw.url);
    await waitFor('the tail of old is deleted', async () => (await present(s3, bucket, old.keys)) === 4);
    const rewritten = randomBytes(CHUNK);
    await client.putChunks([old.keys[3] as string], [rewritten]); // the next victim, rewritten
    await pause(1500);
    expect(await read(s3, bucket, old.keys[3] as string)).toEqual(rewritten);
    s3.destroy();
    expect(gw.gateway.capacity?.chunk(bucket, old.keys[3] as string)).toBeDefined();
  });

  it('drains a bucket past its high mark down to its low one, though writes land while it trims', async () => {
    const bucket = uniqueBucket('cap');
    // One delete a second, low mark 75%: the pass that chose three victims at 10 chunks is still
    // deleting (for two more seconds) when the write lands.
    const gw = await budgeted(backend, bucket, 10, ['--evict-rate', '1', '--budget-low-percent', '75']);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const old = await storePrefix(client, 'old', 5);
    await storePrefix(client, 'hot', 5); // 10 chunks: past 95%, to be trimmed to 7.5
    const s3 = sdkClient(gw.url);
    await waitFor('the tail of old is deleted', async () => (await present(s3, bucket, old.keys)) === 4);
    await client.putChunks(['late/000'], [randomBytes(CHUNK)]); // 10 again: the pass's last victim leaves 8, between the marks
    await waitFor('the bucket is down to its low mark', () => (gw.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 7.5 * CHUNK, 10_000);
    expect(await present(s3, bucket, old.keys)).toBe(1); // old's tail, one chunk at a time
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_evictions_total')).toBe(4);
    s3.destroy();
  });

  it("keeps each tenant to its quota with its own chunks, never another tenant's", () =>
    withTenants(backend, ['team-a', 'team-b'], ['--tenant-quota', `team-a=${4 * CHUNK}`], async (gw, bucket) => {
      const a = clientAs(gw, bucket, 'team-a');
      const b = clientAs(gw, bucket, 'team-b');
      const first = await storePrefix(a, 'a1', 4);
      const theirs = await storePrefix(b, 'b1', 6);
      const second = await storePrefix(a, 'a2', 2); // past team-a's quota: its own coldest tail goes
      expect(gw.gateway.capacity?.tenantBytes('team-a')).toBeLessThanOrEqual(4 * CHUNK);
      expect(await a.lookup(first.keys)).toBe(2);
      expect(await a.lookup(second.keys)).toBe(2);
      expect(await b.lookup(theirs.keys)).toBe(6);
      // Everything of team-a's pinned: nothing of its own can go, so the write is refused.
      await a.pin([...first.keys, ...second.keys], new Date(Date.now() + 60_000));
      const refused = await a.putChunks(['a3/000'], [randomBytes(CHUNK)]).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(ObjectCacheError);
      expect((refused as ObjectCacheError).code).toBe('OC_ERR_QUOTA_EXCEEDED');
      expect((refused as ObjectCacheError).details['S3Code']).toBe('QuotaExceeded');
      expect((refused as ObjectCacheError).details['Status']).toBe(403);
      const s3 = sdkClient(gw.url);
      expect(await exists(s3, bucket, 'a3/000')).toBe(false);
      expect(await b.lookup(theirs.keys)).toBe(6);
      // The tenant is recorded with the object itself.
      const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: second.keys[0] }));
      expect(head.Metadata?.['objectcache-tenant']).toBe('team-a');
      s3.destroy();
    }));

  it('counts the parts of an unfinished multipart upload against the quota and the budget from the first, and frees them when it ends', () =>
    withTenants(backend, ['team-a'], ['--tenant-quota', `team-a=${4 * CHUNK}`], async (gw, bucket, as) => {
      const s3 = as('team-a');
      const upload = async (key: string): Promise<string> => (await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }))).UploadId as string;
      const part = (key: string, uploadId: string, n: number): Promise<unknown> =>
        s3.send(new UploadPartCommand({ Bucket: bucket, Key: key, UploadId: uploadId, PartNumber: n, Body: randomBytes(CHUNK) }));
      const id = await upload('big/000');
      for (let n = 1; n <= 3; n++) await part('big/000', id, n);
      expect(gw.gateway.capacity?.tenantBytes('team-a')).toBe(3 * CHUNK);
      expect(gw.gateway.capacity?.usage()[0]).toMatchObject({ uploadBytes: 3 * CHUNK, bytes: 3 * CHUNK });
      // A fourth part would still fit; past the quota, with nothing of its own to evict, refused.
      await part('big/000', id, 4);
      const refused = await part('big/000', id, 5).then(
        () => undefined,
        (error: S3ServiceException) => error,
      );
      expect(refused?.$metadata.httpStatusCode).toBe(403);
      expect(refused?.$response?.headers['x-objectcache-error-code']).toBe('OC_ERR_QUOTA_EXCEEDED');
      // Another upload's parts count too: the quota holds over every upload of the tenant.
      const other = await upload('big/001');
      expect(
        await part('big/001', other, 1).then(
          () => 'stored',
          () => 'refused',
        ),
      ).toBe('refused');
      // Aborted: its parts count no more.
      await s3.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: 'big/000', UploadId: id }));
      expect(gw.gateway.capacity?.tenantBytes('team-a')).toBe(0);
      await part('big/001', other, 1);
      expect(gw.gateway.capacity?.tenantBytes('team-a')).toBe(CHUNK);
      await s3.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: 'big/001', UploadId: other }));
    }));

  it('counts a browser-form upload against the quota before it is stored, as a PUT', () =>
    withTenants(backend, ['team-a'], ['--tenant-quota', `team-a=${4 * CHUNK}`], async (gw, bucket, as) => {
      const s3 = as('team-a');
      const form = async (key: string, bytes: number): Promise<Response> => {
        const { url, fields } = await createPresignedPost(s3, { Bucket: bucket, Key: key, Expires: 300 });
        const body = new FormData();
        for (const [name, value] of Object.entries(fields)) body.append(name, value);
        body.append('file', new Blob([randomBytes(bytes)]), 'f.bin');
        return fetch(url, { method: 'POST', body });
      };
      const refused = await form('forms/big', 8 * CHUNK);
      expect(refused.status).toBe(403);
      expect(refused.headers.get('x-objectcache-error-code')).toBe('OC_ERR_QUOTA_EXCEEDED');
      expect(await exists(s3, bucket, 'forms/big')).toBe(false);
      expect((await form('forms/small', CHUNK)).status).toBe(204);
      await waitFor('the form upload is learnt', () => gw.gateway.capacity?.tenantBytes('team-a') === CHUNK);
    }));

  it('aborts a multipart upload left unfinished past --multipart-expiry, and frees its parts', async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted(backend, bucket, 100, ['--multipart-expiry', '2s']);
    await testClient(gw, bucket).ensureBucket();
    const s3 = sdkClient(gw.url);
    try {
      const id = (await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'left/000' }))).UploadId as string;
      await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'left/000', UploadId: id, PartNumber: 1, Body: randomBytes(CHUNK) }));
      expect(gw.gateway.capacity?.usage()[0]?.uploadBytes).toBe(CHUNK);
      await waitFor('the upload is aborted', async () => (await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }))).Uploads === undefined, 10_000);
      await waitFor('its parts count no more', () => gw.gateway.capacity?.usage()[0]?.uploadBytes === 0, 10_000);
      const gone = await s3.send(new ListPartsCommand({ Bucket: bucket, Key: 'left/000', UploadId: id })).then(
        () => 'there',
        (error: S3ServiceException) => error.name,
      );
      expect(gone).toBe('NoSuchUpload');
    } finally {
      s3.destroy();
    }
  });

  it("records the copier as a copy's tenant, and the source's chain only for the copier's own chunk", () =>
    withTenants(backend, ['victim', 'mallory'], [], async (gw, bucket, as) => {
      // Written as one prefix: the second chunk records the first as the one before it.
      const victim = { keys: ['v/000', 'v/001'] };
      await clientAs(gw, bucket, 'victim').putChunks(victim.keys, [randomBytes(CHUNK), randomBytes(CHUNK)]);
      const mallory = as('mallory');
      const owner = as('victim');
      await mallory.send(new CopyObjectCommand({ Bucket: bucket, Key: 'm/copy', CopySource: `${bucket}/${victim.keys[1]}` }));
      const copied = await mallory.send(new HeadObjectCommand({ Bucket: bucket, Key: 'm/copy' }));
      expect(copied.Metadata?.['objectcache-tenant']).toBe('mallory');
      expect(copied.Metadata?.['objectcache-after']).toBeUndefined();
      expect(copied.ContentType).toBe('application/octet-stream');
      await waitFor('the copy is learnt', () => gw.gateway.capacity?.chunk(bucket, 'm/copy') !== undefined);
      expect(gw.gateway.capacity?.chunk(bucket, 'm/copy')).toMatchObject({ tenant: 'mallory', size: CHUNK });
      expect(gw.gateway.capacity?.tenantBytes('victim')).toBe(2 * CHUNK);
      // The owner's own copy keeps its chain (it is the owner's to write).
      await owner.send(new CopyObjectCommand({ Bucket: bucket, Key: 'v/copy', CopySource: `${bucket}/${victim.keys[1]}` }));
      const own = await owner.send(new HeadObjectCommand({ Bucket: bucket, Key: 'v/copy' }));
      expect(own.Metadata).toMatchObject({ 'objectcache-tenant': 'victim', 'objectcache-after': victim.keys[0] });
    }));

  it("gives a tenant no way to spoof sizes or tenants, or to kill, pin or hold another tenant's chunks", () =>
    withTenants(backend, ['victim', 'mallory'], ['--tenant-quota', `victim=${4 * CHUNK},mallory=${4 * CHUNK}`], async (gw, bucket, as) => {
      const victim = await storePrefix(clientAs(gw, bucket, 'victim'), 'v', 3);
      const mallory = clientAs(gw, bucket, 'mallory');
      // Links naming the victim's chunks after one that does not exist would make them dead.
      await mallory.lookup(['nowhere', ...victim.keys]);
      expect(gw.gateway.capacity?.chunk(bucket, victim.keys[0] as string)?.pred).toBeUndefined();
      // Pins: only the key's own tenant's chunks.
      const pinned = await fetch(`${gw.url}/${bucket}?objectcache-pin`, { method: 'POST' }).then((r) => r.status);
      expect(pinned).toBe(403);
      await mallory.pin(victim.keys, new Date(Date.now() + 3_600_000));
      expect(gw.gateway.capacity?.usage()[0]?.pinnedBytes).toBe(0);
      // A tenant named by the client, and a size the body does not have, are not what is recorded.
      const s3 = as('mallory');
      s3.middlewareStack.add(
        (next) => async (args) => {
          const request = args.request as { headers: Record<string, string> };
          request.headers['x-amz-meta-objectcache-tenant'] = 'victim';
          return next(args);
        },
        { step: 'build', name: 'spoofTenant' },
      );
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'm/000', Body: randomBytes(CHUNK) }));
      await waitFor('the write is learnt', () => gw.gateway.capacity?.chunk(bucket, 'm/000') !== undefined);
      expect(gw.gateway.capacity?.chunk(bucket, 'm/000')).toMatchObject({ tenant: 'mallory', size: CHUNK });
      const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'm/000' }));
      expect(head.Metadata?.['objectcache-tenant']).toBe('mallory');
      expect(gw.gateway.capacity?.tenantBytes('victim')).toBe(3 * CHUNK);
    }));

  it('keeps what it knows across a restart', async () => {
    const bucket = uniqueBucket('cap');
    const dataDir = backend === 'local' ? mkdtempSync(join(tmpdir(), 'oc-restart-')) : undefined;
    try {
      const first = await budgeted(backend, bucket, 16, [], dataDir);
      const client = testClient(first, bucket);
      await client.ensureBucket();
      const a = await storePrefix(client, 'a', 6);
      const b = await storePrefix(client, 'b', 6);
      expect(await client.lookup(a.keys)).toBe(6); // a read: A is the hot one
      const before = first.gateway.capacity?.chunk(bucket, a.keys[5] as string)?.lastAccess;
      await first.close();
      open.splice(open.indexOf(first), 1);

      const second = await budgeted(backend, bucket, 16, [], dataDir);
      const again = testClient(second, bucket);
      expect(second.gateway.capacity?.chunk(bucket, a.keys[5] as string)?.lastAccess).toBe(before);
      expect(second.gateway.capacity?.chunk(bucket, b.keys[5] as string)?.pred).toBe(b.keys[4]);
      await storePrefix(again, 'c', 4);
      await waitFor('the bucket is trimmed', () => (second.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 13.6 * CHUNK);
      expect(await again.lookup(a.keys)).toBe(6);
      expect(await again.lookup(b.keys)).toBe(3);
    } finally {
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('capacity with two gateways over one MinIO', () => {
  it('agree on what to evict, and one evicts at a time', async () => {
    const bucket = uniqueBucket('cap');
    const state = `${bucket}-state`;
    const one = await budgeted('s3', bucket, 16, [], undefined, state);
    const two = await budgeted('s3', bucket, 16, [], undefined, state);
    await waitFor('one holds the lease', () => (one.gateway.capacity?.isLeader ?? false) !== (two.gateway.capacity?.isLeader ?? false));
    const leader = one.gateway.capacity?.isLeader ? one : two;
    const follower = leader === one ? two : one;
    const viaLeader = testClient(leader, bucket);
    await viaLeader.ensureBucket();
    const viaFollower = testClient(follower, bucket);
    const a = await storePrefix(viaFollower, 'a', 6); // written through the follower
    const b = await storePrefix(viaLeader, 'b', 6);
    expect(await viaFollower.lookup(a.keys)).toBe(6); // read through the follower: A is hot
    await pause(300); // the follower's journal reaches the leader
    await storePrefix(viaLeader, 'c', 4);
    await waitFor('the leader trims', () => (leader.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 13.6 * CHUNK);
    expect(await viaLeader.lookup(a.keys)).toBe(6);
    expect(await viaLeader.lookup(b.keys)).toBe(3);
    // The follower learns the evictions from the leader's journal and agrees on the usage.
    await waitFor('the follower agrees', () => follower.gateway.capacity?.usage()[0]?.bytes === leader.gateway.capacity?.usage()[0]?.bytes);
    expect(await metricValue(follower.gateway.adminUrl, 'objectcache_evictions_total')).toBe(0);
  });
});

describe('capacity when the gateway holding the lease is killed', () => {
  it('another takes the lease once it expires, and trims', async () => {
    const { startGatewayProcess } = await import('../bench/gateway-process.js');
    const bucket = uniqueBucket('cap');
    const state = `${bucket}-state`;
    const args = fastBudget(bucket, 16 * CHUNK, state);
    // One process dying with the lease (the serving processes of a killed primary stop in order, giving it back).
    const first = await startGatewayProcess({ minio: inject('minio'), args: [...args, '--processes', '1'] });
    try {
      const leads = async (adminUrl: string): Promise<boolean> => ((await (await fetch(`${adminUrl}/capacity`)).json()) as { leader: boolean }).leader;
      await waitFor('the first gateway holds the lease', () => leads(first.adminUrl));
      const second = await budgeted('s3', bucket, 16, [], undefined, state);
      const client = testClient(second, bucket);
      await client.ensureBucket();
      await pause(300);
      expect(second.gateway.capacity?.isLeader).toBe(false);
      first.child.kill('SIGKILL'); // dies holding the lease: nothing released, no last snapshot
      const killed = Date.now();
      // Nobody takes over (or trims) until the dead holder's lease (1 s) has run out.
      expect(second.gateway.capacity?.isLeader).toBe(false);
      const a = await storePrefix(client, 'a', 10);
      await storePrefix(client, 'b', 6);
      await waitFor('the second gateway takes the lease', () => second.gateway.capacity?.isLeader === true, 10_000);
      expect(Date.now() - killed).toBeGreaterThanOrEqual(800);
      await waitFor('the second gateway trims', () => (second.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 13.6 * CHUNK);
      const s3 = sdkClient(second.url);
      expect(await present(s3, bucket, a.keys)).toBe(7); // the coldest prefix, from its tail
      s3.destroy();
    } finally {
      await first.stop();
    }
  });
});

describe('capacity settings', () => {
  it('refuse contradictions with errors that name the setting', async () => {
    const { loadServeConfig } = await import('../gateway/common/config.js');
    const env = { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET };
    const fails = (args: string[]): unknown => {
      try {
        loadServeConfig(args, env);
      } catch (error) {
        return error;
      }
      return undefined;
    };
    expect(fails(['--budget', 'kvc=10GiB', '--budget-low-percent', '99'])).toMatchObject({ code: 'OC_ERR_CONFIG_INVALID', setting: 'budget-low-percent' });
    expect(fails(['--tenant-quota', 'a=1GiB'])).toMatchObject({ setting: 'tenant-quota' });
    expect(fails(['--evict-idle', '7d'])).toMatchObject({ setting: 'evict-idle' });
    expect(fails(['--budget', 'kvc=lots'])).toMatchObject({ setting: 'budget' });
    expect(fails(['--budget', 'kvc=10GiB', '--evict-idle', 'soon'])).toMatchObject({ setting: 'evict-idle' });
    expect(fails(['--budget', 'kvc=10GiB', '--capacity-state-bucket', 'kvc'])).toMatchObject({ setting: 'capacity-state-bucket' });
    expect(fails(['--budget', 'kvc=10GiB', '--capacity-sync-ms', '1000', '--capacity-lease-ms', '2000'])).toMatchObject({ setting: 'capacity-lease-ms' });
    expect(fails(['--budget', 'kvc=10GiB,kvc=5GiB'])).toMatchObject({ setting: 'budget' });
    const ok = loadServeConfig(['--budget', 'kvc=1.5GiB,logs=100MB', '--tenant-quota', 'a=1GiB', '--evict-idle', '12h'], env);
    expect(ok.capacity?.budgets.get('kvc')).toBe(1.5 * 1024 ** 3);
    expect(ok.capacity?.budgets.get('logs')).toBe(100e6);
    expect(ok.capacity?.idleMs).toBe(12 * 3_600_000);
    // A full bucket holds 97-99% of its budget by default.
    expect([ok.capacity?.highFraction, ok.capacity?.lowFraction]).toEqual([0.99, 0.97]);
    // Clients never reach the capacity state.
    expect(ok.reservedBuckets.has('objectcache-capacity')).toBe(true);
  });
});

describe('what walks of the eviction order may hold at once', () => {
  it('walks one order at a time, and shares one /capacity document among the requests that arrive while it is made', async () => {
    const bucket = uniqueBucket('cap');
    const gw = await budgeted('local', bucket, 100);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    await storePrefix(client, 'p', 6);
    // Each walk made slow, so that walks started together overlap unless something keeps them apart.
    const original = ChunkIndex.prototype.evictionOrderPaced;
    let active = 0;
    let most = 0;
    let walks = 0;
    let gate: Promise<void> = Promise.resolve();
    const spy = vi.spyOn(ChunkIndex.prototype, 'evictionOrderPaced').mockImplementation(async function* (this: ChunkIndex, ...args: Parameters<ChunkIndex['evictionOrderPaced']>) {
      walks++;
      most = Math.max(most, ++active);
      try {
        await pause(30);
        await gate;
        yield* original.apply(this, args);
      } finally {
        active--;
      }
    });
    try {
      const capacity = gw.gateway.capacity!;
      const coldest = await Promise.all([capacity.coldest(bucket, 2), capacity.coldest(bucket, 3), capacity.coldest(bucket, 1)]);
      expect(coldest.map((c) => c.length)).toEqual([2, 3, 1]);
      expect(most).toBe(1);
      walks = 0;
      // Twenty admin requests while one walk is made (it waits until all twenty have arrived):
      // one walk, each answered with its own `top`.
      let release = (): void => {};
      gate = new Promise((resolve) => (release = resolve));
      const reports = vi.spyOn(Capacity.prototype, 'report');
      const pending = Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          fetch(`${gw.gateway.adminUrl}/capacity?top=${i % 4}`).then((r) => r.json() as Promise<{ buckets: { bucket: string; coldest: unknown[] }[] }>),
        ),
      );
      await waitFor('all twenty requests arrived', () => reports.mock.calls.length === 20);
      release();
      const answers = await pending;
      reports.mockRestore();
      expect(walks).toBe(1);
      answers.forEach((answer, i) => expect(answer.buckets.find((b) => b.bucket === bucket)?.coldest).toHaveLength(i % 4));
    } finally {
      spy.mockRestore();
      await client.close();
    }
  });
});
