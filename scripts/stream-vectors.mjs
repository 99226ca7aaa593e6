// Writes schemas/test-vectors/streams.json: response bodies in the stream format of
// schemas/wire-format.md section 4, each with the outcome every reader must reach. Three readers
// are checked against them: the TypeScript client's decoder (test/wire-format.test.ts), the
// Python client's (client/python/tests/test_stream.py) and schemas/examples/read_stream.py (the
// TypeScript test runs it). Run after `npm run build`; `--check` exits 1 if the file differs.
import { readFileSync, writeFileSync } from 'node:fs';
import { crc32c } from '@node-rs/crc32';
import { encodeFrameHeader, encodePreamble, FrameType } from '../dist/schemas/frames.js';

const file = new URL('../schemas/test-vectors/streams.json', import.meta.url);
const json = (value) => Buffer.from(JSON.stringify(value));
const frame = (type, index, payload, crc = crc32c(payload)) => Buffer.concat([encodeFrameHeader({ type, index, length: payload.length, crc32c: crc }), payload]);
const layer = (index, payload) => frame(FrameType.LAYER, index, payload);
const chunk = (index, payload) => frame(FrameType.CHUNK, index, payload);
const end = (summary) => frame(FrameType.END, 0, json(summary));
const error = (payload) => frame(FrameType.ERROR, 0, json(payload));

// Two chunks, S = 4 bytes, layers 0 and 1 (the worked example of section 5).
const geometry = { chunks: 2, layerBytes: 4, first: 0, end: 2 };
const l0 = Buffer.from([0x00, 0x01, 0x02, 0x03, 0x10, 0x11, 0x12, 0x13]);
const l1 = Buffer.from([0x04, 0x05, 0x06, 0x07, 0x14, 0x15, 0x16, 0x17]);
const c0 = Buffer.from([0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07]);
const c1 = Buffer.from([0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17]);
const layerwiseEnd = {
  mode: 'layerwise',
  layers: [0, 2],
  chunks: 2,
  bytes: 16,
  backendReads: 2,
  plan: [[0, 2]],
  rateBytesPerSec: null,
  verified: true,
  timings: { firstReadMs: 1, firstFrameMs: 1.2, totalMs: 1.9 },
};
const chunkwiseEnd = { ...layerwiseEnd, mode: 'chunkwise' };
const layerwise = Buffer.concat([encodePreamble(), layer(0, l0), layer(1, l1), end(layerwiseEnd)]);
const badCrc = Buffer.concat([encodePreamble(), layer(0, l0), frame(FrameType.LAYER, 1, l1, crc32c(l1) ^ 1), end(layerwiseEnd)]);
const ok = (summary) => ({ outcome: 'ok', layers: Buffer.concat([l0, l1]).toString('hex'), mode: summary.mode });
const fails = (code) => ({ outcome: 'error', code });

