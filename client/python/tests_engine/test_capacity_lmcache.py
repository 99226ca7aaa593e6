"""A budgeted bucket behind LMCache's engine and the ObjectCache plugin, on both backends: writes
past the budget keep the prefix the engines read and trim the coldest one from its tail; after
the eviction LMCache's lookup reports the shorter prefix and its retrieve is a partial hit,
bit-identical for what is left (docs/capacity.md)."""
import json
import time
import urllib.request
from typing import Any, Iterator, Tuple

import pytest
import torch
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, stack_with_bucket, uid

import harness

L, KV_HEADS, HEAD_DIM, CHUNK_TOKENS = 30, 3, 64, 256
CHUNK_BYTES = 2 * L * CHUNK_TOKENS * KV_HEADS * HEAD_DIM * 2  # bf16
BUDGET_CHUNKS = 11  # trimmed from 95% (10.45 chunks) to 85% (9.35)


@pytest.fixture(params=["local", "s3"])
def budgeted(request: pytest.FixtureRequest) -> Iterator[Tuple[Stack, str]]:
    bucket = uid("cap").replace("_", "-")
    with stack_with_bucket(bucket, ["--budget", f"{bucket}={BUDGET_CHUNKS * CHUNK_BYTES}", "--capacity-state-bucket", f"{bucket}-state", "--capacity-sync-ms", "100", "--capacity-lease-ms", "1000", "--budget-high-percent", "95", "--budget-low-percent", "85"], backend=request.param) as stack:
        yield stack, bucket


def engine(name: str, stack: Stack, bucket: str) -> Any:
    return harness.lmcache_engine(name, layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.bfloat16, **harness.plugin_config(stack.gateway_url, bucket, CLIENT_KEY, CLIENT_SECRET))


def capacity(stack: Stack) -> Any:
    return json.loads(urllib.request.urlopen(f"{stack.admin_url}/capacity", timeout=10).read())


def test_the_budget_keeps_the_hot_prefix_and_trims_the_cold_one_from_its_tail(budgeted: Tuple[Stack, str]) -> None:
    stack, bucket = budgeted
    generator = torch.Generator().manual_seed(33)
    # 4 + 4 + 3 chunks: the last chunk stored is the one that takes the bucket past its high mark
    # (11 chunks), so the trim starts once every write is in. (With a fourth chunk after it, the
    # trim could run before that chunk landed and stop at 9, leaving 10 after it: between the marks,
    # where nothing trims again.)
    sizes = (4, 4, 3)
    prefixes = [torch.arange(base, base + n * CHUNK_TOKENS) for base, n in zip((10_000, 20_000, 30_000), sizes)]
    kvs = [torch.randn(2, L, n * CHUNK_TOKENS, KV_HEADS * HEAD_DIM, generator=generator).to(torch.bfloat16) for n in sizes]
    full = 4 * CHUNK_TOKENS
    writer = engine("capacity-writer", stack, bucket)
    try:
        harness.store_and_wait(writer, prefixes[0], kvs[0], full)
        time.sleep(0.01)
        harness.store_and_wait(writer, prefixes[1], kvs[1], full)
        time.sleep(0.01)
        # Another engine reads the first prefix (one descriptor GET): now it is the hot one.
        reader = engine("capacity-reader", stack, bucket)
        try:
            out = torch.zeros_like(kvs[0])
            assert int(reader.retrieve(prefixes[0], kvcaches=out).sum()) == full
        finally:
            harness.destroy_engine("capacity-reader")
        time.sleep(0.01)
        harness.store_and_wait(writer, prefixes[2], kvs[2], 3 * CHUNK_TOKENS)  # 11 chunks: past the high mark
    finally:
        harness.destroy_engine("capacity-writer")

    deadline = time.monotonic() + 30
    while capacity(stack)["buckets"][0]["bytes"] > 0.85 * BUDGET_CHUNKS * CHUNK_BYTES:
        assert time.monotonic() < deadline, capacity(stack)
        time.sleep(0.05)
    fresh = engine("capacity-fresh", stack, bucket)
    try:
        assert fresh.lookup(prefixes[0]) == full  # read: kept
        assert fresh.lookup(prefixes[2]) == 3 * CHUNK_TOKENS  # newest: kept
        left = 2 * CHUNK_TOKENS
        assert fresh.lookup(prefixes[1]) == left  # the cold one lost its last two chunks (11 down to 9)
        # A partial hit: the chunks left are loaded, bit-identical; LMCache recomputes the rest.
        out = torch.zeros_like(kvs[1])
        mask = fresh.retrieve(prefixes[1], kvcaches=out)
        assert int(mask.sum()) == left and bool(mask[:left].all())
        assert torch.equal(out[:, :, :left], kvs[1][:, :, :left])
    finally:
        harness.destroy_engine("capacity-fresh")
    assert stack.metric("objectcache_evictions_total") == 2
