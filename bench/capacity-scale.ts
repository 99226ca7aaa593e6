/**
 * What eviction costs on a large bucket, from the gateway's own index (gateway/capacity/chunk-index.ts):
 *
 * - per write, at bucket sizes of --sizes chunks (default 10,000, 100,000 and 1,000,000): a new
 *   chunk recorded at the tail of a prefix, then the coldest chunk taken from the eviction order
 *   and removed, as a full bucket does on every write; the cost must not grow with the bucket;
 * - one trim of --trim of the largest bucket (default 0.1), read from the standing order, with the
 *   longest the event loop was held (what a request arriving meanwhile waits, from a timer ticking
 *   every millisecond beside it), against the same trim walked afresh over the whole index (as
 *   every trim was walked before the order was kept standing; one tenant's order still is).
 *
 * The largest bucket is also recorded in bulk, as a snapshot is loaded at start (the standing
 * order built once at the end). Prefixes are --depth chunks (default 64), read at varied times, one in --dead-every missing its head.
 *
 *   npm run bench:capacity-scale [-- --sizes 10000,100000,1000000 --depth 64 --trim 0.1 --dead-every 50 --writes 20000]
 */
import { parseArgs } from 'node:util';
import { ChunkIndex } from '../gateway/capacity/chunk-index.js';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '10000,100000,1000000' },
    depth: { type: 'string', default: '64' },
    trim: { type: 'string', default: '0.1' },
    'dead-every': { type: 'string', default: '50' },
    writes: { type: 'string', default: '20000' },
  },
});
const sizes = values.sizes.split(',').map(Number);
const depth = Number(values.depth);
const trimShare = Number(values.trim);
const deadEvery = Number(values['dead-every']);
const writes = Number(values.writes);

/** `bulk`: as a snapshot is loaded at start, the standing order built once at the end. */
function build(chunks: number, bulk = false): ChunkIndex {
  const index = new ChunkIndex();
  const started = performance.now();
  if (bulk) index.suspendOrder();
  for (let p = 0; p * depth < chunks; p++) {
    const keys = Array.from({ length: depth }, (_, i) => `prefix-${p}/chunk-${i}`);
    for (const key of keys) index.put(key, { size: 1, tenant: 'a', etag: `"${key}"`, at: 1 });
    index.link(keys, 'a');
    const read = 1000 + ((p * 7919) % 100_000);
    for (const key of keys) index.touch(key, read);
    if (deadEvery > 0 && p % deadEvery === 0) index.remove(keys[0] as string);
  }
  if (bulk) index.buildOrder();
  const ms = performance.now() - started;
  console.log(
    `index: ${index.size} chunks in prefixes of ${depth}, recorded${bulk ? ' in bulk' : ''} in ${(ms / 1000).toFixed(1)} s (${((ms * 1000) / index.size).toFixed(1)} us a chunk)`,
  );
  return index;
}

/** A full bucket's writes: each records a chunk after the last one written, then the first chunk of the eviction order goes. */
function perWrite(index: ChunkIndex): number {
  let at = 200_000;
  let pred: string | undefined;
  const started = performance.now();
  for (let w = 0; w < writes; w++) {
    const key = `new-${w % 64 === 0 ? 'head' : 'next'}-${w}`;
    index.put(key, { size: 1, tenant: 'a', etag: '"n"', at: ++at, pred: w % 64 === 0 ? undefined : pred });
    pred = key;
    const victim = index.evictionOrder({ deadIfWrittenBefore: at - 30_000 }).next();
    if (!victim.done) index.remove(victim.value.chunk.key);
  }
  return ((performance.now() - started) * 1000) / writes;
}

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
  console.log(`  ${name.padEnd(44)} ${taken} victims  wall ${(wall / 1000).toFixed(2)} s  event loop held at most ${longest.toFixed(0)} ms`);
}

let largest: ChunkIndex | undefined;
for (const size of sizes) {
  const index = build(size);
  console.log(`  a write into the full bucket, one eviction each: ${perWrite(index).toFixed(1)} us (${writes} writes)`);
  largest = index;
}
if (largest) {
  build(largest.size, true);
  const index = largest;
  const wanted = Math.floor(index.size * trimShare);
  await measure('a trim, read from the standing order', async () => {
    let taken = 0;
    for await (const _ of index.evictionOrderPaced()) if (++taken >= wanted) break;
    return taken;
  });
  // One tenant's order is walked afresh over the whole index: what every trim cost before.
  await measure('the same trim, the whole index walked afresh', async () => {
    let taken = 0;
    for await (const _ of index.evictionOrderPaced({ tenant: 'a' })) if (++taken >= wanted) break;
    return taken;
  });
}
