/**
 * A chunk's token ids, recorded with the object by the writer: the user metadata
 * `objectcache-tokens` holds them as unsigned LEB128 varints in base64url (about three bytes a
 * token for today's vocabularies, so a 256-token chunk takes about 1 KB of S3's 2 KB of user
 * metadata). The gateway publishes them in its KV events (docs/kv-events.md), which is what lets a
 * KV-aware router (llm-d, Dynamo) key the chunk by its tokens. Token ids are prompt content: they
 * go only to the event subscribers the operator configured, and only with the tenant's topic.
 *
 * Where a chunk's key is an ObjectCache key (schemas/wire-format.md section 1: `<namespace>/<layout
 * fingerprint>/<SHA-256 chain hash>`), the tokens are checked against it: the key's hash must be
 * SHA-256 of the hash before it (the key the writer names in `objectcache-after`, or the layout
 * fingerprint for a prefix's first chunk) and the tokens as u32 LE. So a writer cannot announce
 * tokens that its chunk does not hold.
 */
import { createHash } from 'node:crypto';
import { AFTER_META } from './chain.js';

/** The metadata name (without `x-amz-meta-`). */
export const TOKENS_META = 'objectcache-tokens';

/** The metadata a writer names its chunk's model in (a KV events topic's `{model}`). */
export const MODEL_META = 'objectcache-model';

/** A model name a KV events topic may carry: 1 to 256 printable characters, no spaces, no `@` (llm-d splits topics at it). */
export const MODEL_NAME = /^[\x21-\x3f\x41-\x7e]{1,256}$/;

/** Longer values are refused: with the layer CRCs and the chain they must fit S3's 2 KB of user metadata. */
export const MAX_TOKENS_META_CHARS = 1400;

/** S3's limit on an object's user metadata (gateway/s3/metadata.ts enforces it). */
export const MAX_USER_METADATA_BYTES = 2 * 1024;

/**
 * The bytes `meta` (names without `x-amz-meta-`) takes as MinIO counts them, the prefix included
 * (stricter than S3's count): a writer leaves its tokens out where they would take it past
 * MAX_USER_METADATA_BYTES (they serve KV events only; the CRCs and the chain are kept).
 */
export function userMetadataBytes(meta: Readonly<Record<string, string>>): number {
  let bytes = 0;
  for (const [name, value] of Object.entries(meta)) bytes += 'x-amz-meta-'.length + name.length + value.length;
  return bytes;
}

/** What a recorded value may hold: base64url without padding. */
const TOKENS_VALUE = /^[A-Za-z0-9_-]*$/;

/** The metadata value for `tokens` (each a u32), or undefined when it would not fit. */
export function encodeTokens(tokens: ArrayLike<number>): string | undefined {
  const bytes: number[] = [];
  for (let i = 0; i < tokens.length; i++) {
    let value = (tokens[i] as number) >>> 0;
    while (value >= 0x80) {
      bytes.push((value & 0x7f) | 0x80);
      value >>>= 7;
    }
    bytes.push(value);
  }
  const text = Buffer.from(bytes).toString('base64url');
  return text.length <= MAX_TOKENS_META_CHARS ? text : undefined;
}

/** The token ids a recorded value holds, or undefined when it is not one (malformed, too long, empty). */
export function decodeTokens(value: string | undefined): number[] | undefined {
  if (value === undefined || value.length === 0 || value.length > MAX_TOKENS_META_CHARS || !TOKENS_VALUE.test(value)) return undefined;
  const bytes = Buffer.from(value, 'base64url');
  const tokens: number[] = [];
  let current = 0;
  let shift = 0;
  for (const byte of bytes) {
    if (shift === 28 && byte > 0x0f) return undefined; // past 32 bits
    current += (byte & 0x7f) * 2 ** shift;
    if (byte & 0x80) {
      shift += 7;
      continue;
    }
    tokens.push(current);
    current = 0;
    shift = 0;
  }
  return shift === 0 && tokens.length > 0 ? tokens : undefined;
}

/** An ObjectCache chunk key: its layout fingerprint and chain hash (lower-case hex). */
const OBJECTCACHE_KEY = /(?:^|\/)([0-9a-f]{16})\/([0-9a-f]{64})$/;

export type TokensCheck = 'verified' | 'mismatch' | 'unkeyed';

/**
 * Whether `tokens` are what the chunk `key` holds: `verified` when the key is an ObjectCache key
 * whose hash chains from `after` (or, without it, from the layout fingerprint) over these tokens;
 * `mismatch` when it is such a key and they are not; `unkeyed` when the key is named some other
 * way (an engine's own naming, as LMCache's), so nothing can be checked.
 */
export function checkTokens(key: string, after: string | undefined, tokens: readonly number[]): TokensCheck {
  const match = OBJECTCACHE_KEY.exec(key);
  if (!match) return 'unkeyed';
  const [, fingerprint, hash] = match as unknown as [string, string, string];
  let previous: Buffer;
  if (after === undefined) previous = Buffer.from(fingerprint, 'utf8');
  else {
    const before = OBJECTCACHE_KEY.exec(after);
    if (!before || before[1] !== fingerprint) return 'mismatch';
    previous = Buffer.from(before[2] as string, 'hex');
  }
  const buffer = Buffer.alloc(tokens.length * 4);
  tokens.forEach((token, i) => buffer.writeUInt32LE(token >>> 0, i * 4));
  return createHash('sha256').update(previous).update(buffer).digest('hex') === hash ? 'verified' : 'mismatch';
}

/**
 * What is wrong with the tokens a write records for its chunk `key` (its user metadata `meta`,
 * names without `x-amz-meta-`), or undefined: none recorded, or well formed and, where `key` is
 * an ObjectCache key, the ones it hashes after the chunk `objectcache-after` names.
 */
export function tokensProblem(key: string, meta: Readonly<Record<string, string | undefined>>): string | undefined {
  const value = meta[TOKENS_META];
  if (value === undefined) return undefined;
  const tokens = decodeTokens(value);
  if (tokens === undefined) return `x-amz-meta-${TOKENS_META} is not a token list (base64url of unsigned LEB128 varints, at most ${MAX_TOKENS_META_CHARS} characters)`;
  const after = meta[AFTER_META];
  if (checkTokens(key, after, tokens) !== 'mismatch') return undefined;
  return `The ${tokens.length} tokens of x-amz-meta-${TOKENS_META} do not hash to the chunk key ${key}${after === undefined ? ' (as the first chunk of its prefix)' : ` after ${after}`}`;
}
