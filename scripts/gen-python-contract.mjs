#!/usr/bin/env node
// Writes client/python/src/objectcache/_contract.py, the constants the Python client shares with
// the gateway: error codes, the stream's preamble and frame layout, the descriptor's fields and
// closed string sets, metadata names and limits, and the one version of the project. They are read
// from the BUILT schema modules (dist/schemas/*.js) and package.json, so the Python package keeps
// no hand-made copy that could drift. Run after `npm run -s build`:
//   node scripts/gen-python-contract.mjs            writes the file
//   node scripts/gen-python-contract.mjs --check    prints a diff and exits 1 if the file differs
//   --out PATH                                      another file (the drift test uses it)
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const COMMAND = 'npm run -s build && node scripts/gen-python-contract.mjs';
const SOURCES = ['errors', 'retry-policy', 'frames', 'encoded-chunk', 'integrity', 'chain', 'descriptor', 'descriptor-schema', 'layouts', 'kv-tokens'];

const args = process.argv.slice(2);
const check = args.includes('--check');
const outAt = args.indexOf('--out');
const target = outAt === -1 ? join(root, 'client/python/src/objectcache/_contract.py') : args[outAt + 1];
if (outAt !== -1 && !target) fail('--out needs a path');

function fail(message) {
  process.stderr.write(`gen-python-contract: ${message}\n`);
  process.exit(2);
}

// A dist/ older than its schema would give the Python client yesterday's contract.
for (const name of SOURCES) {
  const ts = join(root, 'schemas', `${name}.ts`);
  const js = join(root, 'dist', 'schemas', `${name}.js`);
  if (!existsSync(js) || statSync(js).mtimeMs < statSync(ts).mtimeMs) fail(`dist/schemas/${name}.js is missing or older than schemas/${name}.ts: run npm run -s build first`);
}
const load = (name) => import(new URL(`../dist/schemas/${name}.js`, import.meta.url).href);
const [errors, retryPolicy, frames, encoded, integrity, chain, descriptor, descriptorSchema, layouts, kvTokens] = await Promise.all(SOURCES.map(load));
const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

function same(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) fail(`${what}: ${JSON.stringify(a)} is not ${JSON.stringify(b)}`);
}

// --- Python literals --------------------------------------------------------------------------

