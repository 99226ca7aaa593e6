/**
 * KV cache layouts of chunk objects, and model presets (schemas/wire-format.md section 1).
 *
 * A chunk holds G tokens of all L layers. `S` (layerBytes) is the bytes of one layer of one chunk.
 * - KV_L2TD (the layout of the paper, docs/references.md): layer-major; inside a layer K then V, each token-major then
 *   hidden dimension. Layer l is the one range [l*S, (l+1)*S).
 * - KV_2LTD (what LMCache's S3 connector writes): all K for every layer, then all V:
 *   [K/V][layer][token][dim]. Layer l is two ranges: K at [l*S/2, (l+1)*S/2) and V at
 *   [L*S/2 + l*S/2, L*S/2 + (l+1)*S/2). S must be even.
 * - MLA: one compressed latent per token per layer (DeepSeek-V2 class), layer-major like KV_L2TD.
 * Whatever the stored layout, a delivered slice is in KV_L2TD form: K part, then V part.
 */

export const LAYOUTS = ['KV_L2TD', 'KV_2LTD', 'MLA'] as const;
export type Layout = (typeof LAYOUTS)[number];

export interface ByteRange {
  /** Offset in the chunk object. */
  readonly offset: number;
  readonly length: number;
}

/**
 * The byte ranges of layers [first, end) of one chunk object, in the order their bytes appear in
 * the delivered (KV_L2TD) form. For KV_L2TD and MLA one range; for KV_2LTD the K range and the V
 * range, whose bytes interleave per layer on delivery (see `scatterLayers`).
 */
export function layerRanges(layout: Layout, layers: number, layerBytes: number, first: number, end: number): ByteRange[] {
  if (layout === 'KV_2LTD') {
    const half = layerBytes / 2;
    const vBase = layers * half;
    return [
      { offset: first * half, length: (end - first) * half },
      { offset: vBase + first * half, length: (end - first) * half },
    ];
  }
  return [{ offset: first * layerBytes, length: (end - first) * layerBytes }];
}

/**
 * Where the bytes of range `part` of `layerRanges` land inside one delivered (KV_L2TD) slice of
 * `layerBytes`: the whole slice, or for KV_2LTD the K half (part 0) or the V half (part 1). The one
 * place that says where K and V go (gateway/threads/task-layout.ts for grouped reads,
 * gateway/worker/chunk-streams.ts for streamed ones).
 */
export function slicePiece(layout: Layout, layerBytes: number, part: number): ByteRange {
  if (layout === 'KV_2LTD') return { offset: part * (layerBytes / 2), length: layerBytes / 2 };
  return { offset: 0, length: layerBytes };
}

export interface ModelPreset {
  readonly name: string;
  /** The model id the fingerprint names (Hugging Face id). */
  readonly modelId: string;
  readonly layout: Layout;
  readonly layers: number;
  /** KV bytes of one token in one layer: 2 * n_kv * head_dim * bytes (MLA: latent dims * bytes). */
  readonly bytesPerTokenPerLayer: number;
  readonly dtype: 'float16' | 'bfloat16';
  /** Where the numbers come from. */
  readonly source: string;
}

/** Facts from each model's published config.json. */
export const PRESETS: Readonly<Record<string, ModelPreset>> = {
  'llama-3.1-8b': {
    name: 'llama-3.1-8b',
    modelId: 'meta-llama/Llama-3.1-8B',
    layout: 'KV_L2TD',
    layers: 32,
    bytesPerTokenPerLayer: 2 * 8 * 128 * 2,
    dtype: 'float16',
    source: 'config.json: num_hidden_layers 32, num_key_value_heads 8, head_dim 4096/32 = 128; fp16',
  },
  'llama-3.2-1b': {
    name: 'llama-3.2-1b',
    modelId: 'meta-llama/Llama-3.2-1B',
    layout: 'KV_L2TD',
    layers: 16,
    bytesPerTokenPerLayer: 2 * 8 * 64 * 2,
    dtype: 'bfloat16',
    source: 'config.json: num_hidden_layers 16, num_key_value_heads 8, head_dim 2048/32 = 64; bf16',
  },
  'qwen2.5-7b': {
    name: 'qwen2.5-7b',
    modelId: 'Qwen/Qwen2.5-7B',
    layout: 'KV_L2TD',
    layers: 28,
    bytesPerTokenPerLayer: 2 * 4 * 128 * 2,
    dtype: 'bfloat16',
    source: 'config.json: num_hidden_layers 28, num_key_value_heads 4, head_dim 3584/28 = 128; bf16',
  },
  'deepseek-v2-lite': {
    name: 'deepseek-v2-lite',
    modelId: 'deepseek-ai/DeepSeek-V2-Lite',
    layout: 'MLA',
    layers: 27,
    bytesPerTokenPerLayer: (512 + 64) * 2,
    dtype: 'bfloat16',
    source: 'config.json: num_hidden_layers 27, MLA latent kv_lora_rank 512 + qk_rope_head_dim 64; bf16',
  },
};

export function presetNamed(name: string): ModelPreset | undefined {
  return PRESETS[name.toLowerCase()];
}
