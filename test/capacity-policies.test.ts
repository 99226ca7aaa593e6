/**
 * The capacity benchmark's pieces (bench/capacity): the trace is deterministic and its keys are an
 * engine's chained chunk hashes; the engine loop counts only the leading run of present chunks;
 * each policy evicts what it says it does. No timed assertion: the benchmark reports, it does not
 * test, how the policies compare.
 */
import { describe, expect, it } from 'vitest';
import { LfuDaPolicy, S3FifoPolicy } from '../bench/capacity/alternatives.js';
import {
  BeladyPolicy,
  deadBytes,
  Heap,
  LruPolicy,
  planEngineTier,
  PrefixAwarePolicy,
  simulate,
  WriteAgePolicy,
  type EngineTier,
  type EngineTierOptions,
} from '../bench/capacity/policies.js';
import type { EvictionPolicy } from '../bench/capacity/eviction-policy.js';
import { DEFAULT_WORKLOAD, generateTrace, prng, reuseFacts, workingSetBytes, zipf, type Trace } from '../bench/capacity/workload.js';

const SMALL = { ...DEFAULT_WORKLOAD, requests: 400, activeConversations: 40, documents: 20 };

/** A hand-made trace of one-byte chunks. */
function traceOf(...prompts: string[][]): Trace {
  return { params: DEFAULT_WORKLOAD, chunkTokens: 256, chunkBytes: 1, requests: prompts.map((keys, i) => ({ conversation: i, keys, tokens: keys.length * 256 })) };
}

/** A hand-made trace of one-byte chunks, each prompt a turn of the conversation named with it. */
function turnsOf(...turns: [number, string[]][]): Trace {
  return { params: DEFAULT_WORKLOAD, chunkTokens: 256, chunkBytes: 1, requests: turns.map(([conversation, keys]) => ({ conversation, keys, tokens: keys.length * 256 })) };
}

/** An engine tier given outright: request i's engine held its first local[i] chunks. */
function tierOf(...local: number[]): EngineTier {
  return { options: { count: 1, chunks: 1, routing: 'affinity', restartEvery: 0, seed: 1 }, engine: new Int32Array(local.length), local: Int32Array.from(local), restarts: 0 };
}

const TIER: EngineTierOptions = { count: 2, chunks: 100, routing: 'affinity', restartEvery: 0, seed: 1 };

/** Replays the trace with a budget of `budget` chunks, trimmed to `low` of it once it is passed. */
function run(trace: Trace, policy: EvictionPolicy, budget: number, low: number) {
  return simulate(trace, policy, { budgetBytes: budget, high: 1, low, measureFrom: 0 });
}

