/**
 * The embedded store against one tenant's bad upload and against damaged files: user metadata is
 * held to S3's limits (400 MetadataTooLarge over 2 KB, as MinIO answers; names and values a
 * header can carry), no write can commit a footer the store cannot read back, and a file that
 * cannot be read at start-up is moved under <dataDir>/damaged/ and reported while the store
 * opens and serves everything else.
 */
import {
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListPartsCommand,
  PutObjectCommand,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { createPresignedPost } from '@aws-sdk/s3-presigned-post';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { LocalStore } from '../gateway/stores/embedded/local-store.js';
import { encodeFooter, MAX_FOOTER_BYTES, objectRelativePath, readFooter } from '../gateway/stores/embedded/object-file.js';
import { openBackend } from '../gateway/s3/backend.js';
import { createLogger } from '../gateway/common/logger.js';
import { checkStoredMetadata } from '../gateway/s3/metadata.js';
import { MAX_USER_METADATA_BYTES } from '../schemas/kv-tokens.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { COMPAT_TARGETS, compatSuite, sdkClient, startTestGateway } from './helpers/gateway.js';

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'objectcache-hardening-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** The S3 answer to a request: 200, or the error's status and S3 code. */
async function answer(promise: Promise<unknown>): Promise<{ status: number; code?: string }> {
  try {
    await promise;
    return { status: 200 };
  } catch (error) {
    const e = error as S3ServiceException;
    return { status: e.$metadata?.httpStatusCode ?? -1, code: e.name };
  }
}

function thrown(fn: () => unknown): ObjectCacheError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ObjectCacheError);
    return error as ObjectCacheError;
  }
  throw new Error('expected a throw');
}

/** `count` metadata entries of `bytes` value bytes each. */
function metadata(count: number, bytes: number): Record<string, string> {
  return Object.fromEntries(Array.from({ length: count }, (_, i) => [`m${i}`, String(i % 10).repeat(bytes)]));
}

describe('checkStoredMetadata', () => {
  it('takes user metadata up to 2 KB of names and values, refuses one byte more as MetadataTooLarge', () => {
    const name = 'n';
    checkStoredMetadata({}, { [name]: 'v'.repeat(MAX_USER_METADATA_BYTES - name.length) });
    const error = thrown(() => checkStoredMetadata({}, { [name]: 'v'.repeat(MAX_USER_METADATA_BYTES - name.length + 1) }));
    expect([error.code, error.status, error.s3Code]).toEqual(['OC_ERR_REQUEST_METADATA_TOO_LARGE', 400, 'MetadataTooLarge']);
    // The reported upload: 20 fields of 60 KiB.
    expect(thrown(() => checkStoredMetadata({}, metadata(20, 60 * 1024))).code).toBe('OC_ERR_REQUEST_METADATA_TOO_LARGE');
  });

  it('refuses raw non-ASCII bytes in a value (as every header the gateway takes), whichever way they arrived', () => {
    const euro = Buffer.from('€', 'utf8').toString('latin1'); // its 3 UTF-8 bytes, as Node parses a header
    for (const value of [euro, 'caf\xe9', '\u00ff']) {
      const error = thrown(() => checkStoredMetadata({}, { e: value }));
      expect(error.code).toBe('OC_ERR_REQUEST_INVALID_ARGUMENT');
      expect(error.message).toContain('RFC 2047');
    }
  });

  it('bounds the stored headers and metadata together', () => {
    checkStoredMetadata({ 'cache-control': 'x'.repeat(4000) }, metadata(1, 1000));
    expect(thrown(() => checkStoredMetadata({ 'content-disposition': 'x'.repeat(9000) }, {})).code).toBe('OC_ERR_REQUEST_METADATA_TOO_LARGE');
  });

  it('refuses names that are not header tokens and values with control characters, naming the field', () => {
    for (const bad of ['has space', 'colon:', 'new\nline', 'nul\0', 'é']) {
      const error = thrown(() => checkStoredMetadata({}, { [bad]: 'v' }));
      expect(error.code).toBe('OC_ERR_REQUEST_INVALID_ARGUMENT');
      expect(error.message).toContain(JSON.stringify(`x-amz-meta-${bad}`));
    }
    for (const bad of ['a\r\nset-cookie: x', 'line\nfeed', 'bell\x07', 'del\x7f', '日本']) {
      const error = thrown(() => checkStoredMetadata({}, { note: bad }));
      expect(error.code).toBe('OC_ERR_REQUEST_INVALID_ARGUMENT');
      expect(error.message).toContain('"x-amz-meta-note"');
    }
    expect(thrown(() => checkStoredMetadata({ 'cache-control': 'no\rcache' }, {})).message).toContain('"cache-control"');
    checkStoredMetadata({ 'content-type': 'text/plain; charset=utf-8' }, { tabbed: 'a\tb', 'dash-and.dot_x': 'ok', encoded: '=?UTF-8?B?Y2Fmw6k=?=' });
  });
});

