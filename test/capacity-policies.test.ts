/**
 * The capacity benchmark's pieces (bench/capacity): the trace is deterministic and its keys are an
 * engine's chained chunk hashes; the engine loop counts only the leading run of present chunks;
 * each policy evicts what it says it does. No timed assertion: the benchmark reports, it does not
 * test, how the policies compare.
 */
import { describe, expect, it } from 'vitest';
import { BeladyPolicy, deadBytes, Heap, LruPolicy, PrefixAwarePolicy, simulate, WriteAgePolicy, type EvictionPolicy } from '../bench/capacity/policies.js';
import { DEFAULT_WORKLOAD, generateTrace, prng, workingSetBytes, zipf, type Trace } from '../bench/capacity/workload.js';

const SMALL = { ...DEFAULT_WORKLOAD, requests: 400, activeConversations: 40, documents: 20 };

/** A hand-made trace of one-byte chunks. */
function traceOf(...prompts: string[][]): Trace {
  return { params: DEFAULT_WORKLOAD, chunkTokens: 256, chunkBytes: 1, requests: prompts.map((keys, i) => ({ conversation: i, keys, tokens: keys.length * 256 })) };
}

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
    for (const r of trace.requests) r.keys.forEach((key, i) => {
      const before = i === 0 ? undefined : r.keys[i - 1];
      if (pred.has(key)) expect(pred.get(key)).toBe(before);
      else pred.set(key, before);
    });
    expect(workingSetBytes(trace)).toBe(pred.size * trace.chunkBytes);
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
    const pred = new Map([['a1', 'a0'], ['a2', 'a1'], ['b1', 'b0'], ['b2', 'b1']]);
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
    for (const policy of [new PrefixAwarePolicy(trace.chunkBytes), new LruPolicy(trace.chunkBytes), new WriteAgePolicy(trace.chunkBytes)]) expect(best).toBeGreaterThanOrEqual(rate(policy));
  });

  it('serves the leading chunks an engine holds itself and asks the bucket for the rest', () => {
    const trace = traceOf(['a0', 'a1'], ['a0', 'a1', 'a2']);
    const result = simulate(trace, new LruPolicy(1), { budgetBytes: Infinity, high: 1, low: 1, measureFrom: 0, engines: { count: 1, chunks: 100 } });
    expect(result.hitTokens / 256).toBe(2);
    expect(result.bucketHitTokens).toBe(0);
    expect(result.bytesWritten).toBe(3);
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
