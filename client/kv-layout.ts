/**
 * Converting a chunk's KV between the canonical delivered form (KV_L2TD: per layer, K then V) and
 * the stored layouts, so a client can write objects in the layout its fleet uses, and tests can
 * assemble the layer-major reference a layerwise GET must reproduce.
 */
import type { Layout } from '../schemas/layouts.js';

/** A KV_L2TD chunk (L layers of S bytes, each K half then V half) in the stored `layout`. */
export function toStoredLayout(canonical: Uint8Array, layout: Layout, layers: number, layerBytes: number): Uint8Array {
  if (layout !== 'KV_2LTD') return canonical;
  const half = layerBytes / 2;
  const out = new Uint8Array(layers * layerBytes);
  for (let l = 0; l < layers; l++) {
    out.set(canonical.subarray(l * layerBytes, l * layerBytes + half), l * half);
    out.set(canonical.subarray(l * layerBytes + half, (l + 1) * layerBytes), layers * half + l * half);
  }
  return out;
}

/** The stored object of a chunk back in KV_L2TD form. */
export function toCanonical(stored: Uint8Array, layout: Layout, layers: number, layerBytes: number): Uint8Array {
  if (layout !== 'KV_2LTD') return stored;
  const half = layerBytes / 2;
  const out = new Uint8Array(layers * layerBytes);
  for (let l = 0; l < layers; l++) {
    out.set(stored.subarray(l * half, (l + 1) * half), l * layerBytes);
    out.set(stored.subarray(layers * half + l * half, layers * half + (l + 1) * half), l * layerBytes + half);
  }
  return out;
}

/**
 * The layer-major bytes a layerwise GET delivers for these canonical chunks: for each layer in
 * [first, end), every chunk's slice in prefix order.
 */
export function layerMajor(canonicalChunks: readonly Uint8Array[], layerBytes: number, first: number, end: number): Uint8Array {
  const n = canonicalChunks.length;
  const out = new Uint8Array((end - first) * n * layerBytes);
  for (let l = first; l < end; l++) {
    canonicalChunks.forEach((chunk, c) => {
      out.set(chunk.subarray(l * layerBytes, (l + 1) * layerBytes), ((l - first) * n + c) * layerBytes);
    });
  }
  return out;
}

/**
 * Deterministic synthetic KV for one chunk (xorshift32 seeded by `seed` and the chunk index):
 * what `objectcache seed` writes and benchmarks verify against.
 */
export function syntheticChunk(seed: number, chunk: number, bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  const words = new Uint32Array(out.buffer, 0, Math.floor(bytes / 4));
  let x = (seed * 0x9e3779b1 + chunk * 0x85ebca6b + 1) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    words[i] = x;
  }
  for (let i = words.length * 4; i < bytes; i++) out[i] = (x >>> ((i % 4) * 8)) & 0xff;
  return out;
}
