/**
 * One client's fetch throughput, for comparing clients on the same gateway and prefix (the
 * Python client's benchmark runs this for the TypeScript side): fetches a descriptor `--reps`
 * times into one preallocated target (as a KV loader does) and prints JSON with each fetch's
 * seconds and this process's CPU seconds.
 *
 *   node dist/bench/client-fetch.js --endpoint URL --bucket B --descriptor FILE [--reps 3]
 *   (credentials from OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY)
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ObjectCacheClient } from '../client/client.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';

async function main(): Promise<void> {
  process.env['AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'] ??= 'true';
  const { values } = parseArgs({
    options: {
      endpoint: { type: 'string' },
      bucket: { type: 'string' },
      descriptor: { type: 'string' },
      reps: { type: 'string', default: '3' },
      transport: { type: 'string', default: 'post' },
    },
  });
  if (!values.endpoint || !values.bucket || !values.descriptor) throw new Error('--endpoint, --bucket and --descriptor are required');
  const descriptor = JSON.parse(readFileSync(values.descriptor, 'utf8')) as DescriptorInput;
  const client = new ObjectCacheClient({
    endpoint: values.endpoint,
    bucket: values.bucket,
    credentials: { accessKeyId: process.env['OBJECTCACHE_ACCESS_KEY'] ?? '', secretAccessKey: process.env['OBJECTCACHE_SECRET_KEY'] ?? '' },
  });
  const range = descriptor.layerRange ?? [0, descriptor.layers];
  const target = new Uint8Array(((range[1] ?? 0) - (range[0] ?? 0)) * descriptor.keys.length * descriptor.layerBytes);
  const runs: { seconds: number; cpuSeconds: number; bytes: number }[] = [];
  try {
    for (let r = 0; r < Number(values.reps); r++) {
      const cpu = process.cpuUsage();
      const started = performance.now();
      const result = await client.fetch(descriptor, { target, transport: values.transport === 'get' ? 'get' : 'post' });
      const used = process.cpuUsage(cpu);
      runs.push({ seconds: (performance.now() - started) / 1000, cpuSeconds: (used.user + used.system) / 1e6, bytes: result.summary.bytes });
    }
  } finally {
    await client.close();
  }
  process.stdout.write(`${JSON.stringify({ node: process.version, runs })}\n`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
