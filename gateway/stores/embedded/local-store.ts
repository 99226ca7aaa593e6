// Over 600 lines: one class, the embedded store, whose object, listing and multipart paths share its file layout and locks.
/**
 * The embedded store: the S3 subset ObjectCache needs, on a local data directory, so a fresh
 * checkout serves with no other program (docs/deployment.md, The embedded store).
 *
 * Layout under the data directory:
 *   .lock                                  pid of the gateway that owns the directory
 *   .tmp/                                  staged writes (emptied at start-up)
 *   buckets/<bucket>/bucket.json           creation time
 *   buckets/<bucket>/objects/<hh>/<sha256> one object file (see object-file.ts)
 *   buckets/<bucket>/uploads/<id>/         upload.json and part-<n> files of a multipart upload
 *   damaged/<start-up time>/buckets/...    files found unreadable at a start-up, moved aside under
 *                                          the path they had (see `#moveAside`)
 *
 * File names come from validated bucket names, SHA-256 of keys, and upload ids the store made
 * itself, so no key (`..`, absolute paths, NUL, encoded separators) can name a path outside the
 * directory, and every key, `a//b` and `a/` included, has its own file. Keys are listed from an
 * in-memory index rebuilt from the object footers at start-up. One gateway owns a directory.
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants as fsConstants, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, writeFile, type FileHandle } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { ObjectCacheError } from '../../../schemas/errors.js';
import { KeyIndex, type ListOptions, type ListPage } from './key-index.js';
import {
  commitStagedSync,
  discardStaged,
  encodeFooter,
  objectRelativePath,
  parentOf,
  readFooter,
  stageFile,
  syncDirectory,
  type ChecksumType,
  type ObjectMeta,
  type StagedFile,
} from './object-file.js';

export { objectRelativePath } from './object-file.js';

export type { ObjectMeta } from './object-file.js';

/** S3: every part but the last must be at least 5 MiB. */
export const MIN_PART_BYTES = 5 * 1024 * 1024;
export const MAX_PART_NUMBER = 10_000;

export interface ObjectAttributes {
  readonly contentType: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly userMeta: Readonly<Record<string, string>>;
}

export interface PutOptions extends ObjectAttributes {
  /** Read after the body has been consumed and verified (trailer checksums arrive last). */
  readonly checksum?: () => { algorithm: string; value: string } | undefined;
  /**
   * A conditional write (If-Match / If-None-Match): given the object the key holds now (or
   * undefined), true when the write may replace it. Checked before the body is read and again at
   * the moment of the commit, so a failed condition never changes the stored object.
   */
  readonly precondition?: WritePrecondition | undefined;
}

export type WritePrecondition = (current: ObjectMeta | undefined) => boolean;

/** A file found unreadable when the store opened, and moved out of the way. */
export interface DamagedFile {
  /** Where it was (absolute). */
  readonly path: string;
  /** Where it is now, under `<dataDir>/damaged/` (absolute). */
  readonly movedTo: string;
  /** Why it could not be read. */
  readonly reason: string;
}

export interface OpenObject {
  readonly meta: ObjectMeta;
  readonly handle: FileHandle;
}

interface PartInfo {
  readonly partNumber: number;
  readonly size: number;
  /** Hex MD5 of the part. */
  readonly etag: string;
  readonly lastModified: number;
  /** The part's checksum (base64) in the upload's algorithm, when the upload has one. */
  readonly checksum?: string;
}

/** The checksum an upload was created with (x-amz-checksum-algorithm and -type). */
export interface UploadChecksum {
  readonly algorithm: string;
  readonly type: ChecksumType;
}

interface UploadInfo {
  readonly uploadId: string;
  readonly bucket: string;
  readonly key: string;
  readonly initiated: number;
  readonly attributes: ObjectAttributes;
  readonly checksum?: UploadChecksum;
  readonly parts: Map<number, PartInfo>;
}

/**
 * What CompleteMultipartUpload gets to compute the object's checksum: for a COMPOSITE one, the
 * checksum of the listed parts' checksums (`hash`); for a FULL_OBJECT one, a checksum fed every
 * byte of the object as it is assembled (`full`).
 */
