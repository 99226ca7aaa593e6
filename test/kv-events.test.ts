/**
 * KV events (docs/kv-events.md) against the real gateway on both backends, read by a real ZeroMQ
 * subscriber: a chunk written with its tokens is published as a BlockStored carrying them and its
 * parent; a delete, an overwrite, an eviction (for the budget, a quota, idleness, after a pin's
 * expiry) as BlockRemoved; a multipart upload's chunk from
 * its metadata; tokens that do not hash to the key are refused before anything is stored; the
 * replay socket answers vLLM's replay protocol; and a second gateway on the same MinIO publishes
 * what the first one stored and removed. (The consumers' own decoders read these events in
 * client/python/tests_engine/test_kv_events.py.)
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decode } from '@msgpack/msgpack';
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  HeadObjectCommand,
  PutObjectCommand,
  UploadPartCommand,
  type S3ServiceException,
} from '@aws-sdk/client-s3';
import { createPresignedPost } from '@aws-sdk/s3-presigned-post';
import { Dealer, Subscriber } from 'zeromq';
import { chunkKeys, type LayoutIdentity } from '../client/keys.js';
import { blockHash } from '../gateway/kv-events/kv-events.js';
import { ObjectCacheClient } from '../client/client.js';
import { encodeTokens } from '../schemas/kv-tokens.js';
import { loadServeConfig } from '../gateway/common/config.js';
import { runCliAsync } from './helpers/cli.js';
import { fastBudget, metricValue, sdkClient, SMALL_ARENA, startTestGateway, testClient, uniqueBucket, type BackendKind, type TestGateway } from './helpers/gateway.js';

const LAYERS = 4;
const LAYER_BYTES = 4096;
const CHUNK = LAYERS * LAYER_BYTES;
const G = 16;
const identity: LayoutIdentity = { modelId: 'test/model', dtype: 'bfloat16', chunkTokens: G, layers: LAYERS, layerBytes: LAYER_BYTES, layout: 'KV_L2TD' };

interface Received {
  readonly topic: string;
  readonly sequence: bigint;
  readonly events: Record<string, unknown>[];
}

const open: { close(): Promise<void> | void }[] = [];
afterEach(async () => {
  for (const thing of open.splice(0).reverse()) await thing.close();
});

/** A ZeroMQ subscriber that collects every batch it receives. */
async function subscribe(
  endpoint: string,
  topic = '',
): Promise<{ batches: Received[]; until(predicate: (events: Record<string, unknown>[]) => boolean, what: string): Promise<Record<string, unknown>[]> }> {
  const sub = new Subscriber();
  sub.connect(endpoint);
  sub.subscribe(topic);
  const batches: Received[] = [];
  void (async () => {
    try {
      for await (const [t, s, payload] of sub) {
        const [, events] = decode(payload as Buffer, { useBigInt64: true }) as [number, Record<string, unknown>[], number];
        batches.push({ topic: (t as Buffer).toString(), sequence: (s as Buffer).readBigInt64BE(), events });
      }
    } catch {
      // closed
    }
  })();
  open.push({ close: () => sub.close() });
  // A subscriber misses what is published before its connection is up (ZeroMQ's slow joiner).
  await new Promise((r) => setTimeout(r, 300));
  return {
    batches,
    async until(predicate, what) {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const all = batches.flatMap((b) => b.events);
        if (predicate(all)) return all;
        if (Date.now() > deadline) throw new Error(`no ${what} within 10 s; received ${JSON.stringify(all, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`);
        await new Promise((r) => setTimeout(r, 25));
      }
    },
  };
}

async function gatewayWithEvents(backend: BackendKind, bucket: string, chunks: number, extra: string[] = []): Promise<TestGateway> {
  const gw = await startTestGateway({
    backend,
    minio: inject('minio'),
    args: [...fastBudget(bucket, chunks * CHUNK), '--kv-events', 'tcp://127.0.0.1:*', '--kv-events-replay', 'tcp://127.0.0.1:*', ...SMALL_ARENA, ...extra],
  });
  open.push(gw);
  return gw;
}

