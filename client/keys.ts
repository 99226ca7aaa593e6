/**
 * Chunk keys (schemas/wire-format.md section 1): H_i = SHA-256(H_{i-1} || tokens of chunk i as u32 LE),
 * seeded with a fingerprint of the model layout, so a prefix hit is an ordered list of keys and
 * two layouts can never share a key. Only full chunks of G tokens are keyed.
 */
import { createHash } from 'node:crypto';
import type { Layout } from '../schemas/layouts.js';

export interface LayoutIdentity {
  readonly modelId: string;
  readonly dtype: string;
  readonly chunkTokens: number;
  readonly layers: number;
  readonly layerBytes: number;
  readonly layout: Layout;
}

/** 16 hex characters naming a layout: model id, dtype, G, L, S and the stored layout. */
export function layoutFingerprint(identity: LayoutIdentity): string {
  const canonical = ['objectcache-v1', identity.modelId, identity.dtype, identity.chunkTokens, identity.layers, identity.layerBytes, identity.layout].join('|');
  return createHash('sha256').update(canonical, 'utf8').digest('hex').slice(0, 16);
}

/** The key prefix under which a layout's chunks live: `kv/<fingerprint>/`. */
export function keyPrefixFor(fingerprint: string, namespace = 'kv'): string {
  return `${namespace}/${fingerprint}/`;
}

/** Hex chunk hashes of the full chunks of `tokens`, in prefix order. */
export function chunkHashes(tokens: ArrayLike<number>, chunkTokens: number, fingerprint: string): string[] {
  const hashes: string[] = [];
  let previous = Buffer.from(fingerprint, 'utf8');
  const buffer = Buffer.alloc(chunkTokens * 4);
  for (let start = 0; start + chunkTokens <= tokens.length; start += chunkTokens) {
    for (let i = 0; i < chunkTokens; i++) buffer.writeUInt32LE((tokens[start + i] as number) >>> 0, i * 4);
    const digest = createHash('sha256').update(previous).update(buffer).digest();
    hashes.push(digest.toString('hex'));
    previous = digest;
  }
  return hashes;
}

/** Full object keys of the full chunks of `tokens`. */
export function chunkKeys(tokens: ArrayLike<number>, identity: LayoutIdentity, namespace = 'kv'): string[] {
  const fingerprint = layoutFingerprint(identity);
  return chunkHashes(tokens, identity.chunkTokens, fingerprint).map((h) => keyPrefixFor(fingerprint, namespace) + h);
}
