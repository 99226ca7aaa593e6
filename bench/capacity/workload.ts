/**
 * The capacity benchmark's trace: engine requests whose prompts share prefixes the way chat and
 * RAG traffic does. A pure function of its parameters (a seeded PRNG, no clock), so the simulated
 * policies and a replay through a real gateway see the very same requests.
 *
 * The model:
 * - a few system prompts, one per conversation, drawn with Zipf-like popularity;
 * - a library of documents, attached to a share of conversations after the system prompt, also
 *   Zipf-like (a few documents are read by many conversations, most by a few);
 * - a conversation's first prompt is its system prompt, its document if any, then its own text
 *   (the first prompt is 4K-16K tokens, log-uniform); each later turn appends the answer and the
 *   next user message, so its prompt extends the previous one, up to 32K tokens;
 * - a fixed number of conversations are in progress at once; each request is the next turn of one
 *   of them picked uniformly (so the gap between two turns of a conversation is random, about
 *   that number of requests); a conversation ends at random after a turn, or when its next turn
 *   would pass the largest prompt, and a new one takes its place.
 *
 * Keys are an engine's: the key of chunk i hashes the key of chunk i-1 with the tokens of chunk i,
 * so it stands for every token up to the end of chunk i (vLLM's block hashes and LMCache's chunk
 * hashes are chained the same way); two prompts sharing their first k chunks share those k keys.
 * Tokens are not materialised: a token is named by its segment (system prompt, document, or a
 * conversation's turn) and its offset in it, which identifies it as well as the token would.
 * Only whole chunks are keys: the partial chunk at the end of a prompt is never stored.
 */
import { createHash } from 'node:crypto';

export interface WorkloadParams {
  readonly seed: number;
  readonly requests: number;
  /** Conversations in progress at once (users between two turns). */
  readonly activeConversations: number;
  readonly systemPrompts: number;
  /** [min, max] tokens, uniform. */
  readonly systemPromptTokens: readonly [number, number];
  /** Zipf exponent of system prompt popularity. */
  readonly systemPromptZipf: number;
  readonly documents: number;
  /** [min, max] tokens, log-uniform. */
  readonly documentTokens: readonly [number, number];
  readonly documentZipf: number;
  /** Share of conversations that start with a document after their system prompt. */
  readonly documentShare: number;
  /** [min, max] tokens of a conversation's first prompt, log-uniform. */
  readonly firstPromptTokens: readonly [number, number];
  /** [min, max] tokens one turn appends (the answer and the next user message), uniform. */
  readonly turnTokens: readonly [number, number];
  /** Chance that a conversation ends after a turn. */
  readonly endProbability: number;
  readonly maxPromptTokens: number;
  readonly chunkTokens: number;
  /** KV bytes per token of the model at full size (Llama-3.1-8B in bf16: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes). */
  readonly kvBytesPerToken: number;
  /** Every byte count is multiplied by this (the trace's shape does not change). */
  readonly scale: number;
}

export const DEFAULT_WORKLOAD: WorkloadParams = {
  seed: 1,
  requests: 20_000,
  activeConversations: 1500,
  systemPrompts: 12,
  systemPromptTokens: [1024, 4096],
  systemPromptZipf: 1.1,
  documents: 400,
  documentTokens: [2048, 16384],
  documentZipf: 1.0,
  documentShare: 0.5,
  firstPromptTokens: [4096, 16384],
  turnTokens: [300, 2000],
  endProbability: 0.2,
  maxPromptTokens: 32768,
  chunkTokens: 256,
  kvBytesPerToken: 128 * 1024,
  scale: 1 / 128,
};

export interface TraceRequest {
  /** Which conversation the request is a turn of. */
  readonly conversation: number;
  /** Keys of the prompt's whole chunks, in order. */
  readonly keys: readonly string[];
  /** Tokens of the prompt (its last partial chunk included). */
  readonly tokens: number;
}