describe('capacity workload', () => {
  it('draws the same numbers from the same seed, in [0, 1)', () => {
    const a = prng(7);
    const b = prng(7);
    const draws = Array.from({ length: 1000 }, () => a());
    expect(draws).toEqual(Array.from({ length: 1000 }, () => b()));
    expect(draws.every((x) => x >= 0 && x < 1)).toBe(true);
    expect(prng(8)()).not.toBe(draws[0]);
  });

  it('draws Zipf ranks: rank 0 most often, every rank in range', () => {
    const draw = zipf(10, 1.2, prng(3));
    const counts = new Array<number>(10).fill(0);
    for (let i = 0; i < 20_000; i++) counts[draw()]! += 1;
    expect(counts[0]).toBeGreaterThan(counts[1]!);
    expect(counts[1]).toBeGreaterThan(counts[9]!);
    expect(counts.reduce((s, c) => s + c, 0)).toBe(20_000);
  });

  it('generates the same trace from the same parameters, and another from another seed', () => {
    const a = generateTrace(SMALL);
    expect(generateTrace(SMALL).requests).toEqual(a.requests);
    expect(generateTrace({ ...SMALL, seed: 2 }).requests).not.toEqual(a.requests);
    expect(a.requests).toHaveLength(400);
    expect(a.chunkBytes).toBe(256 * 1024); // 32 MiB x 1/128
  });

  it("keys a prompt's whole chunks, 4K-32K tokens, each turn extending the conversation's last prompt", () => {
    const trace = generateTrace(SMALL);
    const last = new Map<number, readonly string[]>();
    for (const request of trace.requests) {
      expect(request.keys).toHaveLength(Math.floor(request.tokens / 256));
      expect(request.tokens).toBeGreaterThanOrEqual(4096);
      expect(request.tokens).toBeLessThanOrEqual(32768);
      const before = last.get(request.conversation);
      if (before) {
        expect(request.keys.length).toBeGreaterThan(before.length - 1);
        expect(request.keys.slice(0, before.length)).toEqual(before);
      }
      last.set(request.conversation, request.keys);
    }
    expect(new Set(trace.requests.map((r) => r.conversation)).size).toBeGreaterThan(SMALL.activeConversations);
  });

  it('shares leading keys between conversations that share a system prompt, and only those', () => {
    const trace = generateTrace(SMALL);
    const firsts = new Map<number, readonly string[]>();
    for (const r of trace.requests) if (!firsts.has(r.conversation)) firsts.set(r.conversation, r.keys);
    const heads = [...firsts.values()].map((keys) => keys[0]);
    // A dozen system prompts, hundreds of conversations: heads repeat (the popular prompts).
    expect(new Set(heads).size).toBeLessThanOrEqual(SMALL.systemPrompts);
    // A key stands for its whole prefix: the same key never follows two different keys.
    const pred = new Map<string, string | undefined>();
    for (const r of trace.requests)
      r.keys.forEach((key, i) => {
        const before = i === 0 ? undefined : r.keys[i - 1];
        if (pred.has(key)) expect(pred.get(key)).toBe(before);
        else pred.set(key, before);
      });
    expect(workingSetBytes(trace)).toBe(pred.size * trace.chunkBytes);
  });
});

describe('capacity trace facts', () => {
  it("counts the chunks never read again, the gap to a chunk's first reuse, and third uses", () => {
    const facts = reuseFacts(traceOf(['a', 'b'], ['a', 'c'], ['a', 'b']));
    expect(facts.usedOnce).toBeCloseTo(1 / 3); // c
    expect(facts.thirdUseAfterSecond).toBe(0.5); // a of a and b
    expect(facts.firstReuseGapMedian).toBe(2); // a after 1 request, b after 2
    expect(facts.firstReuseGapP90).toBe(2);
  });
});