describe.each(COMPAT_TARGETS)('user metadata over 2 KB (%s)', (target) => {
  const suite = compatSuite(target, 'meta', async (s3, bucket) => {
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'source', Body: 'source bytes' }));
  });
  const { bucket } = suite;
  const tooLarge = metadata(3, 1000);
  const exists = async (key: string): Promise<boolean> => (await answer(suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key })))).status === 200;

  it('PutObject: 400 MetadataTooLarge and nothing stored; 1.5 KB is stored and read back byte-exact', async () => {
    expect(await answer(suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'big', Body: 'x', Metadata: tooLarge })))).toEqual({ status: 400, code: 'MetadataTooLarge' });
    expect(await exists('big')).toBe(false);
    const fits = metadata(3, 500);
    expect(await answer(suite.s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'fits', Body: 'x', Metadata: fits })))).toEqual({ status: 200 });
    expect((await suite.s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 'fits' }))).Metadata).toEqual(fits);
  });

  it('CreateMultipartUpload and CopyObject with REPLACE: 400 MetadataTooLarge, the destination untouched', async () => {
    expect(await answer(suite.s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'mp', Metadata: tooLarge })))).toEqual({ status: 400, code: 'MetadataTooLarge' });
    const copy = new CopyObjectCommand({ Bucket: bucket, Key: 'copy', CopySource: `${bucket}/source`, MetadataDirective: 'REPLACE', Metadata: tooLarge });
    expect(await answer(suite.s3.send(copy))).toEqual({ status: 400, code: 'MetadataTooLarge' });
    expect(await exists('copy')).toBe(false);
  });
});

