/**
 * A request trace in the JSONL format of Mooncake's FAST'25 release (github.com/kvcache-ai/Mooncake,
 * `FAST25-release/traces`: a conversation trace, a tool-agent trace and a synthetic one), as the
 * capacity benchmark's Trace (workload.ts), so that the policies and the gateway replay public
 * production traffic rather than only the generator's.
 *
 * Each line is `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}`.
 * A hash id names one 512-token block, and the ids are prefix-structured: two requests that share
 * their first k ids share their first k blocks, so an id is a chunk key as the gateway's are (a
 * chunk's key names its whole prefix). Only the prompt's whole blocks are keys, as the generator's
 * (the partial block at the end of a prompt is never stored). A request's "conversation" is its
 * first block: what a prefix-aware router keeps on one engine.
 */
import { readFileSync } from 'node:fs';
import { DEFAULT_WORKLOAD, chunkBytesOf, type Trace, type TraceRequest, type WorkloadParams } from './workload.js';

/** The block size of Mooncake's traces, in tokens. */
export const MOONCAKE_BLOCK_TOKENS = 512;

/**
 * The first `limit` requests (all without one) of the JSONL file at `path`, in file order (its
 * timestamps' order). `scale` multiplies the byte counts as the generator's does. Throws, naming
 * the line, on a line that is not such a request.
 */
export function loadMooncakeTrace(path: string, options: { scale: number; limit?: number }): Trace {
  const requests: TraceRequest[] = [];
  const lines = readFileSync(path, 'utf8').split('\n');
  for (const [index, line] of lines.entries()) {
    if (options.limit !== undefined && requests.length >= options.limit) break;
    if (line.trim() === '') continue;
    const where = `${path}, line ${index + 1}`;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch (error) {
      throw new Error(`${where}: not JSON (${(error as Error).message})`);
    }
    const r = parsed as { input_length?: unknown; hash_ids?: unknown };
    const ids = r.hash_ids;
    if (!Array.isArray(ids) || !ids.every((id) => Number.isSafeInteger(id) && (id as number) >= 0))
      throw new Error(`${where}: hash_ids must be a list of whole numbers (Mooncake's trace format)`);
    if (!Number.isSafeInteger(r.input_length) || (r.input_length as number) < 0) throw new Error(`${where}: input_length must be a whole number of tokens`);
    const tokens = r.input_length as number;
    const whole = Math.min(ids.length, Math.floor(tokens / MOONCAKE_BLOCK_TOKENS));
    const keys = (ids as number[]).slice(0, whole).map((id) => `mc/${id}`);
    requests.push({ conversation: (ids[0] as number | undefined) ?? -1 - index, keys, tokens });
  }
  if (requests.length === 0) throw new Error(`${path}: no requests`);
  const params: WorkloadParams = { ...DEFAULT_WORKLOAD, requests: requests.length, chunkTokens: MOONCAKE_BLOCK_TOKENS, scale: options.scale, activeConversations: 1 };
  return { params, chunkTokens: MOONCAKE_BLOCK_TOKENS, chunkBytes: chunkBytesOf(params), requests };
}
