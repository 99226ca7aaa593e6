/**
 * Parsing, validation and normalisation of descriptors (schemas/wire-format.md section 2). Strict: every
 * wrong field is named, all at once, before any byte streams; limits are enforced; arithmetic
 * (N * L * S and friends) is checked to stay within exact integers.
 */
import { Ajv, type ErrorObject } from 'ajv';
import { DESCRIPTOR_SCHEMA, type DescriptorInput } from './descriptor-schema.js';
import { ObjectCacheError } from './errors.js';
import type { Layout } from './layouts.js';
import { objectKeyProblem } from './object-key.js';

export type Delivery = 'layer-major' | 'chunk-major';
export type RequestedMode = 'auto' | 'layerwise' | 'chunkwise';

/** Limits a gateway enforces on descriptors (settings `--max-descriptor-keys` ...). */
export interface DescriptorLimits {
  readonly maxKeys: number;
  readonly maxLayers: number;
  readonly maxLayerBytes: number;
  readonly maxTotalBytes: number;
}

export const DEFAULT_DESCRIPTOR_LIMITS: DescriptorLimits = {
  maxKeys: 8192,
  maxLayers: 512,
  maxLayerBytes: 64 * 1024 * 1024,
  maxTotalBytes: 64 * 1024 ** 3,
};

/** A validated descriptor with full keys and derived sizes. */
export interface Descriptor {
  readonly version: 1;
  readonly keys: readonly string[];
  readonly layers: number;
  readonly chunkTokens: number;
  readonly layerBytes: number;
  readonly layout: Layout;
  readonly delivery: Delivery;
  /** First delivered layer. */
  readonly layerStart: number;
  /** One past the last delivered layer. */
  readonly layerEnd: number;
  readonly computeMsPerLayer: number | undefined;
  readonly tenant: string | undefined;
  readonly mode: RequestedMode;
  readonly target: { readonly length: number; readonly layerStride: number } | undefined;
  /** Encodings the client accepts (schemas/encoded-chunk.ts); undefined: raw bytes, stream version 1. */
  readonly codecs: readonly string[] | undefined;
  /** Who the client asks to check slices against their writers' CRC-32Cs (wire-format.md section 2); undefined: the gateway's setting. */
  readonly sliceChecks: 'gateway' | 'client' | undefined;
  /** N. */
  readonly chunks: number;
  /** Bytes of one delivered layer: N * S. */
  readonly layerPayloadBytes: number;
  /** W = N * (layerEnd - layerStart) * S. */
  readonly totalBytes: number;
}

const ajv = new Ajv({ allErrors: true, strict: true });
const validate = ajv.compile<DescriptorInput>(DESCRIPTOR_SCHEMA);

