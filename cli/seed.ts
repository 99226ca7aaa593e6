/**
 * `objectcache seed`: writes synthetic KV chunks of a model preset through a gateway (or any S3)
 * and prints the descriptor JSON of the whole prefix on stdout.
 */
import type { Writable } from 'node:stream';
import { LAYOUTS, presetNamed, PRESETS, type Layout } from '../schemas/layouts.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ObjectCacheClient } from '../client/client.js';
import { chunkHashes, keyPrefixFor, layoutFingerprint } from '../client/keys.js';
import { syntheticChunk, toStoredLayout } from '../client/kv-layout.js';
import { clientCredentials, parseOptions, positiveInteger, requireString, usageError } from './options.js';

export const SEED_HELP = `Usage: objectcache seed --endpoint URL --bucket NAME --preset NAME --tokens N [options]

Writes synthetic KV chunks for a prompt of N tokens through the endpoint and prints the
descriptor JSON (compact form: keyPrefix + chunk hashes) on stdout.

Options:
  --endpoint URL        gateway (or S3) endpoint, e.g. http://127.0.0.1:9080   (required)
  --bucket NAME         bucket; created if missing                             (required)
  --preset NAME         ${Object.keys(PRESETS).join(', ')}   (required)
  --tokens N            prompt length; only full chunks are written            (required)
  --chunk-tokens G      tokens per chunk (default 16)
  --layout NAME         stored layout: ${LAYOUTS.join(', ')} (default: the preset's)
  --seed S              seed of the synthetic tokens and KV bytes (default 1)
  --concurrency C       PUTs in flight (default 16)
Credentials: OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY.`;

/** Deterministic token ids for a seed (a Llama-3 sized vocabulary). */
export function syntheticTokens(seed: number, count: number): Uint32Array {
  const out = new Uint32Array(count);
  let x = (seed * 2654435761) >>> 0 || 7;
  for (let i = 0; i < count; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x % 128_000;
  }
  return out;
}

export async function runSeed(argv: readonly string[], env: NodeJS.ProcessEnv, stdout: Writable, stderr: Writable): Promise<number> {
  const values = parseOptions(argv, {
    endpoint: { type: 'string' },
    bucket: { type: 'string' },
    preset: { type: 'string' },
    tokens: { type: 'string' },
    'chunk-tokens': { type: 'string' },
    layout: { type: 'string' },
    seed: { type: 'string' },
    concurrency: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values['help']) {
    stdout.write(`${SEED_HELP}\n`);
    return 0;
  }
  const endpoint = requireString(values, 'endpoint');
  const bucket = requireString(values, 'bucket');
  const presetName = requireString(values, 'preset');
  const preset = presetNamed(presetName);
  if (!preset) throw usageError(`--preset must be one of ${Object.keys(PRESETS).join(', ')}, got ${presetName}`);
  const tokens = positiveInteger(values, 'tokens');
  const chunkTokens = positiveInteger(values, 'chunk-tokens', 16);
  const seed = positiveInteger(values, 'seed', 1);
  const concurrency = positiveInteger(values, 'concurrency', 16);
  const layout = (values['layout'] as string | undefined) ?? preset.layout;
  if (!(LAYOUTS as readonly string[]).includes(layout)) throw usageError(`--layout must be one of ${LAYOUTS.join(', ')}, got ${layout}`);
  if ((preset.layout === 'MLA') !== (layout === 'MLA'))
    throw usageError(`--layout ${layout} does not fit the ${preset.name} preset (${preset.layout === 'MLA' ? 'an MLA model' : 'a K/V model'})`);
  const layerBytes = chunkTokens * preset.bytesPerTokenPerLayer;
  const identity = { modelId: preset.modelId, dtype: preset.dtype, chunkTokens, layers: preset.layers, layerBytes, layout: layout as Layout };
  const fingerprint = layoutFingerprint(identity);
  const hashes = chunkHashes(syntheticTokens(seed, tokens), chunkTokens, fingerprint);
  if (hashes.length === 0) throw usageError(`--tokens ${tokens} is less than one chunk of ${chunkTokens} tokens`);
  const keyPrefix = keyPrefixFor(fingerprint);

  const client = new ObjectCacheClient({ endpoint, bucket, credentials: clientCredentials(env) });
  try {
    await client.ensureBucket();
    const objectBytes = preset.layers * layerBytes;
    const started = performance.now();
    const batch = Math.max(concurrency, 1);
    for (let at = 0; at < hashes.length; at += batch) {
      const keys = hashes.slice(at, at + batch).map((h) => keyPrefix + h);
      const objects = keys.map((_, i) => toStoredLayout(syntheticChunk(seed, at + i, objectBytes), layout as Layout, preset.layers, layerBytes));
      await client.putChunks(keys, objects, { concurrency, layout: { layout: layout as Layout, layers: preset.layers, layerBytes } });
      stderr.write(`\rseed: ${Math.min(at + batch, hashes.length)}/${hashes.length} chunks`);
    }
    const seconds = (performance.now() - started) / 1000;
    stderr.write(`\nseed: wrote ${hashes.length} chunks of ${objectBytes} bytes (${((hashes.length * objectBytes) / 1024 ** 2).toFixed(1)} MiB) in ${seconds.toFixed(1)} s\n`);
  } finally {
    await client.close();
  }
  const descriptor: DescriptorInput = { version: 1, keyPrefix, keys: hashes, layers: preset.layers, chunkTokens, layerBytes, layout: layout as Layout, delivery: 'layer-major' };
  stdout.write(`${JSON.stringify(descriptor)}\n`);
  return 0;
}