/** A prefix of `n` chunks: its tokens, keys and objects. */
function prefix(n: number): { tokens: number[][]; keys: string[]; objects: Uint8Array[] } {
  const flat = Array.from({ length: n * G }, () => Math.floor(Math.random() * 150_000));
  const keys = chunkKeys(flat, identity);
  return { tokens: keys.map((_, i) => flat.slice(i * G, (i + 1) * G)), keys, objects: keys.map(() => randomBytes(CHUNK)) };
}

const stored = (events: Record<string, unknown>[], hash: bigint): Record<string, unknown> | undefined =>
  events.find((e) => e['type'] === 'BlockStored' && (e['block_hashes'] as bigint[])[0] === hash);
const removed = (events: Record<string, unknown>[], hash: bigint): boolean => events.some((e) => e['type'] === 'BlockRemoved' && (e['block_hashes'] as bigint[])[0] === hash);

describe.each<BackendKind>(['local', 's3'])('KV events (%s backend)', (backend) => {
  it('publishes a chunk stored with its tokens and parent, and its removal by delete, overwrite and eviction', async () => {
    const bucket = uniqueBucket('kvev');
    const gw = await gatewayWithEvents(backend, bucket, 6, ['--kv-events-topic', 'kv@pool:test@{model}']);
    const events = gw.gateway.kvEvents;
    if (!events) throw new Error('the gateway publishes no KV events');
    const sub = await subscribe(events.endpoint, 'kv@');
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const p = prefix(3);
    await client.putChunks(p.keys, p.objects, { tokens: p.tokens, model: 'test/model', layout: { layout: 'KV_L2TD', layers: LAYERS, layerBytes: LAYER_BYTES } });
    const hashes = p.keys.map((k) => blockHash(bucket, k));
    let all = await sub.until((e) => hashes.every((h) => stored(e, h)), 'BlockStored of the three chunks');
    for (const [i, hash] of hashes.entries()) {
      const event = stored(all, hash) as Record<string, unknown>;
      expect(event).toMatchObject({ token_ids: p.tokens[i], block_size: G, medium: 'SHARED', locality: 'REMOTE', lora_id: null });
      expect(event['parent_block_hash']).toBe(i === 0 ? null : hashes[i - 1]);
    }
    expect(sub.batches.every((b) => b.topic === 'kv@pool:test@test/model')).toBe(true);
    // Sequence numbers rise by one a batch.
    const sequences = sub.batches.map((b) => b.sequence);
    sequences.slice(1).forEach((s, i) => expect(s).toBe((sequences[i] as bigint) + 1n));

    // A delete, then an overwrite of another chunk (removed, then stored again).
    const s3 = sdkClient(gw.url);
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: p.keys[2] }));
    all = await sub.until((e) => removed(e, hashes[2] as bigint), 'BlockRemoved of the deleted chunk');
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: p.keys[1], Body: randomBytes(CHUNK) }));
    all = await sub.until(
      (e) => removed(e, hashes[1] as bigint) && e.filter((x) => x['type'] === 'BlockStored' && (x['block_hashes'] as bigint[])[0] === hashes[1]).length === 2,
      'the overwrite',
    );
    // Rewritten without tokens: published without them.
    const again = all.filter((x) => x['type'] === 'BlockStored' && (x['block_hashes'] as bigint[])[0] === hashes[1]).at(-1) as Record<string, unknown>;
    expect(again['token_ids']).toEqual([]);

    // Past the budget (6 chunks), eviction removes the coldest prefix: the first one's chunks.
    const q = prefix(6);
    await client.putChunks(q.keys, q.objects, { tokens: q.tokens, model: 'test/model' });
    await sub.until((e) => removed(e, hashes[0] as bigint), 'BlockRemoved of an evicted chunk');
    // A removal's topic names the model its store named (every chunk here was stored with it).
    const removals = sub.batches.filter((b) => b.events.some((e) => e['type'] === 'BlockRemoved' && (e['block_hashes'] as bigint[])[0] === hashes[0]));
    expect(removals.map((b) => b.topic)).toEqual(['kv@pool:test@test/model']);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_kv_events_total{kind="removed"}')).toBeGreaterThanOrEqual(3);
  });

  it('refuses tokens that do not hash to the chunk key, and publishes a multipart upload from its metadata', async () => {
    const bucket = uniqueBucket('kvtok');
    const gw = await gatewayWithEvents(backend, bucket, 100);
    const sub = await subscribe((gw.gateway.kvEvents as { endpoint: string }).endpoint);
    const s3 = sdkClient(gw.url);
    await testClient(gw, bucket).ensureBucket();
    const p = prefix(2);
    const wrong = [...(p.tokens[1] as number[])];
    wrong[0] = (wrong[0] as number) + 1;
    for (const value of [encodeTokens(wrong) as string, 'not*base64', 'gA']) {
      const refused = await s3
        .send(
          new PutObjectCommand({ Bucket: bucket, Key: p.keys[1], Body: randomBytes(CHUNK), Metadata: { 'objectcache-after': p.keys[0] as string, 'objectcache-tokens': value } }),
        )
        .catch((error: unknown) => error as S3ServiceException);
      expect(refused).toMatchObject({ name: 'InvalidArgument', $metadata: { httpStatusCode: 400 } });
    }
    await expect(testClient(gw, bucket).lookup([p.keys[1] as string])).resolves.toBe(0); // nothing stored
    // A browser-form POST's tokens are checked as a PUT's are.
    const { url, fields } = await createPresignedPost(s3, {
      Bucket: bucket,
      Key: p.keys[1] as string,
      Expires: 300,
      Fields: { 'x-amz-meta-objectcache-after': p.keys[0] as string, 'x-amz-meta-objectcache-tokens': encodeTokens(wrong) as string },
    });
    const form = new FormData();
    for (const [name, value] of Object.entries(fields)) form.append(name, value);
    form.append('file', new Blob([randomBytes(CHUNK)]), 'f.bin');
    const posted = await fetch(url, { method: 'POST', body: form });
    expect(posted.status).toBe(400);
    expect(posted.headers.get('x-objectcache-error-code')).toBe('OC_ERR_KV_TOKENS');
    await expect(testClient(gw, bucket).lookup([p.keys[1] as string])).resolves.toBe(0);

    // A multipart upload names its metadata when it is created; the chunk is learnt with a HEAD.
    const key = p.keys[0] as string;
    const { UploadId } = await s3.send(
      new CreateMultipartUploadCommand({ Bucket: bucket, Key: key, Metadata: { 'objectcache-tokens': encodeTokens(p.tokens[0] as number[]) as string } }),
    );
    const part = await s3.send(new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: 1, Body: randomBytes(CHUNK) }));
    await s3.send(new CompleteMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId, MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag }] } }));
    const all = await sub.until((e) => stored(e, blockHash(bucket, key)) !== undefined, 'BlockStored of the multipart chunk');
    expect(stored(all, blockHash(bucket, key))).toMatchObject({ token_ids: p.tokens[0], parent_block_hash: null });
  });

  it('publishes a copy, the chunks of a DeleteObjects, and what a quota evicts, for the tenants it names only', async () => {
    const bucket = uniqueBucket('kvten');
    const dir = mkdtempSync(join(tmpdir(), 'oc-kv-tenants-'));
    open.push({ close: () => rmSync(dir, { recursive: true, force: true }) });
    const credentials = join(dir, 'credentials.json');
    const allow = { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: ['s3:*'], Resource: ['arn:aws:s3:::*'] }] };
    writeFileSync(
      credentials,
      JSON.stringify(['team-a', 'team-b'].map((tenant) => ({ accessKeyId: `${tenant}-key`, secretAccessKey: `${tenant}-secret`, tenant, policy: allow }))),
    );
    const gw = await gatewayWithEvents(backend, bucket, 100, [
      '--credentials',
      credentials,
      '--tenant-quota',
      `team-a=${4 * CHUNK}`,
      '--kv-events-tenants',
      'team-a',
      '--kv-events-salt',
      'tenant',
    ]);
    const sub = await subscribe((gw.gateway.kvEvents as { endpoint: string }).endpoint);
    const as = (tenant: string): ObjectCacheClient =>
      new ObjectCacheClient({ endpoint: gw.url, bucket, credentials: { accessKeyId: `${tenant}-key`, secretAccessKey: `${tenant}-secret` }, retries: 0 });
    const s3a = sdkClient(gw.url, { accessKeyId: 'team-a-key', secretAccessKey: 'team-a-secret' });
    await as('team-a').ensureBucket();
    const p = prefix(4);
    const hashes = p.keys.map((k) => blockHash(bucket, k));
    await as('team-a').putChunks(p.keys.slice(0, 2), p.objects.slice(0, 2), { tokens: p.tokens.slice(0, 2) });
    // team-b's chunk is stored, and not published (--kv-events-tenants team-a).
    const other = prefix(1);
    await as('team-b').putChunks(other.keys, other.objects, { tokens: other.tokens });
    // A copy that sets its metadata: the copy is a chunk of its own, with the tokens it names.
    await s3a.send(
      new CopyObjectCommand({
        Bucket: bucket,
        Key: p.keys[2],
        CopySource: `${bucket}/${p.keys[0] as string}`,
        MetadataDirective: 'REPLACE',
        Metadata: { 'objectcache-after': p.keys[1] as string, 'objectcache-tokens': encodeTokens(p.tokens[2] as number[]) as string },
      }),
    );
    let all = await sub.until((e) => [0, 1, 2].every((i) => stored(e, hashes[i] as bigint)), 'BlockStored of the two chunks and the copy');
    expect(stored(all, hashes[2] as bigint)).toMatchObject({ token_ids: p.tokens[2], parent_block_hash: hashes[1], extra_keys: [['team-a']] });
    // DeleteObjects: each deleted chunk is removed (the gateway asks the store which went).
    await s3a.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: p.keys[2] }, { Key: p.keys[1] }] } }));
    all = await sub.until((e) => removed(e, hashes[2] as bigint) && removed(e, hashes[1] as bigint), 'BlockRemoved of the chunks DeleteObjects deleted');
    // Past team-a's quota (4 chunks), its own coldest chunk is evicted to make room.
    const more = prefix(4);
    await as('team-a').putChunks(more.keys, more.objects, { tokens: more.tokens });
    all = await sub.until((e) => removed(e, hashes[0] as bigint), 'BlockRemoved of the chunk the quota evicted');
    const otherHash = blockHash(bucket, other.keys[0] as string);
    expect(all.some((e) => (e['block_hashes'] as bigint[])[0] === otherHash)).toBe(false);
    // team-b copying team-a's chunk as it is (COPY) does not take its tokens, model or chain with it.
    const s3b = sdkClient(gw.url, { accessKeyId: 'team-b-key', secretAccessKey: 'team-b-secret' });
    await s3b.send(new CopyObjectCommand({ Bucket: bucket, Key: 'copies/of-a', CopySource: `${bucket}/${more.keys[1] as string}` }));
    const copied = await s3b.send(new HeadObjectCommand({ Bucket: bucket, Key: 'copies/of-a' }));
    expect(Object.keys(copied.Metadata ?? {}).filter((name) => name.startsWith('objectcache-'))).toEqual(['objectcache-tenant']);
  });

  it('publishes a chunk evicted as idle, and a pinned one only once its pin has expired', async () => {
    const bucket = uniqueBucket('kvidle');
    const gw = await gatewayWithEvents(backend, bucket, 100, ['--evict-idle', '2s']);
    const sub = await subscribe((gw.gateway.kvEvents as { endpoint: string }).endpoint);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const idle = prefix(1);
    const pinned = prefix(1);
    await client.putChunks([...idle.keys, ...pinned.keys], [...idle.objects, ...pinned.objects], { tokens: [...idle.tokens, ...pinned.tokens], chain: false });
    const pinnedUntil = Date.now() + 5000;
    expect(await client.pin(pinned.keys, new Date(pinnedUntil))).toBeTruthy();
    const [idleHash, pinnedHash] = [blockHash(bucket, idle.keys[0] as string), blockHash(bucket, pinned.keys[0] as string)];
    await sub.until((e) => removed(e, idleHash), 'BlockRemoved of the idle chunk');
    expect(
      removed(
        sub.batches.flatMap((b) => b.events),
        pinnedHash,
      ),
    ).toBe(false); // idle too, but pinned
    await sub.until((e) => removed(e, pinnedHash), 'BlockRemoved of the chunk whose pin expired');
    expect(Date.now()).toBeGreaterThanOrEqual(pinnedUntil);
    expect(await metricValue(gw.gateway.adminUrl, `objectcache_evictions_total{bucket="${bucket}",reason="idle"}`)).toBe(2);
  }, 20_000);

  it('stores a chunk whose metadata the tenant the gateway records would take past 2 KB, without its tokens', async () => {
    const bucket = uniqueBucket('kvfull');
    const gw = await gatewayWithEvents(backend, bucket, 100);
    await testClient(gw, bucket).ensureBucket();
    const p = prefix(1);
    const tokens = encodeTokens(p.tokens[0] as number[]) as string;
    // 2,040 bytes as MinIO counts them (x-amz-meta- included): the writer's own fit passes; with
    // x-amz-meta-objectcache-tenant added it would not.
    const fixed = 'x-amz-meta-objectcache-tokens'.length + tokens.length + 'x-amz-meta-pad'.length;
    const s3 = sdkClient(gw.url);
    await s3.send(
      new PutObjectCommand({ Bucket: bucket, Key: p.keys[0], Body: p.objects[0] as Uint8Array, Metadata: { 'objectcache-tokens': tokens, pad: 'p'.repeat(2040 - fixed) } }),
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: p.keys[0] }));
    expect(head.Metadata?.['objectcache-tokens']).toBeUndefined();
    expect(head.Metadata?.['objectcache-tenant']).toBeDefined();
    expect(head.Metadata?.['pad']).toHaveLength(2040 - fixed);
  });

  it('replays held batches from a sequence number, then the end marker', async () => {
    const bucket = uniqueBucket('kvrep');
    const gw = await gatewayWithEvents(backend, bucket, 100, ['--kv-events-encoding', 'array']);
    const bound = gw.gateway.kvEvents as { endpoint: string; replayEndpoint: string; firstSequence: bigint };
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const p = prefix(2);
    // Two batches: nobody subscribed to either.
    await client.putChunks(p.keys.slice(0, 1), p.objects.slice(0, 1), { tokens: p.tokens.slice(0, 1) });
    await new Promise((r) => setTimeout(r, 150));
    await client.putChunks(p.keys.slice(1), p.objects.slice(1), { tokens: p.tokens.slice(1), after: p.keys[0] as string });
    const dealer = new Dealer();
    dealer.connect(bound.replayEndpoint);
    open.push({ close: () => dealer.close() });
    const replayed: { sequence: bigint; events: unknown[] }[] = [];
    for (let tries = 0; tries < 100; tries++) {
      replayed.length = 0;
      const start = Buffer.alloc(8);
      start.writeBigInt64BE(bound.firstSequence);
      await dealer.send(['', start]);
      for (;;) {
        const [, , seq, payload] = (await dealer.receive()) as Buffer[];
        const sequence = (seq as Buffer).readBigInt64BE();
        if (sequence === -1n) break;
        replayed.push({ sequence, events: (decode(payload as Buffer, { useBigInt64: true }) as [number, unknown[]])[1] });
      }
      if (replayed.flatMap((r) => r.events).length >= 2) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(replayed[0]?.sequence).toBe(bound.firstSequence);
    const events = replayed.flatMap((r) => r.events) as unknown[][];
    // The positional form: tag, hashes, parent, tokens, block size, lora id, medium.
    expect(events).toEqual([
      ['BlockStored', [blockHash(bucket, p.keys[0] as string)], null, p.tokens[0], G, null, 'SHARED'],
      ['BlockStored', [blockHash(bucket, p.keys[1] as string)], blockHash(bucket, p.keys[0] as string), p.tokens[1], G, null, 'SHARED'],
    ]);
    expect(await metricValue(gw.gateway.adminUrl, 'objectcache_kv_event_replays_total')).toBeGreaterThanOrEqual(1);
  });
});

