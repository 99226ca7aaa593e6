/**
 * The README is the front door: every setting and every error code the code defines is listed
 * there, and the test command CI runs is the README's.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SERVE_SETTINGS } from '../gateway/config.js';
import { ERRORS } from '../schemas/errors.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const ci = readFileSync(new URL('../.ci/run', import.meta.url), 'utf8');

describe('README', () => {
  it('lists every setting with its environment variable and default', () => {
    for (const spec of Object.values(SERVE_SETTINGS)) {
      const row = readme.split('\n').find((line) => line.startsWith('|') && line.includes(`\`${spec.env}\``));
      expect(row, spec.env).toBeDefined();
      expect(row).toContain(spec.default === undefined ? 'unset' : `\`${spec.default}\``);
      expect(row, `${spec.env}: run node scripts/readme-tables.mjs`).toContain(spec.description);
    }
  });

  it('lists every error code with its HTTP status and S3 code', () => {
    for (const [code, spec] of Object.entries(ERRORS)) {
      const row = readme.split('\n').find((line) => line.startsWith('|') && line.includes(`\`${code}\``));
      expect(row, code).toBeDefined();
      expect(row).toContain(spec.status === 0 ? '| — |' : `| ${spec.status} |`);
      expect(row).toContain(`\`${spec.s3Code}\``);
      expect(row, `${code}: run node scripts/readme-tables.mjs`).toContain(spec.description);
    }
  });

  it('names the test command that .ci/run runs', () => {
    expect(readme).toContain('npm ci && npm test');
    expect(ci).toMatch(/^npm test$/m);
  });
});
