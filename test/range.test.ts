import { describe, expect, it } from 'vitest';
import { ObjectCacheError } from '../schemas/errors.js';
import { parseRange } from '../gateway/s3/range.js';

describe('parseRange', () => {
  it('parses the single-range forms S3 supports', () => {
    expect(parseRange('bytes=0-9', 100)).toEqual({ start: 0, end: 9 });
    expect(parseRange('bytes=90-', 100)).toEqual({ start: 90, end: 99 });
    expect(parseRange('bytes=-5', 100)).toEqual({ start: 95, end: 99 });
    expect(parseRange('bytes=-500', 100)).toEqual({ start: 0, end: 99 });
    expect(parseRange('bytes=50-5000', 100)).toEqual({ start: 50, end: 99 });
  });

  it('ignores malformed and multi-range headers (the whole object is served)', () => {
    for (const header of ['bytes=5-2', 'bytes=0-1,3-4', 'items=0-1', 'bytes=-', 'bytes=a-b', undefined]) expect(parseRange(header, 100)).toBeUndefined();
  });

  it('rejects ranges that do not overlap the object with OC_ERR_STORE_INVALID_RANGE', () => {
    for (const [header, size] of [
      ['bytes=100-', 100],
      ['bytes=-0', 100],
      ['bytes=0-0', 0],
    ] as const) {
      try {
        parseRange(header, size);
        expect.unreachable();
      } catch (error) {
        expect((error as ObjectCacheError).code).toBe('OC_ERR_STORE_INVALID_RANGE');
        expect((error as ObjectCacheError).status).toBe(416);
      }
    }
  });
});
