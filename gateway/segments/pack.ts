/**
 * Packing a run (docs/segments.md, Packing): a segment written from the LAYER frames of the
 * layerwise GET that reads the run, with what it fell behind on read from the chunks after it
 * (descriptor-get/read-rest.ts). Segments (segments.ts) starts a pack;
 * the catalog writes its manifest once its data object is stored (catalog.ts, Catalog.settle).
 */
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { Descriptor } from '../../schemas/descriptor.js';
import { unquoted, type CapacityStore } from '../stores/capacity-store.js';
import type { TaskRead } from '../descriptor-get/read-ahead.js';
import type { EncodedChunks } from '../descriptor-get/encoded-chunks.js';
import { layoutOf, type Slices } from '../threads/task-layout.js';
import type { ReadRest, SegmentPack } from '../descriptor-get/packed-segments.js';
import { codecOf, encodeU32s, type Manifest } from './manifest.js';

/** A store that takes nothing of a pack for this long has it abandoned. */
const PACK_STALL_MS = 30_000;
/** A pack that fell behind its read starts reading the rest from the chunks this long after, if the read lasts that long. */
const REST_AFTER_MS = 5_000;
/** How often a pack waiting for the store looks at what it has taken. */
const ROOM_POLL_MS = 50;

/** A pack's outcome when its data object is stored: the manifest to write, and what it records decoded. */
export interface Packed {
  readonly manifest: Manifest;
  readonly crcs: Uint32Array;
  readonly sizes: Uint32Array | undefined;
  /** Every read it was packed from was checked against CRC32Cs its chunk's writer recorded. */
  readonly writerVerified: boolean;
}

export interface PackOptions {
  readonly run: string;
  readonly bucket: string;
  readonly descriptor: Descriptor;
  /** The chunks' index, when the request names `codecs` (its slices are packed as stored). */
  readonly encoded: EncodedChunks | undefined;
  readonly bytes: number;
  readonly store: CapacityStore;
  readonly segmentBucket: string;
  readonly ready: () => Promise<void>;
  readonly done: (outcome: Packed | { abandoned: string }) => Promise<void>;
  /** Bytes the pack may have copied and the store not yet taken (--segment-pack-queue-bytes). */
  readonly queueBytes: number;
  /** Copy the request's frames (--segment-pack-from frames); otherwise read every layer after it. */
  readonly copyFrames: boolean;
  /** Reads the layers the pack fell behind on, from the chunks, after its request (ReadRest). */
  readonly rest: ReadRest;
  /** The pack fell behind and reads the rest (the `reread` event). */
  readonly reread: () => void;
  /** The chunk versions the request has read so far, by prefix position (all of them once its first layer is in). */
  readonly versions: () => readonly (string | undefined)[];
  /** Whether every read of the request so far was checked against CRC32Cs its chunk's writer recorded. */
  readonly verified: () => boolean;
}

/**
 * One segment being written from the frames of the layerwise GET that reads its run: each LAYER
 * frame's payload is copied into the body of one streamed PUT (the frames' buffers go back to
 * the pool as usual), each task's slice checksums into the manifest. The request never waits for
 * the store: once the copies the store has not taken would pass `queueBytes`, the pack stops
 * copying frames, and after the request has ended (or REST_AFTER_MS later, if it lasts that long)
 * it reads the layers it missed from the chunks itself (`rest`, locked to the versions the
 * request read) at the store's pace. Abandoned when
 * the request fails, when a chunk of the run is written meanwhile, or when the store refuses it or
 * takes nothing for PACK_STALL_MS.
 */
export class Pack implements SegmentPack {
  readonly run: string;
  readonly bucket: string;
  readonly #o: PackOptions;
  readonly #keys: Set<string>;
  readonly #crcs: Uint32Array;
  /** How long the run's slices are (the request's, for its tasks' layouts). */
  readonly #slices: Slices;
  readonly #body = new PassThrough({ highWaterMark: 4 * 1024 * 1024 });
  readonly #abort = new AbortController();
  readonly #data: string;
  /** The data object's PUT, once started: at once when the pack copies frames, else with the rest read. */
  #stored: Promise<string> | undefined;
  #written = 0;
  /** LAYER frames of the request seen so far, and the first one not copied (the pack fell behind there). */
  #frames = 0;
  #behind: number | undefined;
  #abandoned: string | undefined;
  /** The read of the layers the pack fell behind on, once started, and the timer that starts it. */
  #rest: Promise<void> | undefined;
  /** Whether the rest's reads were all checked against their writers' CRC32Cs. */
  #restVerified = true;
  #restTimer: NodeJS.Timeout | undefined;
  /** The request ended complete, and the pack waits for the rest to be read (finish). */
  #completing = false;
  /** Resolved by ended(): the request's response is out, so the rest's reads do not compete with its last bytes. */
  readonly #requestEnded: Promise<void>;
  #endRequest!: () => void;
  /** finish() was called: the stream is complete. */
  #finishing = false;
  /** A chunk of the run was written after the data object was stored. */
  stale = false;

