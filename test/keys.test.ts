/**
 * Chunk keys: a hash chain seeded with the layout fingerprint. A longer prompt's keys extend a
 * shorter prompt's keys (prefix reuse), a change in any token changes every later key, partial
 * chunks are not keyed, and two layouts never share a key.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chunkKeys, layoutFingerprint, type LayoutIdentity } from '../client/keys.js';
import { toCanonical, toStoredLayout } from '../client/kv-layout.js';

const llama: LayoutIdentity = { modelId: 'meta-llama/Llama-3.1-8B', dtype: 'float16', chunkTokens: 4, layers: 32, layerBytes: 4 * 4096, layout: 'KV_L2TD' };

describe('chunk keys', () => {
  it('match the shared vectors the Python client is checked against too (schemas/test-vectors/chunk-keys.json)', () => {
    const file = JSON.parse(readFileSync(new URL('../schemas/test-vectors/chunk-keys.json', import.meta.url), 'utf8')) as {
      vectors: (LayoutIdentity & { tokens: number[]; fingerprint: string; keys: string[] })[];
    };
    expect(file.vectors.length).toBeGreaterThanOrEqual(4);
    for (const v of file.vectors) {
      expect(layoutFingerprint(v)).toBe(v.fingerprint);
      expect(chunkKeys(v.tokens, v)).toEqual(v.keys);
      expect(v.keys).toHaveLength(Math.floor(v.tokens.length / v.chunkTokens));
    }
  });

  it('extend as the prompt grows, and only full chunks are keyed', () => {
    fc.assert(
      fc.property(fc.array(fc.nat({ max: 128_000 }), { maxLength: 40 }), fc.array(fc.nat({ max: 128_000 }), { maxLength: 20 }), (prompt, more) => {
        const short = chunkKeys(prompt, llama);
        const long = chunkKeys([...prompt, ...more], llama);
        expect(short.length).toBe(Math.floor(prompt.length / 4));
        expect(long.slice(0, short.length)).toEqual(short);
        for (const key of long) expect(key).toMatch(/^kv\/[0-9a-f]{16}\/[0-9a-f]{64}$/);
      }),
    );
  });

  it('change from the first differing chunk on', () => {
    const a = chunkKeys([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], llama);
    const b = chunkKeys([1, 2, 3, 4, 5, 6, 7, 99, 9, 10, 11, 12], llama);
    expect(b[0]).toBe(a[0]);
    expect(b[1]).not.toBe(a[1]);
    expect(b[2]).not.toBe(a[2]); // the chain carries the difference forward
  });

  it('never coincide across layouts', () => {
    const tokens = [5, 6, 7, 8];
    const variants: LayoutIdentity[] = [
      llama,
      { ...llama, layout: 'KV_2LTD' },
      { ...llama, dtype: 'bfloat16' },
      { ...llama, chunkTokens: 2 },
      { ...llama, modelId: 'Qwen/Qwen2.5-7B' },
    ];
    const fingerprints = new Set(variants.map(layoutFingerprint));
    expect(fingerprints.size).toBe(variants.length);
    const firstKeys = new Set(variants.map((v) => chunkKeys(tokens, v)[0]));
    expect(firstKeys.size).toBe(variants.length);
  });
});

describe('stored layouts', () => {
  it('convert KV_L2TD to KV_2LTD and back without loss', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 16 }), (layers, half) => {
        const canonical = Uint8Array.from({ length: layers * half * 2 }, (_, i) => (i * 7) & 0xff);
        const stored = toStoredLayout(canonical, 'KV_2LTD', layers, half * 2);
        // all K halves first
        expect(Buffer.from(stored.subarray(0, half))).toEqual(Buffer.from(canonical.subarray(0, half)));
        expect(Buffer.from(toCanonical(stored, 'KV_2LTD', layers, half * 2))).toEqual(Buffer.from(canonical));
      }),
    );
  });
});
