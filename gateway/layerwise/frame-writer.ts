/**
 * Writes the framed stream (schemas/frames.ts) to the response with backpressure: a frame's
 * payload may be several buffers (pieces of the layer from different worker tasks), written
 * without concatenation; the CRC32C covers them in order. After a write that fills the socket
 * buffer, the writer waits for 'drain' (or for the client to go away).
 */
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

  /** After a write that filled the socket buffer: wait for 'drain', or for the client to go away. */
  async #flush(wroteAll: boolean): Promise<void> {
    if (wroteAll || this.#res.destroyed) return;
    const res = this.#res;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
  }

  async preamble(): Promise<void> {
    await this.#flush(this.#res.write(encodePreamble()));
  }

  /**
   * Writes one frame. `onFlushed` runs once the socket has taken every byte of it (and of the
   * frames before it), so their buffers may be reused.
   */
  async frame(type: FrameType, index: number, pieces: readonly Uint8Array[], onFlushed?: () => void): Promise<void> {
    let crc = 0;
    let length = 0;
    for (const piece of pieces) {
      crc = crc32c(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength), crc);
      length += piece.byteLength;
    }
    this.#res.cork();
    let ok = this.#res.write(encodeFrameHeader({ type, index, length, crc32c: crc }));
    pieces.forEach((piece, i) => {
      ok = (i === pieces.length - 1 && onFlushed ? this.#res.write(piece, () => onFlushed()) : this.#res.write(piece)) && ok;
    });
    this.#res.uncork();
    this.payloadBytes += length;
    await this.#flush(ok);
  }

  async json(type: typeof FrameType.ERROR | typeof FrameType.END, value: unknown): Promise<void> {
    await this.frame(type, 0, [Buffer.from(JSON.stringify(value), 'utf8')]);
  }
}