const vectors = [
  ['layerwise', 'Two LAYER frames, then END.', layerwise, ok(layerwiseEnd)],
  [
    'chunkwise',
    "Two CHUNK frames (each chunk's layers in order), then END: the same layers.",
    Buffer.concat([encodePreamble(), chunk(0, c0), chunk(1, c1), end(chunkwiseEnd)]),
    ok(chunkwiseEnd),
  ],
  [
    'end-with-unknown-fields',
    'An END summary with a field readers do not know: ignored.',
    Buffer.concat([encodePreamble(), layer(0, l0), layer(1, l1), end({ ...layerwiseEnd, fromTheFuture: [1, 2] })]),
    ok(layerwiseEnd),
  ],
  ['truncated-in-a-payload', "The body ends inside the second LAYER frame's payload.", layerwise.subarray(0, 8 + 32 + 24 + 3), fails('OC_ERR_CLIENT_INCOMPLETE')],
  [
    'truncated-before-end',
    'Every layer, but the body ends before the END frame.',
    Buffer.concat([encodePreamble(), layer(0, l0), layer(1, l1)]),
    fails('OC_ERR_CLIENT_INCOMPLETE'),
  ],
  ['bad-crc', "The second LAYER frame's CRC32C does not match its payload.", badCrc, fails('OC_ERR_CLIENT_CRC')],
  [
    'error-after-a-layer',
    'An ERROR frame after layer 0 (a chunk overwritten mid-stream; retryable).',
    Buffer.concat([
      encodePreamble(),
      layer(0, l0),
      error({ code: 'OC_ERR_CHUNK_CHANGED', message: 'chunk k/1 was overwritten while it was being read', retryable: true, chunk: 1, key: 'k/1' }),
    ]),
    { outcome: 'error', code: 'OC_ERR_CHUNK_CHANGED', retryable: true, details: { ChunkIndex: 1, Key: 'k/1' } },
  ],
  [
    'error-first-older-gateway',
    "An ERROR frame right after the preamble, without `retryable` (an older gateway): the code's.",
    Buffer.concat([encodePreamble(), error({ code: 'OC_ERR_CHUNK_CORRUPT', message: 'layer 0 of chunk k/0 does not match', chunk: 0, key: 'k/0', layer: 0 })]),
    { outcome: 'error', code: 'OC_ERR_CHUNK_CORRUPT', retryable: false, details: { ChunkIndex: 0, Key: 'k/0', Layer: 0 } },
  ],
  ['layers-out-of-order', 'LAYER 1 before LAYER 0.', Buffer.concat([encodePreamble(), layer(1, l1), layer(0, l0), end(layerwiseEnd)]), fails('OC_ERR_CLIENT_PROTOCOL')],
  [
    'layer-of-the-wrong-size',
    'A LAYER frame of 4 bytes where a layer is 8.',
    Buffer.concat([encodePreamble(), layer(0, l0.subarray(0, 4)), end(layerwiseEnd)]),
    fails('OC_ERR_CLIENT_PROTOCOL'),
  ],
  ['mixed-modes', 'A CHUNK frame in a layerwise stream.', Buffer.concat([encodePreamble(), layer(0, l0), chunk(1, c1), end(layerwiseEnd)]), fails('OC_ERR_CLIENT_PROTOCOL')],
  ['early-end', 'END after one of two layers.', Buffer.concat([encodePreamble(), layer(0, l0), end(layerwiseEnd)]), fails('OC_ERR_CLIENT_PROTOCOL')],
  ['bytes-after-end', 'A byte after the END frame.', Buffer.concat([layerwise, Buffer.from([0])]), fails('OC_ERR_CLIENT_PROTOCOL')],
  ['bad-preamble', 'The body does not start with OCKV version 1.', Buffer.concat([Buffer.from('HTTP'), layerwise.subarray(4)]), fails('OC_ERR_CLIENT_PROTOCOL')],
  ['unknown-frame-type', 'A frame of type 9.', Buffer.concat([encodePreamble(), frame(9, 0, l0), end(layerwiseEnd)]), fails('OC_ERR_CLIENT_PROTOCOL')],
  [
    'preamble-reserved-set',
    'A preamble whose reserved field is not zero.',
    (() => {
      const b = Buffer.from(layerwise);
      b[6] = 1;
      return b;
    })(),
    fails('OC_ERR_CLIENT_PROTOCOL'),
  ],
  [
    'error-frame-not-json',
    'An ERROR frame whose payload is not JSON.',
    Buffer.concat([encodePreamble(), frame(FrameType.ERROR, 0, Buffer.from('gateway on fire'))]),
    fails('OC_ERR_CLIENT_PROTOCOL'),
  ],
  [
    'end-frame-not-an-object',
    'An END frame whose payload is JSON but not an object.',
    Buffer.concat([encodePreamble(), layer(0, l0), layer(1, l1), frame(FrameType.END, 0, json([1, 2]))]),
    fails('OC_ERR_CLIENT_PROTOCOL'),
  ],
  [
    'reserved-field-set',
    'A LAYER frame whose flags byte is not zero.',
    Buffer.concat([
      encodePreamble(),
      (() => {
        const f = layer(0, l0);
        f[1] = 1;
        return f;
      })(),
      layer(1, l1),
      end(layerwiseEnd),
    ]),
    fails('OC_ERR_CLIENT_PROTOCOL'),
  ],
];

const document = {
  about:
    'Response bodies in the ObjectCache stream format (schemas/wire-format.md section 4) and the outcome every reader must reach: the delivered layers (layer-major, hex) or the error code. Written by scripts/stream-vectors.mjs.',
  geometry,
  vectors: vectors.map(([name, description, body, expect]) => ({ name, description, body: body.toString('hex'), expect })),
};
const text = `${JSON.stringify(document, null, 2)}\n`;
if (process.argv.includes('--check')) {
  if (readFileSync(file, 'utf8') !== text) {
    console.error('schemas/test-vectors/streams.json is out of date: run node scripts/stream-vectors.mjs');
    process.exit(1);
  }
} else {
  writeFileSync(file, text);
  console.log(`wrote ${vectors.length} vectors to schemas/test-vectors/streams.json`);
}