describe('a writer\u2019s tokens and chain', () => {
  it('are left out where they would take the metadata past S3\u2019s 2 KB (the chunk is stored, its event has no tokens), and an after that cannot be recorded is refused', async () => {
    const bucket = uniqueBucket('kvfit');
    const gw = await gatewayWithEvents('local', bucket, 100);
    const sub = await subscribe((gw.gateway.kvEvents as { endpoint: string }).endpoint);
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const p = prefix(2);
    // 250 layers' CRC-32Cs take 1,334 characters: with 16 tokens they fit, with 300 large ones they do not.
    const layout = { layout: 'KV_L2TD' as const, layers: 250, layerBytes: 64 };
    const objects = p.keys.map(() => randomBytes(250 * 64));
    const big = Array.from({ length: 300 }, () => 2_000_000); // 1,200 characters: within the tokens' own limit
    await client.putChunks(p.keys, objects, { tokens: [p.tokens[0] as number[], big], model: 'test/model', layout });
    const hashes = p.keys.map((k) => blockHash(bucket, k));
    const all = await sub.until((e) => hashes.every((h) => stored(e, h)), 'BlockStored of both chunks');
    expect(stored(all, hashes[0] as bigint)?.['token_ids']).toEqual(p.tokens[0]);
    expect(stored(all, hashes[1] as bigint)?.['token_ids']).toEqual([]);
    expect(stored(all, hashes[1] as bigint)?.['parent_block_hash']).toBe(hashes[0]);
    const head = await sdkClient(gw.url).send(new HeadObjectCommand({ Bucket: bucket, Key: p.keys[1] }));
    expect(head.Metadata?.['objectcache-after']).toBe(p.keys[0]);
    expect(head.Metadata?.['objectcache-tokens']).toBeUndefined();

    const q = prefix(1);
    await expect(client.putChunks(q.keys, q.objects, { after: 'a\nb' })).rejects.toMatchObject({ code: 'OC_ERR_CLIENT_USAGE' });
    await expect(client.putChunks(q.keys, q.objects, { after: 'k'.repeat(513) })).rejects.toMatchObject({ code: 'OC_ERR_CLIENT_USAGE' });
    // Refused before anything was sent: nothing stored.
    await expect(sdkClient(gw.url).send(new HeadObjectCommand({ Bucket: bucket, Key: q.keys[0] }))).rejects.toMatchObject({ $metadata: { httpStatusCode: 404 } });
  });
});