  constructor(options: PackOptions) {
    this.#o = options;
    this.run = options.run;
    this.bucket = options.bucket;
    const d = options.descriptor;
    this.#keys = new Set(d.keys);
    this.#crcs = new Uint32Array((d.layerEnd - d.layerStart) * d.chunks);
    this.#slices = { layerBytes: d.layerBytes, encoded: options.encoded };
    this.#data = `${options.bucket}/${options.run}/${randomBytes(8).toString('hex')}`;
    this.#requestEnded = new Promise((resolve) => (this.#endRequest = resolve));
    if (options.copyFrames) void this.#put(); // its refusal is handled where it is made (#put)
    // Destroying the body (abandon) emits its error, perhaps before the store reads it: the
    // failure is the PUT's to report, never an unhandled 'error' event.
    this.#body.on('error', () => {});
  }

  holds(key: string): boolean {
    return this.#keys.has(key);
  }

  /** Starts the data object's PUT (once), fed by the body. */
  #put(): Promise<string> {
    if (this.#stored) return this.#stored;
    const o = this.#o;
    const stored = o.ready().then(() => o.store.putStream(o.segmentBucket, this.#data, this.#body, o.bytes, this.#abort.signal));
    // A store that refuses the PUT (or its bucket) ends the pack at once: nothing reads the body
    // any more, and the request it feeds must not wait for it (room).
    stored.catch((error: unknown) => {
      if (!this.#finishing) this.abandon(`the store refused the segment: ${(error as Error).message}`);
    });
    this.#stored = stored;
    return stored;
  }

  /**
   * A LAYER frame's payload from the request, in stream order, copied without waiting: unless the
   * pack fell behind, when the copies the store has not taken and this frame would pass
   * `queueBytes` (the first frame of an empty queue is always taken). From then on the request's
   * frames are not copied; finish() reads those layers from the chunks. So a pack holds at most
   * `queueBytes`, or one LAYER frame when that is larger. A pack that copies no frames
   * (--segment-pack-from chunks) is behind from the first, and reads them all after the request.
   */
  frame(pieces: readonly Uint8Array[]): void {
    const layer = this.#frames++;
    if (this.#abandoned !== undefined || this.#behind !== undefined) return;
    if (!this.#o.copyFrames) {
      // No PUT is open meanwhile, so nothing can be cut off for idling: the rest waits for finish().
      this.#behind = layer;
      return;
    }
    const bytes = pieces.reduce((sum, piece) => sum + piece.byteLength, 0);
    const queued = this.#queued();
    if (queued > 0 && queued + bytes > this.#o.queueBytes) {
      this.#behind = layer;
      // Read after the request, or REST_AFTER_MS from now if the request lasts longer: a PUT whose
      // body pauses much longer may be cut off by the store (S3 ends an upload idle for ~20 s).
      this.#restTimer = setTimeout(() => this.#startRest(), REST_AFTER_MS);
      this.#restTimer.unref();
      return;
    }
    this.#copy(pieces);
  }

  #copy(pieces: readonly Uint8Array[]): void {
    for (const piece of pieces) {
      const copy = Buffer.allocUnsafeSlow(piece.byteLength);
      copy.set(piece);
      this.#body.write(copy);
      this.#written += piece.byteLength;
    }
  }

  /** Starts reading the layers the pack fell behind on from the chunks, locked to the versions the request read (once). */
  #startRest(): void {
    if (this.#rest !== undefined || this.#abandoned !== undefined || this.#behind === undefined) return;
    clearTimeout(this.#restTimer);
    const versions = this.#lockedVersions();
    if (!versions) return;
    void this.#put();
    this.#o.reread();
    this.#rest = this.#o
      .rest({
        from: this.#o.descriptor.layerStart + this.#behind,
        versions,
        signal: this.#abort.signal,
        queueBytes: this.#o.queueBytes,
        take: async (reads, frames) => {
          this.checksums(reads);
          for (const pieces of frames) {
            for (const piece of pieces) {
              await this.#room();
              if (this.#abandoned !== undefined) return;
              this.#copy([piece]);
            }
          }
        },
      })
      .then(
        (verified) => void (this.#restVerified = verified),
        (error: unknown) => this.abandon(`reading the layers it fell behind on failed: ${(error as Error).message}`),
      );
  }

  /**
   * The chunk versions the request read (its first unit reads every chunk, and every later read
   * of a chunk is locked to the first): the manifest's, and the rest's locked versions. Abandons the pack when
   * one is unknown.
   */
  #lockedVersions(): readonly string[] | undefined {
    const versions = this.#o.versions();
    if (versions.length >= this.#o.descriptor.chunks && versions.every((version) => version !== undefined)) return versions;
    this.abandon('a chunk\u2019s version is unknown');
    return undefined;
  }

  /** Bytes copied that the store has not taken yet. */
  #queued(): number {
    return this.#body.writableLength + this.#body.readableLength;
  }

  /**
   * Resolves once the store has taken the pack's copies down to `queueBytes` (the rest read after
   * the request goes at the store's pace). A store that takes nothing for PACK_STALL_MS has the
   * pack abandoned.
   */
  async #room(): Promise<void> {
    const body = this.#body;
    let lastProgress = performance.now();
    let low = this.#queued();
    while (this.#abandoned === undefined && this.#queued() > this.#o.queueBytes) {
      // 'drain' or 'close', or a look every ROOM_POLL_MS (a drain can come before anyone listens,
      // and a queue below the body's high-water mark emits none).
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          body.off('drain', done).off('close', done);
          resolve();
        };
        const timer = setTimeout(done, ROOM_POLL_MS);
        body.on('drain', done).on('close', done);
      });
      const queued = this.#queued();
      if (queued < low) {
        low = queued;
        lastProgress = performance.now();
      } else if (performance.now() - lastProgress >= PACK_STALL_MS) this.abandon(`the store took nothing of the segment for ${PACK_STALL_MS} ms`);
    }
  }

  /** The slice checksums of a unit's reads (layer-major task blocks), into the manifest's order. */
  checksums(reads: readonly TaskRead[]): void {
    const d = this.#o.descriptor;
    for (const { task, crcs } of reads) {
      const layout = layoutOf(task, 'layer-major', this.#slices);
      for (let layer = task.first; layer < task.end; layer++) {
        for (let c = 0; c < layout.chunks; c++) this.#crcs[(layer - d.layerStart) * d.chunks + task.chunkStart + c] = crcs[layout.slice(layer, c)] as number;
      }
    }
  }

  /** The request that feeds the pack ended: abandons it unless the stream was complete. */
  ended(): void {
    this.#endRequest();
    if (!this.#finishing && !this.#completing) this.abandon('the layerwise GET that fed it ended early');
  }

  abandon(reason: string): void {
    if (this.#abandoned !== undefined) return;
    if (this.#finishing) {
      // All of it is with the store already: only the manifest can still be kept from being used.
      this.stale = true;
      return;
    }
    this.#abandoned = reason;
    clearTimeout(this.#restTimer);
    this.#abort.abort();
    this.#body.destroy(new Error(reason));
    void this.#stored?.then(
      // Stored after all (the store had every byte): it is not named by a manifest, so removed.
      (etag) => (etag ? this.#o.store.delete(this.#o.segmentBucket, this.#data).catch(() => {}) : undefined),
      () => {},
    );
    void this.#o.done({ abandoned: reason });
  }

  /**
   * The request sent its last frame: the layers it fell behind on are read from the chunks once
   * its response is out (ended()), the data object is completed, then the manifest written (by
   * Catalog.settle).
   */
  async finish(): Promise<void> {
    if (this.#abandoned !== undefined || this.#finishing || this.#completing) return;
    const d = this.#o.descriptor;
    const etags = this.#lockedVersions();
    if (!etags) return;
    if (this.#behind !== undefined) {
      // Set before the first await: the request's end (ended()) must not abandon the pack now.
      this.#completing = true;
      try {
        // Once the response is out (unless REST_AFTER_MS started the rest already).
        if (this.#rest === undefined) await this.#requestEnded;
        this.#startRest();
        await this.#rest;
      } finally {
        this.#completing = false;
      }
      if (this.#abandoned !== undefined) return;
    }
    if (this.#written !== this.#o.bytes) {
      this.abandon(`the stream held ${this.#written} of ${this.#o.bytes} bytes`);
      return;
    }
    this.#finishing = true;
    this.#body.end();
    let dataEtag: string;
    try {
      dataEtag = await this.#put();
    } catch (error) {
      if (this.#abandoned === undefined) {
        this.#abandoned = `the store refused the segment: ${(error as Error).message}`;
        await this.#o.done({ abandoned: this.#abandoned });
      }
      return;
    }
    if (this.#abandoned !== undefined) return;
    const codec = codecOf(this.#o.encoded);
    let sizes: Uint32Array | undefined;
    if (codec !== 'raw') {
      const encoded = this.#o.encoded as EncodedChunks;
      sizes = new Uint32Array(this.#crcs.length);
      for (let layer = d.layerStart; layer < d.layerEnd; layer++) {
        for (let c = 0; c < d.chunks; c++) sizes[(layer - d.layerStart) * d.chunks + c] = (encoded.sliceBytes[c] as readonly number[])[layer] as number;
      }
    }
    const manifest: Manifest = {
      objectcache: 'segment',
      version: 1,
      bucket: this.bucket,
      keys: d.keys,
      etags: etags.map(unquoted),
      layout: d.layout,
      layers: d.layers,
      layerBytes: d.layerBytes,
      first: d.layerStart,
      end: d.layerEnd,
      codec,
      ...(sizes ? { sizes: encodeU32s(sizes) } : {}),
      data: this.#data,
      dataEtag: unquoted(dataEtag),
      bytes: this.#o.bytes,
      crcs: encodeU32s(this.#crcs),
      packedAt: new Date().toISOString(),
    };
    await this.#o.done({ manifest, crcs: this.#crcs, sizes, writerVerified: this.#o.verified() && this.#restVerified });
  }
}