export interface Trace {
  readonly params: WorkloadParams;
  readonly chunkTokens: number;
  /** KV bytes of one chunk, scaled. */
  readonly chunkBytes: number;
  readonly requests: readonly TraceRequest[];
}

/** A small seeded PRNG (mulberry32): 32 bits of state, uniform doubles in [0, 1). */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Draws ranks 0..n-1 with probability proportional to 1 / (rank + 1)^s. */
export function zipf(n: number, s: number, random: () => number): () => number {
  const cdf = new Float64Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) cdf[i] = total += 1 / (i + 1) ** s;
  return () => {
    const u = random() * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cdf[mid] as number) > u) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
}

/** A run of tokens that prompts share whole: a system prompt, a document, one turn of a conversation. */
interface Segment {
  readonly id: string;
  readonly tokens: number;
}

/** A conversation's prompt so far, and the keys of its whole chunks. */
interface Conversation {
  readonly id: number;
  readonly segments: Segment[];
  tokens: number;
  readonly keys: string[];
  turns: number;
}

/** The chunk bytes of a trace's parameters. */
export function chunkBytesOf(params: WorkloadParams): number {
  return Math.round(params.chunkTokens * params.kvBytesPerToken * params.scale);
}

/** Generates the trace: the same parameters give the same requests, key for key. */
export function generateTrace(params: WorkloadParams): Trace {
  const random = prng(params.seed);
  const uniform = ([min, max]: readonly [number, number]): number => Math.round(min + random() * (max - min));
  const logUniform = ([min, max]: readonly [number, number]): number => Math.round(Math.exp(Math.log(min) + random() * (Math.log(max) - Math.log(min))));
  const systemPrompts = Array.from({ length: params.systemPrompts }, (_, i): Segment => ({ id: `sys${i}`, tokens: uniform(params.systemPromptTokens) }));
  const documents = Array.from({ length: params.documents }, (_, i): Segment => ({ id: `doc${i}`, tokens: logUniform(params.documentTokens) }));
  const pickSystem = zipf(systemPrompts.length, params.systemPromptZipf, random);
  const pickDocument = zipf(documents.length, params.documentZipf, random);
  const keyCache = new Map<string, string[]>();
  let nextConversation = 0;

  const start = (): Conversation => {
    const id = nextConversation++;
    const segments: Segment[] = [systemPrompts[pickSystem()] as Segment];
    if (random() < params.documentShare) segments.push(documents[pickDocument()] as Segment);
    const shared = segments.reduce((sum, s) => sum + s.tokens, 0);
    // The conversation's own text fills the first prompt to its drawn length; at least a short
    // question when the shared part alone is already that long.
    const own = Math.max(uniform([64, 512]), logUniform(params.firstPromptTokens) - shared);
    segments.push({ id: `c${id}.0`, tokens: own });
    const conversation: Conversation = { id, segments, tokens: 0, keys: [], turns: 0 };
    conversation.tokens = shared + own;
    // Shared segments hash alike in every conversation: cache the keys of their whole chunks.
    extendKeys(conversation, params.chunkTokens, keyCache);
    return conversation;
  };

  const active = Array.from({ length: params.activeConversations }, start);
  const requests: TraceRequest[] = [];
  while (requests.length < params.requests) {
    const slot = Math.floor(random() * active.length);
    let conversation = active[slot] as Conversation;
    if (conversation.turns > 0) {
      const added = uniform(params.turnTokens);
      if (random() < params.endProbability || conversation.tokens + added > params.maxPromptTokens) {
        conversation = start();
        active[slot] = conversation;
      } else {
        conversation.segments.push({ id: `c${conversation.id}.${conversation.turns}`, tokens: added });
        conversation.tokens += added;
        extendKeys(conversation, params.chunkTokens, keyCache);
      }
    }
    conversation.turns++;
    requests.push({ conversation: conversation.id, keys: conversation.keys.slice(), tokens: conversation.tokens });
  }
  return { params, chunkTokens: params.chunkTokens, chunkBytes: chunkBytesOf(params), requests };
}

