/**
 * The eviction order (gateway/capacity/chunk-index.ts): dead chunks first, then least recently
 * used leaves, so a prefix is trimmed from its tail and never opened in the middle; pinned or busy
 * chunks protect their prefix; a tenant's order holds only its own chunks.
 */
import { describe, expect, it } from 'vitest';
import { ChunkIndex } from '../gateway/capacity/chunk-index.js';

function store(index: ChunkIndex, keys: string[], at: number, tenant = 'a', size = 10): void {
  for (const key of keys) index.put(key, { size, tenant, etag: `"${key}"`, at });
}

const order = (index: ChunkIndex, options?: Parameters<ChunkIndex['evictionOrder']>[0]): string[] => [...index.evictionOrder(options)].map((c) => `${c.chunk.key}:${c.reason}`);

describe('ChunkIndex', () => {
  it('accounts bytes per bucket and tenant through writes, rewrites and removals', () => {
    const index = new ChunkIndex();
    store(index, ['x', 'y'], 1, 'a', 10);
    store(index, ['z'], 1, 'b', 5);
    expect(index.bytes).toBe(25);
    index.put('x', { size: 4, tenant: 'a', etag: '"x2"', at: 2 });
    expect(index.bytes).toBe(19);
    expect(index.tenantBytes('a')).toBe(14);
    index.remove('z');
    expect(index.tenantBytes('b')).toBe(0);
    expect([...index.tenants().keys()]).toEqual(['a']);
    expect(index.remove('nothing')).toBeUndefined();
  });

  it('knows the largest chunk present, not the largest it ever held', () => {
    const index = new ChunkIndex();
    store(index, ['x', 'y'], 1, 'a', 10);
    index.put('huge', { size: 1000, tenant: 'b', etag: '"h"', at: 1 });
    index.put('big', { size: 50, tenant: 'a', etag: '"b"', at: 1 });
    expect(index.largest).toBe(1000);
    index.remove('huge');
    expect(index.largest).toBe(50);
    index.put('big', { size: 20, tenant: 'a', etag: '"b2"', at: 2 }); // rewritten smaller
    expect(index.largest).toBe(20);
    index.remove('x');
    expect(index.largest).toBe(20);
    for (const key of ['big', 'y']) index.remove(key);
    expect(index.largest).toBe(0);
  });

  it('trims a prefix from its tail, never from its head, and the coldest prefix first', () => {
    const index = new ChunkIndex();
    store(index, ['p0', 'p1', 'p2'], 100);
    store(index, ['q0', 'q1'], 100);
    index.link(['p0', 'p1', 'p2'], 'a');
    index.link(['q0', 'q1'], 'a');
    // One descriptor GET reads the whole of q later: every chunk of q is hotter than p's.
    for (const key of ['q0', 'q1']) index.touch(key, 200);
    expect(order(index)).toEqual(['p2:lru', 'p1:lru', 'p0:lru', 'q1:lru', 'q0:lru']);
  });

  it('keeps a shared head until every prefix that starts with it is gone', () => {
    const index = new ChunkIndex();
    store(index, ['sys', 'a1', 'b1'], 100);
    index.link(['sys', 'a1'], 'a');
    index.link(['sys', 'b1'], 'a');
    index.touch('sys', 300); // read alone, by a plain GET: still a head of two prefixes
    index.touch('b1', 200);
    expect(order(index)).toEqual(['a1:lru', 'b1:lru', 'sys:lru']);
  });

  it('evicts dead chunks first: a chunk whose predecessor is gone can never be read as a prefix', () => {
    const index = new ChunkIndex();
    store(index, ['c0', 'c1', 'c2'], 100);
    store(index, ['cold'], 50);
    index.link(['c0', 'c1', 'c2'], 'a');
    for (const key of ['c1', 'c2']) index.touch(key, 900);
    index.remove('c0'); // deleted by a client
    expect(index.isDead(index.get('c2')!)).toBe(true);
    expect(order(index)).toEqual(['c1:dead', 'c2:dead', 'cold:lru']);
  });

  it('builds the same order in slices that give way to the event loop', async () => {
    const index = new ChunkIndex();
    // 2,000 prefixes of 5 chunks, every tenth missing its head (dead), read at varied times.
    for (let p = 0; p < 2000; p++) {
      const keys = Array.from({ length: 5 }, (_, i) => `p${p}/${i}`);
      store(index, keys, 100 + (p % 37));
      index.link(keys, 'a');
      index.touch(keys[0]!, 1000 + ((p * 7919) % 2000));
      if (p % 10 === 0) index.remove(keys[0]!);
    }
    const sync = order(index);
    let turns = 0;
    let running = true;
    const count = (): void => {
      if (!running) return;
      turns++;
      setImmediate(count);
    };
    setImmediate(count);
    const paced: string[] = [];
    for await (const c of index.evictionOrderPaced({}, 0)) paced.push(`${c.chunk.key}:${c.reason}`);
    running = false;
    expect(paced).toEqual(sync);
    expect(sync.filter((c) => c.endsWith(':dead'))).toHaveLength(800);
    // The walk over 9,800 chunks handed the loop back again and again, not once at its end.
    expect(turns).toBeGreaterThan(4);
  });

  it('does not count a chunk as dead while its predecessor may still be on its way', () => {
    const index = new ChunkIndex();
    index.link(['w0', 'w1', 'w2'], 'a');
    store(index, ['w2'], 1_000); // written in parallel: w0 and w1 not stored yet
    store(index, ['older'], 10);
    // Not ahead of a colder leaf, but not kept past the warmer ones either (its predecessor may never come).
    expect(order(index, { deadIfWrittenBefore: 1_000 })).toEqual(['older:lru', 'w2:dead']);
    store(index, ['warm'], 2_000);
    expect(order(index, { deadIfWrittenBefore: 1_000 })).toEqual(['older:lru', 'w2:dead', 'warm:lru']);
    expect(order(index, { deadIfWrittenBefore: 2_000 })).toEqual(['w2:dead', 'older:lru', 'warm:lru']);
  });

  it('remembers a chain looked up before it was stored', () => {
    const index = new ChunkIndex();
    index.link(['k0', 'k1'], 'a'); // the engine's lookup misses, then it stores
    store(index, ['k0', 'k1'], 100);
    expect(index.get('k1')!.pred).toBe('k0');
    expect(index.depth(index.get('k1')!)).toBe(1);
    expect(index.successors('k0')).toBe(1);
  });

  it('keeps at most 50,000 links for keys not stored yet, forgetting the oldest', () => {
    const index = new ChunkIndex();
    const keys = Array.from({ length: 50_002 }, (_, i) => `p/${i}`);
    index.link(keys, 'a'); // 50,001 links, one too many
    store(index, ['p/1', 'p/50001'], 100);
    expect(index.get('p/1')!.pred).toBeUndefined(); // the oldest, forgotten
    expect(index.get('p/50001')!.pred).toBe('p/50000');
  });

  it('keeps another tenant\u2019s pending links when one tenant names 50,000 keys it never stores', () => {
    const index = new ChunkIndex();
    index.link(['v/0', 'v/1'], 'victim'); // the victim's lookup misses, then it stores
    const noise = Array.from({ length: 60_000 }, (_, i) => `n/${i}`);
    index.link(noise, 'flooder');
    store(index, ['v/0', 'v/1'], 100, 'victim');
    expect(index.get('v/1')!.pred).toBe('v/0');
  });

  it("keeps a tenant's pending link when another tenant names the same key", () => {
    const index = new ChunkIndex();
    index.link(['v/0', 'v/1'], 'victim');
    index.link(['elsewhere', 'v/1'], 'mallory');
    store(index, ['v/0', 'v/1'], 100, 'victim');
    expect(index.get('v/1')!.pred).toBe('v/0');
  });

  it('says what a chain taught, never the whole list again', () => {
    const index = new ChunkIndex();
    store(index, ['c/0', 'c/1', 'c/2', 'c/3'], 100);
    expect(index.learn(['c/0', 'c/1', 'c/2', 'c/3'], 'a')).toEqual([['c/0', 'c/1', 'c/2', 'c/3']]);
    expect(index.learn(['c/0', 'c/1', 'c/2', 'c/3'], 'a')).toEqual([]);
    expect(index.learn(['c/0', 'c/1', 'c/2', 'c/3', 'c/4', 'c/5'], 'a')).toEqual([['c/3', 'c/4', 'c/5']]);
  });

  it('bounds the loop checks of one request, and learns a long chain over several', () => {
    const index = new ChunkIndex();
    const keys = Array.from({ length: 2000 }, (_, i) => `long/${i}`);
    store(index, keys, 100); // stored before any request named their order
    expect(index.link(keys, 'a')).toBe(true);
    expect(index.get('long/1')!.pred).toBe('long/0');
    expect(index.get('long/1999')!.pred).toBeUndefined(); // past this request's budget
    let requests = 1;
    while (index.link(keys, 'a')) {
      requests++;
      expect(requests, 'the chain is learnt within a bounded number of requests').toBeLessThan(100);
    }
    expect(index.depth(index.get('long/1999')!)).toBe(1999);
    expect(requests).toBeGreaterThan(1);
  });

  it('skips what cannot go now, and so protects every chunk before it', () => {
    const index = new ChunkIndex();
    store(index, ['h', 't'], 100);
    store(index, ['other'], 150);
    index.link(['h', 't'], 'a');
    expect(order(index, { evictable: (c) => c.key !== 't' })).toEqual(['other:lru']);
  });

  it("limits a tenant's order to its own chunks", () => {
    const index = new ChunkIndex();
    store(index, ['a-old'], 50, 'a');
    store(index, ['b-old'], 10, 'b');
    store(index, ['a-new'], 100, 'a');
    expect(order(index, { tenant: 'a' })).toEqual(['a-old:lru', 'a-new:lru']);
    expect(order(index, { tenant: 'b' })).toEqual(['b-old:lru']);
  });

  it('refuses links that would loop, and relinks of a chunk already placed', () => {
    const index = new ChunkIndex();
    store(index, ['m', 'n'], 100);
    expect(index.link(['m', 'n'], 'a')).toBe(true);
    expect(index.link(['n', 'm'], 'a')).toBe(false); // m after n would close a loop
    expect(index.link(['x', 'n'], 'a')).toBe(false); // n already follows m
    expect(index.link(['n', 'n'], 'a')).toBe(false);
    expect(order(index)).toEqual(['n:lru', 'm:lru']);
    // Nor one that would close a loop longer than the longest chain measured (4,096 links): a chain
    // is cut there (a chunk past it starts one of its own), so no loop can be closed around it, and
    // the order can still be built (a snapshot's load) and read.
    const keys = Array.from({ length: 4200 }, (_, i) => `long/${i}`);
    keys.forEach((key, i) => index.put(key, { size: 1, tenant: 'a', etag: '"l"', at: 1, ...(i > 0 ? { pred: keys[i - 1] } : {}) }));
    index.link([keys[4199] as string, keys[0] as string], 'a');
    let steps = 0;
    for (let at = index.get(keys[4199] as string); at?.pred !== undefined && steps < 10_000; at = index.get(at.pred)) steps++;
    expect(steps).toBeLessThan(10_000); // the chain back from the last ends
    index.buildOrder();
    expect(order(index)).toHaveLength(4202);
  });

  it("takes links only from the tenant that owns the chunk, so no tenant can kill another's prefix", () => {
    const index = new ChunkIndex();
    store(index, ['v0', 'v1'], 100, 'victim');
    expect(index.link(['gone', 'v0'], 'attacker')).toBe(false); // v0 would be dead
    index.link(['planted', 'v2'], 'attacker'); // a link kept for a key the victim stores later
    store(index, ['v2'], 100, 'victim');
    expect(index.get('v2')!.pred).toBeUndefined();
    expect(order(index).every((c) => c.endsWith(':lru'))).toBe(true);
  });

  it("does not let another tenant's successor hold a chunk against its owner's quota", () => {
    const index = new ChunkIndex();
    store(index, ['head'], 100, 'a');
    store(index, ['tail'], 100, 'b');
    index.link(['head', 'tail'], 'b');
    expect(order(index, { tenant: 'a' })).toEqual(['head:lru']);
    expect(order(index)).toEqual(['tail:lru', 'head:lru']); // the budget still trims tails first
  });

  it('keeps its standing order equal to the whole order walked afresh, through writes, reads, links, rewrites, removals and bulk loads', () => {
    const rand = seeded(7);
    for (let round = 0; round < 40; round++) {
      const index = new ChunkIndex();
      const keys = Array.from({ length: 24 }, (_, i) => `k${i}`);
      const pick = (): string => keys[Math.floor(rand() * keys.length)] as string;
      // Every other round loads in bulk first (a snapshot): the order is built once, then kept.
      if (round % 2 === 1) index.suspendOrder();
      for (let step = 0; step < 120; step++) {
        if (round % 2 === 1 && step === 60) index.suspendOrder();
        const at = 1 + Math.floor(rand() * 50);
        const op = rand();
        if (op < 0.35) index.put(pick(), { size: 1, tenant: 'a', etag: `"${step}"`, at, ...(rand() < 0.7 ? { pred: pick() } : {}) });
        else if (op < 0.55) index.remove(pick());
        else if (op < 0.8) index.touch(pick(), at + Math.floor(rand() * 50));
        else index.link([pick(), pick(), pick()], 'a');
        if (step % 10 !== 9) continue;
        const blocked = new Set(keys.filter(() => rand() < 0.15));
        const options = { evictable: (c: { key: string }) => !blocked.has(c.key), deadIfWrittenBefore: Math.floor(rand() * 60) };
        expect(order(index, options)).toEqual(oracle(index, options));
        // Read a step at a time, as a trim that gives way to requests does, while the index
        // changes under it (writes, removals, reads, heads coming back): it reads on, and never
        // yields a chunk twice or one that is gone.
        const yielded: string[] = [];
        for (const candidate of index.evictionOrder(options)) {
          expect(index.get(candidate.chunk.key)).toBe(candidate.chunk);
          if (candidate.reason === 'dead') expect(index.isDead(candidate.chunk)).toBe(true);
          yielded.push(candidate.chunk.key);
          const change = rand();
          if (change < 0.3) index.remove(pick());
          else if (change < 0.6) index.put(pick(), { size: 1, tenant: 'a', etag: `"w${step}"`, at: 100, ...(rand() < 0.7 ? { pred: pick() } : {}) });
          else index.touch(pick(), 300);
        }
        expect(new Set(yielded).size).toBe(yielded.length);
      }
    }
  });
});

