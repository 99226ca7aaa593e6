/**
 * The sorted key index of one bucket of the embedded store, answering ListObjects with prefix,
 * delimiter and a resume marker. Keys are ordered by Unicode code point, which is the UTF-8 byte
 * order S3 lists in (JavaScript's `<` compares UTF-16 code units and would misplace keys with
 * characters above U+FFFF).
 */

/** Compares two strings in code-point (UTF-8 byte) order. */
export function compareKeys(a: string, b: string): number {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // Surrogates (D800-DFFF) encode code points above FFFF: move them past E000-FFFF.
    if (x >= 0xd800) x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
    if (y >= 0xd800) y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    return x - y;
  }
  return a.length - b.length;
}

export interface ListOptions {
  readonly prefix: string;
  readonly delimiter: string;
  /** Resume strictly after this key or common prefix (marker, start-after, continuation). */
  readonly after: string | undefined;
  readonly maxKeys: number;
}

export interface ListPage<T> {
  readonly contents: T[];
  readonly commonPrefixes: string[];
  readonly isTruncated: boolean;
  /** The last key or common prefix returned; resume after it. */
  readonly next: string | undefined;
}

export class KeyIndex<T> {
  readonly #keys: string[] = [];
  readonly #values = new Map<string, T>();

  get size(): number {
    return this.#keys.length;
  }

  get(key: string): T | undefined {
    return this.#values.get(key);
  }

  /** Index of the first key >= `key`. */
  #lowerBound(key: string): number {
    let lo = 0;
    let hi = this.#keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareKeys(this.#keys[mid] as string, key) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  set(key: string, value: T): void {
    if (!this.#values.has(key)) this.#keys.splice(this.#lowerBound(key), 0, key);
    this.#values.set(key, value);
  }

  delete(key: string): boolean {
    if (!this.#values.delete(key)) return false;
    const at = this.#lowerBound(key);
    if (this.#keys[at] === key) this.#keys.splice(at, 1);
    return true;
  }

  *values(): IterableIterator<T> {
    for (const key of this.#keys) yield this.#values.get(key) as T;
  }

  list(options: ListOptions): ListPage<T> {
    const { prefix, delimiter, after, maxKeys } = options;
    const contents: T[] = [];
    const commonPrefixes: string[] = [];
    let start = this.#lowerBound(prefix);
    if (after !== undefined && compareKeys(after, prefix) >= 0) {
      start = this.#lowerBound(after);
      if (this.#keys[start] === after) start++;
    }
    let last: string | undefined;
    let lastPrefix: string | undefined;
    for (let i = start; i < this.#keys.length; i++) {
      const key = this.#keys[i] as string;
      if (!key.startsWith(prefix)) break;
      let item: string = key;
      let isPrefix = false;
      if (delimiter !== '') {
        const at = key.indexOf(delimiter, prefix.length);
        if (at !== -1) {
          item = key.slice(0, at + delimiter.length);
          isPrefix = true;
          if (item === lastPrefix || (after !== undefined && after.startsWith(item))) continue;
        }
      }
      if (contents.length + commonPrefixes.length >= maxKeys) return { contents, commonPrefixes, isTruncated: true, next: last };
      if (isPrefix) {
        commonPrefixes.push(item);
        lastPrefix = item;
      } else {
        contents.push(this.#values.get(key) as T);
      }
      last = item;
    }
    return { contents, commonPrefixes, isTruncated: false, next: last };
  }
}
