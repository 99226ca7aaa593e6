// Over 600 lines: the red-team findings' tests, one section per finding, sharing the two-gateway fixtures.
/**
 * The gateway serves no byte and applies no state it cannot verify against what its writer
 * recorded (docs/reliability.md, Trust model), tried as an attacker would:
 *
 * - the gateways' own state buckets are refused to every key but the administrator, whatever
 *   features the gateway in front has on (a second gateway without --segments or --budget);
 * - a packed segment is served only when its manifest carries the state key's MAC and its
 *   CRC32Cs are those its chunks' writers recorded; else its chunks are served;
 * - capacity journals, snapshots and leases no gateway signed are not applied, a signed
 *   journal's sizes are checked against the store before eviction acts on them, and one tenant's
 *   writes cannot be journalled for a chunk no key of its tenant may write;
 * - one read-only key cannot grow the shared journal past its share, nor make another tenant's
 *   pin be lost; a journal the store refuses keeps its events for the next sync.
 */
import {
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { ObjectCacheClient } from '../client/client.js';
import { embeddedCapacityStore, type CapacityStore } from '../gateway/stores/capacity-store.js';
import { SharedState, type CapacityEvent } from '../gateway/capacity/shared-state.js';
import { loadServeConfig } from '../gateway/common/config.js';
import { createLogger } from '../gateway/common/logger.js';
import { startGateway, type Gateway } from '../gateway/pipeline/server.js';
import { loadStateKey, StateKey } from '../gateway/common/state-key.js';
import { crc32c } from '../native/crc32c.js';
import { LocalStore } from '../gateway/stores/embedded/local-store.js';
import {
  CLIENT_KEY,
  fastBudget,
  metricValue,
  sdkClient,
  segmentEvents,
  SMALL_ARENA,
  startTestGateway,
  testClient,
  uniqueBucket,
  type BackendKind,
  type TestGateway,
} from './helpers/gateway.js';
import { descriptorOf, reference, seedPrefix, type SeededPrefix } from './helpers/kv.js';
import { waitFor } from './helpers/wait.js';

const minio = inject('minio');
const L = 4;
const S = 8192;

const open: TestGateway[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const gw of open.splice(0)) await gw.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function gateway(backend: BackendKind, args: string[], dataDir?: string): Promise<TestGateway> {
  const gw = await startTestGateway({ backend, minio, args: [...SMALL_ARENA, ...args], ...(dataDir ? { dataDir } : {}) });
  open.push(gw);
  return gw;
}

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'oc-trust-'));
  dirs.push(dir);
  return dir;
}

/** A credentials file: each entry's key `<name>-key` / `<name>-secret`, its tenant its name, and its policy. */
function credentialsFile(keys: Record<string, unknown>): string {
  const file = join(tempDir(), 'credentials.json');
  writeFileSync(file, JSON.stringify(Object.entries(keys).map(([name, policy]) => ({ accessKeyId: `${name}-key`, secretAccessKey: `${name}-secret`, tenant: name, policy }))));
  return file;
}

const allowAll = { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: ['s3:*', 'objectcache:PinObject'], Resource: ['arn:aws:s3:::*'] }] };

/** The MinIO server itself, with its root keys (what an operator, or anyone holding those keys, reaches). */
function minioRoot(): S3Client {
  return new S3Client({ endpoint: minio.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey } });
}

async function denied(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    expect(error).toBeInstanceOf(S3ServiceException);
    const e = error as S3ServiceException;
    expect(e.$metadata.httpStatusCode).toBe(403);
    return e.$response?.headers?.['x-objectcache-error-code'];
  }
}

