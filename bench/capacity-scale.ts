/**
 * What the eviction order costs on a large bucket: --chunks chunks (default 1,000,000) in prefixes
 * of --depth (default 64), read at varied times, one in --dead-every prefixes missing its head. The
 * order is walked to the low mark (--trim, default 0.1 of the chunks) twice, as the trimming pass
 * walked it before (in one go) and as it walks it now (in slices that give way to the event loop,
 * gateway/capacity/chunk-index.ts `evictionOrderPaced`). For each: the wall time, and the longest
 * the event loop was held (what a request arriving meanwhile waits), from a timer ticking every
 * millisecond beside the walk.
 *
 *   npm run bench:capacity-scale [-- --chunks 1000000 --depth 64 --trim 0.1 --dead-every 50]
 */
import { parseArgs } from 'node:util';
import { ChunkIndex } from '../gateway/capacity/chunk-index.js';

const { values } = parseArgs({
  options: {
    chunks: { type: 'string', default: '1000000' },
    depth: { type: 'string', default: '64' },
    trim: { type: 'string', default: '0.1' },
    'dead-every': { type: 'string', default: '50' },
  },
});
const chunks = Number(values.chunks);
const depth = Number(values.depth);
const trimShare = Number(values.trim);
const deadEvery = Number(values['dead-every']);

const index = new ChunkIndex();
const built = performance.now();
for (let p = 0; p * depth < chunks; p++) {
  const keys = Array.from({ length: depth }, (_, i) => `prefix-${p}/chunk-${i}`);
  for (const key of keys) index.put(key, { size: 1, tenant: 'a', etag: `"${key}"`, at: 1 });
  index.link(keys, 'a');
  const read = 1000 + ((p * 7919) % 100_000);
  for (const key of keys) index.touch(key, read);
  if (deadEvery > 0 && p % deadEvery === 0) index.remove(keys[0] as string);
}
console.log(`index: ${index.size} chunks in prefixes of ${depth}, built in ${((performance.now() - built) / 1000).toFixed(1)} s`);
const wanted = Math.floor(index.size * trimShare);

/** Runs the walk beside a 1 ms timer; the longest gap between its ticks is how long the loop was held. */
async function measure(name: string, walk: () => Promise<number>): Promise<void> {
  let last = performance.now();
  let longest = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  await new Promise((resolve) => setTimeout(resolve, 20));
  last = performance.now();
  const start = performance.now();
  const taken = await walk();
  const wall = performance.now() - start;
  await new Promise((resolve) => setTimeout(resolve, 5));
  clearInterval(timer);
  longest = Math.max(longest, performance.now() - last);
  console.log(`${name.padEnd(28)} ${taken} victims  wall ${(wall / 1000).toFixed(2)} s  event loop held at most ${longest.toFixed(0)} ms`);
}

await measure('in one go (before)', async () => {
  let taken = 0;
  for (const _ of index.evictionOrder()) if (++taken >= wanted) break;
  return taken;
});
await measure('in slices of 10 ms (now)', async () => {
  let taken = 0;
  for await (const _ of index.evictionOrderPaced()) if (++taken >= wanted) break;
  return taken;
});
