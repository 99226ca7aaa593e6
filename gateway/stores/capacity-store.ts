/**
 * What capacity management asks of the store, on either backend: list a bucket, read and write
 * its own state objects (conditionally: the lease and the snapshot), and delete one version of a
 * chunk. ETags are kept quoted, as S3 answers them.
 *
 * Deleting one version: the embedded store checks the ETag and unlinks in one tick, so the
 * delete is exact. S3 has `If-Match` on DeleteObject, which AWS S3 honours and MinIO (the pinned
 * build) ignores; so before the DELETE the gateway HEADs the chunk and leaves it alone if its ETag
 * changed. What remains on such a store is the time between that HEAD and the DELETE (one round
 * trip) for a write through another gateway (docs/architecture.md, "Capacity").
 */
import { escapeUriPath } from '@smithy/util-uri-escape';
import { XMLParser } from 'fast-xml-parser';
import { Readable } from 'node:stream';
import type { LocalStore } from './embedded/local-store.js';
import type { S3Backend } from './s3-backend.js';
import { ObjectCacheError } from '../../schemas/errors.js';

export interface ListedObject {
  readonly key: string;
  readonly size: number;
  readonly etag: string;
  /** ms since the epoch. */
  readonly lastModified: number;
}

export interface CapacityStore {
  /** Creates the bucket when it does not exist. */
  ensureBucket(bucket: string): Promise<void>;
  /** One page of keys under `prefix`, after `after`, in key order (none while the bucket does not exist). */
  list(bucket: string, prefix: string, after: string | undefined): Promise<{ objects: ListedObject[]; truncated: boolean }>;
  /**
   * An object's bytes and ETag, or undefined when it does not exist. Past `maxBytes` nothing of it
   * is read: the body is empty and `tooLarge` set (what is read of an object nobody verified yet
   * is bounded; an empty body verifies as nothing).
   */
  get(bucket: string, key: string, maxBytes?: number): Promise<{ body: Buffer; etag: string; tooLarge?: true } | undefined>;
  /**
   * Writes an object only if it does not exist (`ifNoneMatch`) or still has the ETag `ifMatch`;
   * resolves to the new ETag, or undefined when the condition failed.
   */
  put(bucket: string, key: string, body: Buffer, condition: { ifMatch?: string; ifNoneMatch?: true }, meta?: Readonly<Record<string, string>>): Promise<string | undefined>;
  /**
   * Streams `bytes` bytes from `body` into a new object (a packed segment, gateway/descriptor-get/
   * segments.ts); resolves to its ETag once stored. The caller ends `body` only once all of it was
   * written, and destroys it otherwise: a body that fails stores nothing.
   */
  putStream(bucket: string, key: string, body: Readable, bytes: number, signal: AbortSignal): Promise<string>;
  /** An object's size, ETag, user metadata and stored headers (content-type, cache-control, ...), or undefined. */
  head(bucket: string, key: string): Promise<StoreHead | undefined>;
  /** Deletes the object if it still has `etag`: 'deleted', 'changed' (left alone) or 'gone'. */
  deleteVersion(bucket: string, key: string, etag: string): Promise<'deleted' | 'changed' | 'gone'>;
  /** Deletes the object whatever it holds (the gateway's own state objects). */
  delete(bucket: string, key: string): Promise<void>;
  /** One page of the bucket's unfinished multipart uploads (after `after`, in key and upload id order). */
  uploads(bucket: string, after: UploadMarker | undefined): Promise<{ uploads: ListedUpload[]; next: UploadMarker | undefined }>;
  /** The bytes of each part of an unfinished upload, by part number, or undefined when it is not there (completed or aborted). */
  uploadParts(bucket: string, key: string, uploadId: string): Promise<Map<number, number> | undefined>;
  /** Aborts an unfinished upload (its parts are freed); one already gone is no error. */
  abortUpload(bucket: string, key: string, uploadId: string): Promise<void>;
}

