/**
 * The ObjectCache descriptor: one source of truth. This JSON Schema is what the gateway validates
 * with (Ajv), the TypeScript type is derived from it (json-schema-to-ts), and
 * schemas/descriptor.schema.json is this object written out (a test keeps them equal).
 * Field meanings: schemas/wire-format.md.
 */
import type { FromSchema } from 'json-schema-to-ts';

export const DESCRIPTOR_SCHEMA = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  $id: 'https://objectcache.dev/schemas/descriptor-v1.json',
  title: 'ObjectCache descriptor',
  description: 'Names the matched prefix chunks and the model layout of one layerwise GET.',
  type: 'object',
  additionalProperties: false,
  required: ['version', 'keys', 'layers', 'chunkTokens', 'layerBytes', 'layout', 'delivery'],
  properties: {
    version: { const: 1, description: 'Descriptor format version.' },
    keyPrefix: { type: 'string', maxLength: 1024, description: 'Compact form: prepended to every entry of keys.' },
    keys: {
      type: 'array',
      minItems: 1,
      items: { type: 'string', minLength: 1, maxLength: 1024 },
      description: 'Object keys of the matched chunks in prefix order (after keyPrefix).',
    },
    layers: { type: 'integer', minimum: 1, description: 'L: layers in every chunk object.' },
    chunkTokens: { type: 'integer', minimum: 1, description: 'G: tokens per chunk.' },
    layerBytes: { type: 'integer', minimum: 1, description: 'S: bytes of one layer of one chunk.' },
    layout: { enum: ['KV_L2TD', 'KV_2LTD', 'MLA'], description: 'How the chunk objects are stored.' },
    delivery: { enum: ['layer-major', 'chunk-major'], description: 'Order the client wants bytes in.' },
    layerRange: {
      type: 'array',
      items: { type: 'integer', minimum: 0 },
      minItems: 2,
      maxItems: 2,
      description: '[first, end) of the layers to deliver; all layers when absent.',
    },
    computeMsPerLayer: { type: 'number', exclusiveMinimum: 0, maximum: 3_600_000, description: 'Client compute window per layer, for the scheduler.' },
    tenant: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9._:-]+$', description: 'Tenant for bandwidth sharing and metrics.' },
    mode: { enum: ['auto', 'layerwise', 'chunkwise'], description: 'Delivery mode; auto applies the size threshold.' },
    codecs: {
      type: 'array',
      minItems: 1,
      maxItems: 16,
      uniqueItems: true,
      items: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,31}$' },
      description: 'Encodings the client decodes ("none": raw). Present: the stream is version 2, each slice a segment in its stored encoding; absent: raw bytes only (version 1).',
    },
    sliceChecks: {
      enum: ['gateway', 'client'],
      description:
        "Who checks each slice against its writer's recorded CRC-32C. client: the reader checks every frame's CRC-32C, so the gateway may send the recorded values as the slices' checksums without a pass over the bytes. gateway: the gateway checksums every slice it reads. Absent: the gateway checks, unless it runs with --slice-checks client; one run with --slice-checks gateway always checks.",
    },
    target: {
      type: 'object',
      additionalProperties: false,
      required: ['length', 'layerStride'],
      properties: {
        length: { type: 'integer', minimum: 1, description: 'Bytes of the client buffer.' },
        layerStride: { type: 'integer', minimum: 1, description: 'Distance between consecutive delivered layers in the buffer.' },
      },
      description: 'Where the client places the bytes (where an RDMA transport would name the remote buffer).',
    },
  },
} as const;

/** A descriptor as it travels on the wire. */
export type DescriptorInput = FromSchema<typeof DESCRIPTOR_SCHEMA>;
