/**
 * The ZeroMQ side of the KV events (docs/kv-events.md): a PUB socket that sends each batch as
 * three frames (topic, an 8-byte big-endian sequence number, the msgpack batch), and an optional
 * ROUTER socket that replays the batches still held from a sequence number on, then an end marker
 * (sequence -1, empty payload): the protocol of vLLM's ZmqEventPublisher
 * (vllm/distributed/kv_events.py), so its subscribers, llm-d's and Dynamo's read the gateway's.
 *
 * Sequence numbers are per topic (a subscriber of one sees its own batches one by one). The
 * first starts at the microseconds since the epoch when the gateway started, a later one past
 * every number given so far, and each goes up by one a batch on it (the numbers of the 4,096 most
 * recent topics are kept; a forgotten one starts again past every number given), so they keep rising across a restart and a subscriber sees the jump: it knows it missed
 * what happened meanwhile (and asks the replay socket, which answers with what this run still
 * holds). A batch dropped here (the queue full) takes its number; an event dropped before its
 * topic was known takes one of every topic's (`skip`). So a gap always means a possible loss.
 *
 * Nothing here can hold up the data path: a PUB socket drops a batch for a subscriber whose queue
 * (the high-water mark) is full instead of waiting; the batches not yet handed to ZeroMQ and the
 * replay history are bounded in count and bytes.
 */
import { Publisher, Router } from 'zeromq';
import type { Logger } from '../common/logger.js';
import type { KvEventsObserver } from '../common/observers.js';

export interface PublisherOptions {
  /** PUB endpoint: bound, or connected to when it starts with `connect:` (a router that binds its own socket). */
  readonly endpoint: string;
  /** ROUTER endpoint for replay requests (bound), or undefined: no replay. */
  readonly replayEndpoint: string | undefined;
  /** Batches held for replay. */
  readonly history: number;
  /** Messages ZeroMQ queues per subscriber before it drops for that subscriber. */
  readonly highWaterMark: number;
  readonly logger: Pick<Logger, 'warn' | 'error' | 'info'>;
  readonly observer: Pick<KvEventsObserver, 'published' | 'dropped' | 'replayed' | 'subscribers'>;
  /** The first sequence number (default: microseconds since the epoch now). */
  readonly firstSequence?: bigint;
}

/** Bytes of batches held for replay at most, whatever --kv-events-history says. */
const MAX_HISTORY_BYTES = 64 * 1024 * 1024;
/** Batches waiting for the socket at most; past it a batch is dropped (and its number skipped). */
const MAX_QUEUED = 1024;
/** Topics whose sequence numbers are kept; the least recently published is forgotten past it. */
const MAX_TOPICS = 4096;
const END_SEQUENCE = Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);

interface Held {
  readonly sequence: bigint;
  readonly topic: Buffer;
  readonly payload: Uint8Array;
}

function sequenceBytes(sequence: bigint): Buffer {
  const bytes = Buffer.alloc(8);
  bytes.writeBigInt64BE(sequence);
  return bytes;
}

/** The `connect:` prefix of an endpoint the gateway connects to rather than binds. */
export const CONNECT_PREFIX = 'connect:';

export class EventPublisher {
  readonly #o: PublisherOptions;
  readonly #pub = new Publisher();
  readonly #replay: Router | undefined;
  /** The first sequence number of the first topic. */
  readonly #base: bigint;
  /** Each recent topic's next number, least recently published first (at most MAX_TOPICS). */
  readonly #next = new Map<string, bigint>();
  /** Batches numbered on any topic, and numbers skipped on every topic: a topic not in #next starts past both. */
  #numbered = 0n;
  #skipped = 0n;
  #malformedLogged = false;
  readonly #history: Held[] = [];
  #historyBytes = 0;
  readonly #queue: { held: Held; stored: number; removed: number }[] = [];
  /** The queue being handed to the socket, while it is. */
  #draining: Promise<void> | undefined;
  #closed = false;
  #replaying: Promise<void> | undefined;

  constructor(options: PublisherOptions) {
    this.#o = options;
    this.#base = options.firstSequence ?? BigInt(Date.now()) * 1000n;
    this.#pub.sendHighWaterMark = options.highWaterMark;
    this.#pub.linger = 0;
    // What a subscriber sends a PUB socket is its subscriptions: short.
    this.#pub.maxMessageSize = 4096;
    this.#replay = options.replayEndpoint === undefined ? undefined : new Router();
    if (this.#replay) {
      // Room for a whole replay and its end marker; a replay to a requester that stopped reading
      // gives up after a second rather than waiting on it.
      this.#replay.sendHighWaterMark = 2 * (options.history + 1);
      // Sends wait for room (at most a second) instead of dropping, so a replay is whole or ends.
      this.#replay.mandatory = true;
      this.#replay.sendTimeout = 1000;
      this.#replay.linger = 0;
      // A replay request is 8 bytes.
      this.#replay.maxMessageSize = 64;
    }
  }

