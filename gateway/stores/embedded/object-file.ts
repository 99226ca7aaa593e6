/**
 * One object of the embedded store is one file: the object's bytes from offset 0, then a JSON
 * footer with its metadata, then the footer's length (u32 big-endian) and the magic `OCF1`.
 * Data at offset 0 keeps positional (range and layer) reads at their natural offsets, and data
 * plus metadata in one file make a commit one atomic rename: a reader sees the old object or the
 * new one, never a mix and never a partial file.
 */
import { createHash, randomBytes } from 'node:crypto';
import { renameSync } from 'node:fs';
import { open, rm, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { ObjectCacheError } from '../../../schemas/errors.js';

const MAGIC = Buffer.from('OCF1', 'latin1');

/** S3's two kinds of multipart checksum (x-amz-checksum-type). */
export type ChecksumType = 'FULL_OBJECT' | 'COMPOSITE';

/** The file that holds `key` in `bucket`, relative to the data directory (see local-store.ts). Pure, for the read workers too. */
export function objectRelativePath(bucket: string, key: string): string {
  const digest = createHash('sha256').update(key, 'utf8').digest('hex');
  return join('buckets', bucket, 'objects', digest.slice(0, 2), digest);
}
const TRAILER_BYTES = 8;
/**
 * The largest footer read or written. The gateway keeps metadata far below it (gateway/s3/metadata.ts);
 * this bound only stops a corrupt length from allocating gigabytes, and a write that would make
 * a file no reader accepts.
 */
export const MAX_FOOTER_BYTES = 1024 * 1024;

export interface ObjectMeta {
  readonly key: string;
  readonly size: number;
  /** Hex MD5 of the data, or `<hex>-<parts>` for multipart objects; unquoted. */
  readonly etag: string;
  readonly lastModified: number;
  readonly contentType: string;
  /** Stored representation headers (cache-control, content-disposition, ...). */
  readonly headers: Readonly<Record<string, string>>;
  /** User metadata, lowercase names without the x-amz-meta- prefix. */
  readonly userMeta: Readonly<Record<string, string>>;
  /**
   * The S3 checksum recorded at the write (x-amz-checksum-*): its algorithm, base64 value, and for
   * a multipart object whether it covers the whole object (FULL_OBJECT, also every single PUT) or
   * is the checksum of the parts' checksums, `<value>-<parts>` (COMPOSITE).
   */
  readonly checksum?: { readonly algorithm: string; readonly value: string; readonly type?: ChecksumType };
  /** Sizes of the parts of a multipart object, in part order (absent: one part). */
  readonly parts?: readonly number[];
}

function ioError(message: string, cause: unknown): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_STORE_IO', message, { cause });
}

/** True for a footer with every field the store reads (a JSON document of another shape is corrupt). */
function isObjectMeta(value: unknown): value is ObjectMeta {
  if (typeof value !== 'object' || value === null) return false;
  const meta = value as Partial<ObjectMeta>;
  const isRecord = (field: unknown): boolean => typeof field === 'object' && field !== null;
  return (
    typeof meta.key === 'string' &&
    Number.isSafeInteger(meta.size) &&
    (meta.size as number) >= 0 &&
    typeof meta.etag === 'string' &&
    typeof meta.lastModified === 'number' &&
    typeof meta.contentType === 'string' &&
    isRecord(meta.headers) &&
    isRecord(meta.userMeta)
  );
}

/**
 * Reads the footer of an open object file. A file that is not a whole object file (truncated, no
 * footer, a corrupt length, JSON that does not parse or lacks fields, a size that disagrees) is
 * OC_ERR_STORE_IO, named by `file` when given; errors of the file system itself pass through.
 */
