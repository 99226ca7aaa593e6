/**
 * The single byte range S3 supports on GET (RFC 9110 section 14.1.2). A syntactically invalid
 * or multi-range header is ignored and the whole object is served, as S3 does; a valid range
 * that does not overlap the object is 416 InvalidRange.
 */
import { ObjectCacheError } from '../../schemas/errors.js';

export interface ByteRange {
  readonly start: number;
  /** Inclusive. */
  readonly end: number;
}

export function parseRange(header: string | undefined, size: number): ByteRange | undefined {
  if (header === undefined) return undefined;
  const m = /^\s*bytes=(\d*)-(\d*)\s*$/.exec(header);
  if (!m) return undefined;
  const [, first = '', last = ''] = m;
  if (first === '' && last === '') return undefined;
  const unsatisfiable = (): ObjectCacheError =>
    new ObjectCacheError('OC_ERR_STORE_INVALID_RANGE', 'The requested range is not satisfiable', {
      details: { RangeRequested: header.trim(), ActualObjectSize: size, ObjectSize: size },
    });
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0 || size === 0) throw unsatisfiable();
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? Number.MAX_SAFE_INTEGER : Number(last);
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || end < start) return undefined;
  if (start >= size) throw unsatisfiable();
  return { start, end: Math.min(end, size - 1) };
}
