/**
 * A benchmark client that talks to MinIO directly (the S3-CW and S3-LW baselines and seeding):
 * SigV4-signed GET and PUT over an undici pool, plus a bounded-concurrency helper.
 */
import type { Dispatcher, Pool } from 'undici';
import { signingPool } from '../sigv4/signing-dispatcher.js';
import { SocketRangeClient } from '../http-range/socket-range-get.js';
import { encodeLayerCrcs, LAYER_CRC_META, layerCrcs } from '../schemas/integrity.js';

export interface DirectS3 {
  readonly endpoint: URL;
  readonly pool: Pool;
  /** The pool, signing every request. */
  readonly http: Dispatcher.ComposedDispatcher;
}

export function directS3(minio: { endpoint: string; accessKey: string; secretKey: string }, connections: number): DirectS3 {
  const { pool, http } = signingPool({ endpoint: minio.endpoint, accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey, pool: { connections } });
  return { endpoint: new URL(minio.endpoint), pool, http };
}

const rangeHeaders = (range?: [number, number]): Record<string, string> => (range ? { range: `bytes=${range[0]}-${range[1]}` } : {});

export async function directGet(d: DirectS3, path: string, range?: [number, number]): Promise<Buffer> {
  const res = await d.http.request({ method: 'GET', path, headers: rangeHeaders(range) });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== (range ? 206 : 200)) throw new Error(`GET ${path} answered ${res.statusCode}`);
  return body;
}

/**
 * GETs an object (or a range of it) straight into `target` at `offset`, as a client that loads KV
 * into a preallocated buffer does (the layerwise client does the same), and returns the bytes.
 */
export async function directGetInto(d: DirectS3, path: string, target: Uint8Array, offset: number, range?: [number, number]): Promise<number> {
  const res = await d.http.request({ method: 'GET', path, headers: rangeHeaders(range) });
  if (res.statusCode !== (range ? 206 : 200)) {
    await res.body.dump();
    throw new Error(`GET ${path} answered ${res.statusCode}`);
  }
  let at = offset;
  for await (const chunk of res.body) {
    target.set(chunk as Buffer, at);
    at += (chunk as Buffer).byteLength;
  }
  return at - offset;
}

export async function directPut(d: DirectS3, path: string, body?: Uint8Array, more: Record<string, string> = {}): Promise<void> {
  const headers = { 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD', 'content-length': String(body?.byteLength ?? 0), ...more };
  const res = await d.http.request({ method: 'PUT', path, headers, body: body ?? null });
  await res.body.dump();
  if (res.statusCode !== 200) throw new Error(`PUT ${path} answered ${res.statusCode}`);
}

/**
 * PUTs a KV_L2TD chunk object with its layers' CRC32Cs in its metadata, as the clients store a
 * chunk (schemas/wire-format.md section 1), so the gateway's reads of it are checked against its
 * writer's values (by the gateway, or by the client that asks to check them).
 */
export function directPutChunk(d: DirectS3, path: string, chunk: Uint8Array, layers: number, layerBytes: number): Promise<void> {
  return directPut(d, path, chunk, { [`x-amz-meta-${LAYER_CRC_META}`]: encodeLayerCrcs(layerCrcs(chunk, layers, layerBytes)) });
}

/** Runs job(0..count-1) with at most `limit` in flight; results in index order. */
export async function inParallel<T>(count: number, limit: number, job: (i: number) => Promise<T>): Promise<T[]> {
  const out = new Array<T>(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, count) }, async () => {
      while (next < count) {
        const i = next++;
        out[i] = await job(i);
      }
    }),
  );
  return out;
}

/** GETs every chunk object whole into `target` (chunk c at c x chunkBytes), `limit` in flight: the S3-CW baseline. */
export async function getWholeObjects(d: DirectS3, bucket: string, keys: readonly string[], target: Uint8Array, chunkBytes: number, limit: number): Promise<void> {
  await inParallel(keys.length, limit, async (c) => directGetInto(d, `/${bucket}/${keys[c]}`, target, c * chunkBytes));
}

/** A direct reader as fast as the gateway's: its socket range reader (http-range/socket-range-get.ts), the kernel writing each body into the target. */
export function inPlaceReader(minio: { endpoint: string; accessKey: string; secretKey: string }, connections: number): SocketRangeClient {
  return new SocketRangeClient({
    endpoint: new URL(minio.endpoint),
    connections,
    accessKeyId: minio.accessKey,
    secretAccessKey: minio.secretKey,
    region: 'us-east-1',
    timeoutMs: 30_000,
  });
}

/** getWholeObjects through an inPlaceReader. */
export async function getWholeObjectsInPlace(
  reader: SocketRangeClient,
  bucket: string,
  keys: readonly string[],
  target: Uint8Array,
  chunkBytes: number,
  limit: number,
): Promise<void> {
  const signal = new AbortController().signal;
  await inParallel(keys.length, limit, async (c) => {
    const place = target.subarray(c * chunkBytes, (c + 1) * chunkBytes);
    const answer = await reader.send({ method: 'GET', path: `/${bucket}/${keys[c]}` }, { onHead: (status) => (status === 200 ? [place] : { collect: 4096 }) }, signal);
    if (answer.status !== 200) throw new Error(`GET /${bucket}/${keys[c]} answered ${answer.status}`);
  });
}
