/**
 * Configuration: defaults, precedence (flag over environment), extra client keys from
 * --credentials, and that a key from that file really authenticates through the gateway.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListBucketsCommand } from '@aws-sdk/client-s3';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, defaultBufferedBytes, loadServeConfig, sliceChecksFor } from '../gateway/common/config.js';
import { arenaBytes } from '../gateway/pipeline/server.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { sdkClient, startTestGateway } from './helpers/gateway.js';

const dir = mkdtempSync(join(tmpdir(), 'objectcache-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('loadServeConfig', () => {
  it('uses the documented defaults and serves the embedded store without a backend', () => {
    const config = loadServeConfig([], {});
    expect(config.host).toBe('127.0.0.1');
    expect(config.port).toBe(9080);
    expect(config.metricsPort).toBe(9081);
    expect(config.backend).toEqual({ kind: 'local', dataDir: './data' });
    expect(config.clientCredentials.map((c) => c.accessKeyId)).toEqual(['objectcache']);
  });

  it('leaves the slice checks to a client that asks for them by default; gateway always checks, client unless asked not to', () => {
    expect(loadServeConfig([], {}).descriptorGet.sliceChecks).toBe('auto');
    const cases = [
      ['auto', undefined, 'gateway'],
      ['auto', 'client', 'client'],
      ['auto', 'gateway', 'gateway'],
      ['gateway', 'client', 'gateway'],
      ['gateway', undefined, 'gateway'],
      ['client', undefined, 'client'],
      ['client', 'gateway', 'gateway'],
    ] as const;
    for (const [setting, asked, who] of cases) expect(sliceChecksFor(setting, asked), `${setting}, asked ${String(asked)}`).toBe(who);
  });

  it('gives the buffered-byte budget 1 GiB per serving process by default, within a quarter of the memory; a value set wins', () => {
    const GiB = 1024 ** 3;
    expect(defaultBufferedBytes(3, 64 * GiB)).toBe(3 * GiB);
    expect(defaultBufferedBytes(16, 16 * GiB)).toBe(4 * GiB); // a quarter of the memory
    expect(defaultBufferedBytes(3, 2 * GiB)).toBe(GiB); // never under 1 GiB
    expect(loadServeConfig(['--processes', '1'], {}).descriptorGet.maxBufferedBytes).toBe(GiB);
    expect(loadServeConfig(['--processes', '2'], {}).descriptorGet.maxBufferedBytes).toBe(defaultBufferedBytes(2));
    expect(loadServeConfig(['--processes', '3', '--max-buffered-bytes', '4096'], {}).descriptorGet.maxBufferedBytes).toBe(4096);
    // Each serving process's task-buffer arena: the whole budget alone, twice its share with others.
    expect(arenaBytes(GiB, 1)).toBe(GiB);
    expect(arenaBytes(4 * GiB, 2)).toBe(4 * GiB);
    expect(arenaBytes(16 * GiB, 16)).toBe(2 * GiB);
  });

  it('packs segments by default for the budgeted buckets only, and not at all without a budget', () => {
    expect(loadServeConfig([], {}).segments).toBeUndefined();
    expect([...(loadServeConfig(['--budget', 'kvc=1GiB'], {}).segments?.buckets ?? [])]).toEqual(['kvc']);
    expect(loadServeConfig(['--budget', 'kvc=1GiB', '--segments', 'off'], {}).segments).toBeUndefined();
    // Packs take the chunks on the embedded store (it shares the gateway's cores), the frames in front of S3.
    expect(loadServeConfig(['--budget', 'kvc=1GiB'], {}).segments?.packFrom).toBe('chunks');
    const s3 = { OBJECTCACHE_BACKEND_ACCESS_KEY: 'k', OBJECTCACHE_BACKEND_SECRET_KEY: 'secret-key' };
    expect(loadServeConfig(['--budget', 'kvc=1GiB', '--s3-endpoint', 'http://127.0.0.1:9000'], s3).segments?.packFrom).toBe('frames');
    expect(loadServeConfig(['--budget', 'kvc=1GiB', '--segment-pack-from', 'frames'], {}).segments?.packFrom).toBe('frames');
    const on = loadServeConfig(['--segments', 'on'], {}).segments;
    expect(on?.bucket).toBe('objectcache-segments');
    expect(on?.buckets).toBeUndefined();
  });

  it('lets a flag win over its environment variable', () => {
    const config = loadServeConfig(['--port', '7000'], { OBJECTCACHE_PORT: '8000', OBJECTCACHE_METRICS_PORT: '8001' });
    expect(config.port).toBe(7000);
    expect(config.metricsPort).toBe(8001);
  });

  it('reads extra client keys (with tenants) from --credentials and rejects duplicates', () => {
    const file = join(dir, 'creds.json');
    writeFileSync(
      file,
      JSON.stringify([
        { accessKeyId: 'team-a', secretAccessKey: 'team-a-secret', tenant: 'tenant-a' },
        { accessKeyId: 'team-b', secretAccessKey: 'team-b-secret' },
      ]),
    );
    const config = loadServeConfig(['--credentials', file], {});
    expect(config.clientCredentials.map((c) => [c.accessKeyId, c.tenant])).toEqual([
      ['objectcache', 'objectcache'],
      ['team-a', 'tenant-a'],
      ['team-b', 'team-b'],
    ]);
    writeFileSync(file, JSON.stringify([{ accessKeyId: 'objectcache', secretAccessKey: 'another-secret' }]));
    expect(() => loadServeConfig(['--credentials', file], {})).toThrow(ConfigError);
  });

  it('refuses a bad setting with the stable code and the setting named, as any ObjectCacheError', () => {
    let thrown: unknown;
    try {
      loadServeConfig(['--read-bytes', '12'], {});
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect(thrown).toBeInstanceOf(ObjectCacheError);
    expect(thrown).toMatchObject({ code: 'OC_ERR_CONFIG_INVALID', setting: expect.stringContaining('read-bytes') });
    expect((thrown as ObjectCacheError).details['Setting']).toContain('read-bytes');
  });

  it("refuses a bucket setting that breaks S3's naming rules, and a segment bucket that is also budgeted", () => {
    for (const args of [
      ['--budget', 'a..b=1GiB'],
      ['--budget', 'kv=1GiB', '--capacity-state-bucket', '192.168.0.1'],
      ['--segments', 'on', '--segment-bucket', 'seg.-x'],
    ]) {
      expect(() => loadServeConfig(args, {}), args.join(' ')).toThrow(/is not a bucket name/);
    }
    expect(() => loadServeConfig(['--segments', 'on', '--segment-bucket', 'kvc', '--budget', 'kvc=1GiB'], {})).toThrow(/also a budgeted bucket/);
    expect(loadServeConfig(['--segments', 'on', '--segment-bucket', 'segs', '--budget', 'kvc=1GiB'], {}).segments?.bucket).toBe('segs');
  });

  it('refuses limits that contradict each other, naming the setting (Node would throw a RangeError of its own)', () => {
    const refused = (args: string[]): unknown => {
      try {
        loadServeConfig(args, {});
      } catch (error) {
        return error;
      }
      return undefined;
    };
    expect(refused(['--request-timeout-ms', '1500'])).toMatchObject({ code: 'OC_ERR_CONFIG_INVALID', setting: 'request-timeout-ms' });
    expect(refused(['--max-connections', '6'])).toMatchObject({ code: 'OC_ERR_CONFIG_INVALID', setting: 'max-requests-per-key' });
    expect(refused(['--max-descriptor-gets', '4', '--max-descriptor-gets-per-key', '5'])).toMatchObject({ code: 'OC_ERR_CONFIG_INVALID', setting: 'max-descriptor-gets-per-key' });
    // The former names still work for one release, each named in a start-up warning.
    expect(refused(['--max-layerwise-requests', '4', '--max-layerwise-per-key', '5'])).toMatchObject({ code: 'OC_ERR_CONFIG_INVALID', setting: 'max-descriptor-gets-per-key' });
    expect(refused(['--request-timeout-ms', '1500', '--header-timeout-ms', '1000', '--max-connections', '6', '--max-requests-per-key', '4'])).toBeUndefined();
  });

  it('reads a renamed setting by its former name for one release, and says so', () => {
    const env = { OBJECTCACHE_ACCESS_KEY: 'admin-key', OBJECTCACHE_SECRET_KEY: 'admin-secret-key', OBJECTCACHE_MAX_LAYERWISE_PER_KEY: '2' };
    const config = loadServeConfig(['--max-layerwise-requests', '7'], env);
    expect(config.descriptorGet.maxDescriptorGets).toBe(7);
    expect(config.limits.maxDescriptorGetsPerKey).toBe(2);
    expect([...config.deprecatedSettings].sort()).toEqual([
      '--max-layerwise-requests is deprecated: use --max-descriptor-gets',
      'OBJECTCACHE_MAX_LAYERWISE_PER_KEY is deprecated: use OBJECTCACHE_MAX_DESCRIPTOR_GETS_PER_KEY',
    ]);
    // The new name wins over the former, with no warning for the one not used.
    const both = loadServeConfig(['--max-layerwise-requests', '7', '--max-descriptor-gets', '9'], { ...env, OBJECTCACHE_MAX_LAYERWISE_PER_KEY: '' });
    expect(both.descriptorGet.maxDescriptorGets).toBe(9);
    expect(both.deprecatedSettings).toEqual([]);
  });

  it('authenticates a key from the credentials file through the gateway', async () => {
    const file = join(dir, 'gateway-creds.json');
    writeFileSync(file, JSON.stringify([{ accessKeyId: 'fleet-7', secretAccessKey: 'fleet-7-secret' }]));
    const gw = await startTestGateway({ backend: 'local', args: ['--credentials', file] });
    try {
      const client = sdkClient(gw.url, { accessKeyId: 'fleet-7', secretAccessKey: 'fleet-7-secret' });
      expect((await client.send(new ListBucketsCommand({}))).$metadata.httpStatusCode).toBe(200);
      client.destroy();
    } finally {
      await gw.close();
    }
  });
});
