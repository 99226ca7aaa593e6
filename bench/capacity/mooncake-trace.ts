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
 * (the partial block at the end of a prompt is never stored).
 *
 * The traces name no conversations, so a turn is recognised by its prompt: a request whose whole
 * blocks start with every whole block of an earlier request's prompt (two at least) continues that
 * request's conversation, as a multi-turn chat's next prompt holds the last one; any other request
 * starts a conversation. What a session- or prefix-aware router keeps on one engine. (Grouping by
 * the first block instead put the whole conversation trace, whose prompts all start with one
 * system-prompt block, in one conversation, so on one engine.)
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
  /** The conversation of each earlier prompt of two whole blocks or more, by its last block's id (ids are prefix-structured: the last names the whole prompt). */
  const conversationEnding = new Map<number, number>();
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
    const blocks = (ids as number[]).slice(0, whole);
    const keys = blocks.map((id) => `mc/${id}`);
    let conversation = requests.length;
    for (let k = blocks.length; k >= 2; k--) {
      const earlier = conversationEnding.get(blocks[k - 1] as number);
      if (earlier !== undefined) {
        conversation = earlier;
        break;
      }
    }
    if (blocks.length >= 2) conversationEnding.set(blocks[blocks.length - 1] as number, conversation);
    requests.push({ conversation, keys, tokens });
  }
  if (requests.length === 0) throw new Error(`${path}: no requests`);
  const params: WorkloadParams = { ...DEFAULT_WORKLOAD, requests: requests.length, chunkTokens: MOONCAKE_BLOCK_TOKENS, scale: options.scale, activeConversations: 1 };
  return { params, chunkTokens: MOONCAKE_BLOCK_TOKENS, chunkBytes: chunkBytesOf(params), requests };
}