describe('KV events settings', () => {
  it('name the llm-d pool form by a preset, and refuse what they cannot use', () => {
    const env = { OBJECTCACHE_ACCESS_KEY: 'k', OBJECTCACHE_SECRET_KEY: 'secretsecret' };
    const base = ['--data-dir', '/tmp/unused', '--budget', 'kvc=1GiB', '--kv-events', 'tcp://127.0.0.1:5557'];
    expect(loadServeConfig([...base, '--kv-events-topic', 'llm-d'], env).kvEvents?.topic).toBe('kv@pool:objectcache@{model}');
    expect(loadServeConfig([...base, '--kv-events-topic', 'kv@pod-1@{model}'], env).kvEvents?.topic).toBe('kv@pod-1@{model}');
    expect(() => loadServeConfig([...base, '--kv-events-encoding', 'json'], env)).toThrow(/kv-events-encoding/);
  });
});

describe('objectcache kv-events', () => {
  it('prints what the replay socket holds, then what comes, as JSON lines, in either encoding', async () => {
    const bucket = uniqueBucket('kvcli');
    const gw = await gatewayWithEvents('local', bucket, 100, ['--kv-events-encoding', 'array']);
    const bound = gw.gateway.kvEvents as { endpoint: string; replayEndpoint: string };
    const client = testClient(gw, bucket);
    await client.ensureBucket();
    const p = prefix(2);
    await client.putChunks(p.keys.slice(0, 1), p.objects.slice(0, 1), { tokens: p.tokens.slice(0, 1), model: 'org/m' });
    // The first event from the replay socket, the second as it is published.
    const run = runCliAsync(['kv-events', '--endpoint', bound.endpoint, '--replay', bound.replayEndpoint, '--count', '2']);
    const deadline = Date.now() + 20_000;
    while ((await metricValue(gw.gateway.adminUrl, 'objectcache_kv_event_subscribers')) < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 300)); // its subscription reaches the gateway
    await client.putChunks(p.keys.slice(1), p.objects.slice(1), { tokens: p.tokens.slice(1), after: p.keys[0] as string });
    const { status, stdout, stderr } = await run;
    expect(stderr).toBe('');
    expect(status).toBe(0);
    const lines = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines.map((l) => [l['type'], l['block_hashes'], l['parent_block_hash'], l['token_ids'], l['medium']])).toEqual([
      ['BlockStored', [String(blockHash(bucket, p.keys[0] as string))], null, p.tokens[0], 'SHARED'],
      ['BlockStored', [String(blockHash(bucket, p.keys[1] as string))], String(blockHash(bucket, p.keys[0] as string)), p.tokens[1], 'SHARED'],
    ]);
  }, 30_000);
});

