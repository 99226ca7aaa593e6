/**
 * A benchmark client that talks to MinIO directly (the S3-CW and S3-LW baselines and seeding):
 * SigV4-signed GET and PUT over an undici pool, plus a bounded-concurrency helper.
 */
import { SignatureV4 } from '@smithy/signature-v4';
import { Pool } from 'undici';
import { NodeSha256 } from '../storage-worker/sigv4-support.js';

const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

export interface DirectS3 {
  readonly endpoint: URL;
  readonly signer: SignatureV4;
  readonly pool: Pool;
}

export function directS3(minio: { endpoint: string; accessKey: string; secretKey: string }, connections: number): DirectS3 {
  return {
    endpoint: new URL(minio.endpoint),
    signer: new SignatureV4({ credentials: { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey }, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false }),
    pool: new Pool(minio.endpoint, { connections }),
  };
}

export async function directGet(d: DirectS3, path: string, range?: [number, number]): Promise<Buffer> {
  const headers: Record<string, string> = { host: d.endpoint.host, 'x-amz-content-sha256': EMPTY_SHA256 };
  if (range) headers['range'] = `bytes=${range[0]}-${range[1]}`;
  const signed = await d.signer.sign({ method: 'GET', protocol: 'http:', hostname: d.endpoint.hostname, port: Number(d.endpoint.port), path, query: {}, headers });
  const res = await d.pool.request({ method: 'GET', path, headers: signed.headers });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== (range ? 206 : 200)) throw new Error(`GET ${path} answered ${res.statusCode}`);
  return body;
}

/**
 * GETs an object (or a range of it) straight into `target` at `offset`, as a client that loads KV
 * into a preallocated buffer does (the layerwise client does the same), and returns the bytes.
 */
export async function directGetInto(d: DirectS3, path: string, target: Uint8Array, offset: number, range?: [number, number]): Promise<number> {
  const headers: Record<string, string> = { host: d.endpoint.host, 'x-amz-content-sha256': EMPTY_SHA256 };
  if (range) headers['range'] = `bytes=${range[0]}-${range[1]}`;
  const signed = await d.signer.sign({ method: 'GET', protocol: 'http:', hostname: d.endpoint.hostname, port: Number(d.endpoint.port), path, query: {}, headers });
  const res = await d.pool.request({ method: 'GET', path, headers: signed.headers });
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

export async function directPut(d: DirectS3, path: string, body?: Uint8Array): Promise<void> {
  const headers: Record<string, string> = { host: d.endpoint.host, 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD', 'content-length': String(body?.byteLength ?? 0) };
  const signed = await d.signer.sign({ method: 'PUT', protocol: 'http:', hostname: d.endpoint.hostname, port: Number(d.endpoint.port), path, query: {}, headers });
  const res = await d.pool.request({ method: 'PUT', path, headers: signed.headers, body: body ?? null });
  await res.body.dump();
  if (res.statusCode !== 200) throw new Error(`PUT ${path} answered ${res.statusCode}`);
}

/** Runs job(0..count-1) with at most `limit` in flight; results in index order. */
export async function inParallel<T>(count: number, limit: number, job: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(count);
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