describe('the state buckets, through a gateway with no feature on', () => {
  it('are refused to every key but the administrator: the default names and the configured ones', async () => {
    const credentials = credentialsFile({
      // Explicitly denied writes to the chunks, allowed everything else: the key of the finding.
      mallory: {
        Version: '2012-10-17',
        Statement: [
          { Effect: 'Allow', Action: 's3:*', Resource: ['arn:aws:s3:::*'] },
          { Effect: 'Deny', Action: 's3:PutObject', Resource: 'arn:aws:s3:::kvcache/*' },
        ],
      },
    });
    const plain = await gateway('s3', ['--credentials', credentials, '--segment-bucket', 'my-segments', '--capacity-state-bucket', 'my-capacity']);
    const mallory = sdkClient(plain.url, { accessKeyId: 'mallory-key', secretAccessKey: 'mallory-secret' });
    try {
      for (const bucket of ['objectcache-segments', 'objectcache-capacity', 'my-segments', 'my-capacity', 'OBJECTCACHE-SEGMENTS'.toLowerCase()]) {
        expect(await denied(mallory.send(new PutObjectCommand({ Bucket: bucket, Key: 'kvcache/run.json', Body: '{}' }))), bucket).toBe('OC_ERR_ACCESS_RESERVED');
        expect(await denied(mallory.send(new GetObjectCommand({ Bucket: bucket, Key: 'lease' }))), bucket).toBe('OC_ERR_ACCESS_RESERVED');
      }
      // The administrator still may (its key is the operator's).
      const admin = sdkClient(plain.url);
      await admin.send(new PutObjectCommand({ Bucket: 'my-segments', Key: 'probe', Body: 'x' })).catch(async (error: unknown) => {
        // The bucket may not exist yet: what matters is that the refusal is not the reservation.
        expect((error as S3ServiceException).$response?.headers?.['x-objectcache-error-code']).not.toBe('OC_ERR_ACCESS_RESERVED');
      });
      admin.destroy();
    } finally {
      mallory.destroy();
    }
  });
});

