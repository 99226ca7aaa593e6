/**
 * The embedded store on its own: no key can name a path outside the data directory, the index is
 * rebuilt from disk after a restart, a failed write leaves nothing, and one process owns a
 * directory at a time.
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { LocalStore } from '../gateway/stores/embedded/local-store.js';

const attrs = { contentType: 'application/octet-stream', headers: {}, userMeta: {} };
const dirs: string[] = [];

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'objectcache-localstore-'));
  dirs.push(dir);
  return dir;
}

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

async function read(store: LocalStore, bucket: string, key: string): Promise<string> {
  const { meta, handle } = await store.openObject(bucket, key);
  try {
    const buffer = Buffer.alloc(meta.size);
    await handle.read(buffer, 0, meta.size, 0);
    return buffer.toString();
  } finally {
    await handle.close();
  }
}

afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('LocalStore', () => {
  it('keeps every key inside the data directory, path tricks included', async () => {
    const root = tempDir();
    const dataDir = join(root, 'data');
    const store = await LocalStore.open(dataDir);
    await store.createBucket('bucket');
    const tricky = ['../../escape', '/etc/passwd', 'a/../../b', '..%2F..%2Fx', '..\\..\\win', 'a//b', 'a/', './.', '....//....'];
    for (const key of tricky) await store.putObject('bucket', key, Readable.from([Buffer.from(key)]), attrs);
    for (const key of tricky) expect(await read(store, 'bucket', key)).toBe(key);
    expect(readdirSync(root)).toEqual(['data']);
    for (const file of walk(dataDir)) expect(relative(dataDir, file).startsWith('..')).toBe(false);
    await store.close();
  });

  it('rebuilds its index from disk after a restart', async () => {
    const dataDir = tempDir();
    const first = await LocalStore.open(dataDir);
    await first.createBucket('kv');
    for (const key of ['b', 'a/1', 'a/2']) await first.putObject('kv', key, Readable.from([Buffer.from(`v-${key}`)]), { ...attrs, userMeta: { k: key } });
    await first.deleteObject('kv', 'b');
    await first.close();
    const second = await LocalStore.open(dataDir);
    const page = second.list('kv', { prefix: '', delimiter: '', after: undefined, maxKeys: 10 });
    expect(page.contents.map((m) => [m.key, m.userMeta['k']])).toEqual([
      ['a/1', 'a/1'],
      ['a/2', 'a/2'],
    ]);
    expect(await read(second, 'kv', 'a/2')).toBe('v-a/2');
    await second.close();
  });

  it('leaves no object and no staged file when the body stream fails', async () => {
    const dataDir = tempDir();
    const store = await LocalStore.open(dataDir);
    await store.createBucket('kv');
    await store.putObject('kv', 'key', Readable.from([Buffer.from('old value')]), attrs);
    const failing = new Readable({
      read() {
        this.push(Buffer.alloc(1024, 1));
        this.destroy(new Error('client went away'));
      },
    });
    await expect(store.putObject('kv', 'key', failing, attrs)).rejects.toThrow('client went away');
    expect(await read(store, 'kv', 'key')).toBe('old value');
    expect(readdirSync(join(dataDir, '.tmp'))).toEqual([]);
    await store.close();
  });

  it('lets exactly one of concurrent conditional writers commit; the losers fail 412 and leave no staged file', async () => {
    const dataDir = tempDir();
    const store = await LocalStore.open(dataDir);
    await store.createBucket('kv');
    const absent = (current: unknown): boolean => current === undefined;
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) => store.putObject('kv', 'key', Readable.from([Buffer.from(`writer ${i}`)]), { ...attrs, precondition: absent })),
    );
    const winners = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    expect(winners).toHaveLength(1);
    for (const r of results) if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'OC_ERR_STORE_PRECONDITION_FAILED' });
    expect(await read(store, 'kv', 'key')).toBe(`writer ${winners[0]}`);
    expect(readdirSync(join(dataDir, '.tmp'))).toEqual([]);
    await store.close();
  });

  it('keeps the upload of a CompleteMultipartUpload that lost a concurrent condition, so it can be retried', async () => {
    const dataDir = tempDir();
    const store = await LocalStore.open(dataDir);
    await store.createBucket('kv');
    const uploads = await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const uploadId = await store.createUpload('kv', 'key', attrs);
        const part = await store.putPart('kv', 'key', uploadId, 1, Readable.from([Buffer.from(`upload ${i}`)]));
        return { uploadId, etag: part.etag };
      }),
    );
    const absent = (current: unknown): boolean => current === undefined;
    const results = await Promise.allSettled(uploads.map(({ uploadId, etag }) => store.completeUpload('kv', 'key', uploadId, [{ partNumber: 1, etag }], absent)));
    const winners = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    expect(winners).toHaveLength(1);
    expect(await read(store, 'kv', 'key')).toBe(`upload ${winners[0]}`);
    const losers = uploads.filter((_, i) => i !== winners[0]).map((u) => u.uploadId);
    expect(
      store
        .listUploads('kv', '')
        .map((u) => u.uploadId)
        .sort(),
    ).toEqual(losers.sort());
    expect(readdirSync(join(dataDir, '.tmp'))).toEqual([]);
    await store.close();
  });

  it('refuses a data directory another live process holds', async () => {
    const dataDir = tempDir();
    const store = await LocalStore.open(dataDir);
    const { writeFileSync } = await import('node:fs');
    writeFileSync(join(dataDir, '.lock'), String(process.ppid));
    await expect(LocalStore.open(dataDir)).rejects.toMatchObject({ code: 'OC_ERR_STORE_IO' });
    await store.close();
  });
});