/** Appends the keys of the chunks the conversation's prompt now fills whole. */
function extendKeys(conversation: Conversation, chunkTokens: number, cache: Map<string, string[]>): void {
  const whole = Math.floor(conversation.tokens / chunkTokens);
  const keys = conversation.keys;
  if (keys.length === 0) {
    // Chunks that lie inside the leading shared segments are the same for every conversation.
    const cacheId = conversation.segments
      .slice(0, -1)
      .map((s) => s.id)
      .join('+');
    const cached = cache.get(cacheId);
    if (cached) keys.push(...cached);
    else {
      const sharedTokens = conversation.segments.slice(0, -1).reduce((sum, s) => sum + s.tokens, 0);
      keys.push(...chunkKeys(conversation.segments, chunkTokens, 0, Math.floor(sharedTokens / chunkTokens), undefined));
      cache.set(cacheId, keys.slice());
    }
  }
  keys.push(...chunkKeys(conversation.segments, chunkTokens, keys.length, whole, keys[keys.length - 1]));
}

/** Keys of chunks [from, to): each hashes the one before it with the segments and offsets of its tokens. */
function chunkKeys(segments: readonly Segment[], chunkTokens: number, from: number, to: number, before: string | undefined): string[] {
  const keys: string[] = [];
  let previous = before ?? '';
  for (let chunk = from; chunk < to; chunk++) {
    const begin = chunk * chunkTokens;
    const end = begin + chunkTokens;
    const hash = createHash('sha256').update(previous);
    let offset = 0;
    for (const segment of segments) {
      const lo = Math.max(begin, offset);
      const hi = Math.min(end, offset + segment.tokens);
      if (lo < hi) hash.update(`|${segment.id}:${lo - offset}-${hi - offset}`);
      offset += segment.tokens;
      if (offset >= end) break;
    }
    previous = hash.digest('hex').slice(0, 32);
    keys.push(previous);
  }
  return keys;
}

/** Bytes of the distinct chunks of the trace: what an unbounded bucket would end up holding. */
export function workingSetBytes(trace: Trace): number {
  const distinct = new Set<string>();
  for (const request of trace.requests) for (const key of request.keys) distinct.add(key);
  return distinct.size * trace.chunkBytes;
}

/** How a trace's chunks are reused: what an online eviction order has to go on. */
export interface ReuseFacts {
  /** Of the distinct chunks, the share only one request holds (stored, never read again). */
  readonly usedOnce: number;
  /** Of the chunks used at least twice, the share used a third time. */
  readonly thirdUseAfterSecond: number;
  /** Requests from a chunk's first use to its second, median and 90th percentile. */
  readonly firstReuseGapMedian: number;
  readonly firstReuseGapP90: number;
}

export function reuseFacts(trace: Trace): ReuseFacts {
  const uses = new Map<string, { first: number; count: number }>();
  const gaps: number[] = [];
  trace.requests.forEach((request, at) => {
    for (const key of request.keys) {
      const seen = uses.get(key);
      if (seen === undefined) uses.set(key, { first: at, count: 1 });
      else {
        if (seen.count === 1) gaps.push(at - seen.first);
        seen.count++;
      }
    }
  });
  let once = 0;
  let twice = 0;
  let thrice = 0;
  for (const { count } of uses.values()) {
    if (count === 1) once++;
    if (count >= 2) twice++;
    if (count >= 3) thrice++;
  }
  gaps.sort((a, b) => a - b);
  const at = (q: number): number => gaps[Math.min(gaps.length - 1, Math.floor(q * gaps.length))] ?? 0;
  return {
    usedOnce: uses.size === 0 ? 0 : once / uses.size,
    thirdUseAfterSecond: twice === 0 ? 0 : thrice / twice,
    firstReuseGapMedian: at(0.5),
    firstReuseGapP90: at(0.9),
  };
}
