/**
 * Incremental decoder of the ObjectCache stream (schemas/wire-format.md). Payload bytes are
 * copied straight from the network chunks into their place in the caller's target buffer (layer
 * l of the delivery at (l - layerStart) * layerStride), every payload's CRC32C is checked, frames
 * must arrive in order, and a layer is announced ready when its frame ends (layerwise) or when
 * the last chunk has arrived (chunkwise).
 */
import { crc32c } from '../native/crc32c.js';
import { ObjectCacheError } from '../schemas/errors.js';
import { checkPreamble, decodeFrameHeader, FRAME_HEADER_BYTES, FrameType, MAX_JSON_FRAME_BYTES, PREAMBLE_BYTES, type EndSummary, type ErrorPayload, type FrameHeader } from '../schemas/frames.js';
import { ERRORS, siteDetails, type ErrorCode } from '../schemas/errors.js';

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
function jsonObject(pieces: readonly Buffer[], frame: 'ERROR' | 'END'): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(pieces)));
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
  #headerBuf = Buffer.alloc(FRAME_HEADER_BYTES);
  #headerFill = 0;
  #received = 0;
  #crc = 0;
  #json: Buffer[] = [];
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
        break;
    }
  }

  /** Copies payload bytes of the current frame to their place. */
  #payload(bytes: Uint8Array): void {
    const header = this.#header as FrameHeader;
    this.#crc = crc32c(bytes, this.#crc);
    if (header.type === FrameType.LAYER) {
      this.#layerView(header.index).set(bytes, this.#received);
    } else if (header.type === FrameType.CHUNK) {
      const S = this.#o.layerBytes;
      let from = 0;
      let position = this.#received;
      while (from < bytes.byteLength) {
        const layer = this.#o.layerStart + Math.floor(position / S);
        const within = position % S;
        const n = Math.min(S - within, bytes.byteLength - from);
        const at = (layer - this.#o.layerStart) * this.#o.layerStride + header.index * S + within;
        this.#o.target.set(bytes.subarray(from, from + n), at);
        from += n;
        position += n;
      }
    } else {
      this.#json.push(Buffer.from(bytes));
    }
    this.#received += bytes.byteLength;
  }

  #endFrame(): void {
    const header = this.#header as FrameHeader;
    if (this.#crc >>> 0 !== header.crc32c >>> 0) {
      throw new ObjectCacheError('OC_ERR_CLIENT_CRC', `the CRC32C of ${header.type === FrameType.LAYER ? `layer ${header.index}` : header.type === FrameType.CHUNK ? `chunk ${header.index}` : 'a control frame'} does not match`);
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
        const payload = jsonObject(this.#json, 'ERROR') as Partial<ErrorPayload>;
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
        this.#summary = jsonObject(this.#json, 'END') as unknown as EndSummary;
        break;
    }
    this.#header = undefined;
    this.#headerFill = 0;
    this.#received = 0;
    this.#crc = 0;
    this.#json = [];
  }

  /** Feeds bytes from the response body. Throws ObjectCacheError on any protocol, CRC or gateway error. */
  push(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.byteLength) {
      if (this.#summary) throw protocolError('bytes after the END frame');
      if (!this.#preambleSeen) {
        const n = Math.min(PREAMBLE_BYTES - this.#headerFill, chunk.byteLength - at);
        this.#headerBuf.set(chunk.subarray(at, at + n), this.#headerFill);
        this.#headerFill += n;
        at += n;
        if (this.#headerFill < PREAMBLE_BYTES) return;
        const problem = checkPreamble(this.#headerBuf);
        if (problem) throw protocolError(problem);
        this.#preambleSeen = true;
        this.#headerFill = 0;
        continue;
      }
      if (!this.#header) {
        const n = Math.min(FRAME_HEADER_BYTES - this.#headerFill, chunk.byteLength - at);
        this.#headerBuf.set(chunk.subarray(at, at + n), this.#headerFill);
        this.#headerFill += n;
        at += n;
        if (this.#headerFill < FRAME_HEADER_BYTES) return;
        const header = decodeFrameHeader(this.#headerBuf);
        if (typeof header === 'string') throw protocolError(header);
        this.#beginFrame(header);
        this.#header = header;
        if (header.length === 0) this.#endFrame();
        continue;
      }
      const n = Math.min(this.#header.length - this.#received, chunk.byteLength - at);
      this.#payload(chunk.subarray(at, at + n));
      at += n;
      if (this.#received === this.#header.length) this.#endFrame();
    }
  }

  /** Call at the end of the body: throws unless the END frame arrived. */
  finish(): EndSummary {
    if (!this.#summary) throw new ObjectCacheError('OC_ERR_CLIENT_INCOMPLETE', `the stream ended after ${this.#nextLayer - this.#o.layerStart} of ${this.#o.layerEnd - this.#o.layerStart} layers without an END frame`);
    return this.#summary;
  }
}
