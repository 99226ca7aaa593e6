/**
 * Writes the framed stream (schemas/frames.ts) to the response with backpressure: a frame's
 * payload may be several buffers (pieces of the layer from different worker tasks), written
 * without concatenation; the CRC32C covers them in order. After a write that fills the socket
 * buffer, the writer waits for 'drain' (or for the client to go away).
 */
import type { ServerResponse } from 'node:http';
import { crc32c } from '@node-rs/crc32';
import { ObjectCacheError } from '../../schemas/errors.js';
import { encodeFrameHeader, encodePreamble, FrameType } from '../../schemas/frames.js';
import { PACE_SLICE_BYTES, type Pacer } from '../scheduler/pacer.js';

export class FrameWriter {
  readonly #res: ServerResponse;
  /** Paces payload bytes at the request's granted rate, when it has one. */
  pacer: Pacer | undefined;
  /** Called with the payload bytes of each slice written (delivered-bytes metrics). */
  readonly #onBytes: ((bytes: number) => void) | undefined;

  readonly #stallTimeoutMs: number;

  constructor(res: ServerResponse, onBytes?: (bytes: number) => void, stallTimeoutMs = 30_000) {
    this.#res = res;
    this.#onBytes = onBytes;
    this.#stallTimeoutMs = stallTimeoutMs;
  }

  /** After a write that filled the socket buffer: wait for 'drain', or for the client to go away. */
  async #flush(wroteAll: boolean): Promise<void> {
    if (wroteAll || this.#res.destroyed) return;
    const res = this.#res;
    // A client that takes nothing for the stall timeout is cut off: its buffers go back to the
    // pool instead of waiting on a reader that may never come back (DESIGN.md section 11).
    await new Promise<void>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      const timer = setTimeout(() => {
        res.off('drain', done);
        res.off('close', done);
        const error = new ObjectCacheError('OC_ERR_CLIENT_STALLED', `The client took no data for ${this.#stallTimeoutMs} ms`);
        res.destroy(); // the caller gets the error; nothing else should see an 'error' event
        reject(error);
      }, this.#stallTimeoutMs);
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
    if (!this.pacer || type === FrameType.ERROR || type === FrameType.END) {
      this.#res.cork();
      let ok = this.#res.write(encodeFrameHeader({ type, index, length, crc32c: crc }));
      pieces.forEach((piece, i) => {
        ok = (i === pieces.length - 1 && onFlushed ? this.#res.write(piece, () => onFlushed()) : this.#res.write(piece)) && ok;
      });
      this.#res.uncork();
      this.#onBytes?.(length);
      await this.#flush(ok);
      return;
    }
    // Paced: the header, then the payload in slices, each sent when the pacer allows.
    await this.#flush(this.#res.write(encodeFrameHeader({ type, index, length, crc32c: crc })));
    for (const [i, piece] of pieces.entries()) {
      for (let at = 0; at < piece.byteLength; at += PACE_SLICE_BYTES) {
        const slice = piece.subarray(at, Math.min(piece.byteLength, at + PACE_SLICE_BYTES));
        await this.pacer.take(slice.byteLength);
        if (this.#res.destroyed) return;
        const last = i === pieces.length - 1 && at + PACE_SLICE_BYTES >= piece.byteLength;
        const ok = last && onFlushed ? this.#res.write(slice, () => onFlushed()) : this.#res.write(slice);
        this.#onBytes?.(slice.byteLength);
        await this.#flush(ok);
      }
    }
  }

  async json(type: typeof FrameType.ERROR | typeof FrameType.END, value: unknown): Promise<void> {
    await this.frame(type, 0, [Buffer.from(JSON.stringify(value), 'utf8')]);
  }
}
