/**
 * Incremental decoder of the ObjectCache stream (schemas/wire-format.md). It names the place of
 * the stream's next bytes (`next()`): payload bytes go straight to their place in the caller's
 * target buffer (layer l of the delivery at (l - layerStart) * layerStride), so a socket reader
 * can have the kernel write them there (client/client.ts), or `push` copies network chunks
 * there. Every payload's CRC32C is checked where it landed, frames must arrive in order, and a
 * layer is announced ready when its frame ends (layerwise) or when the last chunk has arrived
 * (chunkwise).
 */
import { crc32c } from '../native/crc32c.js';
import { ObjectCacheError } from '../schemas/errors.js';
import {
  checkPreamble,
  decodeFrameHeader,
  FRAME_HEADER_BYTES,
  FrameType,
  MAX_JSON_FRAME_BYTES,
  PREAMBLE_BYTES,
  type EndSummary,
  type ErrorPayload,
  type FrameHeader,
} from '../schemas/frames.js';
import { ERRORS, siteDetails, type ErrorCode } from '../schemas/errors.js';

/** What a payload's CRC32C mismatch leaves the caller to do (schemas/wire-format.md section 1). */
const CORRUPT_HINT = 'changed on the way, or a stored chunk is corrupt: a descriptor with sliceChecks "gateway" has the gateway name the chunk';

export interface DecoderGeometry {
  readonly layerStart: number;
  readonly layerEnd: number;
  readonly chunks: number;
  readonly layerBytes: number;
}

export interface DecoderOptions extends DecoderGeometry {
  readonly target: Uint8Array;
  readonly layerStride: number;
  /** Called once per delivered layer, in layer order, with the layer's bytes in the target. */
  readonly onLayerReady?: (layer: number, view: Uint8Array) => void;
}

function protocolError(message: string): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_CLIENT_PROTOCOL', message);
}