describe.each<BackendKind>(['local', 's3'])('a packed segment someone else wrote (%s backend)', (backend) => {
  const bucket = uniqueBucket('trust');
  const segmentBucket = uniqueBucket('trust-segs');
  const args = [
    '--segments',
    'on',
    '--segment-min-bytes',
    '0',
    '--segment-after-reads',
    '2',
    '--segment-bucket',
    segmentBucket,
    '--read-bytes',
    String(2 * S),
    '--task-bytes',
    String(4 * S),
  ];
  let dataDir: string | undefined;
  let gw: TestGateway;
  let client: ObjectCacheClient;
  let admin: S3Client;

  beforeAll(async () => {
    dataDir = backend === 'local' ? tempDir() : undefined;
    gw = await gateway(backend, args, dataDir);
    client = testClient(gw, bucket);
    await client.ensureBucket();
    admin = sdkClient(gw.url);
  });
  afterAll(async () => {
    admin?.destroy();
    await client?.close();
  });

  /** The state key every gateway of this backend holds (the store's credentials, or the data directory's). */
  const stateKey = (): StateKey =>
    loadStateKey(undefined, backend === 's3' ? { kind: 's3', accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey } : { kind: 'local', dataDir: dataDir as string });

  /** The manifest of `prefix`'s segment in the store: its key and JSON as stored, if there is one. */
  async function manifestOf(prefix: SeededPrefix): Promise<{ key: string; manifest: Record<string, unknown> } | undefined> {
    const listed = await admin.send(new ListObjectsV2Command({ Bucket: segmentBucket, Prefix: `${bucket}/` }));
    const manifests = (listed.Contents ?? []).map((o) => o.Key as string).filter((k) => k.endsWith('.json'));
    for (const key of manifests) {
      const got = await admin.send(new GetObjectCommand({ Bucket: segmentBucket, Key: key }));
      const manifest = JSON.parse(await got.Body!.transformToString()) as Record<string, unknown>;
      if ((manifest['keys'] as string[])[0] === prefix.keys[0]) return { key, manifest };
    }
    return undefined;
  }

  /**
   * Packs `prefix` (two reads), and returns its manifest's key and JSON as stored. Waited for by
   * its own manifest, not by the count alone: an earlier test's prefix may be packed again
   * meanwhile (its forged segment dropped, its run due again), and count too.
   */
  async function pack(prefix: SeededPrefix): Promise<{ key: string; manifest: Record<string, unknown> }> {
    const before = await segmentEvents(gw.gateway.adminUrl, 'packed');
    for (let i = 0; i < 2; i++) await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    let stored: { key: string; manifest: Record<string, unknown> } | undefined;
    await waitFor('the segment is packed', async () => (await segmentEvents(gw.gateway.adminUrl, 'packed')) > before && (stored = await manifestOf(prefix)) !== undefined);
    return stored as { key: string; manifest: Record<string, unknown> };
  }

  /**
   * Replaces the segment's data with other bytes of the same length, and its manifest with one
   * whose CRC32Cs are those bytes': signed with `key`, or unsigned.
   */
  async function forge(prefix: SeededPrefix, stored: { key: string; manifest: Record<string, unknown> }, key: StateKey | undefined): Promise<void> {
    const { mac: _, ...manifest } = stored.manifest;
    const slices = prefix.keys.length * prefix.layers;
    const forged = randomBytes(slices * prefix.layerBytes);
    const crcs = Buffer.alloc(slices * 4);
    for (let i = 0; i < slices; i++) crcs.writeUInt32LE(crc32c(forged.subarray(i * prefix.layerBytes, (i + 1) * prefix.layerBytes)), 4 * i);
    const put = await admin.send(new PutObjectCommand({ Bucket: segmentBucket, Key: manifest['data'] as string, Body: forged }));
    const fields = { ...manifest, crcs: crcs.toString('base64'), dataEtag: (put.ETag as string).replace(/"/g, '') };
    const body = key ? JSON.stringify({ ...fields, mac: key.mac('segment-manifest', JSON.stringify(fields)) }) : JSON.stringify(fields);
    await admin.send(new PutObjectCommand({ Bucket: segmentBucket, Key: stored.key, Body: body }));
  }

  /**
   * A gateway that does not know the segment yet (a second one in front of the store, or this one
   * restarted on the embedded store): it finds the forged one in the store at the run's due read.
   */
  async function newcomer(): Promise<TestGateway> {
    if (backend === 'local') {
      await gw.close();
      open.splice(open.indexOf(gw), 1);
      gw = await gateway(backend, args, dataDir);
      await client.close();
      client = testClient(gw, bucket);
      admin.destroy();
      admin = sdkClient(gw.url);
      return gw;
    }
    return gateway(backend, args);
  }

  for (const signed of [false, true]) {
    it(`serves the chunks, not a segment whose ${signed ? 'CRC32Cs are not its chunks\u2019 writers\u2019 (its manifest signed)' : 'manifest no gateway signed'}`, async () => {
      const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
      await forge(prefix, await pack(prefix), signed ? stateKey() : undefined);
      const other = await newcomer();
      const reader = testClient(other, bucket);
      try {
        const rejected = await segmentEvents(other.gateway.adminUrl, 'rejected');
        for (let i = 0; i < 3; i++) {
          const got = await reader.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
          expect(Buffer.from(got.target).equals(Buffer.from(reference(prefix))), `read ${i} is the chunks' bytes`).toBe(true);
          expect(got.segmentChunks).toBe(0);
          expect(got.summary.verified).toBe(true);
        }
        expect(await segmentEvents(other.gateway.adminUrl, 'served')).toBe(0);
        expect(await segmentEvents(other.gateway.adminUrl, 'rejected')).toBeGreaterThan(rejected);
      } finally {
        await reader.close();
      }
    });
  }

  it('says so in END (verified: false) when a chunk\u2019s writer recorded no CRC32Cs, from the segment as from the chunks', async () => {
    const prefix = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD', checksums: false });
    await pack(prefix);
    const got = await client.fetch(descriptorOf(prefix, { mode: 'layerwise' }));
    expect(got.segmentChunks).toBe(6);
    expect(Buffer.from(got.target).equals(Buffer.from(reference(prefix)))).toBe(true);
    expect(got.summary.verified).toBe(false);
    const recorded = await seedPrefix(client, { chunks: 6, layers: L, layerBytes: S, layout: 'KV_L2TD' });
    await pack(recorded);
    const fromSegment = await client.fetch(descriptorOf(recorded, { mode: 'layerwise' }));
    expect(fromSegment.segmentChunks).toBe(6);
    expect(fromSegment.summary.verified).toBe(true);
  });
});

const CHUNK = 64 * 1024;

describe('capacity state someone else wrote (two gateways over one MinIO)', () => {
  const live: TestGateway[] = [];
  afterEach(async () => {
    for (const gw of live.splice(0)) {
      await gw.close();
      open.splice(open.indexOf(gw), 1);
    }
  });

  async function pair(bucket: string, state: string, extra: string[] = []): Promise<{ leader: TestGateway; follower: TestGateway }> {
    const args = [...fastBudget(bucket, 16 * CHUNK, state), ...extra];
    const one = await gateway('s3', args);
    const two = await gateway('s3', args);
    live.push(one, two);
    await waitFor('one holds the lease', () => (one.gateway.capacity?.isLeader ?? false) !== (two.gateway.capacity?.isLeader ?? false));
    return one.gateway.capacity?.isLeader ? { leader: one, follower: two } : { leader: two, follower: one };
  }

  async function store(client: ObjectCacheClient, name: string, n: number): Promise<string[]> {
    const keys = Array.from({ length: n }, (_, i) => `${name}/${String(i).padStart(3, '0')}`);
    for (const key of keys) await client.putChunks([key], [randomBytes(CHUNK)]);
    return keys;
  }

  const journal = (events: readonly CapacityEvent[]): string => events.map((e) => `${JSON.stringify(e)}\n`).join('');

  it('applies no journal, snapshot or lease no gateway signed, and checks a signed journal\u2019s sizes before evicting', async () => {
    const bucket = uniqueBucket('trustcap');
    const state = `${bucket}-state`;
    const { leader, follower } = await pair(bucket, state);
    const viaLeader = testClient(leader, bucket);
    await viaLeader.ensureBucket();
    const a = await store(testClient(follower, bucket), 'a', 6);
    const b = await store(viaLeader, 'b', 6);
    await waitFor(
      'the leader checked the follower\u2019s writes',
      () => leader.gateway.capacity?.usage()[0]?.uncheckedBytes === 0 && leader.gateway.capacity?.usage()[0]?.chunks === 12,
    );
    const root = minioRoot();
    try {
      // One line recording a 1 TB write for the administrator's tenant, unsigned: never applied.
      const huge: CapacityEvent = { t: 'put', b: bucket, k: 'a/000', s: 2 ** 40, n: CLIENT_KEY, e: '"forged"', at: Date.now() };
      await root.send(new PutObjectCommand({ Bucket: state, Key: 'journal/evil/000000000001', Body: journal([huge]) }));
      // Signed with the state key (a gateway's own, gone rogue): applied, but its size is checked
      // against the store before eviction acts on it.
      const key = loadStateKey(undefined, { kind: 's3', accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
      const name = 'journal/rogue/000000000001';
      const payload = journal([{ ...huge, k: 'b/000' }]);
      await root.send(new PutObjectCommand({ Bucket: state, Key: name, Body: `${payload}${JSON.stringify({ mac: key.mac('capacity-journal', `${name}\n${payload}`) })}\n` }));
      // An unsigned lease held far into the future by nobody: it stops no gateway from evicting.
      await root.send(new PutObjectCommand({ Bucket: state, Key: 'lease', Body: JSON.stringify({ holder: 'evil', expires: Date.now() + 3_600_000 }) }));
      await waitFor('the unsigned journal is rejected', async () => (await metricValue(leader.gateway.adminUrl, 'objectcache_capacity_rejected_total{what="journal"}')) >= 1);
      await waitFor('a gateway holds the lease again', () => leader.gateway.capacity?.isLeader === true || follower.gateway.capacity?.isLeader === true, 10_000);
      const holder = leader.gateway.capacity?.isLeader ? leader : follower;
      await waitFor(
        'the rogue size is checked',
        () => holder.gateway.capacity?.chunk(bucket, 'b/000')?.size === CHUNK && holder.gateway.capacity?.usage()[0]?.uncheckedBytes === 0,
      );
      await new Promise((r) => setTimeout(r, 500));
      expect(await viaLeader.lookup(a)).toBe(6);
      expect(await viaLeader.lookup(b)).toBe(6);
      expect(await metricValue(holder.gateway.adminUrl, 'objectcache_evictions_total')).toBe(0);
      // Eviction still works: past the budget's high mark (95%), the coldest go, by whichever
      // gateway holds the lease by then. A pass takes the bucket down to its low mark (85%), but
      // writes may land after it, so what is certain is only that it ends under the high mark
      // (at least 3 of the 18 chunks gone), with a's chunks (the coldest) gone first.
      await store(viaLeader, 'c', 6);
      const evicted = async (gw: TestGateway): Promise<number> => metricValue(gw.gateway.adminUrl, 'objectcache_evictions_total');
      const under = (gw: TestGateway): boolean => (gw.gateway.capacity?.usage()[0]?.bytes ?? Infinity) <= 0.95 * 16 * CHUNK;
      await waitFor('a gateway trims', async () => (await evicted(leader)) + (await evicted(follower)) >= 3 && under(leader) && under(follower), 10_000);
      expect(leader.gateway.capacity?.chunk(bucket, 'a/005')).toBeUndefined();
      await viaLeader.close();
    } finally {
      root.destroy();
    }
  });

  it('drops a journalled write of a chunk no key of its tenant may write', async () => {
    const bucket = uniqueBucket('trustten');
    const state = `${bucket}-state`;
    const credentials = credentialsFile({ 'team-a': { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: 's3:*', Resource: [`arn:aws:s3:::${bucket}/a/*`] }] } });
    const { leader } = await pair(bucket, state, ['--credentials', credentials]);
    const client = testClient(leader, bucket);
    await client.ensureBucket();
    const keys = await store(client, 'b', 2);
    const root = minioRoot();
    try {
      const key = loadStateKey(undefined, { kind: 's3', accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
      const name = 'journal/rogue/000000000001';
      // team-a may write only a/*: a write of b/000 charged to it is not applied.
      const payload = journal([{ t: 'put', b: bucket, k: keys[0] as string, s: CHUNK, n: 'team-a', e: '"x"', at: Date.now() + 1000 }]);
      await root.send(new PutObjectCommand({ Bucket: state, Key: name, Body: `${payload}${JSON.stringify({ mac: key.mac('capacity-journal', `${name}\n${payload}`) })}\n` }));
      await waitFor('the write is dropped', async () => (await metricValue(leader.gateway.adminUrl, 'objectcache_capacity_rejected_total{what="unauthorized"}')) >= 1);
      expect(leader.gateway.capacity?.tenantBytes('team-a')).toBe(0);
      expect(leader.gateway.capacity?.chunk(bucket, keys[0] as string)?.tenant).toBe(CLIENT_KEY);
    } finally {
      root.destroy();
      await client.close();
    }
  });

  it('bounds what a read-only key adds to the journal, and loses no other tenant\u2019s pin', async () => {
    const bucket = uniqueBucket('trustflood');
    const state = `${bucket}-state`;
    const credentials = credentialsFile({
      'team-a': allowAll,
      reader: { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: 's3:GetObject', Resource: [`arn:aws:s3:::${bucket}/reader/*`] }] },
    });
    const { leader, follower } = await pair(bucket, state, ['--credentials', credentials]);
    const teamA = new ObjectCacheClient({ endpoint: follower.url, bucket, credentials: { accessKeyId: 'team-a-key', secretAccessKey: 'team-a-secret' } });
    const reader = new ObjectCacheClient({ endpoint: follower.url, bucket, credentials: { accessKeyId: 'reader-key', secretAccessKey: 'reader-secret' }, retries: 0 });
    const root = minioRoot();
    try {
      await teamA.ensureBucket();
      const pinned = await store(teamA, 'a', 4);
      // Keys of control characters (each 6 bytes in a journal line), never stored: every lookup
      // teaches the gateway a new key order.
      const noise = (n: number): string[] => Array.from({ length: 2000 }, (_, i) => `reader/${'\u0001'.repeat(120)}/${n}/${i}`);
      const flood = Array.from({ length: 24 }, (_, n) => reader.lookup(noise(n)));
      expect(await teamA.pin(pinned, new Date(Date.now() + 3_600_000))).toBeInstanceOf(Date);
      await Promise.all(flood);
      await waitFor('the pin reaches the lease holder', () => leader.gateway.capacity?.usage()[0]?.pinnedBytes === 4 * CHUNK, 10_000);
      expect(await metricValue(follower.gateway.adminUrl, 'objectcache_capacity_hints_dropped_total')).toBeGreaterThan(0);
      // What the follower journalled of it: at most its key's share per sync period.
      const listed = await root.send(new ListObjectsV2Command({ Bucket: state, Prefix: 'journal/' }));
      for (const object of listed.Contents ?? []) expect(object.Size, object.Key).toBeLessThanOrEqual(1024 * 1024 + 64 * 1024);
    } finally {
      root.destroy();
      await teamA.close();
      await reader.close();
    }
  });
});

describe('a snapshot put back', () => {
  it('is not applied by a gateway that applied a newer one (two gateways over one MinIO)', async () => {
    const bucket = uniqueBucket('trustsnap');
    const state = `${bucket}-state`;
    const args = fastBudget(bucket, 16 * 64 * 1024, state);
    const one = await gateway('s3', args);
    const two = await gateway('s3', args);
    const client = testClient(one, bucket);
    const root = minioRoot();
    try {
      await client.ensureBucket();
      await client.putChunks(['gone/000'], [randomBytes(64 * 1024)]);
      const snapshotOf = async (): Promise<{ body: string; etag: string }> => {
        const got = await root.send(new GetObjectCommand({ Bucket: state, Key: 'snapshot' }));
        return { body: await got.Body!.transformToString(), etag: got.ETag as string };
      };
      // A snapshot (written every 30 syncs, 3 s here) that holds the chunk.
      await waitFor('a snapshot holds the chunk', async () => (await snapshotOf().catch(() => ({ body: '', etag: '' }))).body.includes('gone/000'), 15_000);
      const old = await snapshotOf();
      await client.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'gone/000' }));
      await waitFor(
        'a newer snapshot without it',
        async () => {
          const now = await snapshotOf();
          return now.etag !== old.etag && !now.body.includes('gone/000');
        },
        15_000,
      );
      for (const gw of [one, two]) await waitFor('the chunk is forgotten', () => gw.gateway.capacity?.chunk(bucket, 'gone/000') === undefined);
      const holder = one.gateway.capacity?.isLeader ? one : two;
      // Put back, as someone who can write the state bucket (but holds no state key) would.
      await root.send(new PutObjectCommand({ Bucket: state, Key: 'snapshot', Body: old.body }));
      // The lease holder (which wrote the newer one) refuses it, and never counts the chunk again.
      const until = Date.now() + 2000;
      while (Date.now() < until) {
        expect(holder.gateway.capacity?.chunk(bucket, 'gone/000')).toBeUndefined();
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(await metricValue(holder.gateway.adminUrl, 'objectcache_capacity_rejected_total{what="snapshot"}')).toBeGreaterThanOrEqual(1);
      // Its next snapshot (If-Match on the replayed one, a newer generation) replaces it, and a
      // gateway that had not seen the newer one before the replay agrees again.
      await waitFor('a newer snapshot replaces it', async () => !(await snapshotOf()).body.includes('gone/000'), 15_000);
      for (const gw of [one, two]) await waitFor('every gateway agrees', () => gw.gateway.capacity?.chunk(bucket, 'gone/000') === undefined, 5000);
    } finally {
      root.destroy();
      await client.close();
    }
  });
});

