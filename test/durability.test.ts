/**
 * Durability: a PUT is acknowledged only once the store has it, and killing the gateway process
 * (SIGKILL) in the middle of a PUT never leaves a partial object, in either backend: a new key
 * stays absent, an existing key keeps its old bytes, and the restarted gateway serves normally.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3ServiceException } from '@aws-sdk/client-s3';
import { describe, expect, inject, it } from 'vitest';
import { startMinio, type MinioServer } from '../bench/minio.js';
import { startServe, type ServeProcess } from './helpers/cli.js';
import { until } from './helpers/wait.js';
import { signedHeaders } from './helpers/signing.js';
import { CLIENT_KEY, CLIENT_SECRET, sdkClient, uniqueBucket } from './helpers/gateway.js';

const minio = inject('minio');

function startProcess(args: string[]): Promise<ServeProcess> {
  return startServe(args, { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET, OBJECTCACHE_BACKEND_ACCESS_KEY: minio.accessKey, OBJECTCACHE_BACKEND_SECRET_KEY: minio.secretKey });
}

/** Sends half of a declared 8 MiB body, then kills the gateway with SIGKILL. */
async function killMidPut(gateway: { child: ChildProcess; url: string }, bucket: string, key: string): Promise<void> {
  const url = new URL(`${gateway.url}/${bucket}/${key}`);
  const total = 8 * 1024 * 1024;
  const signed = { headers: await signedHeaders(url.origin, { method: 'PUT', path: url.pathname, headers: { 'content-length': String(total), 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' } }) };
  const exited = new Promise((r) => gateway.child.once('exit', r));
  await new Promise<void>((done) => {
    const req = httpRequest(url, { method: 'PUT', headers: signed.headers });
    req.on('error', () => done());
    req.write(Buffer.alloc(total / 2, 7), () => {
      setTimeout(() => {
        gateway.child.kill('SIGKILL');
        done();
      }, 200);
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
      await killMidPut(gateway, 'durable', 'new-key');
      gateway = await startProcess(['--data-dir', dataDir]);
      await killMidPut(gateway, 'durable', 'existing');
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
    // A MinIO of its own, so its request counters are this test's alone.
    const own = await startMinio({ binary: minio.binary, publicMetrics: true });
    try {
      await noPartialObjectIn(own);
    } finally {
      await own.destroy();
    }
  });
});

/** PUTs MinIO has finished handling (answered, or given up on after the connection dropped). */
async function putsHandled(endpoint: string): Promise<number> {
  const text = await (await fetch(`${endpoint}/minio/v2/metrics/node`)).text();
  return text.split('\n').filter((line) => line.startsWith('minio_s3_requests_total{') && line.includes('api="putobject"')).reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

async function noPartialObjectIn(minio: MinioServer): Promise<void> {
  {
    const bucket = uniqueBucket('durable');
    const direct = sdkClient(minio.endpoint, { accessKeyId: minio.accessKey, secretAccessKey: minio.secretKey });
    await direct.send(new CreateBucketCommand({ Bucket: bucket }));
    await direct.send(new PutObjectCommand({ Bucket: bucket, Key: 'existing', Body: 'version one' }));
    let gateway = await startProcess(['--s3-endpoint', minio.endpoint]);
    await killMidPut(gateway, bucket, 'new-key');
    gateway = await startProcess(['--s3-endpoint', minio.endpoint]);
    await killMidPut(gateway, bucket, 'existing');
    // Positive evidence before the negative assertion: MinIO has finished with all three PUTs
    // (the first whole, the two cut short), so a partial upload would be visible by now.
    await until(async () => (await putsHandled(minio.endpoint)) >= 3);
    const head = await direct.send(new HeadObjectCommand({ Bucket: bucket, Key: 'new-key' })).catch((e: S3ServiceException) => e);
    expect((head as S3ServiceException).$metadata?.httpStatusCode).toBe(404);
    expect(await text(direct, bucket, 'existing')).toBe('version one');
    gateway = await startProcess(['--s3-endpoint', minio.endpoint]);
    const s3 = sdkClient(gateway.url);
    expect(await text(s3, bucket, 'existing')).toBe('version one');
    s3.destroy();
    direct.destroy();
    await gateway.stop();
  }
}