describe('KV events of what a reconciliation finds', () => {
  it('publishes a chunk written past the gateway, with the tokens its writer recorded, once the gateway lists the bucket', async () => {
    const bucket = uniqueBucket('kvrec');
    const minio = inject('minio');
    const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    await direct.send(new CreateBucketCommand({ Bucket: bucket }));
    const p = prefix(1);
    await direct.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: p.keys[0],
        Body: p.objects[0] as Uint8Array,
        Metadata: { 'objectcache-tokens': encodeTokens(p.tokens[0] as number[]) as string },
      }),
    );
    // The gateway's first listing runs as it starts: the replay socket holds what it published.
    const gw = await gatewayWithEvents('s3', bucket, 100);
    const bound = gw.gateway.kvEvents as { replayEndpoint: string; firstSequence: bigint };
    const dealer = new Dealer();
    dealer.connect(bound.replayEndpoint);
    open.push({ close: () => dealer.close() });
    const hash = blockHash(bucket, p.keys[0] as string);
    let found: unknown;
    for (let tries = 0; tries < 100 && found === undefined; tries++) {
      const start = Buffer.alloc(8);
      start.writeBigInt64BE(bound.firstSequence);
      await dealer.send(['', start]);
      for (;;) {
        const [, , seq, payload] = (await dealer.receive()) as Buffer[];
        if ((seq as Buffer).readBigInt64BE() === -1n) break;
        const [, events] = decode(payload as Buffer, { useBigInt64: true }) as [number, Record<string, unknown>[]];
        found ??= stored(events, hash);
      }
      if (found === undefined) await new Promise((r) => setTimeout(r, 100));
    }
    expect(found).toMatchObject({ token_ids: p.tokens[0], parent_block_hash: null });
  });
});

describe('KV events with two gateways on one MinIO', () => {
  it('a subscriber of either gateway sees what the other stored and removed', async () => {
    const bucket = uniqueBucket('kv2gw');
    const a = await gatewayWithEvents('s3', bucket, 100);
    const b = await gatewayWithEvents('s3', bucket, 100);
    const subB = await subscribe((b.gateway.kvEvents as { endpoint: string }).endpoint);
    const client = testClient(a, bucket);
    await client.ensureBucket();
    const p = prefix(2);
    await client.putChunks(p.keys, p.objects, { tokens: p.tokens });
    const hashes = p.keys.map((k) => blockHash(bucket, k));
    // Learnt from a's journal, its tokens from a HEAD.
    const all = await subB.until((e) => hashes.every((h) => stored(e, h)), 'BlockStored at the other gateway');
    expect(stored(all, hashes[1] as bigint)).toMatchObject({ token_ids: p.tokens[1], parent_block_hash: hashes[0] });
    await sdkClient(a.url).send(new DeleteObjectCommand({ Bucket: bucket, Key: p.keys[1] }));
    await subB.until((e) => removed(e, hashes[1] as bigint), 'BlockRemoved at the other gateway');
  });
});
