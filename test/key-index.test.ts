/**
 * The embedded store's key index against brute-force models: code-point order equals UTF-8 byte
 * order, and paging through a listing (prefix, delimiter, any page size) yields exactly what S3
 * semantics say, with no key or common prefix lost or repeated.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareKeys, KeyIndex } from '../gateway/stores/embedded/key-index.js';

const keyArb = fc.string({ unit: fc.constantFrom('a', 'b', '/', '-', 'é', '\u{E000}', '\u{1F9E0}', 'z'), minLength: 1, maxLength: 6 });

function model(keys: string[], prefix: string, delimiter: string): string[] {
  const sorted = [...new Set(keys)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const out: string[] = [];
  for (const key of sorted) {
    if (!key.startsWith(prefix)) continue;
    const at = delimiter === '' ? -1 : key.indexOf(delimiter, prefix.length);
    const item = at === -1 ? key : key.slice(0, at + delimiter.length);
    if (out.at(-1) !== item) out.push(item);
  }
  return out;
}

describe('compareKeys', () => {
  it('orders strings as their UTF-8 bytes', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.string({ unit: 'binary' }), (a, b) => {
        expect(Math.sign(compareKeys(a, b))).toBe(Math.sign(Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'))));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('KeyIndex.list', () => {
  it('pages through exactly the model listing for any prefix, delimiter and page size', () => {
    fc.assert(
      fc.property(
        fc.array(keyArb, { maxLength: 40 }),
        fc.constantFrom('', 'a', 'b/', 'a/'),
        fc.constantFrom('', '/', '-'),
        fc.integer({ min: 1, max: 7 }),
        (keys, prefix, delimiter, pageSize) => {
          const index = new KeyIndex<string>();
          for (const key of keys) index.set(key, key);
          const seen: string[] = [];
          let after: string | undefined;
          for (let guard = 0; guard < 100; guard++) {
            const page = index.list({ prefix, delimiter, after, maxKeys: pageSize });
            expect(page.contents.length + page.commonPrefixes.length).toBeLessThanOrEqual(pageSize);
            const items = [...page.contents, ...page.commonPrefixes].sort((a, b) => compareKeys(a, b));
            seen.push(...items);
            if (!page.isTruncated) break;
            after = page.next;
          }
          expect(seen).toEqual(model(keys, prefix, delimiter));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('removes keys and keeps the order', () => {
    const index = new KeyIndex<number>();
    ['b', 'a', 'c', 'a/b'].forEach((k, i) => index.set(k, i));
    expect(index.delete('a')).toBe(true);
    expect(index.delete('missing')).toBe(false);
    expect(index.list({ prefix: '', delimiter: '', after: undefined, maxKeys: 10 }).contents).toEqual([3, 0, 2]);
  });
});
