/**
 * Range reads behind one interface, used inside the read workers: the embedded store with
 * positional scatter reads (readv straight into the layer buffer), and S3 with range GETs whose
 * answers are checked (206, the expected Content-Range and object size, the expected length)
 * before their bytes count.
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { escapeUriPath } from '@smithy/util-uri-escape';
import type { ErrorCode } from '../schemas/errors.js';
import { LAYER_CRC_META } from '../schemas/integrity.js';
import { readFooter } from './local-store/object-file.js';
import { objectRelativePath } from './local-store/local-store.js';
import { S3Backend, mapBackendError } from './s3-backend.js';
import { ScatterCursor, type RangeTarget } from './scatter.js';
import type { WorkerBackend } from './protocol.js';

/** A failure of one read, carried to the task boundary and turned into a ReadResult. */
export class ReadError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  constructor(code: ErrorCode, message: string, retryable = false) {
    super(message);
    this.code = code;
    this.retryable = retryable;
  }
}

export interface RangeRead {
  readonly bucket: string;
  readonly key: string;
  readonly target: RangeTarget;
  /** L * S: the size every chunk object must have. */
  readonly objectBytes: number;
  readonly signal: AbortSignal;
}

/** What a read learned about its object besides the bytes. */
export interface RangeReadInfo {
  /** The recorded per-layer CRC32C metadata (schemas/integrity.ts), if the object has it. */
  readonly layerCrcs: string | undefined;
}

export interface RangeReader {
  read(request: RangeRead): Promise<RangeReadInfo>;
  close(): Promise<void>;
}

function sizeError(key: string, actual: number, expected: number): ReadError {
  return new ReadError('OC_ERR_CHUNK_SIZE', `chunk ${key} is ${actual} bytes; the descriptor's layers x layerBytes is ${expected}`);
}

export class LocalRangeReader implements RangeReader {
  readonly #dataDir: string;
  constructor(dataDir: string) {
    this.#dataDir = dataDir;
  }

  async read({ bucket, key, target, objectBytes }: RangeRead): Promise<RangeReadInfo> {
    let fh;
    try {
      fh = await open(join(this.#dataDir, objectRelativePath(bucket, key)), 'r');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new ReadError('OC_ERR_CHUNK_MISSING', `chunk ${key} does not exist`);
      throw new ReadError('OC_ERR_STORE_IO', `cannot open chunk ${key}: ${(error as Error).message}`);
    }
    try {
      const meta = await readFooter(fh);
      if (meta.key !== key) throw new ReadError('OC_ERR_STORE_IO', `the file of chunk ${key} belongs to another key`);
      if (meta.size !== objectBytes) throw sizeError(key, meta.size, objectBytes);
      let views = target.views;
      let position = target.offset;
      let remaining = target.length;
      while (remaining > 0) {
        const { bytesRead } = await fh.readv(views, position);
        if (bytesRead === 0) throw sizeError(key, position, objectBytes);
        position += bytesRead;
        remaining -= bytesRead;
        // A short readv: continue with what is left of the views.
        let skip = bytesRead;
        const rest: Uint8Array[] = [];
        for (const view of views) {
          if (skip >= view.byteLength) {
            skip -= view.byteLength;
            continue;
          }
          rest.push(skip > 0 ? view.subarray(skip) : view);
          skip = 0;
        }
        views = rest;
      }
      return { layerCrcs: meta.userMeta[LAYER_CRC_META] };
    } finally {
      await fh.close();
    }
  }

  async close(): Promise<void> {}
}

/** `bytes 0-99/1000` → [0, 99, 1000]. */
function parseContentRange(value: string | string[] | undefined): [number, number, number] | undefined {
  const m = typeof value === 'string' ? /^bytes (\d+)-(\d+)\/(\d+)$/.exec(value.trim()) : null;
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

export class S3RangeReader implements RangeReader {
  readonly #backend: S3Backend;
  constructor(backend: S3Backend) {
    this.#backend = backend;
  }

  async read({ bucket, key, target, objectBytes, signal }: RangeRead): Promise<RangeReadInfo> {
    const last = target.offset + target.length - 1;
    let response;
    try {
      response = await this.#backend.request({
        method: 'GET',
        path: escapeUriPath(`/${bucket}/${key}`),
        headers: { range: `bytes=${target.offset}-${last}` },
        signal,
      });
    } catch (error) {
      const mapped = mapBackendError(error, signal) as { code?: ErrorCode; message: string };
      throw new ReadError(mapped.code ?? 'OC_ERR_BACKEND_UNAVAILABLE', `reading chunk ${key}: ${mapped.message}`, true);
    }
    const { statusCode, headers, body } = response;
    if (statusCode !== 206) {
      const text = statusCode === 404 || statusCode === 416 ? await body.text().catch(() => '') : (await body.dump(), '');
      if (statusCode === 404 && !text.includes('<Code>NoSuchBucket</Code>')) throw new ReadError('OC_ERR_CHUNK_MISSING', `chunk ${key} does not exist`);
      if (statusCode === 404) throw new ReadError('OC_ERR_STORE_NO_SUCH_BUCKET', `the bucket ${bucket} does not exist`);
      if (statusCode === 416) throw new ReadError('OC_ERR_CHUNK_SIZE', `chunk ${key} is shorter than the descriptor's layers x layerBytes (${objectBytes})`);
      if (statusCode === 200) throw new ReadError('OC_ERR_BACKEND_RANGE', `the object store ignored the Range of chunk ${key}`);
      if (statusCode >= 500) throw new ReadError('OC_ERR_BACKEND_UNAVAILABLE', `the object store answered ${statusCode} for chunk ${key}`, true);
      throw new ReadError('OC_ERR_BACKEND_RANGE', `the object store answered ${statusCode} for chunk ${key}`);
    }
    const range = parseContentRange(headers['content-range']);
    // The object size first: a short object also truncates the range the store answers with.
    if (range && range[2] !== objectBytes) {
      await body.dump();
      throw sizeError(key, range[2], objectBytes);
    }
    if (!range || range[0] !== target.offset || range[1] !== last) {
      await body.dump();
      throw new ReadError('OC_ERR_BACKEND_RANGE', `chunk ${key}: expected Content-Range bytes ${target.offset}-${last}, got ${String(headers['content-range'])}`);
    }
    const cursor = new ScatterCursor(target.views);
    try {
      for await (const chunk of body) {
        if (!cursor.write(chunk as Buffer)) throw new ReadError('OC_ERR_BACKEND_RANGE', `chunk ${key}: the range read returned more than ${target.length} bytes`);
      }
    } catch (error) {
      body.destroy();
      if (error instanceof ReadError) throw error;
      const mapped = mapBackendError(error, signal) as { code?: ErrorCode; message: string };
      throw new ReadError(mapped.code ?? 'OC_ERR_BACKEND_UNAVAILABLE', `reading chunk ${key}: ${mapped.message}`, true);
    }
    if (cursor.written !== target.length) throw new ReadError('OC_ERR_BACKEND_RANGE', `chunk ${key}: the range read returned ${cursor.written} of ${target.length} bytes`);
    const crcs = headers[`x-amz-meta-${LAYER_CRC_META}`];
    return { layerCrcs: typeof crcs === 'string' ? crcs : undefined };
  }

  async close(): Promise<void> {
    await this.#backend.close();
  }
}

export function createRangeReader(backend: WorkerBackend): RangeReader {
  if (backend.kind === 'local') return new LocalRangeReader(backend.dataDir);
  return new S3RangeReader(new S3Backend({ ...backend, endpoint: new URL(backend.endpoint) }));
}