describe('capacity policies', () => {
  it('counts the leading run of present chunks as hits, reads them, and writes only what is missing', () => {
    const trace = traceOf(['a0', 'a1', 'a2'], ['a0', 'a1', 'a2', 'a3'], ['a0', 'x1']);
    const result = run(trace, new LruPolicy(1), Infinity, 1);
    expect(result.hitTokens / 256).toBe(0 + 3 + 1);
    expect(result.prefixTokens / 256).toBe(3 + 4 + 2);
    expect(result.bytesRead).toBe(4);
    expect(result.bytesWritten).toBe(3 + 1 + 1);
  });

  it('prefix-aware (ChunkIndex) trims a prompt from its tail; plain LRU from its head, leaving a dead tail', () => {
    // Six chunks in a budget of five: two go. The older prompt is a's.
    const trace = traceOf(['a0', 'a1', 'a2'], ['b0', 'b1', 'b2'], ['a0', 'a1', 'a2']);
    const prefix = new PrefixAwarePolicy(1);
    const lru = new LruPolicy(1);
    expect(run(trace, prefix, 5, 0.8).hitTokens / 256).toBe(1); // a0 kept
    expect(run(trace, lru, 5, 0.8).hitTokens / 256).toBe(0); // a0 and a1 gone, a2 unreachable
    const afterTwo = traceOf(['a0', 'a1', 'a2'], ['b0', 'b1', 'b2']);
    const lru2 = new LruPolicy(1);
    run(afterTwo, lru2, 5, 0.8);
    const pred = new Map([
      ['a1', 'a0'],
      ['a2', 'a1'],
      ['b1', 'b0'],
      ['b2', 'b1'],
    ]);
    expect(deadBytes(lru2, pred, 1)).toBe(1);
    const prefix2 = new PrefixAwarePolicy(1);
    run(afterTwo, prefix2, 5, 0.8);
    expect(deadBytes(prefix2, pred, 1)).toBe(0);
    expect([...prefix2.keys()].sort()).toEqual(['a0', 'b0', 'b1', 'b2']);
  });

  it('write age evicts the oldest written chunk however hot it is', () => {
    const trace = traceOf(['s0', 'x'], ['s0', 'y'], ['z']);
    const age = new WriteAgePolicy(1);
    run(trace, age, 3, 1); // the third request passes the budget: one chunk goes
    expect(age.has('s0')).toBe(false);
    const lru = new LruPolicy(1);
    run(trace, lru, 3, 1);
    expect(lru.has('s0')).toBe(true);
  });

  it('Belady evicts what is never used again first, leaves before their prefix, and never leaves a dead chunk', () => {
    const trace = traceOf(['a0', 'a1'], ['b0', 'b1'], ['a0', 'a1'], ['b0']);
    const belady = new BeladyPolicy(trace);
    const result = run(trace, belady, 3, 0.67);
    // After the second request two of four chunks go: b1 (never used again), then b0, a leaf once
    // b1 is gone, whose next use (request 3) is farther than a1's (request 2). a's prompt is kept.
    expect(result.hitTokens / 256).toBe(2);
    expect(result.deadShare).toBe(0);
  });

  it('Belady is at least as good as the online policies on a generated trace', () => {
    const trace = generateTrace(SMALL);
    const budget = workingSetBytes(trace) * 0.2;
    const rate = (policy: EvictionPolicy): number => simulate(trace, policy, { budgetBytes: budget, high: 0.95, low: 0.85, measureFrom: 0 }).hitRate;
    const best = rate(new BeladyPolicy(trace));
    const budgetChunks = budget / trace.chunkBytes;
    for (const policy of [
      new PrefixAwarePolicy(trace.chunkBytes),
      new LruPolicy(trace.chunkBytes),
      new WriteAgePolicy(trace.chunkBytes),
      new S3FifoPolicy(trace.chunkBytes, budgetChunks),
      new LfuDaPolicy(trace.chunkBytes),
    ])
      expect(best).toBeGreaterThanOrEqual(rate(policy));
  });

  it('S3-FIFO evicts a chunk never read on probation before an older one read there, and sends a key it evicted back to the main queue', () => {
    const s3 = new S3FifoPolicy(1, 3);
    // h is written and read; x, y and z are written: four chunks in a budget of three.
    run(traceOf(['h'], ['h'], ['x'], ['y'], ['z']), s3, 3, 1);
    expect([...s3.keys()].sort()).toEqual(['h', 'y', 'z']); // x, never read, went before h
    const lru = new LruPolicy(1);
    run(traceOf(['h'], ['h'], ['x'], ['y'], ['z']), lru, 3, 1);
    expect(lru.has('h')).toBe(false);
    // x is stored again: its key was in the ghost queue, so it skips probation, and y goes.
    const again = new S3FifoPolicy(1, 3);
    run(traceOf(['h'], ['h'], ['x'], ['y'], ['z'], ['x']), again, 3, 1);
    expect([...again.keys()].sort()).toEqual(['h', 'x', 'z']);
  });

  it('S3-FIFO and LFU-DA evict only leaves: never a chunk before one they keep', () => {
    const trace = traceOf(['a0', 'a1', 'a2'], ['a0'], ['a0'], ['b0', 'b1', 'b2'], ['c0', 'c1']);
    const pred = new Map([
      ['a1', 'a0'],
      ['a2', 'a1'],
      ['b1', 'b0'],
      ['b2', 'b1'],
      ['c1', 'c0'],
    ]);
    for (const policy of [new S3FifoPolicy(1, 5), new LfuDaPolicy(1)]) {
      const result = run(trace, policy, 5, 0.6);
      expect(result.deadShare).toBe(0);
      expect(deadBytes(policy, pred, 1)).toBe(0);
      expect(policy.bytes).toBeLessThanOrEqual(5);
    }
  });

  it('LFU-DA keeps the chunk read most over a more recent one read less, until the age passes its count', () => {
    const lfu = new LfuDaPolicy(1);
    run(traceOf(['p'], ['p'], ['p'], ['q'], ['r']), lfu, 2, 1);
    expect([...lfu.keys()].sort()).toEqual(['p', 'r']); // q, accessed once, went; LRU would take p
    const aged = new LfuDaPolicy(1);
    run(traceOf(['p'], ['p'], ['p'], ['q'], ['r'], ['s'], ['t'], ['u'], ['v']), aged, 2, 1);
    expect(aged.has('p')).toBe(false); // each eviction raised the age; new chunks outrank p's three accesses
  });

  it('pops a heap in order', () => {
    const heap = new Heap<number>((a, b) => a < b);
    const values = Array.from({ length: 200 }, (_, i) => (i * 7919) % 211);
    for (const v of values) heap.push(v);
    const out: number[] = [];
    for (let v = heap.pop(); v !== undefined; v = heap.pop()) out.push(v);
    expect(out).toEqual([...values].sort((a, b) => a - b));
  });
});