export interface StoreHead {
  readonly size: number;
  readonly etag: string;
  /** User metadata: lowercase names without x-amz-meta-. */
  readonly meta: Readonly<Record<string, string>>;
  /** The representation headers S3 stores with an object (STORED_HEADERS), lowercase. */
  readonly headers: Readonly<Record<string, string>>;
}

/** The representation headers S3 stores with an object, and a copy takes from its source. */
export const STORED_HEADERS = ['content-type', 'cache-control', 'content-disposition', 'content-encoding', 'content-language', 'expires'] as const;

export interface ListedUpload {
  readonly key: string;
  readonly uploadId: string;
  /** ms since the epoch. */
  readonly initiated: number;
}

/** Where a listing of uploads goes on: after this key and upload id. */
export interface UploadMarker {
  readonly key: string;
  readonly uploadId: string;
}

const quoted = (etag: string): string => (etag.startsWith('"') ? etag : `"${etag}"`);
/** An ETag without its quotes. */
export const unquoted = (etag: string): string => etag.replace(/^"(.*)"$/, '$1');

export function embeddedCapacityStore(store: LocalStore): CapacityStore {
  const head = (bucket: string, key: string): ReturnType<CapacityStore['head']> => {
    if (!store.hasBucket(bucket)) return Promise.resolve(undefined);
    try {
      const meta = store.headObject(bucket, key);
      return Promise.resolve({ size: meta.size, etag: quoted(meta.etag), meta: meta.userMeta, headers: { ...meta.headers, 'content-type': meta.contentType } });
    } catch {
      return Promise.resolve(undefined);
    }
  };
  return {
    async ensureBucket(bucket) {
      if (!store.hasBucket(bucket)) await store.createBucket(bucket);
    },
    async list(bucket, prefix, after) {
      if (!store.hasBucket(bucket)) return { objects: [], truncated: false };
      const page = store.list(bucket, { prefix, delimiter: '', after, maxKeys: 1000 });
      return { objects: page.contents.map((m) => ({ key: m.key, size: m.size, etag: quoted(m.etag), lastModified: m.lastModified })), truncated: page.isTruncated };
    },
    async get(bucket, key, maxBytes = Number.POSITIVE_INFINITY) {
      let opened;
      try {
        opened = await store.openObject(bucket, key);
      } catch (error) {
        if (error instanceof ObjectCacheError && (error.code === 'OC_ERR_STORE_NO_SUCH_KEY' || error.code === 'OC_ERR_STORE_NO_SUCH_BUCKET')) return undefined;
        throw error;
      }
      try {
        if (opened.meta.size > maxBytes) return { body: Buffer.alloc(0), etag: quoted(opened.meta.etag), tooLarge: true };
        const body = Buffer.alloc(opened.meta.size);
        if (body.length > 0) await opened.handle.read(body, 0, body.length, 0);
        return { body, etag: quoted(opened.meta.etag) };
      } finally {
        await opened.handle.close();
      }
    },
    async put(bucket, key, body, condition, meta = {}) {
      const ifMatch = condition.ifMatch === undefined ? undefined : unquoted(condition.ifMatch);
      try {
        const written = await store.putObject(bucket, key, Readable.from([body]), {
          contentType: 'application/octet-stream',
          headers: {},
          userMeta: meta,
          precondition: (current) => (condition.ifNoneMatch ? current === undefined : ifMatch === undefined || current?.etag === ifMatch),
        });
        return quoted(written.etag);
      } catch (error) {
        if (error instanceof ObjectCacheError && error.code === 'OC_ERR_STORE_PRECONDITION_FAILED') return undefined;
        throw error;
      }
    },
    async putStream(bucket, key, body) {
      // The writer ends the body only once all of it was written, and destroys it otherwise: a
      // failed body stores nothing (the staged file is removed).
      const written = await store.putObject(bucket, key, body, { contentType: 'application/octet-stream', headers: {}, userMeta: {} });
      return quoted(written.etag);
    },
    head,
    async deleteVersion(bucket, key, etag) {
      if ((await head(bucket, key)) === undefined) return 'gone';
      try {
        await store.deleteObject(bucket, key, unquoted(etag));
        return 'deleted';
      } catch (error) {
        if (error instanceof ObjectCacheError && error.code === 'OC_ERR_STORE_PRECONDITION_FAILED') return 'changed';
        throw error;
      }
    },
    async delete(bucket, key) {
      if (store.hasBucket(bucket)) await store.deleteObject(bucket, key);
    },
    async uploads(bucket, after) {
      if (!store.hasBucket(bucket)) return { uploads: [], next: undefined };
      const all = store.listUploads(bucket, '');
      const from = after === undefined ? 0 : all.findIndex((u) => u.key > after.key || (u.key === after.key && u.uploadId > after.uploadId));
      const page = from < 0 ? [] : all.slice(from, from + 1000);
      const last = page.at(-1);
      return {
        uploads: page.map((u) => ({ key: u.key, uploadId: u.uploadId, initiated: u.initiated })),
        next: last && from + page.length < all.length ? { key: last.key, uploadId: last.uploadId } : undefined,
      };
    },
    async uploadParts(bucket, key, uploadId) {
      try {
        return new Map(store.listParts(bucket, key, uploadId).parts.map((part) => [part.partNumber, part.size]));
      } catch (error) {
        if (error instanceof ObjectCacheError && (error.code === 'OC_ERR_STORE_NO_SUCH_UPLOAD' || error.code === 'OC_ERR_STORE_NO_SUCH_BUCKET')) return undefined;
        throw error;
      }
    },
    async abortUpload(bucket, key, uploadId) {
      try {
        await store.abortUpload(bucket, key, uploadId);
      } catch (error) {
        if (error instanceof ObjectCacheError && (error.code === 'OC_ERR_STORE_NO_SUCH_UPLOAD' || error.code === 'OC_ERR_STORE_NO_SUCH_BUCKET')) return;
        throw error;
      }
    },
  };
}

