/**
 * KV events for KV-aware routers (docs/kv-events.md): every chunk of a budgeted bucket that comes
 * into capacity's index is published as a `BlockStored`, every one that leaves it as a
 * `BlockRemoved`, in vLLM's KVEventBatch format (vllm/distributed/kv_events.py), which llm-d's
 * and Dynamo's routers read. The index hears of every way a chunk comes or goes, through this
 * gateway or another in front of the same store (their journals), so the events cover writes of
 * every kind, deletes, overwrites, evictions for the budget, a quota or idleness, and what a
 * reconciliation with the store finds.
 *
 * A chunk is one block: its hash is the first 8 bytes of SHA-256 over its bucket and key, as an
 * unsigned 64-bit integer (blockHash), and its parent the same of the chunk its writer recorded
 * before it (`objectcache-after`). Its tokens are those its writer recorded (`objectcache-tokens`),
 * from the write's own headers or, for a write learnt otherwise (another gateway's, a reload), a
 * HEAD; where the key is an ObjectCache key they must hash to it (schemas/kv-tokens.ts), else the
 * event carries no tokens.
 *
 * Events are batched per topic for 20 ms and handed to the publisher
 * (publisher.ts), which never waits; the HEADs wait in a bounded queue, in order, and past it a
 * chunk is published without tokens (counted).
 *
 * A stored chunk goes after its parent's BlockStored: routers drop a block whose parent they do
 * not hold (llm-d does), and an engine's concurrent PUTs of one prefix reach the store in any
 * order. A chunk whose parent is not in the index yet, or whose parent's event is still queued,
 * is held until that event is published, at most PARENT_WAIT_MS (then published as it is); a
 * removal of a held chunk takes both events away.
 */
