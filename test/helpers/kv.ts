/**
 * Test fixtures for layerwise GETs: synthetic chunks written through the gateway in a chosen
 * layout, their descriptor, and the layer-major reference a fetch must reproduce byte for byte.
 */
import { randomBytes } from 'node:crypto';
import type { DescriptorInput } from '../../schemas/descriptor-schema.js';
import type { Layout } from '../../schemas/layouts.js';
import type { ObjectCacheClient } from '../../client/client.js';
import { layerMajor, toStoredLayout } from '../../client/kv-layout.js';

export interface SeededPrefix {
  readonly keys: string[];
  /** KV_L2TD form of each chunk. */
  readonly canonical: Uint8Array[];
  readonly layers: number;
  readonly layerBytes: number;
  readonly layout: Layout;
}

let prefixCounter = 0;

export async function seedPrefix(
  client: ObjectCacheClient,
  opts: { chunks: number; layers: number; layerBytes: number; layout: Layout; checksums?: boolean },
): Promise<SeededPrefix> {
  prefixCounter++;
  const base = `kv/test-${process.pid}-${prefixCounter}-${randomBytes(4).toString('hex')}`;
  const keys = Array.from({ length: opts.chunks }, (_, i) => `${base}/${String(i).padStart(5, '0')}`);
  const canonical = keys.map(() => new Uint8Array(randomBytes(opts.layers * opts.layerBytes)));
  const stored = canonical.map((c) => toStoredLayout(c, opts.layout, opts.layers, opts.layerBytes));
  await client.putChunks(keys, stored, {
    concurrency: 16,
    ...(opts.checksums === false ? {} : { layout: { layout: opts.layout, layers: opts.layers, layerBytes: opts.layerBytes } }),
  });
  return { keys, canonical, layers: opts.layers, layerBytes: opts.layerBytes, layout: opts.layout };
}

export function descriptorOf(prefix: SeededPrefix, extra: Partial<DescriptorInput> = {}): DescriptorInput {
  return {
    version: 1,
    keys: prefix.keys,
    layers: prefix.layers,
    chunkTokens: 16,
    layerBytes: prefix.layerBytes,
    layout: prefix.layout,
    delivery: 'layer-major',
    ...extra,
  };
}

export function reference(prefix: SeededPrefix, first = 0, end = prefix.layers): Uint8Array {
  return layerMajor(prefix.canonical, prefix.layerBytes, first, end);
}