describe('pins repeated', () => {
  it('journal one line per chunk per sync, however often they come', async () => {
    const dataDir = tempDir();
    const local = embeddedCapacityStore(await LocalStore.open(dataDir));
    const written: string[] = [];
    const store: CapacityStore = {
      ...local,
      put: async (bucket, key, body, condition) => {
        if (key.startsWith('journal/')) written.push(body.toString('utf8'));
        return local.put(bucket, key, body, condition);
      },
    };
    const config = {
      budgets: new Map([['kv', 1024]]),
      quotas: new Map(),
      highFraction: 0.95,
      lowFraction: 0.85,
      idleMs: undefined,
      evictPerSecond: 100,
      stateBucket: 'state',
      syncMs: 60_000,
      leaseMs: 180_000,
      multipartExpiryMs: undefined,
    };
    const shared = new SharedState({
      store,
      config,
      key: new StateKey(Buffer.from('a state key for this test'), 'setting'),
      logger: { info: () => {}, warn: () => {}, error: () => {} },
      now: Date.now,
      gatewayId: 'gw',
      apply: () => {},
      reset: () => {},
      snapshot: () => [],
      reconcile: async () => {},
      onFailure: () => {},
      onRejected: () => {},
      onHintsDropped: () => {},
    });
    await shared.start();
    // One tenant pins its 100 chunks 5,000 times over (what 367 requests of 4,096 keys were):
    for (let round = 0; round < 5000; round++) for (let k = 0; k < 100; k++) shared.record({ t: 'pin', b: 'kv', k: `a/${k}`, until: 1_000_000 + round });
    // Another tenant's write in between is never pushed out.
    shared.record({ t: 'put', b: 'kv', k: 'b/victim', s: 10, n: 'team-b', e: '"x"', at: 1 });
    await shared.close();
    const lines = written
      .join('')
      .split('\n')
      .filter((line) => line.startsWith('{"t"'));
    expect(lines.filter((line) => line.includes('"t":"pin"'))).toHaveLength(100);
    expect(lines.some((line) => line.includes('b/victim'))).toBe(true);
    expect(lines.find((line) => line.includes('"a/7"'))).toContain('"until":1004999');
  });
});

