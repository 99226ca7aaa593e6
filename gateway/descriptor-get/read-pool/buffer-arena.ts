/**
 * Task buffers in shared memory. One SharedArrayBuffer, reserved once and shared with every read
 * worker at start-up, is cut into equal blocks; a task is given a block, the worker writes its
 * slices there and the main thread sends them from there, then the block is free again. Nothing
 * is allocated, zeroed, transferred or garbage-collected per task (transferred ArrayBuffers cost
 * the main thread a major GC every few hundred MiB as external memory, and fresh ones cost page
 * faults). Free blocks are reused last-freed first, so only as many blocks as are in use at once
 * are ever touched: the reservation is virtual until then.
 *
 * A task larger than a block, or one that finds no free block, gets its own ArrayBuffer
 * (transferred, as before); the arena is an optimisation, never a limit.
 */

export class BufferArena {
  readonly buffer: SharedArrayBuffer;
  readonly blockBytes: number;
  /** Free block indexes; the last one freed is taken first. */
  readonly #free: number[] = [];
  readonly blocks: number;

  constructor(totalBytes: number, blockBytes: number) {
    const blocks = Math.max(0, Math.floor(totalBytes / blockBytes));
    this.blockBytes = blockBytes;
    this.blocks = blocks;
    this.buffer = new SharedArrayBuffer(blocks * blockBytes);
    for (let i = blocks - 1; i >= 0; i--) this.#free.push(i);
  }

  get freeBlocks(): number {
    return this.#free.length;
  }

  /** The byte offset of a free block for `bytes`, or undefined (too large, or none free). */
  take(bytes: number): number | undefined {
    if (bytes > this.blockBytes) return undefined;
    const block = this.#free.pop();
    return block === undefined ? undefined : block * this.blockBytes;
  }

  give(offset: number): void {
    this.#free.push(offset / this.blockBytes);
  }
}
