"""Encoded chunks end to end (schemas/wire-format.md section 6): put_chunks(codec=...) stores each
layer's slice encoded, the gateway serves the segments in a version 2 stream, and the client decodes
each layer into the target before announcing it. Against the real gateway and MinIO."""

from typing import Dict, List, Tuple

import numpy as np
import pytest

from objectcache import ObjectCacheClient, ObjectCacheError
from objectcache.codecs import SliceShape, codec
from objectcache.keys import chunk_keys

L, T, H = 6, 16, 64
DTYPE = "bfloat16"
SHAPE = SliceShape(T, H, DTYPE)
S = SHAPE.nbytes


def kv_chunks(n: int, seed: int) -> List[bytes]:
    """Chunks of bf16 K/V that look like KV (a per-channel scale, smooth values): compressible planes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        scale = rng.uniform(0.1, 4.0, size=(1, 1, 1, H)).astype(np.float32)
        values = (rng.standard_normal((L, 2, T, H)).astype(np.float32) * scale).reshape(-1)
        bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)
        out.append(bf16.tobytes())
    return out


def store(client: ObjectCacheClient, name: str, n: int = 3, codec_name: str = "bplane-zstd", seed: int = 1) -> Tuple[List[str], List[bytes]]:
    keys = chunk_keys(list(range(n * T)), "enc-model", DTYPE, T, L, S, "KV_L2TD", namespace=name)
    chunks = kv_chunks(n, seed)
    client.put_chunks(keys, chunks, layout=("KV_L2TD", L, S), codec=codec_name, chunk_tokens=T, dtype=DTYPE)
    return keys, chunks


def layer_major(chunks: List[bytes], first: int = 0, end: int = L) -> bytes:
    return b"".join(chunk[l * S : (l + 1) * S] for l in range(first, end) for chunk in chunks)


@pytest.mark.parametrize("mode", ["layerwise", "chunkwise"])
def test_lossless_chunks_come_back_bit_exact_in_both_modes(client: ObjectCacheClient, mode: str) -> None:
    keys, chunks = store(client, f"lossless-{mode}")
    stored = sum(len(client.get_object(k)) for k in keys)
    assert stored < 0.95 * len(chunks) * L * S  # they were stored encoded, and smaller
    ready: List[int] = []
    result = client.fetch(client.descriptor(keys, layers=L, chunk_tokens=T, layer_bytes=S, mode=mode, codecs=["bplane-zstd"]), on_layer_ready=lambda l, _v: ready.append(l), dtype=DTYPE)
    assert bytes(result.target) == layer_major(chunks)
    assert ready == list(range(L))
    assert result.summary["codec"] == "bplane-zstd"
    assert result.summary["verified"] is True
    assert result.summary["bytes"] == stored + 4 * len(keys) * L


def test_int8_layers_are_the_codec_decoding_of_each_slice_and_a_layer_range_works(client: ObjectCacheClient) -> None:
    keys, chunks = store(client, "int8", codec_name="int8-kivi")
    kivi = codec("int8-kivi")
    expected = bytearray(len(keys) * 3 * S)
    view = memoryview(expected)
    for i, layer in enumerate(range(2, 5)):
        for c, chunk in enumerate(chunks):
            at = (i * len(keys) + c) * S
            kivi.decode(kivi.encode(chunk[layer * S : (layer + 1) * S], SHAPE), SHAPE, view[at : at + S])
    seen: Dict[int, bytes] = {}
    # Each layer is decoded before it is announced: its view holds the decoded values then.
    result = client.fetch(
        client.descriptor(keys, layers=L, chunk_tokens=T, layer_bytes=S, mode="layerwise", codecs=["int8-kivi"], layerRange=[2, 5]),
        on_layer_ready=lambda l, v: seen.__setitem__(l, bytes(v)),
        dtype=DTYPE,
    )
    assert bytes(result.target) == bytes(expected)
    assert [seen[l] for l in (2, 3, 4)] == [bytes(expected[i * len(keys) * S : (i + 1) * len(keys) * S]) for i in range(3)]
    assert len(client.get_object(keys[0])) == L * kivi.encoded_bytes(SHAPE)  # type: ignore[attr-defined]


def test_fetch_into_places_decoded_halves_where_the_caller_wants_them(client: ObjectCacheClient) -> None:
    keys, chunks = store(client, "place")
    # Each chunk's own buffer in KV_2LTD: K of layer l at l*S/2, V at (L + l)*S/2.
    buffers = [bytearray(L * S) for _ in keys]

    def place(layer: int, chunk: int) -> List[memoryview]:
        b = memoryview(buffers[chunk])
        half = S // 2
        return [b[layer * half : (layer + 1) * half], b[(L + layer) * half : (L + layer + 1) * half]]

    client.fetch_into(client.descriptor(keys, layers=L, chunk_tokens=T, layer_bytes=S, mode="layerwise", codecs=["bplane-lz4", "bplane-zstd"]), place, dtype=DTYPE)
    for buffer, chunk in zip(buffers, chunks):
        ks = b"".join(chunk[l * S : l * S + S // 2] for l in range(L))
        vs = b"".join(chunk[l * S + S // 2 : (l + 1) * S] for l in range(L))
        assert bytes(buffer) == ks + vs


def test_a_kv_2ltd_chunk_is_encoded_from_its_delivered_form(client: ObjectCacheClient) -> None:
    chunk = kv_chunks(1, 9)[0]
    half = S // 2
    stored = b"".join(chunk[l * S : l * S + half] for l in range(L)) + b"".join(chunk[l * S + half : (l + 1) * S] for l in range(L))
    client.put_chunk("split/c0", stored, layout=("KV_2LTD", L, S), codec="bplane-zstd", chunk_tokens=T, dtype=DTYPE)
    result = client.fetch(client.descriptor(["split/c0"], layers=L, chunk_tokens=T, layer_bytes=S, codecs=["bplane-zstd"]), dtype=DTYPE)
    assert bytes(result.target) == chunk


def test_raw_chunks_through_codecs_none_and_the_refusals(client: ObjectCacheClient) -> None:
    raw_keys = ["raw/c0", "raw/c1"]
    raw = kv_chunks(2, 3)
    client.put_chunks(raw_keys, raw, layout=("KV_L2TD", L, S))
    # A descriptor that may get an encoding needs the dtype up front, whatever the gateway then sends.
    result = client.fetch(client.descriptor(raw_keys, layers=L, chunk_tokens=T, layer_bytes=S, codecs=["bplane-zstd", "none"]), dtype=DTYPE)
    assert bytes(client.fetch(client.descriptor(raw_keys, layers=L, chunk_tokens=T, layer_bytes=S, codecs=["none"])).target) == layer_major(raw)
    assert bytes(result.target) == layer_major(raw)
    assert result.summary["codec"] == "none"

    keys, _ = store(client, "refused")
    with pytest.raises(ObjectCacheError) as raw_ask:
        client.fetch(client.descriptor(keys, layers=L, chunk_tokens=T, layer_bytes=S))
    assert raw_ask.value.code == "OC_ERR_CODEC_UNACCEPTED"
    with pytest.raises(ObjectCacheError) as other:
        client.fetch(client.descriptor(keys, layers=L, chunk_tokens=T, layer_bytes=S, codecs=["int8-kivi"]), dtype=DTYPE)
    assert other.value.code == "OC_ERR_CODEC_UNACCEPTED"
    with pytest.raises(ObjectCacheError) as mixed:
        client.fetch(client.descriptor([raw_keys[0], keys[1]], layers=L, chunk_tokens=T, layer_bytes=S, codecs=["bplane-zstd", "none"]), dtype=DTYPE)
    assert mixed.value.code == "OC_ERR_CODEC_MIXED"
    with pytest.raises(ObjectCacheError) as no_dtype:
        client.fetch(client.descriptor(keys, layers=L, chunk_tokens=T, layer_bytes=S, codecs=["bplane-zstd"]))
    assert no_dtype.value.code == "OC_ERR_CLIENT_USAGE"
    with pytest.raises(ObjectCacheError) as split:
        client.fetch(client.descriptor(keys, layers=L, chunk_tokens=T, layer_bytes=S, layout="KV_2LTD", codecs=["bplane-zstd"]), dtype=DTYPE)
    assert split.value.code == "OC_ERR_DESCRIPTOR_INVALID"


def test_lookup_counts_encoded_chunks_of_an_accepted_codec(client: ObjectCacheClient) -> None:
    keys, _ = store(client, "lookup")
    assert client.lookup(keys + ["lookup/absent"], layers=L, layer_bytes=S, codecs=["bplane-zstd"]) == 3
    assert client.lookup(keys, layers=L, layer_bytes=S) == 0
    assert client.lookup(keys, layers=L, layer_bytes=S, codecs=["int8-kivi"]) == 0


def test_put_refuses_what_it_cannot_encode(client: ObjectCacheClient) -> None:
    chunk = kv_chunks(1, 4)[0]
    with pytest.raises(ObjectCacheError) as missing:
        client.put_chunk("bad/c0", chunk, codec="bplane-zstd")
    assert missing.value.code == "OC_ERR_CLIENT_USAGE"
    with pytest.raises(ObjectCacheError) as unknown:
        client.put_chunk("bad/c0", chunk, layout=("KV_L2TD", L, S), codec="nope", chunk_tokens=T, dtype=DTYPE)
    assert unknown.value.code == "OC_ERR_CLIENT_USAGE"
    with pytest.raises(ObjectCacheError) as shape:
        client.put_chunk("bad/c0", chunk, layout=("KV_L2TD", L, S), codec="bplane-zstd", chunk_tokens=T + 1, dtype=DTYPE)
    assert shape.value.code == "OC_ERR_CLIENT_USAGE"
    assert client.list_keys("bad/") == []


def test_a_version_2_frame_whose_length_no_segments_can_have_is_refused_before_any_allocation() -> None:
    import io
    import struct

    from objectcache.stream import HEADER, Geometry, SegmentDecoder, read_frames

    body = b"OCKV" + struct.pack("<HH", 2, 0) + HEADER.pack(1, 0, 0, 0, 1 << 50, 0, 0)
    geometry = Geometry(0, 1, 2, 16, memoryview(bytearray(32)), 32)
    with pytest.raises(ObjectCacheError) as huge:
        list(read_frames(io.BytesIO(body), geometry, SegmentDecoder(None, None, 16)))
    assert huge.value.code == "OC_ERR_CLIENT_PROTOCOL"
    # A version 1 reader refuses a version 2 stream, and the other way round.
    with pytest.raises(ObjectCacheError) as v1:
        list(read_frames(io.BytesIO(body), geometry))
    assert v1.value.code == "OC_ERR_CLIENT_PROTOCOL"