export async function readFooter(fh: FileHandle, file?: string): Promise<ObjectMeta> {
  const damaged = (problem: string, cause?: unknown): ObjectCacheError => ioError(file === undefined ? `object file ${problem}` : `object file ${file} ${problem}`, cause);
  const { size: fileSize } = await fh.stat();
  if (fileSize < TRAILER_BYTES) throw damaged('is truncated');
  const trailer = Buffer.alloc(TRAILER_BYTES);
  await fh.read(trailer, 0, TRAILER_BYTES, fileSize - TRAILER_BYTES);
  if (!trailer.subarray(4).equals(MAGIC)) throw damaged('has no footer');
  const footerBytes = trailer.readUInt32BE(0);
  if (footerBytes > MAX_FOOTER_BYTES || footerBytes + TRAILER_BYTES > fileSize) throw damaged('footer is corrupt');
  const footer = Buffer.alloc(footerBytes);
  await fh.read(footer, 0, footerBytes, fileSize - TRAILER_BYTES - footerBytes);
  let meta: unknown;
  try {
    meta = JSON.parse(footer.toString('utf8'));
  } catch (error) {
    throw damaged('footer is not valid JSON', error);
  }
  if (!isObjectMeta(meta)) throw damaged('footer lacks the fields of an object');
  if (meta.size !== fileSize - TRAILER_BYTES - footerBytes) throw damaged('size does not match its footer');
  return meta;
}

/**
 * The footer bytes of `meta`. Refuses one over {@link MAX_FOOTER_BYTES}, which readFooter would
 * reject: the write fails (OC_ERR_REQUEST_METADATA_TOO_LARGE) instead of committing an object no
 * one can read and that would stop the store from opening.
 */
export function encodeFooter(meta: ObjectMeta): Buffer {
  const json = Buffer.from(JSON.stringify(meta), 'utf8');
  if (json.length > MAX_FOOTER_BYTES) {
    throw new ObjectCacheError(
      'OC_ERR_REQUEST_METADATA_TOO_LARGE',
      `The object's metadata and headers take ${json.length} bytes stored, over the embedded store's limit of ${MAX_FOOTER_BYTES}`,
    );
  }
  const trailer = Buffer.alloc(TRAILER_BYTES);
  trailer.writeUInt32BE(json.length, 0);
  MAGIC.copy(trailer, 4);
  return Buffer.concat([json, trailer]);
}

/** fsyncs a directory so a rename inside it survives a crash. */
export async function syncDirectory(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export interface StagedFile {
  readonly tempPath: string;
  readonly size: number;
  readonly md5Hex: string;
  /** MD5 digest bytes (multipart ETags hash the parts' binary digests). */
  readonly md5: Buffer;
}

/**
 * Writes `sources` (streams, consumed in order) into a new temp file, followed by the footer
 * that `footer` builds from the written size and MD5; fsyncs it. The caller commits with
 * `commitStaged` or discards with `discardStaged`. On any error the temp file is removed.
 */
export async function stageFile(
  tempDir: string,
  sources: AsyncIterable<Uint8Array> | Readable,
  footer: (written: { size: number; md5Hex: string; md5: Buffer }) => ObjectMeta | undefined,
): Promise<StagedFile> {
  const tempPath = `${tempDir}/${Date.now().toString(36)}-${randomBytes(8).toString('hex')}.tmp`;
  const fh = await open(tempPath, 'wx', 0o644);
  let ok = false;
  try {
    const md5 = createHash('md5');
    let size = 0;
    let position = 0;
    for await (const chunk of sources as AsyncIterable<Uint8Array>) {
      md5.update(chunk);
      size += chunk.byteLength;
      let offset = 0;
      while (offset < chunk.byteLength) {
        const { bytesWritten } = await fh.write(chunk, offset, chunk.byteLength - offset, position);
        offset += bytesWritten;
        position += bytesWritten;
      }
    }
    const digest = md5.digest();
    const md5Hex = digest.toString('hex');
    const meta = footer({ size, md5Hex, md5: digest });
    if (meta !== undefined) {
      const encoded = encodeFooter(meta);
      await fh.write(encoded, 0, encoded.length, position);
    }
    await fh.sync();
    ok = true;
    return { tempPath, size, md5Hex, md5: digest };
  } finally {
    await fh.close();
    if (!ok) await rm(tempPath, { force: true });
  }
}

/**
 * Atomically moves a staged file to its final path. Synchronous on purpose: the caller updates
 * its in-memory index in the same tick, so two concurrent commits of one key cannot leave the
 * index describing the file that lost. The caller then awaits `syncDirectory(dirname(path))`
 * before acknowledging.
 */
export function commitStagedSync(staged: StagedFile, finalPath: string): void {
  renameSync(staged.tempPath, finalPath);
}

export function parentOf(path: string): string {
  return dirname(path);
}

export async function discardStaged(staged: StagedFile): Promise<void> {
  await rm(staged.tempPath, { force: true });
}
