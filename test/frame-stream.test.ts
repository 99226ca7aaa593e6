/**
 * Sending the frame stream: backpressure and the stall rule on a writable that never drains (the
 * sender waits for 'drain' after a write that fills the buffer, and a client that takes nothing
 * for the stall timeout is cut off with OC_ERR_CLIENT_STALLED; loopback sockets here absorb too
 * much to provoke this end to end), the source being returned when the response is gone, the
 * pacing stage keeping the granted rate, and a real HTTP response whose frames are many small
 * pieces sent whole (Node 24 answers false to corked writes it then flushes, with no 'drain'), and
 * a response flag that says to wait when the socket has room (Node 24 left one set under load).
 */
import { createServer, get, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { crc32c } from '@node-rs/crc32';
import { describe, expect, it } from 'vitest';
import { FrameBuilder, paced, send, unpaced, type Frame } from '../gateway/descriptor-get/frame-stream.js';
import type { TaskRead } from '../gateway/descriptor-get/read-ahead.js';
import type { PlannedTask } from '../gateway/descriptor-get/read-plan.js';
import { layoutOf, type Slices } from '../gateway/threads/task-layout.js';
import { Pacer } from '../gateway/descriptor-get/scheduler/pacer.js';
import { FrameDecoder } from '../client/frame-decoder.js';
import { FrameType } from '../schemas/frames.js';
import { ObjectCacheError } from '../schemas/errors.js';

function sink(drains: boolean): Writable & { received: Buffer[] } {
  const w = new Writable({
    highWaterMark: 1024,
    write(chunk: Buffer, _encoding, callback) {
      w.received.push(Buffer.from(chunk));
      if (drains) setImmediate(callback); // else: the reader never takes the data
    },
  }) as Writable & { received: Buffer[] };
  w.received = [];
  return w;
}

function layer(index: number, bytes: number): Frame {
  const payload = new Uint8Array(bytes).fill(index + 1);
  return { type: FrameType.LAYER, index, pieces: [payload.subarray(0, bytes / 2), payload.subarray(bytes / 2)], length: bytes, crc32c: crc32c(Buffer.from(payload)) };
}

async function* layers(count: number, bytes: number, log: string[] = []): AsyncGenerator<Frame> {
  try {
    for (let i = 0; i < count; i++) yield layer(i, bytes);
    yield { type: FrameType.END, index: 0, pieces: [Buffer.from('{}')], length: 2, crc32c: crc32c(Buffer.from('{}')) };
  } finally {
    log.push('source returned');
  }
}

describe('frame stream sender', () => {
  it('waits for drain and delivers every frame, decodable, to a reader that keeps reading', async () => {
    const out = sink(true);
    let flushed = 0;
    let bytes = 0;
    async function* withFlush(): AsyncGenerator<Frame> {
      for await (const frame of layers(4, 100_000)) yield { ...frame, onFlushed: () => flushed++ };
    }
    await send(out as unknown as ServerResponse, unpaced(withFlush()), { stallTimeoutMs: 1000, onBytes: (n) => (bytes += n) });
    await once(out, 'finish');
    const all = Buffer.concat(out.received);
    expect(all.byteLength).toBe(8 + 4 * (24 + 100_000) + 24 + 2);
    const seen: number[] = [];
    const decoder = new FrameDecoder({
      layerStart: 0,
      layerEnd: 4,
      chunks: 1,
      layerBytes: 100_000,
      target: new Uint8Array(400_000),
      layerStride: 100_000,
      onLayerReady: (l, view) => {
        expect(view.every((b) => b === l + 1)).toBe(true);
        seen.push(l);
      },
    });
    decoder.push(all); // checks every frame's CRC32C
    expect(decoder.finish()).toEqual({});
    expect(seen).toEqual([0, 1, 2, 3]);
    expect(bytes).toBe(400_000);
    expect(flushed).toBe(5);
  });

  it('cuts off a reader that takes nothing for the stall timeout, and returns the source', async () => {
    const out = sink(false);
    const log: string[] = [];
    const started = performance.now();
    const failure = await send(out as unknown as ServerResponse, unpaced(layers(4, 100_000, log)), { stallTimeoutMs: 150 }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(ObjectCacheError);
    expect((failure as ObjectCacheError).code).toBe('OC_ERR_CLIENT_STALLED');
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    expect(out.destroyed).toBe(true);
    expect(log).toEqual(['source returned']);
  });

  it('sends every frame of many small pieces on a real HTTP response, each frame in one writev, and ends it', async () => {
    // 4 frames of 42 pieces of 2,919 bytes (a layer of 42 KV_2LTD halves): each frame's corked
    // writes pass the response's high-water mark, and uncork() sends them all at once.
    async function* smallPieces(): AsyncGenerator<Frame> {
      for (let index = 0; index < 4; index++) {
        const pieces = Array.from({ length: 42 }, (_, i) => new Uint8Array(2919).fill((index * 42 + i) % 251));
        yield { type: FrameType.LAYER, index, pieces, length: 42 * 2919, crc32c: crc32c(Buffer.concat(pieces)) };
      }
      yield { type: FrameType.END, index: 0, pieces: [Buffer.from('{}')], length: 2, crc32c: crc32c(Buffer.from('{}')) };
    }
    let sent: Promise<void> | undefined;
    // How the pieces reach the socket: the count of pieces in each call of its _write or _writev.
    const handed: number[] = [];
    type Chunks = { chunk: Buffer }[];
    const server = createServer((_req, res) => {
      res.writeHead(200);
      const socket = res.socket as Socket & { _write: Socket['_write']; _writev: (chunks: Chunks, cb: (error?: Error | null) => void) => void };
      const [write, writev] = [socket._write.bind(socket), socket._writev.bind(socket)];
      socket._write = (chunk: Buffer, encoding, cb) => {
        if (chunk.byteLength === 2919) handed.push(1);
        write(chunk, encoding, cb);
      };
      socket._writev = (chunks, cb) => {
        handed.push(chunks.filter(({ chunk }) => chunk.byteLength === 2919).length);
        writev(chunks, cb);
      };
      sent = send(res, unpaced(smallPieces()), { stallTimeoutMs: 5000 });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const res = await new Promise<import('node:http').IncomingMessage>((resolve, reject) =>
        get({ host: '127.0.0.1', port: (server.address() as AddressInfo).port }, resolve).on('error', reject),
      );
      const received: Buffer[] = [];
      res.on('data', (chunk: Buffer) => received.push(chunk));
      await once(res, 'end');
      await sent;
      const seen: number[] = [];
      const decoder = new FrameDecoder({
        layerStart: 0,
        layerEnd: 4,
        chunks: 42,
        layerBytes: 2919,
        target: new Uint8Array(4 * 42 * 2919),
        layerStride: 42 * 2919,
        onLayerReady: (l) => seen.push(l),
      });
      decoder.push(Buffer.concat(received)); // checks every frame's CRC32C
      expect(decoder.finish()).toEqual({});
      expect(seen).toEqual([0, 1, 2, 3]);
      // Each frame's pieces in one call (one writev), not one write each: Node's response uncorks
      // its socket before handing it the chunks it held, so send() corks the socket around it.
      expect(handed.filter((n) => n > 0)).toEqual([42, 42, 42, 42]);
    } finally {
      server.close();
    }
  }, 10_000);

  it('paces payload bytes at the granted rate', async () => {
    const out = sink(true);
    const rate = 4 * 1024 * 1024; // 4 MiB/s; 2 MiB take about 500 ms
    const started = performance.now();
    await send(out as unknown as ServerResponse, paced(layers(2, 1024 * 1024), new Pacer(rate)), { stallTimeoutMs: 5000 });
    await once(out, 'finish');
    const ms = performance.now() - started;
    expect(ms).toBeGreaterThanOrEqual(400);
    expect(Buffer.concat(out.received).byteLength).toBe(8 + 2 * (24 + 1024 * 1024) + 24 + 2);
  });

  it('asks the socket whether to wait, not the response, whose flag Node 24 left set with nothing buffered', async () => {
    // The state a loaded run caught (e45a06d): the response's writableNeedDrain true, nothing
    // buffered, the socket not waiting, so no 'drain' would ever come. Waiting on the response's
    // flag stalled the stream until the stall timeout; the socket says there is room.
    const received: Buffer[] = [];
    const out = new Writable({
      highWaterMark: 16 * 1024 * 1024, // takes everything at once: never a 'drain' to wait for
      write(chunk: Buffer, _encoding, callback) {
        received.push(Buffer.from(chunk));
        callback();
      },
    });
    Object.defineProperty(out, 'writableNeedDrain', { get: () => true });
    Object.defineProperty(out, 'socket', { value: new Writable({ write: (_chunk, _encoding, callback) => callback() }) });
    await send(out as unknown as ServerResponse, unpaced(layers(4, 10_000)), { stallTimeoutMs: 500 });
    expect(Buffer.concat(received).byteLength).toBe(8 + 4 * (24 + 10_000) + 24 + 2);
  });
});

describe('FrameBuilder', () => {
  // A layer group of two tasks (chunks [0, 3) and [3, 5), layers [1, 4)), each slice's bytes random
  // and its checksum the workers' (crc32c of the slice): every LAYER frame must be the layer's
  // slices in chunk order, with the CRC32C of exactly those bytes (and, encoded, of the
  // slice-length table in front of them), combined from the slices' checksums.
  const sizeOf = (chunk: number, layer: number): number => 1 + ((chunk * 7 + layer * 5) % 23);
  for (const encoded of [false, true]) {
    it(`cuts LAYER frames from a group's task blocks${encoded ? ' of encoded slices' : ''}, bytes and CRC32C exact`, () => {
      const layerBytes = 24;
      const slices: Slices = encoded
        ? { layerBytes, encoded: { sliceBytes: Array.from({ length: 5 }, (_, c) => Array.from({ length: 6 }, (_, l) => sizeOf(c, l))) } }
        : { layerBytes };
      const reads: TaskRead[] = [
        [0, 3],
        [3, 5],
      ].map(([chunkStart, chunkEnd]) => {
        const task: PlannedTask = { group: 0, first: 1, end: 4, chunkStart: chunkStart as number, chunkEnd: chunkEnd as number };
        const layout = layoutOf(task, 'layer-major', slices);
        const region = Uint8Array.from({ length: layout.bytes }, () => Math.floor(Math.random() * 256));
        const crcs = new Uint32Array(layout.layers * layout.chunks);
        for (let layer = 1; layer < 4; layer++)
          for (let c = 0; c < layout.chunks; c++) {
            const at = layout.sliceOffset(layer, c);
            crcs[layout.slice(layer, c)] = crc32c(Buffer.from(region.subarray(at, at + layout.sliceBytes(layer, c))));
          }
        return { task, region, crcs };
      });
      const frames = new FrameBuilder(slices).layerFrames(reads);
      expect(frames.map((f) => [f.type, f.index])).toEqual([1, 2, 3].map((layer) => [FrameType.LAYER, layer]));
      for (const frame of frames) {
        const expected: Buffer[] = [];
        const lengths: number[] = [];
        for (const { task, region } of reads) {
          const layout = layoutOf(task, 'layer-major', slices);
          for (let c = 0; c < layout.chunks; c++) {
            const at = layout.sliceOffset(frame.index, c);
            expected.push(Buffer.from(region.subarray(at, at + layout.sliceBytes(frame.index, c))));
            lengths.push(layout.sliceBytes(frame.index, c));
          }
        }
        if (encoded) {
          const table = Buffer.alloc(4 * lengths.length);
          lengths.forEach((n, i) => table.writeUInt32LE(n, 4 * i));
          expected.unshift(table);
        }
        const payload = Buffer.concat(expected);
        expect(Buffer.concat(frame.pieces)).toEqual(payload);
        expect(frame.length).toBe(payload.byteLength);
        expect(frame.crc32c).toBe(crc32c(payload));
      }
    });
  }
});