describe('a journal the store refuses', () => {
  it('keeps every event for the next sync, pins included', async () => {
    const dataDir = tempDir();
    const local = embeddedCapacityStore(await LocalStore.open(dataDir));
    let refuse = 1;
    const puts: string[] = [];
    const store: CapacityStore = {
      ...local,
      put: async (bucket, key, body, condition) => {
        if (key.startsWith('journal/') && refuse-- > 0) throw new Error('the store is down');
        if (key.startsWith('journal/')) puts.push(body.toString('utf8'));
        return local.put(bucket, key, body, condition);
      },
    };
    const key = new StateKey(Buffer.from('a state key for this test'), 'setting');
    const config = {
      budgets: new Map([['kv', 1024]]),
      quotas: new Map(),
      highFraction: 0.95,
      lowFraction: 0.85,
      idleMs: undefined,
      evictPerSecond: 100,
      stateBucket: 'state',
      syncMs: 60_000,
      leaseMs: 180_000,
      multipartExpiryMs: undefined,
    };
    const applied: CapacityEvent[] = [];
    const shared = new SharedState({
      store,
      config,
      key,
      logger: { info: () => {}, warn: () => {}, error: () => {} },
      now: Date.now,
      gatewayId: 'gw',
      apply: (event) => applied.push(event),
      reset: () => {},
      snapshot: () => [],
      reconcile: async () => {},
      onFailure: () => {},
      onRejected: () => {},
      onHintsDropped: () => {},
    });
    await shared.start();
    shared.record({ t: 'pin', b: 'kv', k: 'a/0', until: Date.now() + 60_000 });
    for (let i = 0; i < 1000; i++) shared.recordLink('kv', [[`x/${i}/${'k'.repeat(1000)}`, `x/${i + 1}/${'k'.repeat(1000)}`]], 'team', 'reader-key');
    await shared.close().catch(() => {}); // the first write fails: kept
    await shared.close();
    const written = puts.join('');
    expect(written).toContain('"t":"pin"');
    // The reader's chains past its share are not journalled, and what is stays within it.
    expect(Buffer.byteLength(written)).toBeLessThan(1024 * 1024 + 4096);
  });
});