/** An ERROR or END frame's payload: a JSON object, or the stream breaks the format. */
function jsonObject(payload: Uint8Array, frame: 'ERROR' | 'END'): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(payload));
  } catch {
    throw protocolError(`an ${frame} frame that is not UTF-8 JSON`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw protocolError(`an ${frame} frame that is not a JSON object`);
  return value as Record<string, unknown>;
}

export class FrameDecoder {
  readonly #o: DecoderOptions;
  #preambleSeen = false;
  #header: FrameHeader | undefined;
  readonly #headerBuf = Buffer.alloc(FRAME_HEADER_BYTES);
  #headerFill = 0;
  #received = 0;
  #crc = 0;
  /** An ERROR or END frame's payload, as it arrives. */
  #json: Buffer | undefined;
  /** The place `next()` gave last, and whether it still holds (no bytes written since). */
  #place: Uint8Array = this.#headerBuf;
  #placed = false;
  #nextLayer: number;
  #nextChunk = 0;
  #mode: 'layerwise' | 'chunkwise' | undefined;
  #summary: EndSummary | undefined;

  constructor(options: DecoderOptions) {
    const layers = options.layerEnd - options.layerStart;
    const needed = (layers - 1) * options.layerStride + options.chunks * options.layerBytes;
    if (options.layerStride < options.chunks * options.layerBytes || options.target.byteLength < needed) {
      throw new ObjectCacheError('OC_ERR_CLIENT_TARGET', `The target buffer needs at least ${needed} bytes with a layer stride of at least ${options.chunks * options.layerBytes}`);
    }
    this.#o = options;
    this.#nextLayer = options.layerStart;
  }

  get done(): boolean {
    return this.#summary !== undefined;
  }

  /** The END summary, once the stream is complete. */
  get summary(): EndSummary | undefined {
    return this.#summary;
  }

  /** Layers announced ready so far. */
  get layersReady(): number {
    return this.#nextLayer - this.#o.layerStart;
  }

  #layerView(layer: number): Uint8Array {
    const at = (layer - this.#o.layerStart) * this.#o.layerStride;
    return this.#o.target.subarray(at, at + this.#o.chunks * this.#o.layerBytes);
  }

  #beginFrame(header: FrameHeader): void {
    const o = this.#o;
    const layers = o.layerEnd - o.layerStart;
    switch (header.type) {
      case FrameType.LAYER:
        if (this.#mode === 'chunkwise') throw protocolError('a LAYER frame in a chunkwise stream');
        this.#mode = 'layerwise';
        if (header.index !== this.#nextLayer || header.index >= o.layerEnd) throw protocolError(`expected layer ${this.#nextLayer}, got LAYER ${header.index}`);
        if (header.length !== o.chunks * o.layerBytes) throw protocolError(`LAYER ${header.index} has ${header.length} bytes, expected ${o.chunks * o.layerBytes}`);
        break;
      case FrameType.CHUNK:
        if (this.#mode === 'layerwise') throw protocolError('a CHUNK frame in a layerwise stream');
        this.#mode = 'chunkwise';
        if (header.index !== this.#nextChunk || header.index >= o.chunks) throw protocolError(`expected chunk ${this.#nextChunk}, got CHUNK ${header.index}`);
        if (header.length !== layers * o.layerBytes) throw protocolError(`CHUNK ${header.index} has ${header.length} bytes, expected ${layers * o.layerBytes}`);
        break;
      case FrameType.ERROR:
      case FrameType.END:
        if (header.length > MAX_JSON_FRAME_BYTES) throw protocolError('an ERROR or END frame is implausibly large');
        this.#json = Buffer.allocUnsafe(header.length);
        break;
    }
  }

  /**
   * Where the stream's next bytes go (at least one byte): within the current payload, its place
   * in the target (a LAYER frame's rest, or the rest of a CHUNK frame's slice of one layer); else
   * the decoder's own bytes for the preamble, a frame header or an ERROR or END payload. A reader
   * that can write received bytes in place (a socket read into this view) calls `wrote(n)` after;
   * `push` copies them here.
   */
  next(): Uint8Array {
    if (this.#summary) throw protocolError('bytes after the END frame');
    // Asked again before any bytes were written (a socket reader checks for a place, then reads into it).
    if (this.#placed) return this.#place;
    this.#placed = true;
    const header = this.#header;
    if (!header) this.#place = this.#headerBuf.subarray(this.#headerFill, this.#preambleSeen ? FRAME_HEADER_BYTES : PREAMBLE_BYTES);
    else if (header.type === FrameType.LAYER) this.#place = this.#layerView(header.index).subarray(this.#received);
    else if (header.type === FrameType.CHUNK) {
      const S = this.#o.layerBytes;
      const within = this.#received % S;
      const at = Math.floor(this.#received / S) * this.#o.layerStride + header.index * S + within;
      this.#place = this.#o.target.subarray(at, at + S - within);
    } else this.#place = (this.#json as Buffer).subarray(this.#received);
    return this.#place;
  }

  /**
   * `n` bytes were written at the start of the place `next()` gave last: their CRC32C is taken
   * there, in cache. Throws ObjectCacheError on any protocol, CRC or gateway error.
   */
  wrote(n: number): void {
    this.#placed = false;
    const header = this.#header;
    if (!header) {
      this.#headerFill += n;
      if (!this.#preambleSeen) {
        if (this.#headerFill < PREAMBLE_BYTES) return;
        const problem = checkPreamble(this.#headerBuf);
        if (problem) throw protocolError(problem);
        this.#preambleSeen = true;
        this.#headerFill = 0;
        return;
      }
      if (this.#headerFill < FRAME_HEADER_BYTES) return;
      const decoded = decodeFrameHeader(this.#headerBuf);
      if (typeof decoded === 'string') throw protocolError(decoded);
      this.#beginFrame(decoded);
      this.#header = decoded;
      if (decoded.length === 0) this.#endFrame();
      return;
    }
    this.#crc = crc32c(this.#place.subarray(0, n), this.#crc);
    this.#received += n;
    if (this.#received === header.length) this.#endFrame();
  }

  #endFrame(): void {
    const header = this.#header as FrameHeader;
    if (this.#crc >>> 0 !== header.crc32c >>> 0) {
      throw new ObjectCacheError(
        'OC_ERR_CLIENT_CRC',
        header.type === FrameType.LAYER || header.type === FrameType.CHUNK
          ? `the CRC32C of ${header.type === FrameType.LAYER ? 'layer' : 'chunk'} ${header.index} does not match: its bytes differ from what their writers stored (${CORRUPT_HINT})`
          : 'the CRC32C of a control frame does not match',
      );
    }
    const o = this.#o;
    switch (header.type) {
      case FrameType.LAYER:
        this.#nextLayer++;
        o.onLayerReady?.(header.index, this.#layerView(header.index));
        break;
      case FrameType.CHUNK:
        this.#nextChunk++;
        if (this.#nextChunk === o.chunks) {
          for (let layer = o.layerStart; layer < o.layerEnd; layer++) o.onLayerReady?.(layer, this.#layerView(layer));
          this.#nextLayer = o.layerEnd;
        }
        break;
      case FrameType.ERROR: {
        const payload = jsonObject(this.#json as Buffer, 'ERROR') as Partial<ErrorPayload>;
        const known = typeof payload.code === 'string' && payload.code in ERRORS;
        const code = (known ? payload.code : 'OC_ERR_INTERNAL') as ErrorCode;
        const details = siteDetails(payload);
        // A code this client does not know (a newer gateway): internal, the code kept.
        if (!known && payload.code !== undefined) details['Code'] = String(payload.code);
        const retryable = typeof payload.retryable === 'boolean' ? { retryable: payload.retryable } : {};
        throw new ObjectCacheError(code, `the gateway failed mid-stream: ${payload.message ?? 'no message'}`, { details, ...retryable });
      }
      case FrameType.END:
        if (this.#nextLayer !== o.layerEnd) throw protocolError(`END after ${this.#nextLayer - o.layerStart} of ${o.layerEnd - o.layerStart} layers`);
        this.#summary = jsonObject(this.#json as Buffer, 'END') as unknown as EndSummary;
        break;
    }
    this.#header = undefined;
    this.#headerFill = 0;
    this.#received = 0;
    this.#crc = 0;
    this.#json = undefined;
  }

  /** Feeds bytes from the response body, copying each to its place. Throws ObjectCacheError on any protocol, CRC or gateway error. */
  push(chunk: Uint8Array): void {
    for (let at = 0; at < chunk.byteLength;) {
      const place = this.next();
      const n = Math.min(place.byteLength, chunk.byteLength - at);
      place.set(chunk.subarray(at, at + n));
      this.wrote(n);
      at += n;
    }
  }

  /**
   * Call at the end of the body: throws unless the END frame arrived. A body that ends without
   * END or ERROR was cut (its connection or the process serving it went): OC_ERR_CLIENT_INCOMPLETE,
   * retryable.
   */
  finish(): EndSummary {
    if (!this.#summary)
      throw new ObjectCacheError(
        'OC_ERR_CLIENT_INCOMPLETE',
        `the stream ended after ${this.#nextLayer - this.#o.layerStart} of ${this.#o.layerEnd - this.#o.layerStart} layers without an END frame`,
      );
    return this.#summary;
  }
}