describe('the footer limit at the write (embedded store)', () => {
  const attrs = { contentType: 'application/octet-stream', headers: {} };

  it('encodeFooter refuses a footer the reader would reject', () => {
    const meta = { key: 'k', size: 0, etag: 'e', lastModified: 0, contentType: '', headers: {}, userMeta: { big: 'x'.repeat(MAX_FOOTER_BYTES) } };
    expect(thrown(() => encodeFooter(meta)).code).toBe('OC_ERR_REQUEST_METADATA_TOO_LARGE');
  });

  it('a PUT or multipart upload whose metadata would not fit fails before anything is committed, and the store reopens', async () => {
    const dataDir = tempDir();
    const store = await LocalStore.open(dataDir);
    await store.createBucket('kv');
    await store.putObject('kv', 'kept', Readable.from([Buffer.from('kept bytes')]), { ...attrs, userMeta: {} });
    const huge = metadata(20, 60 * 1024);
    let bodyRead = false;
    const body = new Readable({
      read() {
        bodyRead = true;
        this.push(null);
      },
    });
    await expect(store.putObject('kv', 'huge', body, { ...attrs, userMeta: huge })).rejects.toMatchObject({ code: 'OC_ERR_REQUEST_METADATA_TOO_LARGE' });
    expect(bodyRead).toBe(false);
    await expect(store.createUpload('kv', 'huge', { ...attrs, userMeta: huge })).rejects.toMatchObject({ code: 'OC_ERR_REQUEST_METADATA_TOO_LARGE' });
    expect(store.listUploads('kv', '')).toEqual([]);
    expect(() => store.headObject('kv', 'huge')).toThrow();
    expect(readdirSync(join(dataDir, '.tmp'))).toEqual([]);
    await store.close();
    const reopened = await LocalStore.open(dataDir);
    expect(reopened.damaged).toEqual([]);
    expect(reopened.headObject('kv', 'kept').size).toBe(10);
    await reopened.close();
  });

  it('the reported form upload (20 x-amz-meta-* fields of 60 KiB) is refused, and the gateway restarts and serves', async () => {
    const dataDir = tempDir();
    let gw = await startTestGateway({ backend: 'local', dataDir });
    let s3 = sdkClient(gw.url);
    try {
      await s3.send(new CreateBucketCommand({ Bucket: 'forms' }));
      await s3.send(new PutObjectCommand({ Bucket: 'forms', Key: 'before', Body: 'before bytes' }));
      const names = Array.from({ length: 20 }, (_, i) => `x-amz-meta-f${i}`);
      const { url, fields } = await createPresignedPost(s3, {
        Bucket: 'forms',
        Key: 'uploads/${filename}',
        Conditions: [['starts-with', '$key', 'uploads/'], ...names.map((name): ['starts-with', string, string] => ['starts-with', `$${name}`, ''])],
        Expires: 300,
      });
      const form = new FormData();
      for (const [name, value] of Object.entries(fields)) form.append(name, value);
      for (const name of names) form.append(name, 'v'.repeat(60 * 1024));
      form.append('file', new Blob([Buffer.from('file bytes')]), 'bomb.bin');
      const res = await fetch(url, { method: 'POST', body: form });
      const text = await res.text();
      // Refused before the file is stored: by the form's field limit (--max-form-fields-bytes,
      // MalformedPOSTRequest) or, where that is raised, by the metadata limit (MetadataTooLarge).
      expect(res.status, text).toBe(400);
      expect(text).toMatch(/<Code>(MetadataTooLarge|MalformedPOSTRequest)<\/Code>/);
      expect(await answer(s3.send(new HeadObjectCommand({ Bucket: 'forms', Key: 'uploads/bomb.bin' })))).toMatchObject({ status: 404 });
    } finally {
      s3.destroy();
      await gw.close();
    }
    gw = await startTestGateway({ backend: 'local', dataDir });
    s3 = sdkClient(gw.url);
    try {
      expect(await (await s3.send(new GetObjectCommand({ Bucket: 'forms', Key: 'before' }))).Body?.transformToString()).toBe('before bytes');
    } finally {
      s3.destroy();
      await gw.close();
    }
  });
});