describe('capacity engine tier', () => {
  it('keeps a conversation on its engine and counts the leading chunks that engine holds', () => {
    const trace = turnsOf([0, ['a0', 'a1']], [1, ['b0']], [0, ['a0', 'a1', 'a2']], [1, ['a0', 'x']]);
    const tier = planEngineTier(trace, TIER);
    expect([...tier.engine]).toEqual([0, 1, 0, 1]);
    // Engine 1 never saw a0: the shared head counts only on the engine that holds it.
    expect([...tier.local]).toEqual([0, 0, 2, 0]);
    expect(tier.restarts).toBe(0);
  });

  it("trims an engine's cache from the tail of its prompts: the head stays", () => {
    const trace = turnsOf([0, ['a0', 'a1', 'a2']], [0, ['a0', 'a1', 'a2', 'a3']]);
    const tier = planEngineTier(trace, { ...TIER, count: 1, chunks: 2 });
    expect([...tier.local]).toEqual([0, 2]);
  });

  it('restarts one engine in turn every so many requests, with an empty cache', () => {
    const same = ['a0', 'a1'];
    const trace = turnsOf(...Array.from({ length: 6 }, (_, i): [number, string[]] => [i % 2, same]));
    const tier = planEngineTier(trace, { ...TIER, restartEvery: 2 });
    // Engine 0 restarts before request 2, engine 1 before request 4, engine 0 again before 6.
    expect([...tier.engine]).toEqual([0, 1, 0, 1, 0, 1]);
    expect([...tier.local]).toEqual([0, 0, 0, 2, 2, 0]);
    expect(tier.restarts).toBe(2);
  });

  it('routes at random, the same way for the same seed', () => {
    const trace = turnsOf(...Array.from({ length: 200 }, (): [number, string[]] => [0, ['a0']]));
    const a = planEngineTier(trace, { ...TIER, count: 4, routing: 'random' });
    expect(new Set(a.engine).size).toBe(4);
    expect([...planEngineTier(trace, { ...TIER, count: 4, routing: 'random' }).engine]).toEqual([...a.engine]);
  });

  it('asks the bucket only for the keys after the engine hits, and stores each missing chunk with the key before it', () => {
    const begun: string[][] = [];
    const written: [string, string | undefined][] = [];
    const lru = new LruPolicy(1);
    const spy: EvictionPolicy = {
      name: 'spy',
      get bytes() {
        return lru.bytes;
      },
      has: (key) => lru.has(key),
      begin: (request) => void begun.push([...request.keys]),
      read: (key) => lru.read(key),
      write: (key, pred) => {
        written.push([key, pred]);
        lru.write(key);
      },
      evict: (target) => lru.evict(target),
      keys: () => lru.keys(),
    };
    const trace = turnsOf([0, ['a0', 'a1']], [0, ['a0', 'a1', 'a2', 'a3']], [1, ['a0', 'a1', 'a2']]);
    const result = simulate(trace, spy, { budgetBytes: Infinity, high: 1, low: 1, measureFrom: 0, tier: tierOf(0, 2, 0) });
    expect(begun).toEqual([
      ['a0', 'a1'],
      ['a2', 'a3'],
      ['a0', 'a1', 'a2'],
    ]);
    expect(written).toEqual([
      ['a0', undefined],
      ['a1', 'a0'],
      ['a2', 'a1'],
      ['a3', 'a2'],
    ]);
    expect(result.hitTokens / 256).toBe(0 + 2 + 3); // the engine's two, then the bucket's three
    expect(result.bucketHitTokens / 256).toBe(3);
    expect(result.askedTokens / 256).toBe(2 + 2 + 3);
    expect(result.coldPrefixTokens / 256).toBe(2 + 3); // the requests whose engine held nothing
    expect(result.coldHitTokens / 256).toBe(3);
  });

  it('keeps the heads the engines serve themselves when the PUTs name the chunk before; LRU and lookups alone lose them', () => {
    // A cold engine stores h0 h1 a0; warm engines (h0 h1 held) store b0 and c0 after h1; five
    // chunks in a budget of four, trimmed to two: three go. Then a cold engine looks up h0 h1 c0.
    const trace = turnsOf([0, ['h0', 'h1', 'a0']], [1, ['h0', 'h1', 'b0']], [2, ['h0', 'h1', 'c0']], [2, ['h0', 'h1', 'c0']]);
    const tier = tierOf(0, 2, 2, 0);
    const hits = (policy: EvictionPolicy): number => simulate(trace, policy, { budgetBytes: 4, high: 1, low: 0.5, measureFrom: 3, tier }).bucketHitTokens / 256;
    const withAfter = new PrefixAwarePolicy(1);
    expect(hits(withAfter)).toBe(2); // a0 b0 c0 went, tails first; h0 h1 kept
    expect(withAfter.index.get('h1')).toBeDefined();
    const lookupsOnly = new PrefixAwarePolicy(1, { putPred: false });
    expect(lookupsOnly.name).toBe('prefix-aware-no-after');
    expect(hits(lookupsOnly)).toBe(0); // b0 c0 were chains of one: h1 a leaf as old as a0
    expect(hits(new LruPolicy(1))).toBe(0); // h0 h1 a0, the oldest, went
  });

  it('Belady behind engine caches counts only the lookups at the bucket as uses', () => {
    const trace = turnsOf([0, ['a0', 'a1']], [0, ['a0', 'a1', 'a2']], [1, ['a0', 'a1']]);
    const tiered = new BeladyPolicy(trace, tierOf(0, 2, 0));
    const plain = new BeladyPolicy(trace);
    tiered.begin(trace.requests[0]!, 0);
    plain.begin(trace.requests[0]!, 0);
    expect(tiered.nextUse('a0')).toBe(2); // request 1's engine serves a0 itself
    expect(plain.nextUse('a0')).toBe(1);
    expect(tiered.nextUse('a2')).toBe(1);
    tiered.begin(trace.requests[1]!, 1);
    expect(tiered.nextUse('a2')).toBe(Infinity);
  });

  it('Belady without engine caches evicts as it did with leaves only: never a chunk before one it keeps', () => {
    const trace = generateTrace(SMALL);
    const belady = new BeladyPolicy(trace);
    const result = simulate(trace, belady, { budgetBytes: workingSetBytes(trace) * 0.2, high: 0.95, low: 0.85, measureFrom: 0 });
    expect(result.deadShare).toBe(0);
  });
});