/**
 * Keys and ETags as the store wrote them: untrimmed (a key may end in a space), with character
 * references decoded (MinIO writes an ETag's quotes as &#34;, as Go's encoding/xml does). Keys are
 * listed URL-encoded (`encoding-type=url`), since XML 1.0 cannot carry most control characters.
 */
const listParser = new XMLParser({
  ignoreAttributes: true,
  parseTagValue: false,
  trimValues: false,
  processEntities: true,
  htmlEntities: true,
  isArray: (name) => name === 'Contents',
});

/** A key as S3 lists it with `encoding-type=url`: percent-encoded, a space as `+`. */
function urlDecodedKey(encoded: string): string {
  try {
    return decodeURIComponent(encoded.replace(/\+/g, ' '));
  } catch {
    throw new ObjectCacheError('OC_ERR_BACKEND_PROTOCOL', `the store listed a key that is not URL-encoded: ${JSON.stringify(encoded.slice(0, 200))}`);
  }
}

export function s3CapacityStore(backend: S3Backend): CapacityStore {
  const path = (bucket: string, key?: string): string => (key === undefined ? `/${bucket}` : `/${bucket}/${escapeUriPath(key)}`);
  const fail = (what: string, status: number): ObjectCacheError =>
    new ObjectCacheError(status >= 500 ? 'OC_ERR_BACKEND_UNAVAILABLE' : 'OC_ERR_BACKEND_PROTOCOL', `${what} at the store answered ${status}`);
  const head: CapacityStore['head'] = async (bucket, key) => {
    const res = await backend.request({ method: 'HEAD', path: path(bucket, key) });
    await res.body.dump();
    if (res.statusCode === 404) return undefined;
    if (res.statusCode !== 200) throw fail(`HEAD ${key}`, res.statusCode);
    const meta: Record<string, string> = {};
    for (const [name, value] of Object.entries(res.headers)) if (name.startsWith('x-amz-meta-') && typeof value === 'string') meta[name.slice(11)] = value;
    const headers: Record<string, string> = {};
    for (const name of STORED_HEADERS) {
      const value = res.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    return { size: Number(res.headers['content-length']), etag: quoted(String(res.headers['etag'] ?? '')), meta, headers };
  };
  return {
    async ensureBucket(bucket) {
      const res = await backend.request({ method: 'PUT', path: path(bucket) });
      await res.body.dump();
      if (res.statusCode !== 200 && res.statusCode !== 409) throw fail(`CreateBucket ${bucket}`, res.statusCode);
    },
    async list(bucket, prefix, after) {
      const query: [string, string][] = [
        ['list-type', '2'],
        ['max-keys', '1000'],
        ['prefix', prefix],
        ['encoding-type', 'url'],
      ];
      if (after !== undefined) query.push(['start-after', after]);
      const res = await backend.request({ method: 'GET', path: path(bucket), query });
      const text = await res.body.text();
      if (res.statusCode === 404) return { objects: [], truncated: false };
      if (res.statusCode !== 200) throw fail(`ListObjectsV2 ${bucket}`, res.statusCode);
      const parsed = listParser.parse(text) as {
        ListBucketResult?: { Contents?: { Key?: string; Size?: string; ETag?: string; LastModified?: string }[]; IsTruncated?: string; EncodingType?: string };
      };
      const result = parsed.ListBucketResult ?? {};
      // Only when the store says it encoded them (one that ignores encoding-type lists them as they are).
      const keyOf = result.EncodingType === 'url' ? urlDecodedKey : (key: string): string => key;
      return {
        objects: (result.Contents ?? []).map((c) => ({
          key: keyOf(String(c.Key ?? '')),
          size: Number(c.Size ?? 0),
          etag: quoted(String(c.ETag ?? '')),
          lastModified: Date.parse(String(c.LastModified ?? '')) || 0,
        })),
        truncated: result.IsTruncated === 'true',
      };
    },
    async get(bucket, key, maxBytes = Number.POSITIVE_INFINITY) {
      const res = await backend.request({ method: 'GET', path: path(bucket, key) });
      if (res.statusCode === 404) {
        await res.body.dump();
        return undefined;
      }
      if (res.statusCode === 200 && !(Number(res.headers['content-length']) <= maxBytes)) {
        res.body.destroy();
        return { body: Buffer.alloc(0), etag: quoted(String(res.headers['etag'] ?? '')), tooLarge: true };
      }
      const body = Buffer.from(await res.body.arrayBuffer());
      if (res.statusCode !== 200) throw fail(`GET ${key}`, res.statusCode);
      return { body, etag: quoted(String(res.headers['etag'] ?? '')) };
    },
    async put(bucket, key, body, condition, meta = {}) {
      const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
      if (condition.ifNoneMatch) headers['if-none-match'] = '*';
      if (condition.ifMatch !== undefined) headers['if-match'] = condition.ifMatch;
      for (const [name, value] of Object.entries(meta)) headers[`x-amz-meta-${name}`] = value;
      const res = await backend.request({ method: 'PUT', path: path(bucket, key), headers, body });
      await res.body.dump();
      if (res.statusCode === 412 || res.statusCode === 409) return undefined;
      if (res.statusCode !== 200) throw fail(`PUT ${key}`, res.statusCode);
      return quoted(String(res.headers['etag'] ?? ''));
    },
    async putStream(bucket, key, body, bytes, signal) {
      const res = await backend.request({
        method: 'PUT',
        path: path(bucket, key),
        headers: { 'content-type': 'application/octet-stream', 'content-length': String(bytes) },
        body,
        signal,
      });
      await res.body.dump();
      if (res.statusCode !== 200) throw fail(`PUT ${key}`, res.statusCode);
      return quoted(String(res.headers['etag'] ?? ''));
    },
    head,
    async deleteVersion(bucket, key, etag) {
      const now = await head(bucket, key);
      if (now === undefined) return 'gone';
      if (now.etag !== etag) return 'changed';
      const res = await backend.request({ method: 'DELETE', path: path(bucket, key), headers: { 'if-match': etag } });
      await res.body.dump();
      if (res.statusCode === 412) return 'changed';
      if (res.statusCode !== 204 && res.statusCode !== 200) throw fail(`DELETE ${key}`, res.statusCode);
      return 'deleted';
    },
    async delete(bucket, key) {
      const res = await backend.request({ method: 'DELETE', path: path(bucket, key) });
      await res.body.dump();
      if (res.statusCode !== 204 && res.statusCode !== 200 && res.statusCode !== 404) throw fail(`DELETE ${key}`, res.statusCode);
    },
    async uploads(bucket, after) {
      const query: [string, string][] = [
        ['uploads', ''],
        ['max-uploads', '1000'],
        ['encoding-type', 'url'],
      ];
      if (after !== undefined) query.push(['key-marker', after.key], ['upload-id-marker', after.uploadId]);
      const res = await backend.request({ method: 'GET', path: path(bucket), query });
      const text = await res.body.text();
      if (res.statusCode === 404) return { uploads: [], next: undefined };
      if (res.statusCode !== 200) throw fail(`ListMultipartUploads ${bucket}`, res.statusCode);
      const result =
        (
          uploadsParser.parse(text) as {
            ListMultipartUploadsResult?: { Upload?: { Key?: string; UploadId?: string; Initiated?: string }[]; IsTruncated?: string; EncodingType?: string };
          }
        ).ListMultipartUploadsResult ?? {};
      const keyOf = result.EncodingType === 'url' ? urlDecodedKey : (key: string): string => key;
      const uploads = (result.Upload ?? []).map((u) => ({
        key: keyOf(String(u.Key ?? '')),
        uploadId: String(u.UploadId ?? ''),
        initiated: Date.parse(String(u.Initiated ?? '')) || 0,
      }));
      const last = uploads.at(-1);
      return { uploads, next: result.IsTruncated === 'true' && last ? { key: last.key, uploadId: last.uploadId } : undefined };
    },
    async uploadParts(bucket, key, uploadId) {
      const parts = new Map<number, number>();
      for (let marker = '0', pages = 0; pages < 10; pages++) {
        const res = await backend.request({
          method: 'GET',
          path: path(bucket, key),
          query: [
            ['uploadId', uploadId],
            ['max-parts', '1000'],
            ['part-number-marker', marker],
          ],
        });
        const text = await res.body.text();
        if (res.statusCode === 404) return undefined;
        if (res.statusCode !== 200) throw fail(`ListParts ${key}`, res.statusCode);
        const result =
          (uploadsParser.parse(text) as { ListPartsResult?: { Part?: { PartNumber?: string; Size?: string }[]; IsTruncated?: string; NextPartNumberMarker?: string } })
            .ListPartsResult ?? {};
        for (const part of result.Part ?? []) parts.set(Number(part.PartNumber ?? 0), Number(part.Size ?? 0) || 0);
        if (result.IsTruncated !== 'true' || result.NextPartNumberMarker === undefined) break;
        marker = String(result.NextPartNumberMarker);
      }
      return parts;
    },
    async abortUpload(bucket, key, uploadId) {
      const res = await backend.request({ method: 'DELETE', path: path(bucket, key), query: [['uploadId', uploadId]] });
      await res.body.dump();
      if (res.statusCode !== 204 && res.statusCode !== 200 && res.statusCode !== 404) throw fail(`AbortMultipartUpload ${key}`, res.statusCode);
    },
  };
}

const uploadsParser = new XMLParser({
  ignoreAttributes: true,
  parseTagValue: false,
  trimValues: false,
  processEntities: true,
  htmlEntities: true,
  isArray: (name) => name === 'Upload' || name === 'Part',
});
