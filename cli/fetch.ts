/**
 * `objectcache fetch`: runs the layerwise GET of a descriptor, writes the delivered KV to a file
 * in layer-major order (layer after layer, whichever mode served it), and prints the per-layer
 * ready timeline and the throughput.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ObjectCacheClient, type Transport } from '../client/client.js';
import { clientCredentials, parseOptions, requireString, usageError } from './options.js';

export const FETCH_HELP = `Usage: objectcache fetch --endpoint URL --bucket NAME --descriptor FILE|- [options]

Fetches the KV named by a descriptor (as printed by "objectcache seed") layer by layer.

Options:
  --endpoint URL        gateway endpoint                                        (required)
  --bucket NAME         bucket                                                  (required)
  --descriptor FILE|-   descriptor JSON file, or - for standard input           (required)
  --out FILE            write the delivered layers, layer-major, to FILE
  --transport T         auto (default), get (header) or post (body)
Credentials: OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY.`;

async function readAll(stream: Readable): Promise<string> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

export async function runFetch(argv: readonly string[], env: NodeJS.ProcessEnv, stdin: Readable, stdout: Writable): Promise<number> {
  const values = parseOptions(argv, {
    endpoint: { type: 'string' },
    bucket: { type: 'string' },
    descriptor: { type: 'string' },
    out: { type: 'string' },
    transport: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values['help']) {
    stdout.write(`${FETCH_HELP}\n`);
    return 0;
  }
  const endpoint = requireString(values, 'endpoint');
  const bucket = requireString(values, 'bucket');
  const source = requireString(values, 'descriptor');
  const transport = (values['transport'] as string | undefined) ?? 'auto';
  if (!['auto', 'get', 'post'].includes(transport)) throw usageError(`--transport must be auto, get or post, got ${transport}`);
  const text = source === '-' ? await readAll(stdin) : readFileSync(source, 'utf8');
  let descriptor: DescriptorInput;
  try {
    descriptor = JSON.parse(text) as DescriptorInput;
  } catch (error) {
    throw usageError(`--descriptor ${source} is not JSON: ${(error as Error).message}`);
  }
  const client = new ObjectCacheClient({ endpoint, bucket, credentials: clientCredentials(env) });
  try {
    const started = performance.now();
    const result = await client.fetch(descriptor, { transport: transport as Transport });
    const ms = performance.now() - started;
    const out = values['out'];
    if (typeof out === 'string') {
      const layers = result.summary.layers[1] - result.summary.layers[0];
      const per = result.summary.bytes / layers;
      const packed =
        result.layerStride === per
          ? result.target
          : Buffer.concat(Array.from({ length: layers }, (_, l) => result.target.subarray(l * result.layerStride, l * result.layerStride + per)));
      writeFileSync(out, packed);
    }
    stdout.write('layer\tready_ms\n');
    for (const { layer, ms: at } of result.timeline) stdout.write(`${layer}\t${at.toFixed(1)}\n`);
    const mib = result.summary.bytes / 1024 ** 2;
    stdout.write(
      `delivered ${mib.toFixed(1)} MiB in ${ms.toFixed(0)} ms (${(mib / (ms / 1000)).toFixed(1)} MiB/s); mode ${result.summary.mode}; transport ${result.transport}; ` +
        `backend reads ${result.summary.backendReads}; ${result.segmentChunks > 0 ? `${result.segmentChunks} of ${descriptor.keys.length} chunks from a packed segment; ` : ''}first layer ready at ${(result.timeline[0]?.ms ?? 0).toFixed(1)} ms\n`,
    );
    return 0;
  } finally {
    await client.close();
  }
}