describe('an unfinished multipart upload on the embedded store', () => {
  it('is aborted past --multipart-expiry, budget or not, its parts freed', async () => {
    const gw = await gateway('local', ['--multipart-expiry', '2s']);
    const s3 = sdkClient(gw.url);
    try {
      const bucket = uniqueBucket('expire');
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
      const id = (await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'left' }))).UploadId as string;
      await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'left', UploadId: id, PartNumber: 1, Body: randomBytes(1024) }));
      expect((await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }))).Uploads).toHaveLength(1);
      await waitFor('the upload is aborted', async () => (await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }))).Uploads === undefined, 10_000);
      await waitFor('its parts are removed', () => !existsSync(join(gw.dataDir as string, 'buckets', bucket, 'uploads', id)), 10_000);
    } finally {
      s3.destroy();
    }
  });
});

describe('one key\u2019s lookups (in front of MinIO)', () => {
  it('wait within the key\u2019s share of backend connections, and leave the rest to other keys', async () => {
    const bucket = uniqueBucket('lookups');
    const credentials = credentialsFile({ flooder: allowAll, 'team-a': allowAll });
    // 8 connections to the store: a key's share is 6.
    const gw = await gateway('s3', ['--credentials', credentials, '--backend-connections', '8']);
    const admin = sdkClient(gw.url);
    const flooder = new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: 'flooder-key', secretAccessKey: 'flooder-secret' }, retries: 0 });
    const teamA = sdkClient(gw.url, { accessKeyId: 'team-a-key', secretAccessKey: 'team-a-secret' });
    try {
      await admin.send(new CreateBucketCommand({ Bucket: bucket }));
      const keys = Array.from({ length: 256 }, (_, i) => `f/${String(i).padStart(4, '0')}`);
      for (let at = 0; at < keys.length; at += 6) await Promise.all(keys.slice(at, at + 6).map((key) => admin.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'x' }))));
      await admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'a/object', Body: 'team-a' }));
      let most = 0;
      let flooding = true;
      const sampler = setInterval(() => {
        const stats = gw.gateway.backendStats();
        if (stats) most = Math.max(most, stats.inflight + stats.waiting);
      }, 2);
      const flood = Promise.all(Array.from({ length: 16 }, () => flooder.lookup(keys))).finally(() => (flooding = false));
      await waitFor('the flood reaches the store', () => (gw.gateway.backendStats()?.inflight ?? 0) > 0);
      const got = await teamA.send(new GetObjectCommand({ Bucket: bucket, Key: 'a/object' }));
      expect(await got.Body!.transformToString()).toBe('team-a');
      expect(flooding, 'team-a was served while the flood went on').toBe(true);
      expect(await flood).toEqual(Array.from({ length: 16 }, () => 256));
      clearInterval(sampler);
      // The flooder's HEADs never took more than its share of the pool (plus team-a's one GET).
      expect(most).toBeLessThanOrEqual(7);
    } finally {
      admin.destroy();
      teamA.destroy();
      await flooder.close();
    }
  });
});

