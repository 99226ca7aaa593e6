/**
 * KvEvents (gateway/kv-events/kv-events.ts) against a scripted store, so that the HEADs' timing is
 * under the test's control: events are published in the order the changes happened even when a
 * later chunk's metadata comes first, and a store that never answers makes the gateway hold a
 * bounded number of events, the rest dropped with their sequence numbers skipped (a gap a
 * subscriber sees). The real store and subscribers are in test/kv-events.test.ts.
 */
import { decode } from '@msgpack/msgpack';
import { afterEach, describe, expect, it } from 'vitest';
import { Subscriber } from 'zeromq';
import type { Chunk } from '../gateway/capacity/chunk.js';
import type { KvEventsConfig } from '../gateway/common/config.js';
import type { KvEventsObserver } from '../gateway/common/observers.js';
import { blockHash, KvEvents, PARENT_WAIT_MS } from '../gateway/kv-events/kv-events.js';
import { EventPublisher } from '../gateway/kv-events/publisher.js';
import type { CapacityStore, StoreHead } from '../gateway/stores/capacity-store.js';

const config: KvEventsConfig = {
  endpoint: 'tcp://127.0.0.1:*',
  replayEndpoint: undefined,
  history: 10,
  topic: '',
  encoding: 'tagged',
  medium: 'SHARED',
  locality: undefined,
  tenants: undefined,
  salt: 'none',
  highWaterMark: 1000,
  batchMs: 5,
};
const quiet = { info: () => {}, warn: () => {}, error: () => {} };

function counting(): KvEventsObserver & { readonly drops: () => number; readonly withoutTokensBy: string[] } {
  let drops = 0;
  const withoutTokensBy: string[] = [];
  return {
    published: () => {},
    withoutTokens: (reason) => void withoutTokensBy.push(reason),
    replayed: () => {},
    subscribers: () => {},
    dropped: (_reason, n) => void (drops += n),
    drops: () => drops,
    withoutTokensBy,
  };
}

const chunk = (key: string): Chunk => ({ key, size: 1, tenant: 't', etag: '"e"', written: 0, lastAccess: 0, pred: undefined, checked: true });

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const thing of open.splice(0)) await thing.close();
});

/** Starts `events` and a subscriber to all its topics, connected (ZeroMQ's slow joiner waited out). */
async function startedWithSubscriber(events: KvEvents): Promise<Subscriber> {
  const { endpoint } = await events.start();
  const sub = new Subscriber();
  open.push(sub);
  sub.connect(endpoint);
  sub.subscribe('');
  await new Promise((r) => setTimeout(r, 200));
  return sub;
}

