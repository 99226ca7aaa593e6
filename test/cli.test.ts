/**
 * The `objectcache` command as a user runs it (the compiled dist/ build): settings are validated
 * at start-up with a message naming the setting, `serve` runs the embedded store with no other
 * program, answers S3 and health checks, and stops cleanly on SIGTERM.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { describe, expect, inject, it } from 'vitest';
import { syntheticChunk } from '../client/kv-layout.js';
import { SERVE_SETTINGS } from '../gateway/common/config.js';
import { runCli, runCliAsync, startServe } from './helpers/cli.js';
import { until } from './helpers/wait.js';
import { CLIENT_KEY, CLIENT_SECRET, sdkClient, startTestGateway } from './helpers/gateway.js';

const run = (args: string[], env: NodeJS.ProcessEnv = {}) => runCli(args, { env });

describe('objectcache CLI', () => {
  it('prints usage and every serve setting with --help', () => {
    const top = run(['--help']);
    expect(top.status).toBe(0);
    for (const command of ['serve', 'seed', 'fetch', 'plan', 'bench']) expect(top.stdout).toContain(`  ${command} `);
    for (const command of ['seed', 'fetch', 'plan', 'bench']) {
      const help = run([command, '--help']);
      expect(help.status, command).toBe(0);
      expect(help.stdout).toContain(`Usage: objectcache ${command}`);
    }
    const help = run(['serve', '--help']);
    expect(help.status).toBe(0);
    for (const spec of Object.values(SERVE_SETTINGS)) expect(help.stdout).toContain(spec.env);
  });

  it('fails fast with exit code 2 and names the bad setting', () => {
    const cases: [string[], NodeJS.ProcessEnv, string][] = [
      [['serve', '--port', 'eighty'], {}, '--port'],
      [['serve', '--port', '70000'], {}, '--port'],
      [['serve', '--s3-endpoint', 'http://127.0.0.1:9'], {}, 'OBJECTCACHE_BACKEND_ACCESS_KEY'],
      [['serve', '--s3-endpoint', 'ftp://x'], { OBJECTCACHE_BACKEND_ACCESS_KEY: 'a', OBJECTCACHE_BACKEND_SECRET_KEY: 'b' }, '--s3-endpoint'],
      [['serve', '--log-level', 'loud'], {}, '--log-level'],
      [['serve', '--no-such-flag'], {}, 'no-such-flag'],
      [['serve'], { OBJECTCACHE_SECRET_KEY: 'short' }, 'OBJECTCACHE_SECRET_KEY'],
      [['serve', '--credentials', '/nonexistent/creds.json'], {}, '--credentials'],
    ];
    for (const [args, env, setting] of cases) {
      const result = run(args, env);
      expect(result.status, `${args.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toContain(setting);
    }
    expect(run(['frobnicate']).status).toBe(2);
  });

  it('serves the embedded store with no other program and stops on SIGTERM', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'objectcache-cli-'));
    const serve = await startServe(['--data-dir', dataDir], { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET });
    try {
      expect((await fetch(`${serve.adminUrl}/healthz`)).status).toBe(200);
      expect((await fetch(`${serve.adminUrl}/readyz`)).status).toBe(200);
      const s3 = sdkClient(serve.url);
      await s3.send(new CreateBucketCommand({ Bucket: 'cli-bucket' }));
      await s3.send(new PutObjectCommand({ Bucket: 'cli-bucket', Key: 'hello.txt', Body: 'hello from the embedded store' }));
      const got = await s3.send(new GetObjectCommand({ Bucket: 'cli-bucket', Key: 'hello.txt' }));
      expect(await got.Body?.transformToString()).toBe('hello from the embedded store');
      s3.destroy();
      // One access log line per request, each with its request id and status.
      await until(() => serve.lines.filter((l) => l['msg'] === 'request').length >= 3, 5000);
      const requestLines = serve.lines.filter((l) => l['msg'] === 'request');
      expect(requestLines.every((l) => typeof l['requestId'] === 'string' && typeof l['status'] === 'number')).toBe(true);
      expect(await serve.stop()).toBe(0);
    } finally {
      serve.child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('seeds a preset prefix and fetches it back layer-major and byte-exact (seed | fetch)', async () => {
    const gw = await startTestGateway({ backend: 's3', minio: inject('minio') });
    const dir = mkdtempSync(join(tmpdir(), 'objectcache-cli-kv-'));
    try {
      const env = { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET };
      const runAsync = (args: string[], input?: string) => runCliAsync(args, { env, ...(input !== undefined ? { input } : {}) });
      const seeded = await runAsync([
        'seed',
        '--endpoint',
        gw.url,
        '--bucket',
        'cli-kv',
        '--preset',
        'llama-3.2-1b',
        '--tokens',
        '100',
        '--chunk-tokens',
        '16',
        '--layout',
        'KV_2LTD',
        '--seed',
        '7',
      ]);
      expect(seeded.status, seeded.stderr).toBe(0);
      const descriptor = JSON.parse(seeded.stdout) as { keys: string[]; layers: number; layerBytes: number; layout: string };
      expect(descriptor.keys).toHaveLength(6); // 100 tokens: 6 full chunks of 16
      expect([descriptor.layers, descriptor.layerBytes, descriptor.layout]).toEqual([16, 16 * 2048, 'KV_2LTD']);
      const out = join(dir, 'kv.bin');
      const fetched = await runAsync(['fetch', '--endpoint', gw.url, '--bucket', 'cli-kv', '--descriptor', '-', '--out', out, '--transport', 'get'], seeded.stdout);
      expect(fetched.status, fetched.stderr).toBe(0);
      expect(fetched.stdout.split('\n').filter((l) => /^\d+\t/.test(l))).toHaveLength(16);
      expect(fetched.stdout).toMatch(/delivered 3\.0 MiB .* mode chunkwise/);
      const bytes = readFileSync(out);
      const S = descriptor.layerBytes;
      for (let l = 0; l < 16; l++) {
        for (let c = 0; c < 6; c++) {
          const expected = syntheticChunk(7, c, 16 * S).subarray(l * S, (l + 1) * S);
          expect(Buffer.compare(bytes.subarray((l * 6 + c) * S, (l * 6 + c + 1) * S), expected)).toBe(0);
        }
      }
      const usage = await runAsync(['fetch', '--endpoint', gw.url]);
      expect(usage.status).toBe(2);
      expect(usage.stderr).toContain('--bucket');
    } finally {
      await gw.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