describe('the admin endpoint\u2019s /capacity', () => {
  it('is served on a loopback address only, unless it asks for a token; then only with it', async () => {
    const bucket = uniqueBucket('admin');
    const start = async (env: Record<string, string>): Promise<Gateway> => {
      const config = loadServeConfig(
        ['--port', '0', '--metrics-port', '0', '--metrics-host', '0.0.0.0', '--log-level', 'silent', '--data-dir', tempDir(), '--budget', `${bucket}=1GiB`],
        { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: 'a-secret-for-the-test', ...env },
      );
      return startGateway(config, { logger: createLogger('silent') });
    };
    const open = await start({});
    try {
      const url = `http://127.0.0.1:${new URL(open.adminUrl).port}`;
      expect((await fetch(`${url}/capacity`)).status).toBe(403);
      expect((await fetch(`${url}/metrics`)).status).toBe(200);
    } finally {
      await open.close();
    }
    // On loopback without a token, only to a loopback Host: not to a page of a rebound domain.
    const loopback = await startGateway(
      loadServeConfig(['--port', '0', '--metrics-port', '0', '--log-level', 'silent', '--data-dir', tempDir(), '--budget', `${bucket}=1GiB`], {
        OBJECTCACHE_ACCESS_KEY: CLIENT_KEY,
        OBJECTCACHE_SECRET_KEY: 'a-secret-for-the-test',
      }),
      { logger: createLogger('silent') },
    );
    try {
      expect((await fetch(`${loopback.adminUrl}/capacity`)).status).toBe(200);
      const rebound = await new Promise<number>((resolve, reject) => {
        const url = new URL(`${loopback.adminUrl}/capacity`);
        httpGet({ host: url.hostname, port: url.port, path: url.pathname, headers: { host: 'attacker.example' } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        }).on('error', reject);
      });
      expect(rebound).toBe(403);
    } finally {
      await loopback.close();
    }
    const token = 'an-admin-token-of-some-length';
    const guarded = await start({ OBJECTCACHE_ADMIN_TOKEN: token });
    try {
      const url = `http://127.0.0.1:${new URL(guarded.adminUrl).port}`;
      const without = await fetch(`${url}/capacity`);
      expect(without.status).toBe(401);
      expect(without.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect((await fetch(`${url}/capacity`, { headers: { authorization: 'Bearer not-the-token-at-all' } })).status).toBe(401);
      const answer = await fetch(`${url}/capacity`, { headers: { authorization: `Bearer ${token}` } });
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as { buckets: { bucket: string }[] }).buckets[0]?.bucket).toBe(bucket);
    } finally {
      await guarded.close();
    }
    expect(() => loadServeConfig([], { OBJECTCACHE_ADMIN_TOKEN: 'short' })).toThrow(/OBJECTCACHE_ADMIN_TOKEN/);
  });
});
