#!/usr/bin/env node
// Regenerates the settings and error tables of docs/reference.md from the code's registries
// (gateway/common/config.ts SERVE_SETTINGS, schemas/errors.ts ERRORS). Run after `npm run build`:
//   node scripts/doc-tables.mjs
import { readFileSync, writeFileSync } from 'node:fs';
import { SERVE_SETTINGS } from '../dist/gateway/common/config.js';
import { ERRORS } from '../dist/schemas/errors.js';

const settings = ['| Flag | Environment variable | Default | Meaning |', '|---|---|---|---|'];
for (const s of Object.values(SERVE_SETTINGS)) {
  const former = s.deprecated ? ` Formerly \`--${s.deprecated.flag}\` / \`${s.deprecated.env}\`, still read (deprecated, for one release).` : '';
  settings.push(`| ${s.envOnly ? '—' : `\`--${s.flag}\``} | \`${s.env}\` | ${s.default === undefined ? 'unset' : `\`${s.default}\``} | ${s.description}${former} |`);
}
const errors = ['| Code | HTTP | S3 code | Retry | When |', '|---|---|---|---|---|'];
for (const [code, e] of Object.entries(ERRORS))
  errors.push(`| \`${code}\` | ${e.status === 0 ? '—' : e.status} | \`${e.s3Code}\` | ${e.retryable ? 'yes' : 'no'} | ${e.description} |`);

const url = new URL('../docs/reference.md', import.meta.url);
let readme = readFileSync(url, 'utf8');
for (const [name, rows] of [
  ['settings', settings],
  ['errors', errors],
]) {
  const start = `<!-- ${name}:start -->`;
  const end = `<!-- ${name}:end -->`;
  const a = readme.indexOf(start);
  const b = readme.indexOf(end);
  if (a === -1 || b === -1) throw new Error(`docs/reference.md lacks the ${start} ... ${end} markers`);
  readme = `${readme.slice(0, a + start.length)}\n${rows.join('\n')}\n${readme.slice(b)}`;
}
writeFileSync(url, readme);
