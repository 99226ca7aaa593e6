"""What each of LMCache's calls costs on the wire with the ObjectCache plugin (docs/engines.md's
"What LMCache's calls become"), counted from the gateway's own request metrics
(``objectcache_http_requests_total`` by operation and status) around each call of LMCache's own
engine, ordinary and layerwise. One backend: the counts do not depend on it."""
import time
from typing import Callable, Dict

import pytest
import torch
from stack import Stack
from test_lmcache import L, KV_HEADS, HEAD_DIM, engine_with_plugin
from test_lmcache_mp import delta
from test_vllm_obj_tier import requests_by

import harness

CHUNKS = 3
TOKENS = CHUNKS * 256


def settled(stack: Stack, before: Dict[str, float], done: Callable[[Dict[str, float]], bool] = lambda d: True, timeout: float = 60.0) -> Dict[str, float]:
    """The requests answered since ``before``, once ``done`` holds of them and they stopped
    growing (LMCache's remote puts finish in the background)."""
    deadline = time.monotonic() + timeout
    last: Dict[str, float] = {}
    while True:
        time.sleep(0.3)
        now = delta(requests_by(stack), before)
        if done(now) and now == last:
            return now
        assert time.monotonic() < deadline, f"requests did not settle: {now}"
        last = now


@pytest.mark.parametrize("stack", ["local"], indirect=True)
def test_what_each_lmcache_call_costs(stack: Stack, bucket: str) -> None:
    tokens = torch.arange(40000, 40000 + TOKENS)
    kv = torch.randn(2, L, TOKENS, KV_HEADS * HEAD_DIM, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    costs: Dict[str, Dict[str, float]] = {}

    before = requests_by(stack)
    writer = engine_with_plugin("cost-writer", stack, bucket, torch.bfloat16)
    try:
        costs["start"] = settled(stack, before)
        before = requests_by(stack)
        writer.store(tokens, kvcaches=kv)
        costs["store"] = settled(stack, before, lambda d: d.get("PutObject 200", 0) >= CHUNKS)
    finally:
        harness.destroy_engine("cost-writer")

    reader = engine_with_plugin("cost-reader", stack, bucket, torch.bfloat16)
    try:
        before = requests_by(stack)
        assert reader.lookup(tokens) == TOKENS
        costs["lookup"] = settled(stack, before)
        before = requests_by(stack)
        out = torch.zeros_like(kv)
        assert int(reader.retrieve(tokens, kvcaches=out).sum()) == TOKENS
        costs["retrieve"] = settled(stack, before)
        assert torch.equal(out, kv)
    finally:
        harness.destroy_engine("cost-reader")

    other = torch.arange(50000, 50000 + TOKENS)
    writer = engine_with_plugin("cost-lw-writer", stack, bucket, torch.bfloat16, use_layerwise=True)
    try:
        before = requests_by(stack)
        harness.store_layerwise(writer, other, kv)
        costs["store_layer"] = settled(stack, before, lambda d: d.get("PutObject 200", 0) >= CHUNKS)
    finally:
        harness.destroy_engine("cost-lw-writer")
    reader = engine_with_plugin("cost-lw-reader", stack, bucket, torch.bfloat16, use_layerwise=True)
    try:
        before = requests_by(stack)
        out = torch.zeros_like(kv)
        assert int(harness.retrieve_layerwise(reader, other, out).sum()) == TOKENS
        costs["retrieve_layer"] = settled(stack, before)
        assert torch.equal(out, kv)
    finally:
        harness.destroy_engine("cost-lw-reader")

    print("\nrequests per call (3 chunks of 256 tokens):", *(f"{call}: {cost}" for call, cost in costs.items()), sep="\n  ")
    # As docs/engines.md states them: the start-up key check is a listing of one key; a store one
    # PUT per chunk; engine.lookup ONE lookup; engine.retrieve a lookup of its own (LMCache asks
    # its backend again before it reads) and ONE descriptor GET; layerwise, LMCache asks about
    # each chunk on its own (a lookup per chunk, when storing too) and reads in ONE layerwise GET.
    assert costs["start"] == {"ListObjectsV2 200": 1}
    assert costs["store"] == {"PutObject 200": CHUNKS}
    assert costs["lookup"] == {"PrefixLookup 200": 1}
    assert costs["retrieve"] == {"PrefixLookup 200": 1, "ChunkwiseGet 200": 1}
    assert costs["store_layer"] == {"PrefixLookup 200": CHUNKS, "PutObject 200": CHUNKS}
    assert costs["retrieve_layer"] == {"PrefixLookup 200": CHUNKS, "LayerwiseGet 200": 1}
