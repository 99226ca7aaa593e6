/**
 * Vitest global setup: brings dist/ up to date (the read workers and the CLI run from the
 * compiled build, so a stale build would test old code), builds MinIO when needed and runs one
 * server for the whole run. Integration tests never skip for want of MinIO: if it cannot be
 * built, the run fails.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { installMinio, repoRoot, startMinio, type MinioInfo } from './helpers/minio.js';

const SOURCES = ['cli', 'gateway', 'http-range', 'test/helpers/minio.ts', 'schemas', 'sigv4', 'client', 'bench', 'native'];

/** True when some compiled source is missing from dist/ or older than its .ts. */
function distIsStale(root: string): boolean {
  const stale = (path: string): boolean => {
    const built = join(root, 'dist', path.replace(/\.ts$/, '.js').replace(/\.cts$/, '.cjs'));
    return !existsSync(built) || statSync(built).mtimeMs < statSync(join(root, path)).mtimeMs;
  };
  const walk = (dir: string): boolean =>
    readdirSync(join(root, dir), { withFileTypes: true }).some((entry) => {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) return walk(path);
      if (!(entry.name.endsWith('.ts') || entry.name.endsWith('.cts')) || entry.name.endsWith('.d.ts')) return false;
      return stale(path);
    });
  return SOURCES.some((source) => existsSync(join(root, source)) && (source.endsWith('.ts') ? stale(source) : walk(source)));
}

declare module 'vitest' {
  export interface ProvidedContext {
    minio: MinioInfo;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const root = repoRoot();
  if (distIsStale(root)) execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.json')], { stdio: 'inherit' });
  // The native modules (rebuilt only when their source changed).
  execFileSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], { stdio: 'inherit' });
  const binary = installMinio();
  const minio = await startMinio({ binary });
  project.provide('minio', { endpoint: minio.endpoint, accessKey: minio.accessKey, secretKey: minio.secretKey, binary });
  return () => minio.destroy();
}
