/**
 * The Python client's copy of the wire contract, client/python/src/objectcache/_contract.py, is
 * written by scripts/gen-python-contract.mjs from the built schemas and package.json; it must be
 * what the generator writes now (else: npm run -s build && node scripts/gen-python-contract.mjs).
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ERRORS } from '../schemas/errors.js';
import { DEFAULT_RETRIES, FIRST_BACKOFF_MS, MAX_RETRY_AFTER_MS, RETRY_AFTER } from '../schemas/retry-policy.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const contractPath = join(root, 'client/python/src/objectcache/_contract.py');
const generate = (...args: string[]): SpawnSyncReturns<string> => spawnSync(process.execPath, [join(root, 'scripts/gen-python-contract.mjs'), ...args], { encoding: 'utf8' });

/** The quoted codes of one frozenset of _contract.py. */
function codesOf(source: string, name: string): string[] {
  const start = source.indexOf(`${name}: Final`);
  expect(start, name).toBeGreaterThan(-1);
  const block = source.slice(start, source.indexOf('\n)\n', start));
  return [...block.matchAll(/"(OC_ERR_[A-Z0-9_]+)"/g)].map((m) => m[1] ?? '').sort();
}

describe('the Python client contract', () => {
  it('is what the generator writes from the schemas', () => {
    const result = generate('--check');
    expect(result.stdout + result.stderr, 'run: npm run -s build && node scripts/gen-python-contract.mjs').toBe('');
    expect(result.status).toBe(0);
  });

  it('is checked: a drifted file is shown as a diff and fails the check', () => {
    const dir = mkdtempSync(join(tmpdir(), 'objectcache-contract-'));
    try {
      const drifted = join(dir, '_contract.py');
      writeFileSync(drifted, readFileSync(contractPath, 'utf8').replace('        "OC_ERR_POOL_BUSY",\n', ''));
      const result = generate('--check', '--out', drifted);
      expect(result.status).toBe(1);
      expect(result.stdout).toContain('+        "OC_ERR_POOL_BUSY",');
      expect(result.stderr).toContain('node scripts/gen-python-contract.mjs');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("gives the Python client the registry's codes and retryable codes (for answers from gateways that do not say), and package.json's version", () => {
    const source = readFileSync(contractPath, 'utf8');
    expect(codesOf(source, 'KNOWN_CODES')).toEqual(Object.keys(ERRORS).sort());
    const retryable = Object.entries(ERRORS)
      .filter(([, spec]) => 'retryable' in spec)
      .map(([code]) => code)
      .sort();
    expect(codesOf(source, 'RETRYABLE_CODES')).toEqual(retryable);
    // Every 503 is a retry-later answer.
    for (const [code, spec] of Object.entries(ERRORS)) if (spec.status === 503) expect(retryable, code).toContain(code);
    const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
    expect(source).toContain(`VERSION: Final[str] = "${version}"\n`);
  });

  it('gives the Python client the one retry policy of schemas/retry-policy.ts', () => {
    const source = readFileSync(contractPath, 'utf8');
    const value = (name: string): string => source.match(new RegExp(`^${name}: Final\\[\\w+\\] = (.+)$`, 'm'))?.[1] ?? `no ${name}`;
    expect(Number(value('DEFAULT_RETRIES'))).toBe(DEFAULT_RETRIES);
    expect(Number(value('FIRST_BACKOFF_S')) * 1000).toBe(FIRST_BACKOFF_MS);
    expect(Number(value('MAX_RETRY_AFTER_S')) * 1000).toBe(MAX_RETRY_AFTER_MS);
    expect(JSON.parse(value('RETRY_AFTER_PATTERN'))).toBe(RETRY_AFTER.source);
  });
});
