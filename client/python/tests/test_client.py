"""The Python client against the real gateway and MinIO: byte-exact layers in the caller's
buffer, every transport and mode, per-layer callbacks in order, the stable error codes, early
exit, and the SlowDown retry."""
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, free_port, layer_major, start_stack, synthetic_chunk, uid

from objectcache import ObjectCacheClient, ObjectCacheError, chunk_keys
from objectcache.layouts import LAYER_CRC_META


_PROMPTS = itertools.count(1)


def seed(client: ObjectCacheClient, chunks: int, layers: int, layer_bytes: int, layout: str = "KV_L2TD", tokens: int = 16) -> Tuple[List[str], List[bytes]]:
    start = next(_PROMPTS) * 100_000
    prompt = list(range(start, start + chunks * tokens))
    keys = chunk_keys(prompt, "test/model", "bfloat16", tokens, layers, layer_bytes, layout)
    canonical = [synthetic_chunk(len(keys[0]), c, layers * layer_bytes) for c in range(chunks)]
    stored = [to_stored(c, layout, layers, layer_bytes) for c in canonical]
    client.put_chunks(keys, stored, layout=(layout, layers, layer_bytes))
    return keys, canonical


def to_stored(canonical: bytes, layout: str, layers: int, layer_bytes: int) -> bytes:
    if layout != "KV_2LTD":
        return canonical
    half = layer_bytes // 2
    k = b"".join(canonical[l * layer_bytes:l * layer_bytes + half] for l in range(layers))
    v = b"".join(canonical[l * layer_bytes + half:(l + 1) * layer_bytes] for l in range(layers))
    return k + v


def test_fetches_layer_by_layer_into_a_bytearray_byte_exact(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=6, layers=8, layer_bytes=4096)
    assert client.lookup(keys) == 6
    assert client.lookup(keys, layers=8, layer_bytes=4096) == 6
    assert client.lookup(keys, layers=8, layer_bytes=2048) == 0
    seen: List[int] = []
    expected = layer_major(chunks, 4096, 0, 8)
    views: List[bytes] = []
    result = client.fetch(ObjectCacheClient.descriptor(keys, layers=8, chunk_tokens=16, layer_bytes=4096), on_layer_ready=lambda l, v: (seen.append(l), views.append(bytes(v))))
    assert seen == list(range(8))
    assert bytes(result.target) == expected
    assert views[3] == expected[3 * 6 * 4096:4 * 6 * 4096]
    assert result.transport == "get"
    assert result.summary["mode"] == "layerwise" and result.summary["verified"] is True
    assert result.summary["bytes"] == 6 * 8 * 4096
    assert [l for l, _ in result.timeline] == list(range(8))


def test_numpy_target_with_a_layer_stride_and_kv_2ltd_chunks(client: ObjectCacheClient) -> None:
    layers, tokens, kv_heads, head_dim = 4, 16, 2, 8
    layer_bytes = 2 * tokens * kv_heads * head_dim * 2  # K and V, bfloat16
    keys, chunks = seed(client, chunks=3, layers=layers, layer_bytes=layer_bytes, layout="KV_2LTD", tokens=tokens)
    stride = 3 * layer_bytes + 512  # padded rows, as an engine's paged buffer might be
    target = np.full(layers * stride, 0xEE, dtype=np.uint8)
    result = client.fetch(ObjectCacheClient.descriptor(keys, layers=layers, chunk_tokens=tokens, layer_bytes=layer_bytes, layout="KV_2LTD"), target=target, layer_stride=stride)
    assert result.target is target
    for l in range(layers):
        row = target[l * stride:l * stride + 3 * layer_bytes].tobytes()
        assert row == layer_major(chunks, layer_bytes, l, l + 1)
        if l < layers - 1:
            assert (target[l * stride + 3 * layer_bytes:(l + 1) * stride] == 0xEE).all()


def test_chunkwise_and_a_layer_range(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=4, layers=6, layer_bytes=1024)
    base = ObjectCacheClient.descriptor(keys, layers=6, chunk_tokens=16, layer_bytes=1024)
    chunkwise = client.fetch({**base, "mode": "chunkwise"})
    assert chunkwise.summary["mode"] == "chunkwise"
    assert bytes(chunkwise.target) == layer_major(chunks, 1024, 0, 6)
    ranged = client.fetch({**base, "layerRange": [2, 5]})
    assert bytes(ranged.target) == layer_major(chunks, 1024, 2, 5)
    assert [l for l, _ in ranged.timeline] == [2, 3, 4]


def test_a_large_descriptor_goes_as_a_post_body(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=160, layers=2, layer_bytes=256)
    result = client.fetch(ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=256))
    assert result.transport == "post"
    assert bytes(result.target) == layer_major(chunks, 256, 0, 2)
    again = client.fetch(ObjectCacheClient.descriptor(keys[:3], layers=2, chunk_tokens=16, layer_bytes=256), transport="post")
    assert again.transport == "post" and bytes(again.target) == layer_major(chunks[:3], 256, 0, 2)


