"""The per-layer KV codecs on the real model's KV: SmolLM2-135M prefills a 1,536-token prefix, its KV
(bfloat16, cut into chunks of 256 tokens) is encoded slice by slice with each codec, decoded, and
reused for a 256-token suffix. Lossless codecs must give back every bit (and so the same logits);
int8-kivi must stay close to exact reuse on the same text (mean KL, top-1 agreement, NLL, greedy
tokens). The measured figures are printed (``-s``) for docs/benchmarks.md. Then the same KV through
LMCache with the plugin's ``codec`` setting, on both backends: stored encoded, retrieved (whole
and layer by layer) exactly as the codec decodes it locally."""
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
import torch
import harness
from harness import greedy
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, uid

from objectcache import ObjectCacheClient

from objectcache.codecs import SliceShape, codec
from objectcache.hf_cache import KVLayout, cache_from_kv, kv_from_cache

PREFIX_TOKENS = 1536
SUFFIX_TOKENS = 256
CHUNK_TOKENS = 256
#: int8-kivi's bounds on this text. Measured: mean KL 7.3e-5, top-1 99.2% (254 of 256 tokens). The
#: top-1 bound is a token's width below 99% (the issue's target), so that a near-tie flipped by
#: another BLAS build does not fail the suite; docs/benchmarks.md reports the measured figure.
INT8_MAX_MEAN_KL = 1e-3
INT8_MIN_TOP1 = 0.98

#: A fixed text that does not repeat (the opening of this repository's docs/architecture.md, frozen
#: here so the figures do not move when that document does).
TEXT_FILE = Path(__file__).parent / "data" / "reuse-text.md"


def encode_decode(kv: torch.Tensor, name: str) -> Tuple[torch.Tensor, int, int]:
    """Every (chunk, layer) slice of a bfloat16 KV_2LTD tensor ``[2, L, T, H]`` through the codec:
    the decoded tensor, the encoded bytes and the raw bytes."""
    c = codec(name)
    _, layers, tokens, hidden = kv.shape
    shape = SliceShape(CHUNK_TOKENS, hidden, "bfloat16")
    out = torch.empty_like(kv)
    encoded = 0
    for start in range(0, tokens, CHUNK_TOKENS):
        for layer in range(layers):
            piece = kv[:, layer, start:start + CHUNK_TOKENS].contiguous()  # [K|V, tokens, hidden]: one slice
            data = c.encode(piece.view(torch.uint16).numpy(), shape)
            encoded += len(data)
            target = torch.empty_like(piece)
            c.decode(data, shape, memoryview(target.view(torch.uint16).numpy()).cast("B"))
            out[:, layer, start:start + CHUNK_TOKENS] = target
    return out, encoded, kv.numel() * kv.element_size()


def suffix_logits(model: Any, layout: KVLayout, kv: torch.Tensor, suffix: torch.Tensor) -> Tuple[torch.Tensor, Any]:
    cache = cache_from_kv(kv, layout, torch.float32)
    with torch.no_grad():
        return model(input_ids=suffix, past_key_values=cache).logits, cache


@pytest.fixture(scope="module")
def reuse(model: Any, tokenizer: Any) -> Dict[str, Any]:
    ids = tokenizer(TEXT_FILE.read_text(encoding="utf-8"), return_tensors="pt").input_ids[0]
    assert len(ids) >= PREFIX_TOKENS + SUFFIX_TOKENS
    prefix, suffix = ids[:PREFIX_TOKENS].unsqueeze(0), ids[PREFIX_TOKENS:PREFIX_TOKENS + SUFFIX_TOKENS].unsqueeze(0)
    layout = KVLayout.of(model)
    with torch.no_grad():
        first = model(input_ids=prefix, use_cache=True)
    # The KV as an engine would store it in bfloat16 (the model computes in float32 here).
    kv = kv_from_cache(first.past_key_values, layout, PREFIX_TOKENS).to(torch.bfloat16).contiguous()
    logits, cache = suffix_logits(model, layout, kv, suffix)
    return {"layout": layout, "kv": kv, "tokens": prefix[0], "suffix": suffix, "logits": logits, "greedy": greedy(model, logits, cache, 20)}


