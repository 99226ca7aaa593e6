/**
 * The compose deployment, checked structurally (no container engine runs here): services, pinned
 * images, ports, health checks, start order, volumes, the Dockerfile, and that the Prometheus
 * configuration and the Grafana dashboard parse and name only metrics the gateway really exports.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';

import { loadServeConfig } from '../gateway/common/config.js';
import { startTestGateway, uniqueBucket, type TestGateway, testClient } from './helpers/gateway.js';
import { descriptorOf, seedPrefix } from './helpers/kv.js';

const root = new URL('../', import.meta.url);
const read = (path: string): string => readFileSync(new URL(path, root), 'utf8');

interface Service {
  image?: string;
  build?: string;
  ports?: string[];
  volumes?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
  command?: string[];
  environment?: Record<string, string>;
}

const compose = parse(read('compose.yaml')) as { services: Record<string, Service>; volumes: Record<string, unknown> };
const dashboard = JSON.parse(read('deploy/grafana/dashboards/objectcache.json')) as { panels: { title: string; targets: { expr: string }[] }[] };
const prometheus = parse(read('deploy/prometheus/prometheus.yml')) as { scrape_configs: { job_name: string; metrics_path: string; static_configs: { targets: string[] }[] }[] };

describe('compose.yaml', () => {
  it('runs MinIO, a one-shot bucket creation, the gateway, Prometheus and Grafana', () => {
    expect(Object.keys(compose.services).sort()).toEqual(['create-bucket', 'gateway', 'grafana', 'minio', 'prometheus']);
  });

  it('pins every image to a version', () => {
    for (const [name, service] of Object.entries(compose.services)) {
      if (service.build) continue;
      expect(service.image, name).toMatch(/^[\w./-]+:[\w.-]+$/);
      expect(service.image, name).not.toMatch(/:latest$/);
    }
  });

  it('builds the gateway from the Dockerfile, publishes its ports and checks its health', () => {
    const gateway = compose.services['gateway'] as Service;
    expect(gateway.build).toBe('.');
    expect(gateway.ports).toEqual(expect.arrayContaining(['9080:9080', '9081:9081']));
    expect(gateway.healthcheck?.test.join(' ')).toContain('/readyz');
    expect(gateway.command).toEqual(expect.arrayContaining(['--s3-endpoint', 'http://minio:9000', '--host', '0.0.0.0', '--metrics-host', '0.0.0.0']));
    expect(gateway.depends_on).toEqual({ minio: { condition: 'service_healthy' }, 'create-bucket': { condition: 'service_completed_successfully' } });
    expect(Object.keys(gateway.environment ?? {})).toEqual(
      expect.arrayContaining(['OBJECTCACHE_ACCESS_KEY', 'OBJECTCACHE_SECRET_KEY', 'OBJECTCACHE_BACKEND_ACCESS_KEY', 'OBJECTCACHE_BACKEND_SECRET_KEY']),
    );
    // Protected mode: no default client secret, since the gateway listens on 0.0.0.0 in its container.
    const environment = gateway.environment ?? {};
    expect(environment['OBJECTCACHE_SECRET_KEY']).toMatch(/^\$\{OBJECTCACHE_SECRET_KEY:\?/);
    expect(environment['OBJECTCACHE_ACCESS_KEY']).toMatch(/^\$\{OBJECTCACHE_ACCESS_KEY:\?/);
    const args = (gateway.command ?? []).slice(1).map((arg) => arg.replace(/\$\{\w+:-([^}]*)\}/, '$1'));
    const backendEnv = { OBJECTCACHE_BACKEND_ACCESS_KEY: 'minioadmin', OBJECTCACHE_BACKEND_SECRET_KEY: 'minioadmin' };
    expect(() => loadServeConfig(args, { ...backendEnv, OBJECTCACHE_ACCESS_KEY: 'objectcache', OBJECTCACHE_SECRET_KEY: 'objectcache-secret' })).toThrow(/published trial secret/);
    expect(loadServeConfig(args, { ...backendEnv, OBJECTCACHE_ACCESS_KEY: 'ops', OBJECTCACHE_SECRET_KEY: 'a-real-secret-1' }).host).toBe('0.0.0.0');
    const dockerfile = read('Dockerfile');
    expect(dockerfile).toMatch(/^EXPOSE 9080 9081$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK /m);
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toContain('dist/cli/main.js');
  });

  it('starts services in order, with health checks and declared volumes', () => {
    expect(compose.services['minio']?.healthcheck).toBeDefined();
    expect(compose.services['create-bucket']?.depends_on).toEqual({ minio: { condition: 'service_healthy' } });
    expect(compose.services['prometheus']?.depends_on).toEqual({ gateway: { condition: 'service_healthy' } });
    expect(compose.services['grafana']?.depends_on).toEqual({ prometheus: { condition: 'service_healthy' } });
    for (const [name, service] of Object.entries(compose.services)) {
      for (const volume of service.volumes ?? []) {
        const source = volume.split(':')[0] as string;
        if (source.startsWith('./')) expect(existsSync(fileURLToPath(new URL(source, root))), `${name}: ${source}`).toBe(true);
        else expect(Object.keys(compose.volumes), `${name}: ${source}`).toContain(source);
      }
    }
  });

  it('points Prometheus at the gateway admin port and Grafana at Prometheus', () => {
    const job = prometheus.scrape_configs.find((j) => j.job_name === 'objectcache-gateway');
    expect(job?.metrics_path).toBe('/metrics');
    expect(job?.static_configs[0]?.targets).toEqual(['gateway:9081']);
    const datasource = parse(read('deploy/grafana/provisioning/datasources/prometheus.yml')) as { datasources: { url: string; uid: string }[] };
    expect(datasource.datasources[0]?.url).toBe('http://prometheus:9090');
    const provider = parse(read('deploy/grafana/provisioning/dashboards/objectcache.yml')) as { providers: { options: { path: string } }[] };
    expect(provider.providers[0]?.options.path).toBe('/var/lib/grafana/dashboards');
    expect(compose.services['grafana']?.volumes).toEqual(expect.arrayContaining(['./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro']));
  });
});

describe('deploy/distributed/compose.yaml', () => {
  const dist = parse(read('deploy/distributed/compose.yaml'), { merge: true }) as { services: Record<string, Service & { image?: string }>; volumes: Record<string, unknown> };
  const nginx = read('deploy/distributed/nginx.conf');
  const scrape = parse(read('deploy/distributed/prometheus.yml')) as { scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[] };

  it('runs four MinIO servers of two drives each as one erasure-coded cluster', () => {
    const minios = Object.entries(dist.services).filter(([name]) => /^minio\d$/.test(name));
    expect(minios.map(([name]) => name).sort()).toEqual(['minio1', 'minio2', 'minio3', 'minio4']);
    for (const [name, service] of minios) {
      expect(service.command, name).toEqual(['server', '--console-address', ':9001', 'http://minio{1...4}/data{1...2}']);
      expect(service.volumes, name).toEqual([`${name}-data1:/data1`, `${name}-data2:/data2`]);
      expect(service.healthcheck, name).toBeDefined();
      for (const volume of service.volumes ?? []) expect(Object.keys(dist.volumes)).toContain(volume.split(':')[0]);
    }
  });

  it('puts two gateways, each on its own MinIO server, behind nginx, and scrapes both', () => {
    for (const [name, endpoint] of [
      ['gateway1', 'http://minio1:9000'],
      ['gateway2', 'http://minio2:9000'],
    ] as const) {
      const gateway = dist.services[name] as Service;
      expect(gateway.build, name).toBe('../..');
      expect(gateway.command, name).toEqual(expect.arrayContaining(['serve', '--s3-endpoint', endpoint, '--host', '0.0.0.0', '--metrics-host', '0.0.0.0', '--cap']));
      expect(gateway.healthcheck?.test.join(' '), name).toContain('/readyz');
      expect(Object.keys(gateway.depends_on ?? {}).sort(), name).toEqual(['create-bucket', 'minio1', 'minio2', 'minio3', 'minio4']);
    }
    const lb = dist.services['load-balancer'] as Service & { image: string };
    expect(lb.image).toMatch(/^nginx:[\d.]+-alpine$/);
    expect(lb.ports).toEqual(['9080:9080']);
    expect(lb.depends_on).toEqual({ gateway1: { condition: 'service_healthy' }, gateway2: { condition: 'service_healthy' } });
    expect(nginx).toMatch(/server gateway1:9080/);
    expect(nginx).toMatch(/server gateway2:9080/);
    // Frames must not wait in nginx, uploads stream, SigV4's Host survives, POST/PUT are never replayed.
    for (const directive of ['proxy_buffering off;', 'proxy_request_buffering off;', 'proxy_set_header Host $http_host;']) expect(nginx).toContain(directive);
    expect(nginx).not.toMatch(/non_idempotent/);
    expect(scrape.scrape_configs.find((j) => j.job_name === 'objectcache')?.static_configs[0]?.targets).toEqual(['gateway1:9081', 'gateway2:9081']);
    for (const [name, service] of Object.entries(dist.services)) {
      if (service.build) continue;
      expect(service.image, name).toMatch(/^[\w./-]+:[\w.-]+$/);
    }
  });
});

describe('the Grafana dashboard', () => {
  let gw: TestGateway;
  let exported = '';

  beforeAll(async () => {
    gw = await startTestGateway({ backend: 'local', args: ['--cap', '1GB/s', '--threshold', '0'] });
    const client = testClient(gw, uniqueBucket('dash'));
    await client.ensureBucket();
    const prefix = await seedPrefix(client, { chunks: 2, layers: 2, layerBytes: 1024, layout: 'KV_L2TD' });
    await client.fetch(descriptorOf(prefix, { tenant: 'dashboard' }));
    await client.close();
    exported = await (await fetch(`${gw.gateway.adminUrl}/metrics`)).text();
  });

  afterAll(async () => {
    await gw?.close();
  });

  it('shows bandwidth shares, predicted stall and layer latency', () => {
    const titles = dashboard.panels.map((p) => p.title.toLowerCase()).join(' | ');
    for (const topic of ['bandwidth shares', 'predicted stall', 'layer-ready latency']) expect(titles).toContain(topic);
  });

  it('queries only metrics the gateway exports', () => {
    const names = new Set<string>();
    for (const panel of dashboard.panels) for (const target of panel.targets) for (const m of target.expr.matchAll(/objectcache_[a-z_]+/g)) names.add(m[0]);
    expect(names.size).toBeGreaterThan(8);
    for (const name of names) expect(exported, name).toMatch(new RegExp(`^# TYPE ${name.replace(/_(bucket|sum|count)$/, '')} `, 'm'));
  });
});