import { createHash } from 'node:crypto';
import { encode } from '@msgpack/msgpack';
import { AFTER_META } from '../../schemas/chain.js';
import { checkTokens, decodeTokens, MODEL_META, MODEL_NAME, TOKENS_META } from '../../schemas/kv-tokens.js';
import type { Chunk } from '../capacity/chunk.js';
import type { ChunkChanges } from '../capacity/chunk-index.js';
import type { KvEventsConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { KvEventsObserver } from '../common/observers.js';
import type { CapacityStore } from '../stores/capacity-store.js';
import { EventPublisher } from './publisher.js';

/** Events waiting for their chunk's metadata at most; past it, a stored chunk goes without tokens. */
const MAX_PENDING = 4096;
/** Events waiting at all at most (the store not answering the HEADs): past it, an event is dropped, and its batch's sequence number skipped. */
const MAX_WAITING = 2 * MAX_PENDING;
/** HEADs for metadata at once. */
const HEADS_AT_ONCE = 8;
/** Events in one batch at most (about 80 KB with 256 tokens each): what a stalled subscriber's queue holds is this times its high-water mark. */
const MAX_BATCH_EVENTS = 64;
/** How long a stored chunk waits for its parent's BlockStored at most. */
export const PARENT_WAIT_MS = 1000;
/** Stored chunks held for their parents at most: past it, one is published as it is. */
const MAX_HELD = 4096;

const slotOf = (bucket: string, key: string): string => `${bucket}\0${key}`;

/** The chunk its writer recorded before it (`objectcache-after`), else the one capacity's index learnt (its `pred`). */
const parentOf = (event: { readonly meta: Readonly<Record<string, string>> | undefined; readonly chunk: Chunk }): string | undefined =>
  event.meta?.[AFTER_META] ?? event.chunk.pred;

type Pending = {
  readonly bucket: string;
  readonly kind: 'stored' | 'removed';
  /** The chunk as it was when the change happened. */
  readonly chunk: Chunk;
  /** The index's own chunk, which learns its model (Chunk.model) for its removal's topic. */
  readonly live: Chunk;
  meta: Readonly<Record<string, string>> | undefined;
  /** Its metadata could not be read (the HEAD failed or found another version, or too many waited): published without tokens. */
  unread?: true;
  ready: Promise<void> | undefined;
  /** While held for its parent: when it goes regardless (performance.now()). */
  until?: number;
};

export class KvEvents {
  readonly #config: KvEventsConfig;
  readonly #store: CapacityStore;
  readonly #log: Pick<Logger, 'info' | 'warn' | 'error'>;
  readonly #observer: KvEventsObserver;
  readonly #publisher: EventPublisher;
  /** In the order they happened: each is published once it and everything before it is ready. */
  readonly #pending: Pending[] = [];
  #heads = 0;
  readonly #waitingHeads: (() => void)[] = [];
  readonly #batches = new Map<string, { events: unknown[]; stored: number }>();
  #timer: NodeJS.Timeout | undefined;
  /** #flushReady is running (one at a time, so events leave in order). */
  #flushing = false;
  #closed = false;
  /** Whether a chunk is in capacity's index now. */
  readonly #present: (bucket: string, key: string) => boolean;
  /** Stored events in #pending, per chunk: a child waits for these. */
  readonly #queuedStores = new Map<string, number>();
  /** Stored chunks held for their parent, per parent (in the order they came), and per chunk. */
  readonly #heldFor = new Map<string, Pending[]>();
  readonly #held = new Map<string, Pending>();
  #heldTimer: NodeJS.Timeout | undefined;

  constructor(options: {
    config: KvEventsConfig;
    store: CapacityStore;
    logger: Pick<Logger, 'info' | 'warn' | 'error'>;
    observer: KvEventsObserver;
    /** Whether capacity's index holds the chunk (a parent stored before, or in the baseline); without it, every parent counts as present. */
    present?: (bucket: string, key: string) => boolean;
  }) {
    this.#config = options.config;
    this.#present = options.present ?? (() => true);
    this.#store = options.store;
    this.#log = options.logger;
    this.#observer = options.observer;
    const c = options.config;
    this.#publisher = new EventPublisher({
      endpoint: c.endpoint,
      replayEndpoint: c.replayEndpoint,
      history: c.history,
      highWaterMark: c.highWaterMark,
      logger: options.logger,
      observer: options.observer,
    });
  }

  async start(): Promise<{ endpoint: string; replayEndpoint: string | undefined; firstSequence: bigint }> {
    const firstSequence = this.#publisher.nextSequence();
    const bound = await this.#publisher.start();
    this.#log.info({ ...bound, firstSequence: String(firstSequence), encoding: this.#config.encoding }, 'kv events: publishing');
    return { ...bound, firstSequence };
  }

  /** The next batch's sequence number on `topic`. */
  nextSequence(topic = ''): bigint {
    return this.#publisher.nextSequence(topic);
  }

  /** The listener capacity's index of `bucket` tells (gateway/capacity/capacity.ts `changes`). */
  changes(bucket: string): ChunkChanges {
    return {
      stored: (chunk, meta) => this.#add({ bucket, kind: 'stored', chunk: { ...chunk }, live: chunk, meta, ready: undefined }),
      removed: (chunk) => this.#add({ bucket, kind: 'removed', chunk: { ...chunk }, live: chunk, meta: undefined, ready: undefined }),
    };
  }

  /** Called from inside capacity's index: whatever goes wrong here stays here. */
  #add(event: Pending): void {
    try {
      this.#enqueue(event);
    } catch (error) {
      this.#log.error({ error }, 'kv events: an index change could not be queued; dropped');
      this.#observer.dropped('queue', 1);
      this.#publisher.skip();
    }
  }

  #enqueue(event: Pending): void {
    if (this.#closed) return;
    if (this.#pending.length + this.#held.size >= MAX_WAITING) {
      this.#observer.dropped('queue', 1);
      this.#publisher.skip();
      return;
    }
    if (event.kind === 'stored' && event.meta === undefined) {
      if (this.#pending.length >= MAX_PENDING) {
        event.meta = {};
        event.unread = true;
      } else
        event.ready = Promise.resolve()
          .then(() => this.#head(event))
          .finally(() => (event.ready = undefined));
    }
    this.#pending.push(event);
    if (event.kind === 'stored') {
      const s = slotOf(event.bucket, event.chunk.key);
      this.#queuedStores.set(s, (this.#queuedStores.get(s) ?? 0) + 1);
    }
    this.#flushReady().catch((error: unknown) => this.#log.error({ error }, 'kv events: publishing failed'));
  }

  /** Reads a stored chunk's metadata (its tokens, chain and model) from the store. */
  async #head(event: Pending): Promise<void> {
    // A slot is taken here or handed over by the HEAD that ends (#heads counts both).
    if (this.#heads >= HEADS_AT_ONCE) await new Promise<void>((resolve) => this.#waitingHeads.push(resolve));
    else this.#heads++;
    try {
      if (this.#closed) throw new Error('closed');
      const head = await this.#store.head(event.bucket, event.chunk.key);
      // Only the version the index holds: a newer one is its own event.
      if (head && head.etag === event.chunk.etag) event.meta = head.meta;
      else {
        event.meta = {};
        event.unread = true;
      }
    } catch (error) {
      if (!this.#closed) this.#log.warn({ error, bucket: event.bucket, key: event.chunk.key }, 'kv events: could not read a stored chunk\u2019s tokens; published without them');
      event.meta = {};
      event.unread = true;
    } finally {
      const next = this.#waitingHeads.shift();
      if (next) next();
      else this.#heads--;
    }
  }

  /** Moves the events that are ready, in order, into their topics' batches. */
  async #flushReady(): Promise<void> {
    if (this.#flushing) return;
    this.#flushing = true;
    try {
      while (this.#pending.length > 0 && !this.#closed) {
        const first = this.#pending[0] as Pending;
        if (first.ready) {
          await first.ready;
          continue;
        }
        this.#pending.shift();
        if (first.kind === 'stored') {
          const s = slotOf(first.bucket, first.chunk.key);
          const left = (this.#queuedStores.get(s) ?? 1) - 1;
          if (left === 0) this.#queuedStores.delete(s);
          else this.#queuedStores.set(s, left);
        }
        this.#place(first);
      }
    } finally {
      this.#flushing = false;
    }
  }

  /** Batches a ready event, or holds a stored chunk until its parent's BlockStored is out (see the top). */
  #place(event: Pending): void {
    const s = slotOf(event.bucket, event.chunk.key);
    if (event.kind === 'removed') {
      const held = this.#held.get(s);
      if (held) {
        // Stored and removed before the parent came: neither is published.
        this.#unhold(held);
        return;
      }
      this.#batch(event);
      return;
    }
    const parent = parentOf(event);
    if (parent !== undefined && parent !== event.chunk.key && !this.#held.has(s) && this.#held.size < MAX_HELD) {
      const p = slotOf(event.bucket, parent);
      if (this.#queuedStores.has(p) || this.#held.has(p) || !this.#present(event.bucket, parent)) {
        event.until = performance.now() + PARENT_WAIT_MS;
        this.#held.set(s, event);
        const siblings = this.#heldFor.get(p);
        if (siblings) siblings.push(event);
        else this.#heldFor.set(p, [event]);
        this.#heldTimer ??= setTimeout(() => this.#expireHeld(), PARENT_WAIT_MS / 4);
        return;
      }
    }
    this.#batch(event);
    this.#releaseChildren(s);
  }

  /** The chunks held for `parent` (a slot) follow it, and theirs them (a worklist: chains are long). */
  #releaseChildren(parent: string): void {
    const stack = [...(this.#heldFor.get(parent) ?? [])].reverse();
    for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
      const s = slotOf(next.bucket, next.chunk.key);
      if (this.#held.get(s) !== next) continue; // released already (a loop of recorded parents)
      this.#unhold(next);
      this.#batch(next);
      stack.push(...[...(this.#heldFor.get(s) ?? [])].reverse());
    }
  }

  /** A held chunk goes now, as it is (it waited long enough), after its held ancestors and before its held descendants. */
  #release(event: Pending): void {
    // The topmost held ancestor goes first; a loop of recorded parents ends where it repeats.
    let top = event;
    const seen = new Set<Pending>([top]);
    for (;;) {
      const parent = parentOf(top);
      const up = parent === undefined ? undefined : this.#held.get(slotOf(top.bucket, parent));
      if (up === undefined || seen.has(up)) break;
      seen.add(up);
      top = up;
    }
    const s = slotOf(top.bucket, top.chunk.key);
    if (this.#held.get(s) !== top) return;
    this.#unhold(top);
    this.#batch(top);
    this.#releaseChildren(s);
  }

  #unhold(event: Pending): void {
    const s = slotOf(event.bucket, event.chunk.key);
    if (this.#held.get(s) !== event) return;
    this.#held.delete(s);
    const p = slotOf(event.bucket, parentOf(event) as string);
    const siblings = this.#heldFor.get(p)?.filter((x) => x !== event) ?? [];
    if (siblings.length === 0) this.#heldFor.delete(p);
    else this.#heldFor.set(p, siblings);
  }

  /** Publishes the held chunks whose wait is over (their parents never came, or were removed). */
  #expireHeld(): void {
    this.#heldTimer = undefined;
    try {
      const now = performance.now();
      for (const event of [...this.#held.values()]) if ((event.until ?? 0) <= now && this.#held.get(slotOf(event.bucket, event.chunk.key)) === event) this.#release(event);
    } catch (error) {
      this.#log.error({ error }, 'kv events: releasing chunks held for their parents failed');
    } finally {
      if (this.#held.size > 0 && !this.#closed) this.#heldTimer = setTimeout(() => this.#expireHeld(), PARENT_WAIT_MS / 4);
    }
  }

  #batch(event: Pending): void {
    const { bucket, chunk } = event;
    if (this.#config.tenants !== undefined && !this.#config.tenants.has(chunk.tenant)) return;
    const meta = event.meta ?? {};
    // A removal names the model its store named (learnt then, kept with the chunk).
    const named = meta[MODEL_META];
    // A writer's model goes into topics only as MODEL_NAME allows (llm-d splits topics at @).
    const model = event.kind === 'stored' ? (named !== undefined && MODEL_NAME.test(named) ? named : '') : (event.live.model ?? '');
    if (event.kind === 'stored' && model !== '') event.live.model = model;
    const topic = this.#config.topic.replaceAll('{model}', model).replaceAll('{tenant}', chunk.tenant).replaceAll('{bucket}', bucket);
    const encoded = event.kind === 'stored' ? this.#stored(bucket, chunk, meta, event.unread === true) : this.#removed(bucket, chunk);
    const batch = this.#batches.get(topic) ?? { events: [], stored: 0 };
    batch.events.push(encoded);
    if (event.kind === 'stored') batch.stored++;
    this.#batches.set(topic, batch);
    if (batch.events.length >= MAX_BATCH_EVENTS) this.#send(topic);
    else this.#timer ??= setTimeout(() => this.#sendAll(), this.#config.batchMs);
  }

  #stored(bucket: string, chunk: Chunk, meta: Readonly<Record<string, string>>, unread: boolean): unknown {
    const after = meta[AFTER_META] ?? chunk.pred;
    let tokens = decodeTokens(meta[TOKENS_META]) ?? [];
    // Counted once, by the first reason that applies.
    if (unread) this.#observer.withoutTokens('head');
    else if (meta[TOKENS_META] === undefined) this.#observer.withoutTokens('none');
    else if (tokens.length === 0 || checkTokens(chunk.key, after, tokens) === 'mismatch') {
      tokens = [];
      this.#observer.withoutTokens('unverified');
    }
    const c = this.#config;
    const hash = blockHash(bucket, chunk.key);
    const parent = after === undefined ? null : blockHash(bucket, after);
    // --kv-events-salt tenant: the tenant as the block's cache salt (vLLM's extra_keys, one entry per block).
    const extraKeys = c.salt === 'tenant' ? [[chunk.tenant]] : undefined;
    if (c.encoding === 'array') return ['BlockStored', [hash], parent, tokens, tokens.length, null, c.medium, ...(extraKeys ? [null, extraKeys] : [])];
    return {
      type: 'BlockStored',
      block_hashes: [hash],
      parent_block_hash: parent,
      token_ids: tokens,
      block_size: tokens.length,
      lora_id: null,
      medium: c.medium,
      lora_name: null,
      ...(extraKeys ? { extra_keys: extraKeys } : {}),
      ...(c.locality === undefined ? {} : { locality: c.locality }),
    };
  }

  #removed(bucket: string, chunk: Chunk): unknown {
    const c = this.#config;
    const hash = blockHash(bucket, chunk.key);
    if (c.encoding === 'array') return ['BlockRemoved', [hash], c.medium];
    return { type: 'BlockRemoved', block_hashes: [hash], medium: c.medium, ...(c.locality === undefined ? {} : { locality: c.locality }) };
  }

  #sendAll(): void {
    this.#timer = undefined;
    for (const topic of [...this.#batches.keys()]) this.#send(topic);
  }

  #send(topic: string): void {
    const batch = this.#batches.get(topic);
    this.#batches.delete(topic);
    if (!batch || batch.events.length === 0) return;
    const { events, stored } = batch;
    let payload: Uint8Array;
    try {
      // [ts, events, data_parallel_rank]: vLLM's EventBatch, an array.
      // A copy: encode() answers a view of a larger buffer, which the replay history would keep whole.
      payload = encode([Date.now() / 1000, events, 0], { useBigInt64: true }).slice();
    } catch (error) {
      this.#log.error({ error }, 'kv events: a batch could not be encoded; dropped');
      this.#observer.dropped('encode', events.length);
      return;
    }
    this.#publisher.publish(topic, payload, stored, events.length - stored);
  }

  /** Hands the batches gathered so far to the socket and closes it (EventPublisher.close); events still waiting for a HEAD are not published. */
  async close(): Promise<void> {
    if (this.#closed) return;
    if (this.#heldTimer) clearTimeout(this.#heldTimer);
    // What waits for a parent goes as it is.
    for (const event of [...this.#held.values()]) if (this.#held.get(slotOf(event.bucket, event.chunk.key)) === event) this.#release(event);
    if (this.#timer) clearTimeout(this.#timer);
    this.#sendAll();
    this.#closed = true;
    // Each woken HEAD finds the events closed and reads nothing.
    for (const wake of this.#waitingHeads.splice(0)) wake();
    await this.#publisher.close();
  }
}

/**
 * A chunk's block hash: the first 8 bytes of SHA-256 of `<bucket>/<key>` as an unsigned 64-bit
 * integer. The bucket is part of it, so the same key in two buckets (two tenants' copies of a
 * prefix) are two blocks, and one's removal is not the other's.
 */
export function blockHash(bucket: string, key: string): bigint {
  return createHash('sha256').update(`${bucket}/${key}`, 'utf8').digest().readBigUInt64BE(0);
}
