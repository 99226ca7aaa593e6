/**
 * A chunk's place in its prefix, recorded with the object by the writer: the user metadata
 * `objectcache-after` names the chunk before it. The gateway's capacity management reads it on
 * the write and again when it lists a bucket (gateway/capacity/), so a budgeted bucket knows the
 * chains of chunks written without a lookup first, and after its journals are lost.
 */

/** The metadata name (without `x-amz-meta-`). */
export const AFTER_META = 'objectcache-after';

/** Longer keys are not recorded (a writer's explicit `after` is refused, a batch's own keys start no chain): S3 allows 2 KB of user metadata in all (per-layer CRC-32Cs too). */
export const MAX_AFTER_KEY = 512;

/** What a recorded key may hold: printable ASCII (a header value the store and every client read alike). */
export const AFTER_KEY = /^[\x20-\x7e]*$/;

/** Whether `key` can be recorded as the chunk before another (the clients refuse another as an explicit `after`, OC_ERR_CLIENT_USAGE, and record none for it in a batch). */
export function recordableAfter(key: string): boolean {
  return key.length <= MAX_AFTER_KEY && AFTER_KEY.test(key);
}
