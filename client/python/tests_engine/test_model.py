"""A real model end to end, on both backends: SmolLM2-135M prefills a prompt, its KV is stored
through the gateway, and a second prompt that shares the prefix looks it up and loads it layer by
layer (one layerwise GET feeding each decoder layer's pre-hook as its frame lands) before its
suffix runs. The logits must equal those of the same computation with the cache already in memory
bit for bit, and those of a full prefill within 1e-4 (they are exact here in fp32); greedy
generation must give the same tokens."""
from typing import Any, Tuple

import pytest
import torch
from harness import greedy
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, uid

from objectcache import ObjectCacheClient, ObjectCacheError, chunk_keys
from objectcache.hf_cache import KVLayout, LayerwiseLoad, chunks_from_cache, load_cache

PREFIX_TOKENS = 512
SUFFIX_TOKENS = 64
FULL_PREFILL_TOLERANCE = 1e-4

TEXT = (
    "Object storage keeps the key-value caches of shared prompt prefixes cheaply, but a model "
    "consumes them layer by layer, so a gateway that streams each layer as it is read lets the "
    "first layers compute while the later ones are still on the wire. "
)


def prompts(tokenizer: Any) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A 512-token shared prefix and two different suffixes (real text, tokenised)."""
    ids = tokenizer(TEXT * 40, return_tensors="pt").input_ids[0]
    assert len(ids) >= PREFIX_TOKENS + 2 * SUFFIX_TOKENS
    prefix = ids[:PREFIX_TOKENS].unsqueeze(0)
    return prefix, ids[PREFIX_TOKENS:PREFIX_TOKENS + SUFFIX_TOKENS].unsqueeze(0), ids[-SUFFIX_TOKENS:].unsqueeze(0)


@pytest.fixture()
def client(stack: Stack) -> Any:
    with ObjectCacheClient(stack.gateway_url, uid("model"), (CLIENT_KEY, CLIENT_SECRET)) as c:
        c.ensure_bucket()
        yield c


def test_a_prefix_loaded_layer_by_layer_gives_the_same_logits_and_tokens(model: Any, tokenizer: Any, client: ObjectCacheClient, stack: Stack) -> None:
    layout = KVLayout.of(model)
    assert (layout.layers, layout.kv_heads, layout.head_dim) == (30, 3, 64)
    prefix, first_suffix, suffix = prompts(tokenizer)
    with torch.no_grad():
        # The first request: prefill, then store the prefix's chunks through the gateway.
        first = model(input_ids=torch.cat([prefix, first_suffix], 1), use_cache=True)
        chunks = chunks_from_cache(first.past_key_values, layout, PREFIX_TOKENS)
        assert len(chunks) == 2 and chunks[0].shape == (2, 30, 256, 192)
        keys = chunk_keys(prefix[0].tolist(), "smollm2-135m", layout.dtype_name, 256, layout.layers, layout.layer_bytes, "KV_2LTD")
        client.put_chunks(keys, [c.view(torch.uint8).numpy() for c in chunks], layout=("KV_2LTD", layout.layers, layout.layer_bytes))

        # The second request shares the prefix: one lookup round trip finds both chunks.
        second_keys = chunk_keys(torch.cat([prefix, suffix], 1)[0].tolist(), "smollm2-135m", layout.dtype_name, 256, layout.layers, layout.layer_bytes, "KV_2LTD")
        assert second_keys[:2] == keys
        assert client.lookup(second_keys, layers=layout.layers, layer_bytes=layout.layer_bytes) == 2

        reads_before = stack.metric("objectcache_backend_reads_total")
        with LayerwiseLoad(client, model, layout, keys) as load:
            layerwise = model(input_ids=suffix, past_key_values=load.cache)
        assert load.result is not None and load.result.summary["mode"] == "layerwise"
        assert load.result.summary["verified"] is True  # every slice matched its stored CRC-32C
        assert [layer for layer, _ in load.result.timeline] == list(range(30))
        assert stack.metric("objectcache_backend_reads_total") > reads_before

        in_memory_cache = load_cache(client, model, layout, keys)
        in_memory = model(input_ids=suffix, past_key_values=in_memory_cache)
        full = model(input_ids=torch.cat([prefix, suffix], 1), use_cache=True)

    assert torch.equal(layerwise.logits, in_memory.logits)
    assert (layerwise.logits - full.logits[:, PREFIX_TOKENS:]).abs().max().item() <= FULL_PREFILL_TOLERANCE
    steps = 16
    assert greedy(model, layerwise.logits, load.cache, steps) == greedy(model, full.logits, full.past_key_values, steps)


def test_a_missing_chunk_is_found_by_the_lookup_and_refused_by_the_load(model: Any, client: ObjectCacheClient) -> None:
    layout = KVLayout.of(model)
    data = [torch.randn(2, 30, 256, 192).view(torch.uint8).numpy() for _ in range(3)]
    keys = [f"kv/missing/{i}" for i in range(3)]
    client.put_chunks(keys, data, layout=("KV_2LTD", layout.layers, layout.layer_bytes))
    client.delete(keys[1])
    assert client.lookup(keys, layers=layout.layers, layer_bytes=layout.layer_bytes) == 1
    with pytest.raises(ObjectCacheError) as missing:
        with LayerwiseLoad(client, model, layout, keys) as load:
            model(input_ids=torch.tensor([[1, 2, 3]]), past_key_values=load.cache)
    assert missing.value.code == "OC_ERR_CHUNK_MISSING"
