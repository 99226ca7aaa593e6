/**
 * bench/capacity/mooncake-trace.ts: Mooncake's JSONL request traces as the capacity benchmark's
 * trace: one key per whole 512-token block, prefix-structured ids as keys, errors naming the line.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadMooncakeTrace } from '../bench/capacity/mooncake-trace.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function file(lines: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'oc-trace-'));
  dirs.push(dir);
  const path = join(dir, 'trace.jsonl');
  writeFileSync(path, `${lines.join('\n')}\n`);
  return path;
}

describe('a Mooncake trace', () => {
  it('becomes requests of their whole blocks, shared prefixes sharing keys', () => {
    const path = file([
      '{"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1, 2]}',
      '{"timestamp": 10, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]}',
      '',
      '{"timestamp": 20, "input_length": 300, "output_length": 5, "hash_ids": [7]}',
    ]);
    const trace = loadMooncakeTrace(path, { scale: 1 / 128 });
    expect(trace.chunkTokens).toBe(512);
    expect(trace.chunkBytes).toBe((512 * 128 * 1024) / 128);
    // 1,200 tokens are two whole blocks (the third is partial, never stored); 300 tokens none.
    expect(trace.requests.map((r) => r.keys)).toEqual([['mc/0', 'mc/1'], ['mc/0', 'mc/1'], []]);
    expect(trace.requests.map((r) => r.tokens)).toEqual([1200, 1024, 300]);
    expect(trace.requests[0]?.conversation).toBe(trace.requests[1]?.conversation);
    expect(loadMooncakeTrace(path, { scale: 1, limit: 1 }).requests).toHaveLength(1);
  });

  it('puts a request in the conversation of the earlier prompt it extends, not of the system prompt all share', () => {
    const line = (ids: number[]): string => JSON.stringify({ timestamp: 0, input_length: ids.length * 512, output_length: 5, hash_ids: ids });
    const trace = loadMooncakeTrace(file([line([0, 1, 2]), line([0, 3, 4]), line([0, 1, 2, 5]), line([0, 3, 4, 6, 7]), line([0, 8]), line([0, 1, 2, 5, 9])]), { scale: 1 });
    const c = trace.requests.map((r) => r.conversation);
    expect(c[2]).toBe(c[0]);
    expect(c[3]).toBe(c[1]);
    expect(c[5]).toBe(c[0]); // extends the third request, itself the first's second turn
    expect(new Set([c[0], c[1], c[4]]).size).toBe(3);
  });

  it('refuses what is not one, naming the line', () => {
    expect(() => loadMooncakeTrace(file(['{"input_length": 10, "hash_ids": [1]}', 'nope']), { scale: 1 })).toThrow(/line 2: not JSON/);
    expect(() => loadMooncakeTrace(file(['{"input_length": 10, "hash_ids": [1, -2]}']), { scale: 1 })).toThrow(/line 1: hash_ids/);
    expect(() => loadMooncakeTrace(file(['{"hash_ids": [1]}']), { scale: 1 })).toThrow(/line 1: input_length/);
    expect(() => loadMooncakeTrace(file(['']), { scale: 1 })).toThrow(/no requests/);
  });
});