export interface CompleteChecksums {
  readonly composite: (partChecksums: readonly Buffer[]) => Promise<string>;
  readonly full: () => { update(bytes: Uint8Array): void; digestBase64(): Promise<string> };
}

interface BucketState {
  readonly name: string;
  readonly created: number;
  readonly index: KeyIndex<ObjectMeta>;
  readonly uploads: Map<string, UploadInfo>;
}

const UPLOAD_ID = /^[0-9a-f]{32}$/;

function isNotFound(error: unknown): boolean {
  return (error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
}

function noSuchBucket(bucket: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_STORE_NO_SUCH_BUCKET', 'The specified bucket does not exist', { details: { BucketName: bucket } });
}

function noSuchKey(bucket: string, key: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_STORE_NO_SUCH_KEY', 'The specified key does not exist.', { details: { BucketName: bucket, Key: key } });
}

function noSuchUpload(uploadId: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_STORE_NO_SUCH_UPLOAD', 'The specified multipart upload does not exist.', { details: { UploadId: uploadId } });
}

/**
 * Fails (OC_ERR_REQUEST_METADATA_TOO_LARGE) before a body is read when `attributes` would make a
 * footer over the store's limit (object-file.ts encodeFooter, which checks again at the write),
 * counting the largest size, ETag, checksum and, for a multipart upload, part list it could get.
 */
function assertFooterFits(key: string, attributes: ObjectAttributes, multipart: boolean): void {
  const largest = Number.MAX_SAFE_INTEGER;
  encodeFooter({
    key,
    size: largest,
    etag: `${'0'.repeat(32)}-${MAX_PART_NUMBER}`,
    lastModified: largest,
    contentType: attributes.contentType,
    headers: attributes.headers,
    userMeta: attributes.userMeta,
    checksum: { algorithm: 'sha256', value: '0'.repeat(44) },
    ...(multipart ? { parts: new Array<number>(MAX_PART_NUMBER).fill(largest) } : {}),
  });
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class LocalStore {
  readonly dataDir: string;
  readonly #buckets = new Map<string, BucketState>();
  readonly #tempDir: string;
  readonly #damaged: DamagedFile[] = [];
  #closed = false;

  private constructor(dataDir: string) {
    this.dataDir = dataDir;
    this.#tempDir = join(dataDir, '.tmp');
  }

  /**
   * Files found unreadable when the store opened and moved aside: the store serves everything
   * else, and the caller reports these (gateway/s3/backend.ts logs each one).
   */
  get damaged(): readonly DamagedFile[] {
    return this.#damaged;
  }

  /** Opens (creating if needed) the data directory, takes its lock and rebuilds the index. */
  static async open(dataDir: string): Promise<LocalStore> {
    const store = new LocalStore(resolve(dataDir));
    await mkdir(join(store.dataDir, 'buckets'), { recursive: true });
    store.#lock();
    try {
      await rm(store.#tempDir, { recursive: true, force: true });
      await mkdir(store.#tempDir, { recursive: true });
      await store.#load();
    } catch (error) {
      store.#unlock();
      throw error;
    }
    return store;
  }

  #lock(): void {
    const lockPath = join(this.dataDir, '.lock');
    try {
      writeFileSync(lockPath, String(process.pid), { flag: 'wx' });
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const owner = Number(readFileSync(lockPath, 'utf8').trim());
    if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && processAlive(owner)) {
      throw new ObjectCacheError('OC_ERR_STORE_IO', `The data directory ${this.dataDir} is in use by process ${owner}`);
    }
    writeFileSync(lockPath, String(process.pid));
  }

  #unlock(): void {
    try {
      unlinkSync(join(this.dataDir, '.lock'));
    } catch {
      // Already gone: nothing to release.
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#unlock();
  }

  async #load(): Promise<void> {
    const root = join(this.dataDir, 'buckets');
    // One folder per start-up, so files moved aside by different start-ups never collide.
    const damagedRoot = join(this.dataDir, 'damaged', new Date().toISOString().replaceAll(':', '-'));
    for (const name of await readdir(root)) {
      let created = Date.now();
      const bucketFile = join(root, name, 'bucket.json');
      try {
        created = (JSON.parse(await readFile(bucketFile, 'utf8')) as { created: number }).created;
      } catch (error) {
        if (isNotFound(error)) continue; // A bucket directory whose creation never committed.
        throw new ObjectCacheError('OC_ERR_STORE_IO', `Cannot read ${bucketFile}: ${(error as Error).message}`, { cause: error });
      }
      const state: BucketState = { name, created, index: new KeyIndex(), uploads: new Map() };
      this.#buckets.set(name, state);
      const objects = join(root, name, 'objects');
      for (const shard of await readdir(objects).catch(() => [] as string[])) {
        for (const file of await this.#entries(join(objects, shard), damagedRoot, 'an object shard directory')) {
          const path = join(objects, shard, file);
          const meta = await this.#readFooterOrMoveAside(path, damagedRoot);
          if (meta === undefined) continue;
          // A footer naming a key whose file is elsewhere (a copied or renamed file) would be
          // listed under one key and read from another's file.
          if (path !== this.#path(name, meta.key)) {
            await this.#moveAside(path, damagedRoot, 'its footer names a key that is stored under another file name');
            continue;
          }
          state.index.set(meta.key, meta);
        }
      }
      const uploads = join(root, name, 'uploads');
      for (const uploadId of await readdir(uploads).catch(() => [] as string[])) {
        if (!UPLOAD_ID.test(uploadId)) continue;
        const dir = join(uploads, uploadId);
        let info: Omit<UploadInfo, 'parts'>;
        try {
          info = JSON.parse(await readFile(join(dir, 'upload.json'), 'utf8')) as Omit<UploadInfo, 'parts'>;
        } catch {
          await rm(dir, { recursive: true, force: true });
          continue;
        }
        const parts = new Map<number, PartInfo>();
        for (const file of await readdir(dir)) {
          const m = /^part-(\d+)$/.exec(file);
          if (!m) continue;
          // A damaged part is moved aside: the upload stays, and the client uploads that part again.
          const meta = await this.#readFooterOrMoveAside(join(dir, file), damagedRoot);
          if (meta === undefined) continue;
          const partNumber = Number(m[1]);
          parts.set(partNumber, { partNumber, size: meta.size, etag: meta.etag, lastModified: meta.lastModified, ...(meta.checksum ? { checksum: meta.checksum.value } : {}) });
        }
        state.uploads.set(uploadId, { ...info, parts });
      }
    }
  }

  /** The names in `dir`; when `dir` is not a directory, it is moved aside and there are none. */
  async #entries(dir: string, damagedRoot: string, what: string): Promise<string[]> {
    try {
      return await readdir(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOTDIR') throw new ObjectCacheError('OC_ERR_STORE_IO', `Cannot list ${dir}: ${(error as Error).message}`, { cause: error });
      await this.#moveAside(dir, damagedRoot, `it is not ${what}`);
      return [];
    }
  }

  /**
   * The footer of the object or part file at `path`, or undefined when the file is damaged (not a
   * whole object file: see readFooter), in which case it has been moved aside. Failures of the file
   * system itself (permissions, I/O errors) still stop the start-up, naming the file: moving
   * files aside would hide a problem of the disk, not of one file.
   */
  async #readFooterOrMoveAside(path: string, damagedRoot: string): Promise<ObjectMeta | undefined> {
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
    } catch (error) {
      throw new ObjectCacheError('OC_ERR_STORE_IO', `Cannot open ${path}: ${(error as Error).message}`, { cause: error });
    }
    let problem: string;
    try {
      return await readFooter(fh);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EISDIR') {
        problem = 'it is a directory, not an object file';
      } else if (error instanceof ObjectCacheError && error.code === 'OC_ERR_STORE_IO') {
        problem = error.message;
      } else {
        throw new ObjectCacheError('OC_ERR_STORE_IO', `Cannot read ${path}: ${(error as Error).message}`, { cause: error });
      }
    } finally {
      await fh.close();
    }
    await this.#moveAside(path, damagedRoot, problem);
    return undefined;
  }

  /**
   * Moves a damaged file (or entry) to `<dataDir>/damaged/<start-up time>/<its path under the data
   * directory>`: kept for inspection or recovery (moving it back restores it), out of the store's
   * way, and recorded in {@link damaged}.
   */
  async #moveAside(path: string, damagedRoot: string, reason: string): Promise<void> {
    const movedTo = join(damagedRoot, relative(this.dataDir, path));
    try {
      await mkdir(dirname(movedTo), { recursive: true });
      await rename(path, movedTo);
    } catch (error) {
      throw new ObjectCacheError('OC_ERR_STORE_IO', `Cannot move the damaged file ${path} (${reason}) aside to ${movedTo}: ${(error as Error).message}`, { cause: error });
    }
    this.#damaged.push({ path, movedTo, reason });
  }

  #bucket(name: string): BucketState {
    const state = this.#buckets.get(name);
    if (!state) throw noSuchBucket(name);
    return state;
  }

  #path(bucket: string, key: string): string {
    return join(this.dataDir, objectRelativePath(bucket, key));
  }

  #uploadDir(bucket: string, uploadId: string): string {
    return join(this.dataDir, 'buckets', bucket, 'uploads', uploadId);
  }

  // ---- buckets ----

  listBuckets(): { name: string; created: number }[] {
    return [...this.#buckets.values()].map((b) => ({ name: b.name, created: b.created })).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  hasBucket(name: string): boolean {
    return this.#buckets.has(name);
  }

  async createBucket(name: string): Promise<void> {
    if (this.#buckets.has(name)) {
      throw new ObjectCacheError('OC_ERR_STORE_BUCKET_EXISTS', 'Your previous request to create the named bucket succeeded and you already own it.', {
        details: { BucketName: name },
      });
    }
    const dir = join(this.dataDir, 'buckets', name);
    await mkdir(join(dir, 'objects'), { recursive: true });
    await mkdir(join(dir, 'uploads'), { recursive: true });
    const created = Date.now();
    await writeFile(join(dir, 'bucket.json.tmp'), JSON.stringify({ created }));
    if (this.#buckets.has(name)) throw new ObjectCacheError('OC_ERR_STORE_BUCKET_EXISTS', 'The bucket already exists', { details: { BucketName: name } });
    renameSync(join(dir, 'bucket.json.tmp'), join(dir, 'bucket.json'));
    this.#buckets.set(name, { name, created, index: new KeyIndex(), uploads: new Map() });
    await syncDirectory(dir);
  }

  async deleteBucket(name: string): Promise<void> {
    const state = this.#bucket(name);
    // Open multipart uploads do not keep a bucket alive: they go with it (as MinIO does).
    if (state.index.size > 0) {
      throw new ObjectCacheError('OC_ERR_STORE_BUCKET_NOT_EMPTY', 'The bucket you tried to delete is not empty', { details: { BucketName: name } });
    }
    this.#buckets.delete(name);
    unlinkSync(join(this.dataDir, 'buckets', name, 'bucket.json'));
    await rm(join(this.dataDir, 'buckets', name), { recursive: true, force: true });
  }

  // ---- objects ----

  /** Streams `body` into a new object; resolves after the object is durable and visible. */
  async putObject(bucket: string, key: string, body: Readable, options: PutOptions): Promise<ObjectMeta> {
    if (options.precondition && !options.precondition(this.#bucket(bucket).index.get(key))) throw this.#preconditionFailed();
    assertFooterFits(key, options, false);
    let meta: ObjectMeta | undefined;
    const staged = await stageFile(this.#tempDir, body, ({ size, md5Hex }) => {
      const checksum = options.checksum?.();
      meta = {
        key,
        size,
        etag: md5Hex,
        lastModified: Date.now(),
        contentType: options.contentType,
        headers: options.headers,
        userMeta: options.userMeta,
        ...(checksum ? { checksum } : {}),
      };
      return meta;
    });
    return this.#commitObject(bucket, key, staged, meta as unknown as ObjectMeta, options.precondition);
  }

  #preconditionFailed(): ObjectCacheError {
    return new ObjectCacheError('OC_ERR_STORE_PRECONDITION_FAILED', 'At least one of the pre-conditions you specified did not hold');
  }

  /**
   * Makes `staged` the object `key` holds. Only the directory is made before the commit: from the
   * precondition's check to the rename and the index update nothing awaits, so the check sees the
   * object the commit replaces and, of concurrent conditional writers, exactly one can pass
   * (If-None-Match: * or If-Match on one ETag). `claim` runs in the same tick, just before the
   * rename, and may refuse the commit by throwing. On any failure the staged file is removed.
   */
  async #commitObject(bucket: string, key: string, staged: StagedFile, meta: ObjectMeta, precondition: WritePrecondition | undefined, claim?: () => void): Promise<ObjectMeta> {
    const finalPath = this.#path(bucket, key);
    try {
      await mkdir(parentOf(finalPath), { recursive: true });
      const state = this.#buckets.get(bucket);
      if (!state) throw noSuchBucket(bucket);
      if (precondition && !precondition(state.index.get(key))) throw this.#preconditionFailed();
      claim?.();
      commitStagedSync(staged, finalPath);
      state.index.set(key, meta);
    } catch (error) {
      await discardStaged(staged);
      throw error;
    }
    await syncDirectory(parentOf(finalPath));
    return meta;
  }

  /** Opens an object for reading; the caller closes `handle`. */
  async openObject(bucket: string, key: string): Promise<OpenObject> {
    this.#bucket(bucket);
    let handle: FileHandle;
    try {
      handle = await open(this.#path(bucket, key), fsConstants.O_RDONLY);
    } catch (error) {
      if (isNotFound(error)) throw noSuchKey(bucket, key);
      throw new ObjectCacheError('OC_ERR_STORE_IO', 'Cannot open the object file', { cause: error });
    }
    try {
      const meta = await readFooter(handle, objectRelativePath(bucket, key));
      if (meta.key !== key) throw new ObjectCacheError('OC_ERR_STORE_IO', 'The object file belongs to another key');
      return { meta, handle };
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  headObject(bucket: string, key: string): ObjectMeta {
    const meta = this.#bucket(bucket).index.get(key);
    if (!meta) throw noSuchKey(bucket, key);
    return meta;
  }

  /**
   * Deletes an object; deleting a missing key succeeds, as in S3. With `ifEtag` (unquoted), only
   * that version: another one is left alone and the call fails with a precondition failure
   * (checked and unlinked in one tick, so no write can commit between them).
   */
  async deleteObject(bucket: string, key: string, ifEtag?: string): Promise<void> {
    const state = this.#bucket(bucket);
    if (ifEtag !== undefined) {
      const current = state.index.get(key);
      if (current !== undefined && current.etag !== ifEtag) throw this.#preconditionFailed();
    }
    const path = this.#path(bucket, key);
    try {
      unlinkSync(path);
    } catch (error) {
      if (!isNotFound(error)) throw new ObjectCacheError('OC_ERR_STORE_IO', 'Cannot delete the object file', { cause: error });
    }
    state.index.delete(key);
  }

  list(bucket: string, options: ListOptions): ListPage<ObjectMeta> {
    return this.#bucket(bucket).index.list(options);
  }

  // ---- multipart uploads ----

  async createUpload(bucket: string, key: string, attributes: ObjectAttributes, checksum?: UploadChecksum): Promise<string> {
    const state = this.#bucket(bucket);
    assertFooterFits(key, attributes, true);
    const uploadId = randomBytes(16).toString('hex');
    const dir = this.#uploadDir(bucket, uploadId);
    await mkdir(dir, { recursive: true });
    const info = { uploadId, bucket, key, initiated: Date.now(), attributes, ...(checksum ? { checksum } : {}) };
    await writeFile(join(dir, 'upload.json'), JSON.stringify(info));
    state.uploads.set(uploadId, { ...info, parts: new Map() });
    return uploadId;
  }

  #upload(bucket: string, key: string, uploadId: string): UploadInfo {
    const state = this.#bucket(bucket);
    const info = UPLOAD_ID.test(uploadId) ? state.uploads.get(uploadId) : undefined;
    if (!info || info.key !== key) throw noSuchUpload(uploadId);
    return info;
  }

  /** The checksum `uploadId` was created with, if any. */
  uploadChecksum(bucket: string, key: string, uploadId: string): UploadChecksum | undefined {
    return this.#upload(bucket, key, uploadId).checksum;
  }

  /** Stores a part; `checksum` (read once the body has ended) is its checksum in the upload's algorithm. */
  async putPart(
    bucket: string,
    key: string,
    uploadId: string,
    partNumber: number,
    body: Readable | AsyncIterable<Uint8Array>,
    checksum?: () => string | undefined,
  ): Promise<PartInfo> {
    const upload = this.#upload(bucket, key, uploadId);
    let part: PartInfo | undefined;
    const staged = await stageFile(this.#tempDir, body, ({ size, md5Hex }) => {
      const value = checksum?.();
      part = { partNumber, size, etag: md5Hex, lastModified: Date.now(), ...(value !== undefined ? { checksum: value } : {}) };
      const recorded = value !== undefined && upload.checksum ? { checksum: { algorithm: upload.checksum.algorithm, value } } : {};
      return { key: String(partNumber), size, etag: md5Hex, lastModified: part.lastModified, contentType: '', headers: {}, userMeta: {}, ...recorded };
    });
    const info = this.#buckets.get(bucket)?.uploads.get(uploadId);
    if (!info) {
      await discardStaged(staged);
      throw noSuchUpload(uploadId);
    }
    commitStagedSync(staged, join(this.#uploadDir(bucket, uploadId), `part-${partNumber}`));
    info.parts.set(partNumber, part as unknown as PartInfo);
    await syncDirectory(this.#uploadDir(bucket, uploadId));
    return part as unknown as PartInfo;
  }

  /** Throws NoSuchUpload unless the upload exists for this key. */
  assertUpload(bucket: string, key: string, uploadId: string): void {
    this.#upload(bucket, key, uploadId);
  }

  listParts(bucket: string, key: string, uploadId: string): { info: UploadInfo; parts: PartInfo[] } {
    const info = this.#upload(bucket, key, uploadId);
    return { info, parts: [...info.parts.values()].sort((a, b) => a.partNumber - b.partNumber) };
  }

  listUploads(bucket: string, prefix: string): UploadInfo[] {
    return [...this.#bucket(bucket).uploads.values()].filter((u) => u.key.startsWith(prefix)).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.initiated - b.initiated));
  }

  async completeUpload(
    bucket: string,
    key: string,
    uploadId: string,
    requested: readonly { partNumber: number; etag: string; checksum?: string | undefined }[],
    precondition?: WritePrecondition,
    checksums?: CompleteChecksums,
  ): Promise<ObjectMeta> {
    const info = this.#upload(bucket, key, uploadId);
    // A failed condition leaves both the object and the upload as they were (it can be retried).
    if (precondition && !precondition(this.#bucket(bucket).index.get(key))) throw this.#preconditionFailed();
    if (requested.length === 0) throw new ObjectCacheError('OC_ERR_REQUEST_MALFORMED_XML', 'CompleteMultipartUpload must list at least one part');
    const chosen: PartInfo[] = [];
    let previous = 0;
    for (const { partNumber, etag, checksum } of requested) {
      if (partNumber <= previous)
        throw new ObjectCacheError('OC_ERR_STORE_INVALID_PART_ORDER', 'The list of parts was not in ascending order', { details: { UploadId: uploadId } });
      previous = partNumber;
      const part = info.parts.get(partNumber);
      if (!part || part.etag !== etag.replace(/^"|"$/g, '')) {
        throw new ObjectCacheError('OC_ERR_STORE_INVALID_PART', `Part ${partNumber} could not be found or its ETag does not match`, {
          details: { UploadId: uploadId, PartNumber: partNumber },
        });
      }
      // A part's checksum named in the request must be the one recorded when it was uploaded.
      if (checksum !== undefined && info.checksum && part.checksum !== checksum) {
        throw new ObjectCacheError(
          'OC_ERR_STORE_INVALID_PART',
          `Part ${partNumber}'s ${info.checksum.algorithm.toUpperCase()} checksum does not match the one it was uploaded with`,
          { details: { UploadId: uploadId, PartNumber: partNumber } },
        );
      }
      chosen.push(part);
    }
    chosen.forEach((part, i) => {
      if (i < chosen.length - 1 && part.size < MIN_PART_BYTES) {
        throw new ObjectCacheError('OC_ERR_STORE_ENTITY_TOO_SMALL', `Part ${part.partNumber} is smaller than the 5 MiB minimum`, { details: { PartNumber: part.partNumber } });
      }
    });
    const dir = this.#uploadDir(bucket, uploadId);
    async function* concatenate(): AsyncGenerator<Uint8Array> {
      for (const part of chosen) {
        const fh = await open(join(dir, `part-${part.partNumber}`), 'r');
        try {
          const buffer = Buffer.allocUnsafe(1024 * 1024);
          let position = 0;
          while (position < part.size) {
            const { bytesRead } = await fh.read(buffer, 0, Math.min(buffer.length, part.size - position), position);
            if (bytesRead === 0) throw new ObjectCacheError('OC_ERR_STORE_IO', `Part ${part.partNumber} is shorter than recorded`);
            position += bytesRead;
            yield Buffer.from(buffer.subarray(0, bytesRead));
          }
        } finally {
          await fh.close();
        }
      }
    }
    const etagDigest = createHash('md5');
    for (const part of chosen) etagDigest.update(Buffer.from(part.etag, 'hex'));
    const etag = `${etagDigest.digest('hex')}-${chosen.length}`;
    // The object's checksum: of the parts' checksums (COMPOSITE), or of every byte as the parts
    // are joined (FULL_OBJECT), in the algorithm the upload was created with.
    let objectChecksum: ObjectMeta['checksum'];
    let source: AsyncIterable<Uint8Array> = concatenate();
    if (info.checksum && checksums) {
      const { algorithm, type } = info.checksum;
      if (type === 'COMPOSITE') {
        if (chosen.some((part) => part.checksum === undefined))
          throw new ObjectCacheError('OC_ERR_STORE_INVALID_PART', `Every part of an upload created with ${algorithm.toUpperCase()} needs its checksum`, {
            details: { UploadId: uploadId },
          });
        const value = await checksums.composite(chosen.map((part) => Buffer.from(part.checksum as string, 'base64')));
        objectChecksum = { algorithm, value: `${value}-${chosen.length}`, type };
      } else {
        const whole = checksums.full();
        const joined = source;
        source = (async function* fed(): AsyncGenerator<Uint8Array> {
          for await (const bytes of joined) {
            whole.update(bytes);
            yield bytes;
          }
          objectChecksum = { algorithm, value: await whole.digestBase64(), type };
        })();
      }
    }
    let meta: ObjectMeta | undefined;
    const staged = await stageFile(this.#tempDir, source, ({ size }) => {
      meta = { key, size, etag, lastModified: Date.now(), ...info.attributes, parts: chosen.map((part) => part.size), ...(objectChecksum ? { checksum: objectChecksum } : {}) };
      return meta;
    });
    // Checked and taken in the commit's tick: the upload may have been aborted or completed
    // concurrently while the parts were copied, and a failed condition must leave it in place.
    const committed = await this.#commitObject(bucket, key, staged, meta as unknown as ObjectMeta, precondition, () => {
      if (this.#buckets.get(bucket)?.uploads.get(uploadId) !== info) throw noSuchUpload(uploadId);
      info.parts.clear();
      this.#bucket(bucket).uploads.delete(uploadId);
    });
    await rm(dir, { recursive: true, force: true });
    return committed;
  }

  /**
   * Aborts every unfinished upload begun before `before` (ms since the epoch), its parts freed
   * (--multipart-expiry); resolves to those aborted.
   */
  async expireUploads(before: number): Promise<{ bucket: string; key: string; uploadId: string }[]> {
    const expired: { bucket: string; key: string; uploadId: string }[] = [];
    for (const state of this.#buckets.values()) {
      for (const info of [...state.uploads.values()]) {
        if (info.initiated >= before || state.uploads.get(info.uploadId) !== info) continue;
        state.uploads.delete(info.uploadId);
        await rm(this.#uploadDir(state.name, info.uploadId), { recursive: true, force: true });
        expired.push({ bucket: state.name, key: info.key, uploadId: info.uploadId });
      }
    }
    return expired;
  }

  async abortUpload(bucket: string, key: string, uploadId: string): Promise<void> {
    this.#upload(bucket, key, uploadId);
    this.#bucket(bucket).uploads.delete(uploadId);
    await rm(this.#uploadDir(bucket, uploadId), { recursive: true, force: true });
  }
}