describe('KvEvents', () => {
  it('publishes in the order the changes happened, whichever HEAD answers first', async () => {
    const answers = new Map<string, (head: StoreHead) => void>();
    const store = { head: (_bucket: string, key: string) => new Promise<StoreHead>((resolve) => answers.set(key, resolve)) } as unknown as CapacityStore;
    const events = new KvEvents({ config, store, logger: quiet, observer: counting() });
    open.push(events);
    const sub = await startedWithSubscriber(events);
    const changes = events.changes('b');
    changes.stored(chunk('a'), undefined); // waits for its HEAD
    changes.stored(chunk('b'), undefined); // waits for its HEAD
    changes.removed(chunk('c')); // needs none
    await new Promise((r) => setTimeout(r, 20)); // both HEADs asked
    expect([...answers.keys()]).toEqual(['a', 'b']);
    const head = (): StoreHead => ({ size: 1, etag: '"e"', meta: {}, headers: {} });
    answers.get('b')?.(head());
    await new Promise((r) => setTimeout(r, 50));
    answers.get('a')?.(head());
    const [, , payload] = (await sub.receive()) as Buffer[];
    const [, batch] = decode(payload as Buffer, { useBigInt64: true }) as [number, Record<string, unknown>[]];
    expect(batch.map((e) => [e['type'], (e['block_hashes'] as bigint[])[0]])).toEqual([
      ['BlockStored', blockHash('b', 'a')],
      ['BlockStored', blockHash('b', 'b')],
      ['BlockRemoved', blockHash('b', 'c')],
    ]);
  });

  it('holds a bounded number of events while the store does not answer, and skips the numbers of those it drops', async () => {
    const store = { head: () => new Promise<StoreHead>(() => {}) } as unknown as CapacityStore;
    const observer = counting();
    const events = new KvEvents({ config, store, logger: quiet, observer });
    open.push(events);
    const { firstSequence } = await events.start();
    const changes = events.changes('b');
    for (let i = 0; i < 10_000; i++) changes.stored(chunk(`k${i}`), undefined);
    expect(observer.drops()).toBe(10_000 - 8192);
    expect(events.nextSequence()).toBe(firstSequence + BigInt(10_000 - 8192));
  });

  it('counts a chunk whose metadata cannot be read once, as such', async () => {
    const store = { head: () => Promise.resolve(undefined) } as unknown as CapacityStore; // gone meanwhile
    const observer = counting();
    const events = new KvEvents({ config, store, logger: quiet, observer });
    open.push(events);
    await events.start();
    events.changes('b').stored(chunk('gone'), undefined);
    events.changes('b').stored(chunk('plain'), {});
    await new Promise((r) => setTimeout(r, 50));
    // In order: the one whose HEAD found nothing, then the one its writer gave no tokens; each once.
    expect(observer.withoutTokensBy).toEqual(['head', 'none']);
  });
});

describe('KvEvents, a chunk and its parent', () => {
  /** Every event received within `ms`, as [type, hash] pairs in order. */
  async function received(sub: Subscriber, ms: number): Promise<[unknown, bigint][]> {
    const got: [unknown, bigint][] = [];
    const until = Date.now() + ms;
    sub.receiveTimeout = 50;
    while (Date.now() < until) {
      try {
        const [, , payload] = (await sub.receive()) as Buffer[];
        const [, batch] = decode(payload as Buffer, { useBigInt64: true }) as [number, Record<string, unknown>[]];
        for (const e of batch) got.push([e['type'], (e['block_hashes'] as bigint[])[0] as bigint]);
      } catch {
        // nothing within the timeout
      }
    }
    return got;
  }

  it('publishes a stored chunk after its parent, whichever write lands first; one whose parent never comes after PARENT_WAIT_MS; and neither of a chunk stored and removed while it waited', async () => {
    const store = { head: () => Promise.resolve(undefined) } as unknown as CapacityStore;
    const inIndex = new Set<string>(['base']); // a parent of the baseline: present, never published
    const events = new KvEvents({ config, store, logger: quiet, observer: counting(), present: (_b, key) => inIndex.has(key) });
    open.push(events);
    const sub = await startedWithSubscriber(events);
    const changes = events.changes('b');
    const after = (key: string): Record<string, string> => ({ 'objectcache-after': key });
    // An engine's three concurrent PUTs of one prefix land last first.
    changes.stored(chunk('p2'), after('p1'));
    changes.stored(chunk('p1'), after('p0'));
    changes.stored(chunk('p0'), {});
    inIndex.add('p0').add('p1').add('p2');
    // A chunk after a baseline chunk goes at once; one after a chunk that never comes waits.
    changes.stored(chunk('q1'), after('base'));
    changes.stored(chunk('orphan'), after('never'));
    // Stored and removed before its parent came: neither is published.
    changes.stored(chunk('gone'), after('never2'));
    changes.removed(chunk('gone'));
    const early = await received(sub, 400);
    expect(early).toEqual([
      ['BlockStored', blockHash('b', 'p0')],
      ['BlockStored', blockHash('b', 'p1')],
      ['BlockStored', blockHash('b', 'p2')],
      ['BlockStored', blockHash('b', 'q1')],
    ]);
    const late = await received(sub, PARENT_WAIT_MS + 500);
    expect(late).toEqual([['BlockStored', blockHash('b', 'orphan')]]);
  });
});