def compare(model: Any, reuse: Dict[str, Any], decoded: torch.Tensor) -> Dict[str, float]:
    logits, cache = suffix_logits(model, reuse["layout"], decoded, reuse["suffix"])
    exact = reuse["logits"]
    p_exact = torch.log_softmax(exact[0].double(), -1)
    p = torch.log_softmax(logits[0].double(), -1)
    targets = reuse["suffix"][0, 1:]
    nll = lambda lp: float(-lp[:-1].gather(1, targets.unsqueeze(1)).mean())  # noqa: E731
    tokens = greedy(model, logits, cache, 20)
    agree = next((i for i, (a, b) in enumerate(zip(tokens, reuse["greedy"])) if a != b), len(tokens))
    kv = reuse["kv"].float()
    return {
        "kv_rel_error": float((decoded.float() - kv).norm() / kv.norm()),
        "logit_max_diff": float((logits - exact).abs().max()),
        "mean_kl": float((p_exact.exp() * (p_exact - p)).sum(-1).mean()),
        "top1": float((logits[0].argmax(-1) == exact[0].argmax(-1)).double().mean()),
        "nll": nll(p),
        "nll_exact": nll(p_exact),
        "greedy_agree": float(agree),
    }


@pytest.mark.parametrize("name", ["bplane-zstd", "bplane-lz4"])
def test_lossless_codecs_give_back_the_real_kv_bit_for_bit(model: Any, reuse: Dict[str, Any], name: str) -> None:
    decoded, encoded, raw = encode_decode(reuse["kv"], name)
    print(f"\n{name}: {raw / encoded:.3f}x smaller than bfloat16 ({raw} -> {encoded} bytes)")
    assert torch.equal(decoded.view(torch.uint16), reuse["kv"].view(torch.uint16))
    logits, _ = suffix_logits(model, reuse["layout"], decoded, reuse["suffix"])
    assert torch.equal(logits, reuse["logits"])
    if name == "bplane-zstd":
        assert raw / encoded >= 1.4


def test_int8_kivi_stays_close_to_exact_reuse(model: Any, reuse: Dict[str, Any]) -> None:
    decoded, encoded, raw = encode_decode(reuse["kv"], "int8-kivi")
    m = compare(model, reuse, decoded)
    print(
        f"\nint8-kivi: {raw / encoded:.3f}x smaller than bfloat16; KV relative error {m['kv_rel_error']:.2e}; "
        f"logit max diff {m['logit_max_diff']:.3f}; mean KL {m['mean_kl']:.2e}; top-1 {100 * m['top1']:.1f}%; "
        f"suffix NLL {m['nll']:.4f} (exact {m['nll_exact']:.4f}); greedy tokens identical for {int(m['greedy_agree'])} of 20"
    )
    assert raw / encoded >= 1.9
    assert m["mean_kl"] <= INT8_MAX_MEAN_KL
    assert m["top1"] >= INT8_MIN_TOP1
    assert abs(m["nll"] - m["nll_exact"]) <= 0.05


@pytest.mark.parametrize("name", ["bplane-zstd", "int8-kivi"])
def test_lmcache_with_a_codec_stores_encoded_chunks_and_reads_them_back_decoded(reuse: Dict[str, Any], stack: Stack, name: str) -> None:
    kv, tokens = reuse["kv"], reuse["tokens"]
    layers, hidden = kv.shape[1], kv.shape[3]
    bucket = uid("lmc-codec").replace("_", "-")
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        c.ensure_bucket()
    config = harness.plugin_config(stack.gateway_url, bucket, CLIENT_KEY, CLIENT_SECRET, codec=name)
    engine = lambda label, **more: harness.lmcache_engine(label, layers=layers, kv_heads=3, head_dim=hidden // 3, dtype=torch.bfloat16, **more, **config)  # noqa: E731
    writer = engine(f"codec-writer-{name}")
    try:
        harness.store_and_wait(writer, tokens, kv, PREFIX_TOKENS)
    finally:
        harness.destroy_engine(f"codec-writer-{name}")
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        stored = sum(len(c.get_object(key)) for key in c.list_keys())
    raw = kv.numel() * kv.element_size()
    assert raw / stored >= (1.4 if name == "bplane-zstd" else 1.9)  # stored encoded

    expected, _, _ = encode_decode(kv, name)
    reader = engine(f"codec-reader-{name}")
    try:
        out = torch.zeros_like(kv)
        assert int(reader.retrieve(tokens, kvcaches=out).sum()) == PREFIX_TOKENS
        assert torch.equal(out.view(torch.uint16), expected.view(torch.uint16))
    finally:
        harness.destroy_engine(f"codec-reader-{name}")
    layerwise = engine(f"codec-layerwise-{name}", use_layerwise=True)
    try:
        out = torch.zeros_like(kv)
        assert int(harness.retrieve_layerwise(layerwise, tokens, out).sum()) == PREFIX_TOKENS
        assert torch.equal(out.view(torch.uint16), expected.view(torch.uint16))
    finally:
        harness.destroy_engine(f"codec-layerwise-{name}")