  /** Binds (or connects) the sockets; rejects when an endpoint cannot be used. */
  async start(): Promise<{ endpoint: string; replayEndpoint: string | undefined }> {
    const { endpoint, replayEndpoint } = this.#o;
    this.#watchSubscribers(endpoint.startsWith(CONNECT_PREFIX));
    if (endpoint.startsWith(CONNECT_PREFIX)) this.#pub.connect(endpoint.slice(CONNECT_PREFIX.length));
    else await this.#pub.bind(endpoint);
    if (this.#replay && replayEndpoint !== undefined) {
      await this.#replay.bind(replayEndpoint);
      this.#replaying = this.#serveReplays(this.#replay);
    }
    return { endpoint: this.#pub.lastEndpoint ?? endpoint, replayEndpoint: this.#replay?.lastEndpoint ?? replayEndpoint };
  }

  /**
   * The next batch's sequence number on `topic`. A topic not among the recent ones (new, or
   * forgotten past MAX_TOPICS: topics name writers' models) starts past every number any topic
   * has had, so its numbers still only rise.
   */
  nextSequence(topic = ''): bigint {
    return this.#next.get(topic) ?? this.#base + this.#numbered + this.#skipped;
  }

  /** Topics whose numbers are kept (diagnostics, and the test of the bound). */
  get topics(): number {
    return this.#next.size;
  }

  /** Skips a sequence number on every topic, for an event dropped before its topic was known: every subscriber sees a gap. */
  skip(): void {
    this.#skipped++;
    for (const [topic, next] of this.#next) this.#next.set(topic, next + 1n);
  }

  /** Queues one encoded batch on `topic` (of `stored` and `removed` events); never waits. */
  publish(topic: string, payload: Uint8Array, stored: number, removed: number): void {
    if (this.#closed) return;
    const sequence = this.nextSequence(topic);
    this.#next.delete(topic);
    this.#next.set(topic, sequence + 1n);
    this.#numbered++;
    if (this.#next.size > MAX_TOPICS) this.#next.delete(this.#next.keys().next().value as string);
    if (this.#queue.length >= MAX_QUEUED) {
      this.#o.observer.dropped('queue', stored + removed);
      return;
    }
    this.#queue.push({ held: { sequence, topic: Buffer.from(topic, 'utf8'), payload }, stored, removed });
    this.#draining ??= this.#drain().finally(() => (this.#draining = undefined));
  }

  async #drain(): Promise<void> {
    for (let next = this.#queue.shift(); next && !this.#closed; next = this.#queue.shift()) {
      const { held, stored, removed } = next;
      try {
        // A PUB socket never waits: a subscriber past its high-water mark misses the batch.
        await this.#pub.send([held.topic, sequenceBytes(held.sequence), held.payload]);
        this.#o.observer.published(1, stored, removed);
      } catch (error) {
        this.#o.observer.dropped('queue', stored + removed);
        this.#o.logger.warn({ error }, 'kv events: a batch could not be sent');
      }
      this.#hold(held);
    }
  }

  #hold(held: Held): void {
    if (!this.#replay) return;
    this.#history.push(held);
    this.#historyBytes += held.payload.byteLength + held.topic.byteLength;
    while (this.#history.length > this.#o.history || this.#historyBytes > MAX_HISTORY_BYTES) {
      const gone = this.#history.shift() as Held;
      this.#historyBytes -= gone.payload.byteLength + gone.topic.byteLength;
    }
  }

  async #serveReplays(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        const [identity, empty, start] = frames as Buffer[];
        if (frames.length !== 3 || identity === undefined || empty?.length !== 0 || start?.length !== 8) {
          if (!this.#malformedLogged) this.#o.logger.warn({ frames: frames.length }, 'kv events: a replay request is not [identity, "", start(8 bytes)]; ignored (logged once)');
          this.#malformedLogged = true;
          continue;
        }
        this.#o.observer.replayed();
        const from = start.readBigInt64BE();
        try {
          // The history as it is now: what is published meanwhile reaches the requester by PUB.
          // Every topic's batches from that number on (each names its topic); one request at a
          // time, handing the event loop back every 256 batches.
          let sent = 0;
          for (const held of this.#history.slice()) {
            if (held.sequence < from || this.#closed) continue;
            await router.send([identity, '', held.topic, sequenceBytes(held.sequence), held.payload]);
            if (++sent % 256 === 0) await new Promise((resolve) => setImmediate(resolve));
          }
          await router.send([identity, '', '', END_SEQUENCE, '']);
        } catch (error) {
          this.#o.logger.warn({ error }, 'kv events: a replay could not be sent whole (the requester stopped reading); it ends there');
        }
      }
    } catch (error) {
      if (!this.#closed) this.#o.logger.error({ error }, 'kv events: the replay socket failed; replays are off until a restart');
    }
  }

  #watchSubscribers(connects: boolean): void {
    const events = this.#pub.events;
    // Bound: each accepted connection, until it goes. Connected: the one connection, while up.
    events.on(connects ? 'connect' : 'accept', () => this.#o.observer.subscribers(1));
    events.on('disconnect', () => this.#o.observer.subscribers(-1));
  }

  /**
   * Hands the queued batches to the socket (a PUB socket takes them at once), then closes the
   * sockets: ZeroMQ drops what it has not sent by then (linger 0: a close never waits on a
   * subscriber). Publish nothing after calling it.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    await this.#draining;
    this.#closed = true;
    this.#queue.length = 0;
    this.#pub.close();
    this.#replay?.close();
    await this.#replaying;
  }
}