def test_the_iterator_yields_ready_layers_and_leaving_early_releases_the_stream(client: ObjectCacheClient, stack: Stack) -> None:
    keys, chunks = seed(client, chunks=4, layers=32, layer_bytes=256 * 1024)
    descriptor = ObjectCacheClient.descriptor(keys, layers=32, chunk_tokens=16, layer_bytes=256 * 1024, tenant="py-leaves-early")
    for layer, view in client.layers(descriptor):
        assert layer == 0 and bytes(view) == layer_major(chunks, 256 * 1024, 0, 1)
        break
    deadline = time.monotonic() + 10
    while stack.metric("objectcache_layerwise_active_requests") > 0:
        assert time.monotonic() < deadline, "the abandoned stream is still served"
        time.sleep(0.05)
    assert stack.metric('objectcache_delivered_bytes_total{tenant="py-leaves-early"}') < 4 * 32 * 256 * 1024
    layers = [l for l, _ in client.layers({**descriptor, "layerRange": [0, 2]})]
    assert layers == [0, 1]


def test_errors_carry_the_stable_codes(client: ObjectCacheClient) -> None:
    keys, _ = seed(client, chunks=2, layers=2, layer_bytes=512)
    descriptor = ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=512)
    with pytest.raises(ObjectCacheError) as missing:
        client.fetch({**descriptor, "keys": [keys[0], keys[1] + "-absent"]})
    assert missing.value.code.startswith("OC_ERR_") and missing.value.status == 404
    with pytest.raises(ObjectCacheError) as wrong_size:
        client.fetch({**descriptor, "layerBytes": 256})
    assert wrong_size.value.code == "OC_ERR_CHUNK_SIZE"
    with pytest.raises(ObjectCacheError) as invalid:
        client.fetch({**descriptor, "layers": 0}, transport="post")
    assert invalid.value.code.startswith("OC_ERR_DESCRIPTOR") and invalid.value.status == 400
    with pytest.raises(ObjectCacheError) as small:
        client.fetch(descriptor, target=bytearray(100))
    assert small.value.code == "OC_ERR_CLIENT_TARGET"
    with pytest.raises(ObjectCacheError) as readonly:
        client.fetch(descriptor, target=bytes(4096))
    assert readonly.value.code == "OC_ERR_CLIENT_USAGE"


def test_a_corrupt_chunk_ends_the_stream_with_its_code(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=2, layers=2, layer_bytes=512)
    # Overwrite chunk 1 with other bytes but the old checksums: the gateway must refuse to serve it.
    client._call("PUT", client._object_path(keys[1]), synthetic_chunk(99, 1, 1024), {f"x-amz-meta-{LAYER_CRC_META}": _crc_meta(chunks[1])})
    with pytest.raises(ObjectCacheError) as corrupt:
        client.fetch(ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=512))
    assert corrupt.value.code == "OC_ERR_CHUNK_CORRUPT"


def _crc_meta(canonical: bytes) -> str:
    from objectcache.layouts import encode_layer_crcs, layer_crcs

    return encode_layer_crcs(layer_crcs(canonical, 2, 512))


def test_a_busy_gateway_is_retried_after_retry_after() -> None:
    # One layerwise GET at a time, paced at 4 MB/s: the second request meets 503 SlowDown.
    busy = start_stack(["--max-layerwise-requests", "1", "--cap", "4MB/s", "--threshold", "0"])
    try:
        with ObjectCacheClient(busy.gateway_url, uid("busy"), (CLIENT_KEY, CLIENT_SECRET), retries=20) as client:
            client.ensure_bucket()
            keys, chunks = seed(client, chunks=4, layers=4, layer_bytes=256 * 1024)  # 4 MiB: about a second
            descriptor = ObjectCacheClient.descriptor(keys, layers=4, chunk_tokens=16, layer_bytes=256 * 1024)
            first_started = threading.Event()
            results: List[bytes] = []
            slow = threading.Thread(target=lambda: results.append(bytes(client.fetch(descriptor, on_layer_ready=lambda l, v: first_started.set()).target)))
            slow.start()
            assert first_started.wait(10)
            refused_before = busy.metric('objectcache_http_requests_total{operation="LayerwiseGet",status="503"}')
            second = client.fetch(descriptor)
            slow.join(30)
            assert busy.metric('objectcache_http_requests_total{operation="LayerwiseGet",status="503"}') > refused_before
            assert bytes(second.target) == layer_major(chunks, 256 * 1024, 0, 4) == results[0]
    finally:
        busy.stop()


def test_the_readme_example_loads_a_numpy_kv_buffer_with_overlap(stack: Stack) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import load_kv

    out = load_kv.main(stack.gateway_url, uid("example"), (CLIENT_KEY, CLIENT_SECRET))
    assert out["tokens"] == 32 * 64 and out["shape"] == (16, 32, 2, 64, 8, 64)
    assert out["summary"]["mode"] == "layerwise" and out["summary"]["verified"] is True
    # Layer 0 was computed on before the whole prefix had arrived.
    assert out["first_compute_s"] < out["last_layer_ready_s"]


def test_a_client_with_several_endpoints_moves_past_one_that_is_down(stack: Stack) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with ObjectCacheClient([down, stack.gateway_url], uid("failover"), (CLIENT_KEY, CLIENT_SECRET)) as client:
        client.ensure_bucket()
        keys, chunks = seed(client, chunks=2, layers=2, layer_bytes=1024)
        assert client.endpoint == stack.gateway_url
        assert bytes(client.fetch(ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=1024)).target) == layer_major(chunks, 1024, 0, 2)
    with ObjectCacheClient([down], uid("down"), (CLIENT_KEY, CLIENT_SECRET)) as alone:
        with pytest.raises(ObjectCacheError) as unreachable:
            alone.ensure_bucket()
        assert unreachable.value.code == "OC_ERR_BACKEND_UNAVAILABLE"
