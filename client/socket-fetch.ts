/**
 * A fetch from plain-http: gateways over the client's own keep-alive sockets: the stream is read
 * with the kernel writing each payload byte straight into its place in the target (as the gateway
 * reads the store, http-range/socket-range-get.ts), where a stream of network chunks costs a
 * fresh buffer and a copy per socket read (measured in docs/clients.md). One try of it is
 * `receive`; the client runs its tries under the retry policy (client/retry.ts).
 */
import { escapeUriPath } from '@smithy/util-uri-escape';
import { DESCRIPTOR_HEADER, encodeDescriptorHeader, SEGMENT_CHUNKS_HEADER } from '../schemas/descriptor.js';
import type { DescriptorInput } from '../schemas/descriptor-schema.js';
import { ObjectCacheError } from '../schemas/errors.js';
import type { EndSummary } from '../schemas/frames.js';
import type { BodyTarget, RangeAnswer, RangeAnswerSink, SocketRangeClient, SocketRequest } from '../http-range/socket-range-get.js';
import { ERROR_BODY_LIMIT, errorFromAnswer, parseErrorDocument, toObjectCacheError, withRequestId } from './answers.js';
import type { FrameDecoder } from './frame-decoder.js';

/** The object a header-form descriptor GET names: its last chunk key (the gateway checks it). */
export function descriptorKey(input: DescriptorInput): string {
  return (input.keyPrefix ?? '') + (input.keys.at(-1) ?? '');
}

/** The x-objectcache-segment-chunks header as a count (0 when absent or not a count). */
export function segmentChunksOf(value: string | string[] | undefined): number {
  return typeof value === 'string' && /^\d{1,9}$/.test(value) ? Number(value) : 0;
}

/** The descriptor GET of `input` on `bucket`: the header form, or the POST body. */
export function socketRequest(bucket: string, input: DescriptorInput, transport: 'get' | 'post'): SocketRequest {
  return transport === 'post'
    ? { method: 'POST', path: escapeUriPath(`/${bucket}`), query: [['objectcache', '']], headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify(input)) }
    : { method: 'GET', path: escapeUriPath(`/${bucket}/${descriptorKey(input)}`), headers: { [DESCRIPTOR_HEADER]: encodeDescriptorHeader(input) } };
}

/**
 * The stream's body as the decoder places it: every socket read goes where `FrameDecoder.next()`
 * says, so payload bytes are written once, by the kernel, straight into the target. What the
 * decoder throws (a CRC, protocol or gateway error, or the caller's `onLayerReady`) is kept and
 * thrown from `wrote`, which fails the read.
 */
class DecoderTarget implements BodyTarget {
  failure: unknown;
  readonly #decoder: FrameDecoder;
  /** Where a read goes once the decoder has failed (it then fails the read). */
  readonly #spill = new Uint8Array(64);
  constructor(decoder: FrameDecoder) {
    this.#decoder = decoder;
  }
  next(): Uint8Array {
    // Called from the socket's read setup, where a throw would end the process: kept for wrote().
    if (this.failure === undefined) {
      try {
        return this.#decoder.next();
      } catch (error) {
        this.failure = error;
      }
    }
    return this.#spill;
  }
  wrote(n: number): void {
    if (this.failure !== undefined) throw this.failure as unknown; // what the decoder threw, as it was thrown
    try {
      this.#decoder.wrote(n);
    } catch (error) {
      this.failure = error;
      throw error;
    }
  }
  paused(): void {} // never: the decoder always has a place
}

/** Which endpoint a try starts at, and what it tells the client. */
export interface Tries {
  /** The endpoint in use. */
  first(): number;
  /** The endpoint at `index` answered: the client uses it from now on. */
  answered(index: number): void;
  /** The error when no endpoint could be reached (`last`: the last failure). */
  unreachable(last: unknown): ObjectCacheError;
}

/**
 * One try of a fetch over sockets, on the endpoint in use and then the others: the END summary,
 * or the gateway's refusal (thrown). A gateway that cannot be reached before it answers is tried
 * once more on a new connection (an idle one may have been closing), then the next one; once the
 * answer has begun, a broken connection ends the fetch (OC_ERR_CLIENT_INCOMPLETE).
 */
export async function receive(
  sockets: readonly SocketRangeClient[],
  tries: Tries,
  request: SocketRequest,
  decoder: FrameDecoder,
  live: AbortSignal,
): Promise<{ summary: EndSummary; segmentChunks: number }> {
  let last: unknown;
  const start = tries.first();
  for (let tried = 0; tried < sockets.length; tried++) {
    const index = (start + tried) % sockets.length;
    const endpoint = sockets[index] as SocketRangeClient;
    for (const fresh of [false, true]) {
      const target = new DecoderTarget(decoder);
      let answered: Readonly<Record<string, string>> | undefined;
      let answeredStatus = 0;
      const sink: RangeAnswerSink = {
        onHead: (status, headers) => {
          answered = headers;
          answeredStatus = status;
          return status === 200 ? { stream: target } : { collect: ERROR_BODY_LIMIT };
        },
      };
      let answer: RangeAnswer;
      try {
        answer = await endpoint.send(request, sink, live, fresh);
      } catch (error) {
        if (live.aborted) throw live.reason;
        const requestId = answered?.['x-amz-request-id'];
        if (target.failure !== undefined) throw withRequestId(target.failure, requestId);
        // A refusal whose body was cut off: its status and headers still say what went wrong.
        if (answered !== undefined && answeredStatus !== 200) {
          const headers = answered;
          throw errorFromAnswer(answeredStatus, {}, (name) => headers[name], error);
        }
        if (answered !== undefined)
          throw withRequestId(
            // Retryable (schemas/errors.ts), and not tried again here: layers were announced.
            new ObjectCacheError('OC_ERR_CLIENT_INCOMPLETE', `the stream broke after ${decoder.layersReady} layers: ${(error as Error).message}`, { cause: error }),
            requestId,
          );
        // Not reached (refused, reset or closed before any answer): again, then the next gateway.
        if (!(error instanceof ObjectCacheError)) throw toObjectCacheError(error, 'the descriptor GET');
        if (error.code !== 'OC_ERR_BACKEND_UNAVAILABLE') throw error;
        last = error;
        continue;
      }
      tries.answered(index);
      if (answer.status !== 200) throw errorFromAnswer(answer.status, parseErrorDocument(answer.text ?? ''), (name) => answer.headers[name]);
      try {
        return { summary: decoder.finish(), segmentChunks: segmentChunksOf(answer.headers[SEGMENT_CHUNKS_HEADER]) };
      } catch (error) {
        throw withRequestId(error, answer.headers['x-amz-request-id']);
      }
    }
  }
  throw tries.unreachable(last);
}
