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
import { ObjectCacheError } from '../../schemas/errors.js';

const MAGIC = Buffer.from('OCF1', 'latin1');

/** The file that holds `key` in `bucket`, relative to the data directory (see local-store.ts). Pure, for the read workers too. */
export function objectRelativePath(bucket: string, key: string): string {
  const digest = createHash('sha256').update(key, 'utf8').digest('hex');
  return join('buckets', bucket, 'objects', digest.slice(0, 2), digest);
}
const TRAILER_BYTES = 8;
const MAX_FOOTER_BYTES = 1024 * 1024;

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
  readonly checksum?: { readonly algorithm: string; readonly value: string };
  /** Sizes of the parts of a multipart object, in part order (absent: one part). */
  readonly parts?: readonly number[];
}

function ioError(message: string, cause: unknown): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_STORE_IO', message, { cause });
}

/** Reads the footer of an open object file. */
export async function readFooter(fh: FileHandle): Promise<ObjectMeta> {
  const { size: fileSize } = await fh.stat();
  if (fileSize < TRAILER_BYTES) throw ioError('object file is truncated', undefined);
  const trailer = Buffer.alloc(TRAILER_BYTES);
  await fh.read(trailer, 0, TRAILER_BYTES, fileSize - TRAILER_BYTES);
  if (!trailer.subarray(4).equals(MAGIC)) throw ioError('object file has no footer', undefined);
  const footerBytes = trailer.readUInt32BE(0);
  if (footerBytes > MAX_FOOTER_BYTES || footerBytes + TRAILER_BYTES > fileSize) throw ioError('object file footer is corrupt', undefined);
  const footer = Buffer.alloc(footerBytes);
  await fh.read(footer, 0, footerBytes, fileSize - TRAILER_BYTES - footerBytes);
  const meta = JSON.parse(footer.toString('utf8')) as ObjectMeta;
  if (meta.size !== fileSize - TRAILER_BYTES - footerBytes) throw ioError('object file size does not match its footer', undefined);
  return meta;
}

export function encodeFooter(meta: ObjectMeta): Buffer {
  const json = Buffer.from(JSON.stringify(meta), 'utf8');
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
export async function stageFile(tempDir: string, sources: AsyncIterable<Uint8Array> | Readable, footer: (written: { size: number; md5Hex: string; md5: Buffer }) => ObjectMeta | undefined): Promise<StagedFile> {
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
