/**
 * A chunk's recorded token ids (schemas/kv-tokens.ts): the shared vectors both clients write, what
 * the gateway refuses to read as tokens, and the check of tokens against an ObjectCache key.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { chunkKeys, type LayoutIdentity } from '../client/keys.js';
import { checkTokens, decodeTokens, encodeTokens, MAX_TOKENS_META_CHARS } from '../schemas/kv-tokens.js';

const identity: LayoutIdentity = { modelId: 'm', dtype: 'bfloat16', chunkTokens: 4, layers: 2, layerBytes: 8, layout: 'KV_L2TD' };

describe('recorded token ids', () => {
  it('match the shared vectors the Python client is checked against too (schemas/test-vectors/kv-tokens.json)', () => {
    const file = JSON.parse(readFileSync(new URL('../schemas/test-vectors/kv-tokens.json', import.meta.url), 'utf8')) as { vectors: { tokens: number[]; value: string }[] };
    expect(file.vectors.length).toBeGreaterThanOrEqual(3);
    for (const v of file.vectors) {
      expect(encodeTokens(v.tokens)).toBe(v.value);
      expect(decodeTokens(v.value)).toEqual(v.tokens);
    }
  });

  it('refuses what is not a whole list of 32-bit varints, and what would not fit the metadata', () => {
    for (const bad of ['', 'not*base64', 'gA', Buffer.from([0xff, 0xff, 0xff, 0xff, 0x1f]).toString('base64url'), 'A'.repeat(MAX_TOKENS_META_CHARS + 1)]) {
      expect(decodeTokens(bad), bad.slice(0, 20)).toBeUndefined();
    }
    expect(decodeTokens(Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f]).toString('base64url'))).toEqual([0xffffffff]);
    expect(encodeTokens(Array.from({ length: 1000 }, () => 150_000))).toBeUndefined();
  });

  it('checks tokens against an ObjectCache key: its chain from the chunk before (or the fingerprint), and nothing for other names', () => {
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8];
    const [first, second] = chunkKeys(tokens, identity) as [string, string];
    expect(checkTokens(first, undefined, [1, 2, 3, 4])).toBe('verified');
    expect(checkTokens(second, first, [5, 6, 7, 8])).toBe('verified');
    expect(checkTokens(second, first, [5, 6, 7, 9])).toBe('mismatch');
    expect(checkTokens(second, undefined, [5, 6, 7, 8])).toBe('mismatch'); // not a first chunk
    expect(checkTokens(first, second, [1, 2, 3, 4])).toBe('mismatch');
    expect(checkTokens(second, 'elsewhere/key', [5, 6, 7, 8])).toBe('mismatch');
    expect(checkTokens('model@1@0@abcdef@bfloat16', undefined, [1, 2])).toBe('unkeyed');
  });
});