describe('damaged files at start-up (embedded store)', () => {
  /** Rewrites the footer JSON of an object file in place through `edit` (same length). */
  function editFooter(path: string, edit: (json: string) => string): void {
    const bytes = readFileSync(path);
    const length = bytes.readUInt32BE(bytes.length - 8);
    const start = bytes.length - 8 - length;
    const json = bytes.subarray(start, start + length).toString('utf8');
    const edited = Buffer.from(edit(json), 'utf8');
    expect(edited.length).toBe(length);
    edited.copy(bytes, start);
    writeFileSync(path, bytes);
  }

  it('readFooter names the file when the footer is not JSON (an OC_ERR_STORE_IO, not a SyntaxError)', async () => {
    const dir = tempDir();
    const path = join(dir, 'object');
    const footer = encodeFooter({ key: 'k', size: 3, etag: 'e', lastModified: 0, contentType: '', headers: {}, userMeta: {} });
    footer[0] = 0x78; // '{' -> 'x'
    writeFileSync(path, Buffer.concat([Buffer.from('abc'), footer]));
    const fh = await open(path, 'r');
    try {
      await expect(readFooter(fh, path)).rejects.toSatisfy(
        (e: unknown) => e instanceof ObjectCacheError && e.code === 'OC_ERR_STORE_IO' && e.message.includes(path) && /JSON/.test(e.message),
      );
    } finally {
      await fh.close();
    }
  });

  it('moves each unreadable object or part file under damaged/, reports it, and serves everything else', async () => {
    const dataDir = tempDir();
    const bucket = 'damaged-kv';
    const keys = ['good/1', 'good/2', 'truncated', 'no-footer', 'bad-json', 'wrong-size', 'copied-from', 'huge-length'];
    let gw = await startTestGateway({ backend: 'local', dataDir });
    let s3 = sdkClient(gw.url);
    let uploadId = '';
    try {
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
      for (const key of keys) await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: `bytes of ${key}`.padEnd(20, '.') }));
      uploadId = (await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: 'upload' }))).UploadId as string;
      await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'upload', UploadId: uploadId, PartNumber: 1, Body: 'part one' }));
      await s3.send(new UploadPartCommand({ Bucket: bucket, Key: 'upload', UploadId: uploadId, PartNumber: 2, Body: 'part two' }));
    } finally {
      s3.destroy();
      await gw.close();
    }
    const file = (key: string): string => join(dataDir, objectRelativePath(bucket, key));
    truncateSync(file('truncated'), 5);
    const noFooter = readFileSync(file('no-footer'));
    noFooter.write('XXXX', noFooter.length - 4, 'latin1');
    writeFileSync(file('no-footer'), noFooter);
    editFooter(file('bad-json'), (json) => `x${json.slice(1)}`);
    editFooter(file('wrong-size'), (json) => json.replace('"size":20', '"size":21'));
    const hugeLength = readFileSync(file('huge-length'));
    hugeLength.writeUInt32BE(0xfffffff0, hugeLength.length - 8);
    writeFileSync(file('huge-length'), hugeLength);
    // A whole object file under another key's name (a copy made by hand): listed under one key, read from the other's file.
    writeFileSync(file('good/2').replace(/[0-9a-f]{64}$/, 'f'.repeat(64)), readFileSync(file('copied-from')));
    const misplaced = file('good/2').replace(/[0-9a-f]{64}$/, 'f'.repeat(64));
    const part = join(dataDir, 'buckets', bucket, 'uploads', uploadId, 'part-2');
    truncateSync(part, 3);
    const damaged = ['truncated', 'no-footer', 'bad-json', 'wrong-size', 'huge-length'].map(file).concat(misplaced, part);

    // The report: one warning per file, with its path, from the backend the gateway opens.
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    const backend = await openBackend({ kind: 'local', dataDir }, undefined, createLogger('warn', sink));
    await backend.close();
    const warned = lines.filter((line) => line['level'] === 'warn');
    expect(warned.map((line) => line['file']).sort()).toEqual([...damaged].sort());
    for (const line of warned) {
      expect(typeof line['reason']).toBe('string');
      const movedTo = line['movedTo'] as string;
      // Kept under damaged/<start-up time>/ at the path it had, so moving it back restores it.
      expect(relative(join(dataDir, 'damaged'), movedTo)).toMatch(new RegExp(`^[^/]+/${relative(dataDir, line['file'] as string).replaceAll('.', '\\.')}$`));
      expect(existsSync(movedTo)).toBe(true);
      expect(existsSync(line['file'] as string)).toBe(false);
    }
    const reasons = Object.fromEntries(warned.map((line) => [line['file'], line['reason']]));
    expect(reasons[file('bad-json')]).toMatch(/JSON/);
    expect(reasons[file('truncated')]).toMatch(/truncated/);
    expect(reasons[misplaced]).toMatch(/another file name/);

    // The gateway starts on the directory and serves the rest, byte-exact; the damaged keys are gone.
    gw = await startTestGateway({ backend: 'local', dataDir });
    s3 = sdkClient(gw.url);
    try {
      for (const key of ['good/1', 'good/2', 'copied-from']) {
        expect(await (await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body?.transformToString()).toBe(`bytes of ${key}`.padEnd(20, '.'));
      }
      for (const key of ['truncated', 'bad-json', 'huge-length'])
        expect(await answer(s3.send(new GetObjectCommand({ Bucket: bucket, Key: key })))).toEqual({ status: 404, code: 'NoSuchKey' });
      // The upload keeps its readable part; the damaged one is simply missing (uploaded again).
      const parts = await s3.send(new ListPartsCommand({ Bucket: bucket, Key: 'upload', UploadId: uploadId }));
      expect(parts.Parts?.map((p) => p.PartNumber)).toEqual([1]);
    } finally {
      s3.destroy();
      await gw.close();
    }
  });
});