/** The order computed from nothing but the chunks, the slow and obvious way (the reference the index's standing order must equal). */
function oracle(index: ChunkIndex, options: { evictable: (c: { key: string }) => boolean; deadIfWrittenBefore: number }): string[] {
  const chunks = [...index.values()];
  const present = new Map(chunks.map((c) => [c.key, c]));
  const live = (c: { pred: string | undefined }): boolean => {
    for (let at = c.pred, steps = 0; at !== undefined && steps < 1000; steps++) {
      const before = present.get(at);
      if (!before) return false;
      at = before.pred;
    }
    return true;
  };
  const depth = (c: { pred: string | undefined }): number => {
    let d = 0;
    for (let at = c.pred; at !== undefined && present.has(at); at = present.get(at)?.pred) d++;
    return d;
  };
  const out: string[] = [];
  const gone = new Set<string>();
  const byAccess = (a: { lastAccess: number; key: string }, b: { lastAccess: number; key: string }): number => a.lastAccess - b.lastAccess || (a.key < b.key ? -1 : 1);
  const dead = chunks.filter((c) => !live(c)).sort(byAccess);
  const young = dead.filter((c) => c.written >= options.deadIfWrittenBefore);
  for (const c of dead) {
    if (c.written >= options.deadIfWrittenBefore || !options.evictable(c)) continue;
    gone.add(c.key);
    out.push(`${c.key}:dead`);
  }
  const skipped = new Set<string>();
  for (;;) {
    const leaves = chunks.filter((c) => live(c) && !gone.has(c.key) && !skipped.has(c.key) && !chunks.some((k) => k.pred === c.key && live(k) && !gone.has(k.key)));
    leaves.sort((a, b) => a.lastAccess - b.lastAccess || depth(b) - depth(a) || (a.key < b.key ? -1 : 1));
    const next = leaves[0];
    while (young.length > 0 && (next === undefined || (young[0] as { lastAccess: number }).lastAccess < next.lastAccess)) {
      const y = young.shift() as (typeof young)[number];
      if (!options.evictable(y)) continue;
      gone.add(y.key);
      out.push(`${y.key}:dead`);
    }
    if (!next) return out;
    if (!options.evictable(next)) skipped.add(next.key);
    else {
      gone.add(next.key);
      out.push(`${next.key}:lru`);
    }
  }
}

/** A small deterministic generator (mulberry32), so a failing round can be replayed. */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
