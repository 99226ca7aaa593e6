/**
 * `objectcache kv-events`: subscribes to a gateway's KV events (docs/kv-events.md) and prints each
 * event as a line of JSON, in either encoding, with its batch's topic and sequence number; asks
 * the replay socket first when given one. What a new user runs to see the events without vLLM.
 */
import type { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { decode } from '@msgpack/msgpack';
import { Dealer, Subscriber } from 'zeromq';
import { usageError } from './options.js';

export const KV_EVENTS_HELP = `Usage: objectcache kv-events [--endpoint URL] [--topic PREFIX] [--replay URL] [--count N]

Prints the gateway's KV events (objectcache serve --kv-events) as they come, one JSON line each:
{"seq", "topic", "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "medium", ...}.
Block hashes are printed as decimal strings (they are 64-bit).

  --endpoint URL   the gateway's --kv-events socket (default tcp://127.0.0.1:5557)
  --topic PREFIX   only topics starting with it (default: every topic)
  --replay URL     the gateway's --kv-events-replay socket: print what it still holds first
  --count N        exit after N events (default: run until interrupted)`;

/** Positional (array) events: their fields by position, after the tag. */
const FIELDS: Readonly<Record<string, readonly string[]>> = {
  BlockStored: ['block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium', 'lora_name'],
  BlockRemoved: ['block_hashes', 'medium'],
  AllBlocksCleared: [],
};

/** One event of a batch as a plain object with its type, whichever encoding it came in. */
export function eventObject(event: unknown): Record<string, unknown> {
  if (Array.isArray(event)) {
    const [type, ...values] = event as unknown[];
    const names = FIELDS[String(type)] ?? [];
    const entries: [string, unknown][] = [['type', type], ...values.map((value, i): [string, unknown] => [names[i] ?? `field${i + 1}`, value])];
    return Object.fromEntries(entries);
  }
  return event !== null && typeof event === 'object' ? (event as Record<string, unknown>) : { type: 'unknown', value: event };
}

const json = (value: Record<string, unknown>): string => JSON.stringify(value, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v));

export async function runKvEvents(argv: readonly string[], stdout: Writable): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      endpoint: { type: 'string', default: 'tcp://127.0.0.1:5557' },
      topic: { type: 'string', default: '' },
      replay: { type: 'string' },
      count: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    stdout.write(`${KV_EVENTS_HELP}\n`);
    return 0;
  }
  const count = values.count === undefined ? Infinity : Number(values.count);
  if (!(count > 0) || (count !== Infinity && !Number.isSafeInteger(count))) throw usageError('--count must be a whole number above 0');
  let printed = 0;
  const print = (topic: string, sequence: bigint, payload: Uint8Array): boolean => {
    const batch = decode(payload, { useBigInt64: true }) as [number, unknown[]];
    for (const event of batch[1] ?? []) {
      stdout.write(`${json({ seq: sequence, topic, ...eventObject(event) })}\n`);
      if (++printed >= count) return true;
    }
    return false;
  };
  const sub = new Subscriber();
  const connected = new Promise<void>((resolve) => sub.events.on('connect', () => resolve()));
  sub.connect(values.endpoint);
  sub.subscribe(values.topic);
  try {
    if (values.replay !== undefined) {
      // Subscribed before the replay is asked for, so nothing published between the two is missed.
      await Promise.race([connected, new Promise((resolve) => setTimeout(resolve, 5000))]);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const dealer = new Dealer({ receiveTimeout: 5000 });
      dealer.connect(values.replay);
      try {
        await dealer.send(['', Buffer.alloc(8)]);
        for (;;) {
          const [, topic, seq, payload] = (await dealer.receive()) as Buffer[];
          const sequence = (seq as Buffer).readBigInt64BE();
          if (sequence === -1n) break;
          if (!(topic as Buffer).toString().startsWith(values.topic)) continue;
          if (print((topic as Buffer).toString(), sequence, payload as Buffer)) return 0;
        }
      } finally {
        dealer.close();
      }
    }
    for await (const [topic, seq, payload] of sub) {
      if (print((topic as Buffer).toString(), (seq as Buffer).readBigInt64BE(), payload as Buffer)) return 0;
    }
    return 0;
  } finally {
    sub.close();
  }
}
