/**
 * The `objectcache` command as a user runs it (the compiled dist/ build): settings are validated
 * at start-up with a message naming the setting, `serve` runs the embedded store with no other
 * program, answers S3 and health checks, and stops cleanly on SIGTERM.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { readFileSync } from 'node:fs';
import { inject } from 'vitest';
import { syntheticChunk } from '../client/kv-layout.js';
import { startTestGateway } from './helpers/gateway.js';
import { describe, expect, it } from 'vitest';
import { SERVE_SETTINGS } from '../gateway/config.js';
import { CLIENT_KEY, CLIENT_SECRET, sdkClient } from './helpers/gateway.js';

const CLI = resolve(fileURLToPath(new URL('../dist/gateway/cli.js', import.meta.url)));

function run(args: string[], env: NodeJS.ProcessEnv = {}): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'], ...env }, encoding: 'utf8', timeout: 20_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

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
    const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--metrics-port', '0', '--data-dir', dataDir], {
      env: { PATH: process.env['PATH'], OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const lines: Record<string, unknown>[] = [];
      const listening = await new Promise<Record<string, unknown>>((resolveLine, reject) => {
        let buffered = '';
        child.stdout.on('data', (d: Buffer) => {
          buffered += d.toString();
          for (let at = buffered.indexOf('\n'); at !== -1; at = buffered.indexOf('\n')) {
            const record = JSON.parse(buffered.slice(0, at)) as Record<string, unknown>;
            buffered = buffered.slice(at + 1);
            lines.push(record);
            if (record['msg'] === 'gateway listening') resolveLine(record);
          }
        });
        child.once('exit', (code) => reject(new Error(`serve exited early with ${code}`)));
      });
      const url = String(listening['url']);
      expect((await fetch(`${String(listening['admin'])}/healthz`)).status).toBe(200);
      expect((await fetch(`${String(listening['admin'])}/readyz`)).status).toBe(200);
      const s3 = sdkClient(url);
      await s3.send(new CreateBucketCommand({ Bucket: 'cli-bucket' }));
      await s3.send(new PutObjectCommand({ Bucket: 'cli-bucket', Key: 'hello.txt', Body: 'hello from the embedded store' }));
      const got = await s3.send(new GetObjectCommand({ Bucket: 'cli-bucket', Key: 'hello.txt' }));
      expect(await got.Body?.transformToString()).toBe('hello from the embedded store');
      s3.destroy();
      await new Promise((r) => setTimeout(r, 50));
      const requestLines = lines.filter((l) => l['msg'] === 'request');
      expect(requestLines.length).toBeGreaterThanOrEqual(3);
      expect(requestLines.every((l) => typeof l['requestId'] === 'string' && typeof l['status'] === 'number')).toBe(true);
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('seeds a preset prefix and fetches it back layer-major and byte-exact (seed | fetch)', async () => {
    const gw = await startTestGateway({ backend: 's3', minio: inject('minio') });
    const dir = mkdtempSync(join(tmpdir(), 'objectcache-cli-kv-'));
    try {
      const env = { OBJECTCACHE_ACCESS_KEY: CLIENT_KEY, OBJECTCACHE_SECRET_KEY: CLIENT_SECRET };
      const runAsync = (args: string[], input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> =>
        new Promise((resolve) => {
          const child = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'], ...env } });
          let stdout = '';
          let stderr = '';
          child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
          child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
          child.on('close', (code) => resolve({ code, stdout, stderr }));
          child.stdin.end(input ?? '');
        });
      const seeded = await runAsync(['seed', '--endpoint', gw.url, '--bucket', 'cli-kv', '--preset', 'llama-3.2-1b', '--tokens', '100', '--chunk-tokens', '16', '--layout', 'KV_2LTD', '--seed', '7']);
      expect(seeded.code, seeded.stderr).toBe(0);
      const descriptor = JSON.parse(seeded.stdout) as { keys: string[]; layers: number; layerBytes: number; layout: string };
      expect(descriptor.keys).toHaveLength(6); // 100 tokens: 6 full chunks of 16
      expect([descriptor.layers, descriptor.layerBytes, descriptor.layout]).toEqual([16, 16 * 2048, 'KV_2LTD']);
      const out = join(dir, 'kv.bin');
      const fetched = await runAsync(['fetch', '--endpoint', gw.url, '--bucket', 'cli-kv', '--descriptor', '-', '--out', out, '--transport', 'get'], seeded.stdout);
      expect(fetched.code, fetched.stderr).toBe(0);
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
      expect(usage.code).toBe(2);
      expect(usage.stderr).toContain('--bucket');
    } finally {
      await gw.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
