/**
 * Compares a signature we computed with the one a request carries in constant time, so the
 * time a rejection takes says nothing about how many leading characters matched.
 */
import { timingSafeEqual } from 'node:crypto';

export function sameSignature(expected: string, actual: string): boolean {
  const a = Buffer.from(expected, 'utf8');
  const b = Buffer.from(actual, 'utf8');
  return a.length === b.length && timingSafeEqual(a, b);
}