/** A Python string literal (JSON's escapes are Python's). */
const str = (value) => JSON.stringify(value);
function bytesLiteral(value) {
  if (!/^[\x20-\x7e]*$/.test(value) || /["\\]/.test(value)) fail(`cannot write ${str(value)} as a bytes literal`);
  return `b"${value}"`;
}
function int(value, what) {
  if (!Number.isSafeInteger(value)) fail(`${what} is not an integer: ${value}`);
  return String(value);
}
/** A Python float literal of a number of ms, in seconds (30000 is 30.0). */
function seconds(ms, what) {
  if (!Number.isFinite(ms) || ms < 0) fail(`${what} is not a duration: ${ms}`);
  const s = ms / 1000;
  return Number.isInteger(s) ? `${s}.0` : String(s);
}
const frozen = (values) =>
  `frozenset(\n    {\n${[...values]
    .sort()
    .map((v) => `        ${str(v)},\n`)
    .join('')}    }\n)`;
const literal = (values) => `Literal[${values.map(str).join(', ')}]`;
const tuple = (values) => `(${values.map(str).join(', ')}${values.length === 1 ? ',' : ''})`;

// --- struct formats, checked against the TypeScript encoders ------------------------------------

const SIZES = { B: 1, H: 2, I: 4, Q: 8 };
/** Little-endian struct.unpack of the formats used here ("<" then B, H, I, Q and Ns). */
function unpack(format, bytes) {
  if (!format.startsWith('<')) fail(`${format} is not little-endian`);
  const out = [];
  let at = 0;
  for (const [, count, code] of format.slice(1).matchAll(/(\d*)([BHIQs])/g)) {
    if (code === 's') {
      out.push(bytes.subarray(at, at + Number(count)).toString('latin1'));
      at += Number(count);
      continue;
    }
    for (let i = 0; i < Number(count || 1); i++) {
      const size = SIZES[code];
      out.push(size === 8 ? bytes.readBigUInt64LE(at) : bytes.readUIntLE(at, size));
      at += size;
    }
  }
  if (at !== bytes.length) fail(`${format} covers ${at} bytes, not ${bytes.length}`);
  return out;
}

// The preamble: magic, version, reserved.
const PREAMBLE_FORMAT = '<4sHH';
same(
  unpack(PREAMBLE_FORMAT, frames.encodePreamble(frames.STREAM_VERSION_SEGMENTED)),
  [frames.STREAM_MAGIC, frames.STREAM_VERSION_SEGMENTED, 0],
  'the preamble as ' + PREAMBLE_FORMAT,
);
// A frame header: type, flags, reserved, index, length, crc32c, reserved.
const FRAME_HEADER_FORMAT = '<BBHIQII';
const probe = { type: frames.FrameType.END, index: 0x04030201, length: 0x0b0a09080706, crc32c: 0xfedcba98 };
const header = frames.encodeFrameHeader(probe);
same(unpack(FRAME_HEADER_FORMAT, header).map(String), [probe.type, 0, 0, probe.index, probe.length, probe.crc32c, 0].map(String), 'a frame header as ' + FRAME_HEADER_FORMAT);
same(frames.decodeFrameHeader(header), probe, 'decodeFrameHeader of encodeFrameHeader');
for (const at of [1, 2, 20]) {
  const bad = Buffer.from(header);
  bad[at] = 1;
  if (typeof frames.decodeFrameHeader(bad) !== 'string') fail(`byte ${at} of a frame header is not reserved`);
}
if (header.length !== frames.FRAME_HEADER_BYTES) fail('FRAME_HEADER_BYTES');

// The largest encoded slice: a factor of the raw slice plus some bytes, and nothing else.
const sliceExtra = encoded.maxEncodedSliceBytes(0);
const sliceFactor = encoded.maxEncodedSliceBytes(1) - sliceExtra;
for (const n of [7, 4096, 64 * 1024 * 1024])
  if (encoded.maxEncodedSliceBytes(n) !== sliceFactor * n + sliceExtra) fail('maxEncodedSliceBytes is no longer factor * layerBytes + extra');

// --- the descriptor's JSON Schema as TypedDicts -------------------------------------------------

const schema = descriptorSchema.DESCRIPTOR_SCHEMA;
/** Closed string sets of the schema, by field: the Python alias and tuple of their values. */
const ENUMS = { layout: ['Layout', 'LAYOUTS'], delivery: ['Delivery', 'DELIVERIES'], mode: ['Mode', 'MODES'] };
/** Nested objects, by field: their TypedDict. */
const OBJECTS = { target: 'DescriptorTarget' };
same(schema.properties.layout.enum, layouts.LAYOUTS, "the schema's layouts and schemas/layouts.ts LAYOUTS");
same(schema.properties.codecs.items.pattern, encoded.CODEC_NAME.source, "the schema's codec names and schemas/encoded-chunk.ts CODEC_NAME");

function pyType(name, spec) {
  if (ENUMS[name]) return ENUMS[name][0];
  if (OBJECTS[name]) return OBJECTS[name];
  if ('const' in spec) return `Literal[${JSON.stringify(spec.const)}]`;
  if (spec.enum) return literal(spec.enum);
  switch (spec.type) {
    case 'string':
      return 'str';
    case 'integer':
      return 'int';
    case 'number':
      return 'float';
    case 'boolean':
      return 'bool';
    case 'array':
      return `List[${pyType(undefined, spec.items)}]`;
    default:
      return fail(`no Python type for the descriptor field ${name} (${JSON.stringify(spec)}): teach scripts/gen-python-contract.mjs`);
  }
}

/** A TypedDict (required fields in a base, optional ones in a total=False subclass, as Python 3.9 allows). */
function typedDict(name, spec, doc) {
  const field = ([key, sub]) => `    #: ${sub.description}\n    ${key}: ${pyType(key, sub)}\n`;
  const entries = Object.entries(spec.properties);
  const required = entries.filter(([key]) => spec.required.includes(key));
  const optional = entries.filter(([key]) => !spec.required.includes(key));
  if (optional.length === 0) return `class ${name}(TypedDict):\n    """${doc}"""\n\n${required.map(field).join('')}`;
  return [
    `class _${name}Required(TypedDict):\n${required.map(field).join('')}`,
    `class ${name}(_${name}Required, total=False):\n    """${doc}"""\n\n${optional.map(field).join('')}`,
  ].join('\n\n');
}

// --- the file ------------------------------------------------------------------------------------

const sources = SOURCES.map((name) => `schemas/${name}.ts`);
const lines = [];
const section = (title) => lines.push('', '', `# --- ${title} ${'-'.repeat(Math.max(3, 94 - title.length))}`, '');
const constant = (name, type, value, doc) => lines.push(...(doc ? [`#: ${doc}`] : []), `${name}: Final[${type}] = ${value}`);

/** Comment lines of at most 100 characters. */
function comment(text) {
  const out = [];
  let line = '#';
  for (const word of text.split(' ')) {
    if (line.length + 1 + word.length > 100) {
      out.push(line);
      line = '#';
    }
    line += ` ${word}`;
  }
  return [...out, line];
}
lines.push(
  ...comment(
    `GENERATED FILE, do not edit. Written by scripts/gen-python-contract.mjs from package.json ("version") and ${sources.join(', ')}, as built into dist/schemas/. After changing any of them, run from the repository root:`,
  ),
  `#   ${COMMAND}`,
  ...comment('`node scripts/gen-python-contract.mjs --check` prints the drift and exits 1; test/python-contract.test.ts fails on it.'),
  '"""The wire contract the Python client shares with the gateway, and the project\'s version."""',
  '',
  'from typing import Final, FrozenSet, List, Literal, Mapping, Tuple, TypedDict',
  '',
);

constant('VERSION', 'str', str(version), "The version of the project (package.json), the Python package's too.");
lines.push('__version__: Final[str] = VERSION');

section('errors (schemas/errors.ts)');
constant('KNOWN_CODES', 'FrozenSet[str]', frozen(Object.keys(errors.ERRORS)), 'Every code of the registry (ERRORS).');
const retryable = Object.entries(errors.ERRORS)
  .filter(([, spec]) => spec.retryable === true)
  .map(([code]) => code);
constant('RETRYABLE_CODES', 'FrozenSet[str]', frozen(retryable), 'The codes for which sending the same request again may succeed (ErrorSpec.retryable).');
{
  // What an answer without x-objectcache-error-code (the store's own, relayed as it is) means:
  // the registry's OC_ERR_STORE_ code for its status and S3 code, or the one code that has them;
  // an answer several codes share (403 AccessDenied, 400 InvalidArgument) stays unnamed.
  const byAnswer = new Map();
  for (const [code, spec] of Object.entries(errors.ERRORS)) {
    if (spec.status === 0) continue;
    const answer = `(${spec.status}, ${JSON.stringify(spec.s3Code)})`;
    byAnswer.set(answer, [...(byAnswer.get(answer) ?? []), code]);
  }
  const rows = [];
  for (const [answer, codes] of byAnswer) {
    const store = codes.filter((code) => code.startsWith('OC_ERR_STORE_'));
    const code = store.length === 1 ? store[0] : codes.length === 1 ? codes[0] : undefined;
    if (code !== undefined) rows.push(`    ${answer}: ${JSON.stringify(code)},`);
  }
  constant(
    'CODES_BY_ANSWER',
    'Mapping[Tuple[int, str], str]',
    `{\n${rows.join('\n')}\n}`,
    "The code an answer without ours (the store's own, relayed) stands for, by HTTP status and S3 code, where one does.",
  );
}

section('the retry policy (schemas/retry-policy.ts)');
// The policy's function, checked against the numbers written here (objectcache/retry.py computes the same).
for (const [attempt, expected] of [
  [1, retryPolicy.FIRST_BACKOFF_MS],
  [2, retryPolicy.FIRST_BACKOFF_MS * 2],
  [3, retryPolicy.FIRST_BACKOFF_MS * 4],
])
  same(retryPolicy.retryDelayMs(undefined, attempt), expected, `retryDelayMs(undefined, ${attempt})`);
same(retryPolicy.retryDelayMs('100000', 1), retryPolicy.MAX_RETRY_AFTER_MS, 'a long Retry-After, capped');
constant('DEFAULT_RETRIES', 'int', int(retryPolicy.DEFAULT_RETRIES, 'DEFAULT_RETRIES'), 'How often a retryable refusal is tried again unless the client is told otherwise.');
constant(
  'FIRST_BACKOFF_S',
  'float',
  seconds(retryPolicy.FIRST_BACKOFF_MS, 'FIRST_BACKOFF_MS'),
  'The wait before the first retry of an answer without Retry-After, in seconds; doubled at each next one.',
);
constant(
  'MAX_RETRY_AFTER_S',
  'float',
  seconds(retryPolicy.MAX_RETRY_AFTER_MS, 'MAX_RETRY_AFTER_MS'),
  'The longest Retry-After honoured, in seconds (a longer one is waited for this long).',
);
constant(
  'RETRY_AFTER_PATTERN',
  'str',
  str(retryPolicy.RETRY_AFTER.source),
  'A Retry-After the clients honour (re.fullmatch): delay-seconds; anything else is ignored and the backoff applies.',
);

section('the response stream (schemas/frames.ts)');
constant('STREAM_MAGIC', 'bytes', bytesLiteral(frames.STREAM_MAGIC));
constant('STREAM_VERSION', 'int', int(frames.STREAM_VERSION, 'STREAM_VERSION'), 'Raw slices.');
constant(
  'STREAM_VERSION_SEGMENTED',
  'int',
  int(frames.STREAM_VERSION_SEGMENTED, 'STREAM_VERSION_SEGMENTED'),
  'A descriptor naming codecs: a segment table, then the slices as stored.',
);
constant('STREAM_CONTENT_TYPE', 'str', str(frames.STREAM_CONTENT_TYPE));
constant('SEGMENTED_STREAM_CONTENT_TYPE', 'str', str(frames.SEGMENTED_STREAM_CONTENT_TYPE));
constant('PREAMBLE_BYTES', 'int', int(frames.PREAMBLE_BYTES, 'PREAMBLE_BYTES'));
constant('PREAMBLE_FORMAT', 'str', str(PREAMBLE_FORMAT), 'struct format of the preamble: magic, version, reserved.');
constant('FRAME_HEADER_BYTES', 'int', int(frames.FRAME_HEADER_BYTES, 'FRAME_HEADER_BYTES'));
constant('MAX_JSON_FRAME_BYTES', 'int', int(frames.MAX_JSON_FRAME_BYTES, 'MAX_JSON_FRAME_BYTES'), "The most a reader takes of an ERROR or END frame's JSON.");
constant('FRAME_HEADER_FORMAT', 'str', str(FRAME_HEADER_FORMAT), 'struct format of a frame header: type, flags, reserved, index, length, crc32c, reserved.');
for (const [name, value] of Object.entries(frames.FrameType)) constant(`FRAME_${name}`, 'int', int(value, name));

section('encoded chunks (schemas/encoded-chunk.ts) and stored metadata (integrity.ts, chain.ts, kv-tokens.ts)');
constant('RAW_CODEC', 'str', str(encoded.RAW_CODEC), 'The codec of a chunk stored raw.');
constant('CODEC_NAME_PATTERN', 'str', str(encoded.CODEC_NAME.source), 'Codec names, as the gateway and the stored metadata take them.');
constant('CODEC_META', 'str', str(encoded.CODEC_META), "User metadata naming an encoded chunk's codec (x-amz-meta-... on the wire).");
constant('SLICE_BYTES_META', 'str', str(encoded.SLICE_BYTES_META), 'User metadata with the length of each encoded slice.');
constant('MAX_ENCODED_LAYERS', 'int', int(encoded.MAX_ENCODED_LAYERS, 'MAX_ENCODED_LAYERS'), "Most layers of an encoded chunk (its index must fit in S3's 2 KB of user metadata).");
constant('MAX_ENCODED_SLICE_FACTOR', 'int', int(sliceFactor, 'the slice factor'), 'An encoded slice is at most FACTOR x layerBytes + EXTRA bytes (maxEncodedSliceBytes).');
constant('MAX_ENCODED_SLICE_EXTRA_BYTES', 'int', int(sliceExtra, 'the slice extra'));
constant('LAYER_CRC_META', 'str', str(integrity.LAYER_CRC_META), "User metadata with the CRC-32C of every layer's slice.");
constant('MAX_CHECKSUMMED_LAYERS', 'int', int(integrity.MAX_CHECKSUMMED_LAYERS, 'MAX_CHECKSUMMED_LAYERS'), "Most layers whose CRC-32Cs fit in S3's 2 KB of user metadata.");
constant('AFTER_META', 'str', str(chain.AFTER_META), 'User metadata naming the chunk before this one in its prefix.');
constant(
  'MAX_AFTER_KEY',
  'int',
  int(chain.MAX_AFTER_KEY, 'MAX_AFTER_KEY'),
  'Longer keys are not recorded: refused as an explicit after (OC_ERR_CLIENT_USAGE), no chain from them in a batch.',
);
constant('AFTER_KEY_PATTERN', 'str', str(chain.AFTER_KEY.source), 'What a recorded key may hold (re.fullmatch); others are not recorded, as MAX_AFTER_KEY says.');
constant('TOKENS_META', 'str', str(kvTokens.TOKENS_META), "User metadata with the chunk's token ids (unsigned LEB128 varints, base64url), for the KV events.");
constant('MAX_TOKENS_META_CHARS', 'int', int(kvTokens.MAX_TOKENS_META_CHARS, 'MAX_TOKENS_META_CHARS'), 'Longer token lists are not recorded.');
constant(
  'MAX_USER_METADATA_BYTES',
  'int',
  int(kvTokens.MAX_USER_METADATA_BYTES, 'MAX_USER_METADATA_BYTES'),
  "S3's limit on user metadata, counted with the x-amz-meta- prefix: tokens that would pass it are left out.",
);
constant('MODEL_META', 'str', str(kvTokens.MODEL_META), "User metadata naming the chunk's model (a KV events topic's {model}).");
constant('MODEL_NAME_PATTERN', 'str', str(kvTokens.MODEL_NAME.source), 'What a recorded model name may be (re.fullmatch).');

section('the descriptor (schemas/descriptor-schema.ts, descriptor.ts, layouts.ts)');
constant('DESCRIPTOR_HEADER', 'str', str(descriptor.DESCRIPTOR_HEADER), 'The request header that carries a descriptor on GET.');
constant(
  'MAX_HEADER_DESCRIPTOR_BYTES',
  'int',
  int(descriptor.MAX_HEADER_DESCRIPTOR_BYTES, 'MAX_HEADER_DESCRIPTOR_BYTES'),
  'A descriptor whose header would be longer goes as a POST body (transport "auto").',
);
constant('DESCRIPTOR_VERSION', `Literal[${int(schema.properties.version.const, 'the descriptor version')}]`, String(schema.properties.version.const));
for (const [field, [alias, all]] of Object.entries(ENUMS)) {
  const values = schema.properties[field].enum;
  lines.push(`#: ${schema.properties[field].description}`, `${alias} = ${literal(values)}`, `${all}: Final[Tuple[${alias}, ...]] = ${tuple(values)}`);
}
lines.push('', '');
for (const [field, name] of Object.entries(OBJECTS)) lines.push(typedDict(name, schema.properties[field], schema.properties[field].description), '', '');
lines.push(typedDict('Descriptor', schema, `${schema.description} Field meanings: schemas/wire-format.md section 2.`));
// As ruff format writes it (client/python/pyproject.toml), so that formatting the package leaves it as it is.
const text = `${lines
  .join('\n')
  .replace(/\n{4,}/g, '\n\n\n')
  .replace(/\n+$/, '')}\n`;

// --- write, or check --------------------------------------------------------------------------------

/** A unified diff of two texts, by lines (a longest common subsequence; the file is small). */
function diff(before, after, context = 3) {
  const a = before.split('\n');
  const b = after.split('\n');
  const lcs = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) for (let j = b.length - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) ops.push([' ', a[i++], j++]);
    else if (i < a.length && (j === b.length || lcs[i + 1][j] >= lcs[i][j + 1])) ops.push(['-', a[i++]]);
    else ops.push(['+', b[j++]]);
  }
  const out = [];
  let last = -1;
  ops.forEach((op, k) => {
    if (op[0] === ' ') return;
    const from = Math.max(k - context, last + 1);
    if (from > last + 1 && last !== -1) out.push('@@');
    for (let c = from; c < k; c++) out.push(` ${ops[c][1]}`);
    out.push(`${op[0]}${op[1]}`);
    last = k;
    for (let c = k + 1; c <= Math.min(k + context, ops.length - 1) && ops[c][0] === ' '; c++) {
      out.push(` ${ops[c][1]}`);
      last = c;
    }
  });
  return out.join('\n');
}

const shown = relative(root, target).startsWith('..') ? target : relative(root, target);
if (!check) {
  writeFileSync(target, text);
  process.stdout.write(`wrote ${shown}\n`);
} else {
  const committed = existsSync(target) ? readFileSync(target, 'utf8') : '';
  if (committed !== text) {
    process.stdout.write(`--- ${shown} (as it is)\n+++ ${shown} (as generated)\n${diff(committed, text)}\n`);
    process.stderr.write(`gen-python-contract: ${shown} differs from the schemas; run: ${COMMAND}\n`);
    process.exit(1);
  }
}
