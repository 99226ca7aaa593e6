/**
 * Durability: a PUT is acknowledged only once the store has it, and killing the gateway process
 * (SIGKILL) in the middle of a PUT never leaves a partial object, in either backend: a new key
 * stays absent, an existing key keeps its old bytes, and the restarted gateway serves normally.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3ServiceException } from '@aws-sdk/client-s3';
import { describe, expect, inject, it } from 'vitest';
import type { MinioInfo } from './helpers/minio.js';
import { startServe, type ServeProcess } from './helpers/cli.js';
import { until } from './helpers/wait.js';
import { signedHeaders } from './helpers/signing.js';
import { CLIENT_KEY, CLIENT_SECRET, metricValue, sdkClient, uniqueBucket } from './helpers/gateway.js';

const minio = inject('minio');

function startProcess(args: string[]): Promise<ServeProcess> {
  return startServe(args, {
    OBJECTCACHE_ACCESS_KEY: CLIENT_KEY,
    OBJECTCACHE_SECRET_KEY: CLIENT_SECRET,
    OBJECTCACHE_BACKEND_ACCESS_KEY: minio.accessKey,
    OBJECTCACHE_BACKEND_SECRET_KEY: minio.secretKey,
  });
}

/**
 * Sends half of a declared 8 MiB body, waits until the upload is on its way into the store
 * (`inStore`: evidence the kill lands mid-write, not before the PUT reached the store), then
 * kills the gateway with SIGKILL.
 */
async function killMidPut(gateway: ServeProcess, bucket: string, key: string, inStore: (gateway: ServeProcess) => boolean | Promise<boolean>): Promise<void> {
  const url = new URL(`${gateway.url}/${bucket}/${key}`);
  const total = 8 * 1024 * 1024;
  const signed = {
    headers: await signedHeaders(url.origin, { method: 'PUT', path: url.pathname, headers: { 'content-length': String(total), 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' } }),
  };
  const exited = new Promise((r) => gateway.child.once('exit', r));
  await new Promise<void>((done) => {
    const req = httpRequest(url, { method: 'PUT', headers: signed.headers });
    req.on('error', () => done());
    req.write(Buffer.alloc(total / 2, 7), () => {
      void until(() => inStore(gateway)).then(() => {
        gateway.child.kill('SIGKILL');
        done();
      });
    });
  });
  await exited;
}

async function text(client: ReturnType<typeof sdkClient>, bucket: string, key: string): Promise<string | number> {
  try {
    return (await (await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body?.transformToString()) ?? '';
  } catch (error) {
    return (error as S3ServiceException).$metadata.httpStatusCode ?? -1;
  }
}

describe('killing the gateway mid-PUT', () => {
  it('leaves no partial object in the embedded store, and the restarted gateway serves', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-durable-'));
    try {
      let gateway = await startProcess(['--data-dir', dataDir]);
      let s3 = sdkClient(gateway.url);
      await s3.send(new CreateBucketCommand({ Bucket: 'durable' }));
      await s3.send(new PutObjectCommand({ Bucket: 'durable', Key: 'existing', Body: 'version one' }));
      s3.destroy();
      // The embedded store stages an upload in .tmp/ while it arrives.
      const staging = (): boolean => readdirSync(join(dataDir, '.tmp')).length > 0;
      await killMidPut(gateway, 'durable', 'new-key', staging);
      gateway = await startProcess(['--data-dir', dataDir]);
      await killMidPut(gateway, 'durable', 'existing', staging);
      gateway = await startProcess(['--data-dir', dataDir]);
      s3 = sdkClient(gateway.url);
      expect(await text(s3, 'durable', 'new-key')).toBe(404);
      expect(await text(s3, 'durable', 'existing')).toBe('version one');
      expect(readdirSync(join(dataDir, '.tmp'))).toEqual([]);
      await s3.send(new PutObjectCommand({ Bucket: 'durable', Key: 'new-key', Body: 'whole' }));
      expect(await text(s3, 'durable', 'new-key')).toBe('whole');
      s3.destroy();
      await gateway.stop();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('leaves no partial object in MinIO either', async () => {
    await noPartialObjectIn(minio);
  });
});

/** The gateway is streaming the PUT to MinIO (its request to the backend is open). */
async function sendingToMinio(gateway: ServeProcess): Promise<boolean> {
  return (await metricValue(gateway.adminUrl, 'objectcache_backend_inflight_requests')) > 0;
}

/**
 * `key` stays absent for a second. MinIO exposes nothing to wait on for an upload whose
 * connection dropped mid-body (measured: neither its in-flight gauge nor its request counter
 * moves for it), so absence is checked repeatedly instead of once after a pause.
 */
async function staysAbsent(client: ReturnType<typeof sdkClient>, bucket: string, key: string): Promise<void> {
  const until = Date.now() + 1000;
  do {
    const head = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key })).catch((e: S3ServiceException) => e);
    expect((head as S3ServiceException).$metadata?.httpStatusCode, `${key} appeared`).toBe(404);
    await new Promise((r) => setTimeout(r, 50));
  } while (Date.now() < until);
}

async function noPartialObjectIn(minio: MinioInfo): Promise<void> {
  {
    const bucket = uniqueBucket('durable');
    const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    await direct.send(new CreateBucketCommand({ Bucket: bucket }));
    await direct.send(new PutObjectCommand({ Bucket: bucket, Key: 'existing', Body: 'version one' }));
    // Each kill lands while the gateway is streaming the PUT into MinIO.
    let gateway = await startProcess(['--s3-endpoint', minio.endpoint]);
    await killMidPut(gateway, bucket, 'new-key', sendingToMinio);
    gateway = await startProcess(['--s3-endpoint', minio.endpoint]);
    await killMidPut(gateway, bucket, 'existing', sendingToMinio);
    await staysAbsent(direct, bucket, 'new-key');
    expect(await text(direct, bucket, 'existing')).toBe('version one');
    gateway = await startProcess(['--s3-endpoint', minio.endpoint]);
    const s3 = sdkClient(gateway.url);
    expect(await text(s3, bucket, 'existing')).toBe('version one');
    s3.destroy();
    direct.destroy();
    await gateway.stop();
  }
}
