/**
 * The frame writer's backpressure and stall rule, on a writable that never drains: the writer
 * waits for 'drain' after a write that fills the buffer, and a client that takes nothing for the
 * stall timeout is cut off with OC_ERR_CLIENT_STALLED (its buffers are then released by the
 * caller). Loopback sockets here absorb too much to provoke this end to end.
 */
import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { FrameWriter } from '../gateway/layerwise/frame-writer.js';
import { FrameType } from '../schemas/frames.js';
import { ObjectCacheError } from '../schemas/errors.js';

function sink(drains: boolean): Writable & { received: number } {
  const w = new Writable({
    highWaterMark: 1024,
    write(chunk: Buffer, _encoding, callback) {
      w.received += chunk.length;
      if (drains) setImmediate(callback); // else: the reader never takes the data
    },
  }) as Writable & { received: number };
  w.received = 0;
  return w;
}

describe('FrameWriter', () => {
  it('waits for drain and delivers every byte to a reader that keeps reading', async () => {
    const out = sink(true);
    const writer = new FrameWriter(out as unknown as ServerResponse, undefined, 1000);
    await writer.preamble();
    for (let layer = 0; layer < 4; layer++) await writer.frame(FrameType.LAYER, layer, [new Uint8Array(100_000)]);
    expect(out.received).toBe(8 + 4 * (24 + 100_000));
  });

  it('cuts off a reader that takes nothing for the stall timeout', async () => {
    const out = sink(false);
    const writer = new FrameWriter(out as unknown as ServerResponse, undefined, 150);
    const started = performance.now();
    const failure = await writer.frame(FrameType.LAYER, 0, [new Uint8Array(100_000)]).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(ObjectCacheError);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CLIENT_STALLED');
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    expect(out.destroyed).toBe(true);
  });
});
