/**
 * The documentation names real things: every relative link of the README and the pages under
 * docs/ leads to a file that exists (and, with a #fragment, to a heading there); every repository
 * path written as code (`gateway/capacity/capacity.ts`) exists; and a symbol written right after
 * such a path (`gateway/common/config.ts` `SERVE_SETTINGS`) occurs in that file. A page that names a
 * file after it moved, or a function after it was renamed, fails here.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const pages = [
  'README.md',
  'schemas/wire-format.md',
  'client/python/README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
/** Top-level folders a path in the docs may start with (generated ones, dist/ and data/, are not checked). */
const tracked = new Set(readdirSync(root).filter((name) => !name.startsWith('.') && !['node_modules', 'dist', 'data'].includes(name) && statSync(join(root, name)).isDirectory()));

/** Text outside fenced code blocks (their contents are commands and output, not references). */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, '');
}

/** GitHub's anchor for a heading. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_\- ]/gu, '')
    .replace(/ /g, '-');
}

function anchors(file: string): Set<string> {
  const text = prose(readFileSync(file, 'utf8'));
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1] ?? '')));
}

describe('documentation references', () => {
  it.each(pages)('%s: every relative link leads to a file, and a #fragment to a heading', (page) => {
    const file = join(root, page);
    const text = prose(readFileSync(file, 'utf8'));
    const broken: string[] = [];
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1] ?? '';
      if (/^[a-z]+:/i.test(target)) continue; // http:, https:, mailto:
      const [path = '', fragment] = target.split('#');
      const to = path === '' ? file : resolve(dirname(file), path);
      if (!existsSync(to)) {
        broken.push(`${target}: no such file`);
        continue;
      }
      if (fragment && to.endsWith('.md') && !anchors(to).has(fragment)) broken.push(`${target}: no heading #${fragment} in ${relative(root, to)}`);
    }
    expect(broken).toEqual([]);
  });

  it.each(pages)('%s: every repository path it names exists, and every symbol named after one occurs in it', (page) => {
    const text = prose(readFileSync(join(root, page), 'utf8'));
    const missing: string[] = [];
    const spans = [...text.matchAll(/`([^`\n]+)`(?:[ \t]+`([^`\n]+)`)?/g)];
    for (const m of spans) {
      const path = (m[1] ?? '').replace(/[:,]$/, '');
      const top = path.split('/')[0] ?? '';
      if (!/^[\w.-]+\/[\w./-]*[\w]$/.test(path) || !tracked.has(top)) continue;
      if (path.includes('*') || /-latest\.|\/results\//.test(path)) continue; // globs; results a run writes
      const where = join(root, path);
      if (!existsSync(where)) {
        missing.push(`${path}: no such file`);
        continue;
      }
      const symbol = m[2]?.replace(/\(\)$/, '').replace(/^[.#]/, '');
      if (symbol && /^[A-Za-z_$][\w$]*(\.[A-Za-z_$#][\w$]*)?$/.test(symbol) && statSync(where).isFile()) {
        const source = readFileSync(where, 'utf8');
        for (const part of symbol.split('.')) if (!source.includes(part.replace(/^#/, ''))) missing.push(`${path} names no ${part}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
