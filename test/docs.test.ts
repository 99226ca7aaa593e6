/**
 * The README is the front door and docs/ what stands behind it: every setting and every error
 * code the code defines is listed in docs/reference.md, the test command CI runs is the README's,
 * and the access-policy files of docs/access-control.md load and do what it says.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Action } from '../gateway/common/access-policy.js';
import { loadServeConfig, SERVE_SETTINGS, type ClientCredential } from '../gateway/common/config.js';
import { ERRORS } from '../schemas/errors.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const reference = readFileSync(new URL('../docs/reference.md', import.meta.url), 'utf8');
const accessControl = readFileSync(new URL('../docs/access-control.md', import.meta.url), 'utf8');
const ci = readFileSync(new URL('../.ci/run', import.meta.url), 'utf8');

describe('README and docs', () => {
  it('lists every setting with its environment variable and default', () => {
    for (const spec of Object.values(SERVE_SETTINGS)) {
      const row = reference.split('\n').find((line) => line.startsWith('|') && line.includes(`\`${spec.env}\``));
      expect(row, spec.env).toBeDefined();
      expect(row).toContain(spec.default === undefined ? 'unset' : `\`${spec.default}\``);
      expect(row, `${spec.env}: run node scripts/doc-tables.mjs`).toContain(spec.description);
    }
  });

  it('lists every error code with its HTTP status and S3 code', () => {
    for (const [code, spec] of Object.entries(ERRORS)) {
      const row = reference.split('\n').find((line) => line.startsWith('|') && line.includes(`\`${code}\``));
      expect(row, code).toBeDefined();
      expect(row).toContain(spec.status === 0 ? '| — |' : `| ${spec.status} |`);
      expect(row).toContain(`\`${spec.s3Code}\` | ${'retryable' in spec ? 'yes' : 'no'} |`);
      expect(row, `${code}: run node scripts/doc-tables.mjs`).toContain(spec.description);
    }
  });

  it('names the test command that .ci/run runs, on the Node.js it names', () => {
    expect(readme).toContain('. scripts/use-node.sh && npm ci && npm test');
    expect(ci).toMatch(/^npm test$/m);
    expect(ci).toMatch(/^\. scripts\/use-node\.sh$/m);
    // One Node.js major everywhere: what the set-up installs, package.json's engines, the image, the CLI's check.
    const version = /OBJECTCACHE_NODE_VERSION:-(\d+)\.\d+\.\d+/.exec(readFileSync(new URL('../scripts/use-node.sh', import.meta.url), 'utf8'))?.[1];
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { engines: { node: string } };
    expect(pkg.engines.node).toBe(`>=${version}`);
    expect(readme).toContain(`Node.js ${version} LTS`);
    expect(readFileSync(new URL('../Dockerfile', import.meta.url), 'utf8')).toMatch(new RegExp(`^FROM node:${version}\\.`, 'm'));
    expect(readFileSync(new URL('../cli/main.ts', import.meta.url), 'utf8')).toContain(`const NODE_MAJOR = ${version};`);
  });

  it("loads the Access control section's keys.json and policies.json as written, and they do what it says", () => {
    const section = accessControl.slice(accessControl.indexOf('# Access control'), accessControl.indexOf('## What each request needs'));
    const blocks = [...section.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
    const keysJson = blocks.find((b) => b.trimStart().startsWith('['));
    const policiesJson = blocks.find((b) => b.includes('"policies"'));
    expect(keysJson && policiesJson).toBeTruthy();
    const dir = mkdtempSync(join(tmpdir(), 'objectcache-docs-'));
    try {
      let n = 0;
      writeFileSync(
        join(dir, 'keys.json'),
        (keysJson ?? '').replace(/"…"/g, () => `"readme-secret-${n++}"`),
      );
      writeFileSync(join(dir, 'policies.json'), policiesJson ?? '');
      const config = loadServeConfig(['--credentials', join(dir, 'keys.json'), '--access-policies', join(dir, 'policies.json')], {
        OBJECTCACHE_ACCESS_KEY: 'admin',
        OBJECTCACHE_SECRET_KEY: 'admin-secret',
      });
      const key = (id: string): ClientCredential => config.clientCredentials.find((c) => c.accessKeyId === id) as ClientCredential;
      const can = (id: string, action: Action, resource: string, context = {}): boolean => key(id).access.allows(action, resource, context);
      expect(can('team-a', 's3:GetObject', 'arn:aws:s3:::kvcache/team-a/x')).toBe(true);
      expect(can('team-a', 's3:GetObject', 'arn:aws:s3:::kvcache/team-b/x')).toBe(false);
      expect(can('team-b', 's3:DeleteObject', 'arn:aws:s3:::kvcache/team-a/x')).toBe(false);
      expect(can('team-a', 's3:ListBucket', 'arn:aws:s3:::kvcache', { 's3:prefix': 'team-a/' })).toBe(true);
      expect(can('team-a', 's3:ListBucket', 'arn:aws:s3:::kvcache', { 's3:prefix': 'team-b/' })).toBe(false);
      expect(can('fleet', 's3:GetObject', 'arn:aws:s3:::kvcache/team-b/x')).toBe(true);
      expect(can('fleet', 's3:GetObject', 'arn:aws:s3:::kvcache/audit/x')).toBe(false);
      expect(can('fleet', 's3:PutObject', 'arn:aws:s3:::kvcache/team-a/x')).toBe(false);
      expect(can('fleet', 'objectcache:ActAsTenant', 'arn:objectcache:::tenant/team-a')).toBe(true);
      expect(can('ops', 's3:DeleteBucket', 'arn:aws:s3:::kvcache')).toBe(true);
      expect(key('admin').access.unrestricted).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