describe('KvEvents, chunks whose parents never come', () => {
  it('holds at most 4,096 of them: past that, one goes at once, without waiting', async () => {
    const store = { head: () => Promise.resolve(undefined) } as unknown as CapacityStore;
    const events = new KvEvents({ config: { ...config, batchMs: 1 }, store, logger: quiet, observer: counting(), present: () => false });
    open.push(events);
    const sub = await startedWithSubscriber(events);
    const changes = events.changes('b');
    for (let i = 0; i < 5000; i++) changes.stored(chunk(`orphan${i}`), { 'objectcache-after': `missing${i}` });
    let early = 0;
    sub.receiveTimeout = 300;
    try {
      for (;;) {
        const [, , payload] = (await sub.receive()) as Buffer[];
        early += (decode(payload as Buffer) as [number, unknown[]])[1].length;
      }
    } catch {
      // nothing more within 300 ms: the held ones wait for PARENT_WAIT_MS
    }
    expect(early).toBe(5000 - 4096);
  });
});

describe('KvEvents, a long chain', () => {
  it('publishes a 4,000-chunk prefix stored last chunk first in prefix order, and one whose head never comes head first once it waited', async () => {
    const store = { head: () => Promise.resolve(undefined) } as unknown as CapacityStore;
    const inIndex = new Set<string>();
    const events = new KvEvents({ config: { ...config, batchMs: 1 }, store, logger: quiet, observer: counting(), present: (_b, key) => inIndex.has(key) });
    open.push(events);
    const sub = await startedWithSubscriber(events);
    const changes = events.changes('b');
    const n = 4000;
    // Each held for its parent; the head comes last and releases all of them, in order.
    for (let i = n - 1; i >= 0; i--) {
      changes.stored(chunk(`c${i}`), i === 0 ? {} : { 'objectcache-after': `c${i - 1}` });
      inIndex.add(`c${i}`);
    }
    // A chain whose head's own parent never comes: released after PARENT_WAIT_MS, head first.
    for (let i = 2; i >= 0; i--) changes.stored(chunk(`o${i}`), { 'objectcache-after': i === 0 ? 'missing' : `o${i - 1}` });
    const got: bigint[] = [];
    sub.receiveTimeout = PARENT_WAIT_MS + 1000;
    while (got.length < n + 3) {
      const [, , payload] = (await sub.receive()) as Buffer[];
      const [, batch] = decode(payload as Buffer, { useBigInt64: true }) as [number, Record<string, unknown>[]];
      for (const e of batch) got.push((e['block_hashes'] as bigint[])[0] as bigint);
    }
    expect(got.slice(0, n)).toEqual(Array.from({ length: n }, (_, i) => blockHash('b', `c${i}`)));
    expect(got.slice(n)).toEqual([0, 1, 2].map((i) => blockHash('b', `o${i}`)));
  }, 15_000);
});

describe('EventPublisher', () => {
  it('keeps the numbers of a bounded number of topics, and a forgotten topic starts past every number it had', async () => {
    const publisher = new EventPublisher({
      endpoint: 'tcp://127.0.0.1:*',
      replayEndpoint: undefined,
      history: 1,
      highWaterMark: 10,
      logger: quiet,
      observer: counting(),
      firstSequence: 1000n,
    });
    open.push(publisher);
    await publisher.start();
    const payload = new Uint8Array(1);
    publisher.publish('model-0', payload, 1, 0);
    publisher.publish('model-0', payload, 1, 0);
    expect(publisher.nextSequence('model-0')).toBe(1002n);
    // Every write may name a model of its own: 5,000 topics, each once.
    for (let i = 1; i <= 5000; i++) publisher.publish(`model-${i}`, payload, 1, 0);
    expect(publisher.topics).toBe(4096);
    expect(publisher.nextSequence('model-0')).toBe(1000n + 5002n); // forgotten: past every number given
    expect(publisher.nextSequence('model-5000')).toBe(1000n + 5002n);
  });
});
