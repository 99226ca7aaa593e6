/**
 * The object keys the gateway accepts, on every path that names one (request paths, copy sources,
 * DeleteObjects bodies, form uploads, descriptors, lookups). S3 allows more, but MinIO reads a
 * key with a leading `/` as the key without it and refuses `//`, `.` and `..` segments; a key that
 * the store would read as another key would let an access policy check one key while the store
 * serves another, so such keys are refused everywhere, on both backends alike.
 */

/** S3 object keys are at most 1024 bytes of UTF-8. */
export const MAX_KEY_BYTES = 1024;

/** Why `key` is not an acceptable object key (a phrase after "the key"), or undefined. */
export function objectKeyProblem(key: string): string | undefined {
  if (key === '') return 'is empty';
  if (Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES) return `is longer than ${MAX_KEY_BYTES} bytes`;
  if (key.includes('\0')) return 'contains NUL';
  if (key.startsWith('/')) return 'starts with / (MinIO would read it as the key without it)';
  if (key.includes('//')) return 'contains // (an empty path segment)';
  for (const segment of key.split('/')) if (segment === '.' || segment === '..') return 'contains a . or .. path segment';
  return undefined;
}
