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

  it('trims a prefix from its tail, never from its head, and the coldest prefix first', () => {
    const index = new ChunkIndex();
    store(index, ['p0', 'p1', 'p2'], 100);
    store(index, ['q0', 'q1'], 100);
    index.link(['p0', 'p1', 'p2']);
    index.link(['q0', 'q1']);
    // One descriptor GET reads the whole of q later: every chunk of q is hotter than p's.
    for (const key of ['q0', 'q1']) index.touch(key, 200);
    expect(order(index)).toEqual(['p2:lru', 'p1:lru', 'p0:lru', 'q1:lru', 'q0:lru']);
  });

  it('keeps a shared head until every prefix that starts with it is gone', () => {
    const index = new ChunkIndex();
    store(index, ['sys', 'a1', 'b1'], 100);
    index.link(['sys', 'a1']);
    index.link(['sys', 'b1']);
    index.touch('sys', 300); // read alone, by a plain GET: still a head of two prefixes
    index.touch('b1', 200);
    expect(order(index)).toEqual(['a1:lru', 'b1:lru', 'sys:lru']);
  });

  it('evicts dead chunks first: a chunk whose predecessor is gone can never be read as a prefix', () => {
    const index = new ChunkIndex();
    store(index, ['c0', 'c1', 'c2'], 100);
    store(index, ['cold'], 50);
    index.link(['c0', 'c1', 'c2']);
    for (const key of ['c1', 'c2']) index.touch(key, 900);
    index.remove('c0'); // deleted by a client
    expect(index.isDead(index.get('c2')!)).toBe(true);
    expect(order(index)).toEqual(['c1:dead', 'c2:dead', 'cold:lru']);
  });

  it('remembers a chain looked up before it was stored', () => {
    const index = new ChunkIndex();
    index.link(['k0', 'k1']); // the engine's lookup misses, then it stores
    store(index, ['k0', 'k1'], 100);
    expect(index.get('k1')!.pred).toBe('k0');
    expect(index.depth(index.get('k1')!)).toBe(1);
    expect(index.successors('k0')).toBe(1);
  });

  it('skips what cannot go now, and so protects every chunk before it', () => {
    const index = new ChunkIndex();
    store(index, ['h', 't'], 100);
    store(index, ['other'], 150);
    index.link(['h', 't']);
    expect(order(index, { evictable: (c) => c.key !== 't' })).toEqual(['other:lru']);
  });

  it("limits a tenant's order to its own chunks, and never to a chunk another tenant's follows", () => {
    const index = new ChunkIndex();
    store(index, ['shared'], 100, 'a');
    store(index, ['b-tail'], 100, 'b');
    store(index, ['a-own'], 100, 'a');
    index.link(['shared', 'b-tail']);
    expect(order(index, { tenant: 'a' })).toEqual(['a-own:lru']);
    expect(order(index, { tenant: 'b' })).toEqual(['b-tail:lru']);
  });

  it('survives a loop of links (two requests disagreeing on an order) without hanging', () => {
    const index = new ChunkIndex();
    store(index, ['m', 'n'], 100);
    index.link(['m', 'n']);
    index.link(['n', 'm']);
    expect(order(index).sort()).toEqual(['m:dead', 'n:dead']);
  });
});