function fieldOf(error: ErrorObject): string {
  const path = error.instancePath === '' ? '' : error.instancePath.slice(1).replace(/\//g, '.');
  if (error.keyword === 'required') return path === '' ? String(error.params['missingProperty']) : `${path}.${String(error.params['missingProperty'])}`;
  if (error.keyword === 'additionalProperty' || error.keyword === 'additionalProperties') {
    const extra = String(error.params['additionalProperty']);
    return path === '' ? extra : `${path}.${extra}`;
  }
  return path === '' ? '(descriptor)' : path;
}

function describe(error: ErrorObject): string {
  const field = fieldOf(error);
  switch (error.keyword) {
    case 'required':
      return `${field} is required`;
    case 'additionalProperties':
      return `${field} is not a descriptor field`;
    case 'enum':
      return `${field} must be one of ${(error.params['allowedValues'] as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
    case 'const':
      return `${field} must be ${JSON.stringify(error.params['allowedValue'])}`;
    default:
      return `${field} ${error.message ?? 'is invalid'}`;
  }
}

function invalid(problems: string[]): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_DESCRIPTOR_INVALID', `Invalid descriptor: ${problems.join('; ')}`, { details: { ArgumentName: 'x-objectcache-descriptor' } });
}

function overLimit(what: string, value: number, limit: number): ObjectCacheError {
  return new ObjectCacheError('OC_ERR_DESCRIPTOR_LIMIT', `The descriptor's ${what} (${value}) exceeds this gateway's limit of ${limit}`, { details: { ArgumentName: what } });
}

/** Multiplies exactly or reports that the product leaves the exact-integer range. */
function product(factors: readonly number[], what: string): number {
  let value = 1;
  for (const factor of factors) {
    value *= factor;
    if (!Number.isSafeInteger(value)) throw invalid([`${what} overflows (more than 2^53 bytes)`]);
  }
  return value;
}

/** Validates a decoded descriptor document; throws ObjectCacheError naming every bad field. */
export function parseDescriptor(input: unknown, limits: DescriptorLimits = DEFAULT_DESCRIPTOR_LIMITS): Descriptor {
  const rawKeys = typeof input === 'object' && input !== null ? (input as { keys?: unknown }).keys : undefined;
  // Checked before schema validation, so a million keys are refused without validating them all.
  if (Array.isArray(rawKeys) && rawKeys.length > limits.maxKeys) throw overLimit('keys', rawKeys.length, limits.maxKeys);
  if (!validate(input)) {
    throw invalid((validate.errors ?? []).slice(0, 20).map(describe));
  }
  const d = input;
  const problems: string[] = [];
  const prefix = d.keyPrefix ?? '';
  const keys = d.keys.map((k) => prefix + k);
  const seen = new Set<string>();
  keys.forEach((key, i) => {
    if (problems.length >= 20) return;
    const problem = objectKeyProblem(key);
    if (problem !== undefined) problems.push(`keys[${i}] ${problem}`);
    else if (seen.has(key)) problems.push(`keys[${i}] repeats an earlier key`);
    seen.add(key);
  });
  if (d.layers > limits.maxLayers) throw overLimit('layers', d.layers, limits.maxLayers);
  if (d.layerBytes > limits.maxLayerBytes) throw overLimit('layerBytes', d.layerBytes, limits.maxLayerBytes);
  if (d.layout === 'KV_2LTD' && d.layerBytes % 2 !== 0) problems.push('layerBytes must be even for KV_2LTD (a K half and a V half)');
  // Encoded chunks store their slices one layer after another (schemas/encoded-chunk.ts), and a
  // version 2 stream serves raw chunks as whole slices too: the split K/V layout has no place there.
  if (d.codecs !== undefined && d.layout === 'KV_2LTD') problems.push("codecs needs layout KV_L2TD or MLA (encoded chunks hold each layer's slice whole, in layer order)");
  const layerStart = d.layerRange?.[0] ?? 0;
  const layerEnd = d.layerRange?.[1] ?? d.layers;
  if (d.layerRange && !(layerStart < layerEnd && layerEnd <= d.layers)) {
    problems.push(`layerRange must be [first, end) with 0 <= first < end <= layers (${d.layers})`);
  }
  if (problems.length > 0) throw invalid(problems);

  const chunks = keys.length;
  product([d.layers, d.layerBytes], 'layers * layerBytes');
  const layerPayloadBytes = product([chunks, d.layerBytes], 'keys * layerBytes');
  const totalBytes = product([chunks, layerEnd - layerStart, d.layerBytes], 'keys * layers * layerBytes');
  if (totalBytes > limits.maxTotalBytes) throw overLimit('total bytes', totalBytes, limits.maxTotalBytes);
  if (d.target) {
    const delivered = layerEnd - layerStart;
    if (d.target.layerStride < layerPayloadBytes) problems.push(`target.layerStride must be at least keys * layerBytes (${layerPayloadBytes})`);
    const needed = (delivered - 1) * d.target.layerStride + layerPayloadBytes;
    if (!Number.isSafeInteger(needed) || d.target.length < needed) problems.push(`target.length must be at least ${needed} bytes for ${delivered} layers at this stride`);
    if (problems.length > 0) throw invalid(problems);
  }
  return {
    version: 1,
    keys,
    layers: d.layers,
    chunkTokens: d.chunkTokens,
    layerBytes: d.layerBytes,
    layout: d.layout,
    delivery: d.delivery,
    layerStart,
    layerEnd,
    computeMsPerLayer: d.computeMsPerLayer,
    tenant: d.tenant,
    mode: d.delivery === 'chunk-major' ? 'chunkwise' : (d.mode ?? 'auto'),
    target: d.target,
    codecs: d.codecs,
    sliceChecks: d.sliceChecks,
    chunks,
    layerPayloadBytes,
    totalBytes,
  };
}

/** The request header that carries a descriptor on GET. */
export const DESCRIPTOR_HEADER = 'x-objectcache-descriptor';
/** On a descriptor GET's answer: how many of its first chunks were read from a packed segment (docs/segments.md, Serving). */
export const SEGMENT_CHUNKS_HEADER = 'x-objectcache-segment-chunks';

/** The clients send a descriptor whose header would be longer than this as a POST body instead (transport 'auto'). */
export const MAX_HEADER_DESCRIPTOR_BYTES = 8 * 1024;

/** Decodes the `x-objectcache-descriptor` header: base64 (or base64url) of UTF-8 JSON. */
export function decodeDescriptorHeader(value: string): unknown {
  const text = value.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_ENCODING', 'x-objectcache-descriptor must be base64 of the descriptor JSON', {
      details: { ArgumentName: 'x-objectcache-descriptor' },
    });
  }
  return decodeDescriptorJson(Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64').toString('utf8'));
}

/** Parses descriptor JSON text (the POST body form). */
export function decodeDescriptorJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new ObjectCacheError('OC_ERR_DESCRIPTOR_ENCODING', `The descriptor is not valid JSON: ${(error as Error).message}`, {
      details: { ArgumentName: 'x-objectcache-descriptor' },
    });
  }
}

/** Encodes a descriptor for the `x-objectcache-descriptor` header (base64url, no padding). */
export function encodeDescriptorHeader(descriptor: DescriptorInput): string {
  return Buffer.from(JSON.stringify(descriptor), 'utf8').toString('base64url');
}
