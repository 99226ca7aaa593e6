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
import type { Chunk } from '../gateway/capacity/chunk-index.js';
import type { KvEventsConfig } from '../gateway/common/config.js';
import type { KvEventsObserver } from '../gateway/common/observers.js';
import { blockHash, KvEvents } from '../gateway/kv-events/kv-events.js';
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

function counting(): KvEventsObserver & { readonly drops: () => number } {
  let drops = 0;
  return { published: () => {}, withoutTokens: () => {}, replayed: () => {}, subscribers: () => {}, dropped: (_reason, n) => void (drops += n), drops: () => drops };
}

const chunk = (key: string): Chunk => ({ key, size: 1, tenant: 't', etag: '"e"', written: 0, lastAccess: 0, pred: undefined, checked: true });

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const thing of open.splice(0)) await thing.close();
});

describe('KvEvents', () => {
  it('publishes in the order the changes happened, whichever HEAD answers first', async () => {
    const answers = new Map<string, (head: StoreHead) => void>();
    const store = { head: (_bucket: string, key: string) => new Promise<StoreHead>((resolve) => answers.set(key, resolve)) } as unknown as CapacityStore;
    const events = new KvEvents({ config, store, logger: quiet, observer: counting() });
    open.push(events);
    const { endpoint } = await events.start();
    const sub = new Subscriber();
    open.push(sub);
    sub.connect(endpoint);
    sub.subscribe('');
    await new Promise((r) => setTimeout(r, 200));
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
});
