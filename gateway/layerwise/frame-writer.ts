/**
 * Writes the framed stream (schemas/frames.ts) to the response with backpressure: a frame's
 * payload may be several buffers (pieces of the layer from different worker tasks), written
 * without concatenation; the CRC32C covers them in order. After a write that fills the socket
 * buffer, the writer waits for 'drain' (or for the client to go away).
 */
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { crc32c } from '@node-rs/crc32';
import { encodeFrameHeader, encodePreamble, FrameType } from '../../schemas/frames.js';

export class FrameWriter {
  readonly #res: ServerResponse;
  /** Payload bytes written (frame headers excluded). */
  payloadBytes = 0;

  constructor(res: ServerResponse) {
    this.#res = res;
  }

  async #flush(wroteAll: boolean): Promise<void> {
    if (wroteAll || this.#res.destroyed) return;
    const closed = once(this.#res, 'close');
    await Promise.race([once(this.#res, 'drain'), closed]);
  }

  async preamble(): Promise<void> {
    await this.#flush(this.#res.write(encodePreamble()));
  }

  async frame(type: FrameType, index: number, pieces: readonly Uint8Array[]): Promise<void> {
    let crc = 0;
    let length = 0;
    for (const piece of pieces) {
      crc = crc32c(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength), crc);
      length += piece.byteLength;
    }
    this.#res.cork();
    let ok = this.#res.write(encodeFrameHeader({ type, index, length, crc32c: crc }));
    for (const piece of pieces) ok = this.#res.write(piece) && ok;
    this.#res.uncork();
    this.payloadBytes += length;
    await this.#flush(ok);
  }

  async json(type: typeof FrameType.ERROR | typeof FrameType.END, value: unknown): Promise<void> {
    await this.frame(type, 0, [Buffer.from(JSON.stringify(value), 'utf8')]);
  }
}
