"""Per-layer KV codecs (objectcache.codecs): lossless ones give back every bit, int8-kivi stays
within half a quantisation step of every value, and bad input is refused with a stable code."""

from __future__ import annotations

import numpy as np
import pytest

from objectcache import ObjectCacheError
from objectcache.codecs import DTYPES, Int8Kivi, SliceShape, codec, register

SHAPES = [SliceShape(256, 192, "bfloat16"), SliceShape(64, 128, "float16"), SliceShape(17, 24, "float32")]


def kv_like(shape: SliceShape, seed: int = 0) -> bytes:
    """Values shaped like real KV: most small, a few channels (K) and tokens (V) much larger."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0, 1, (2, shape.tokens, shape.hidden)).astype(np.float32)
    values[0, :, :: max(1, shape.hidden // 8)] *= 20  # K outlier channels
    values[1, :: max(1, shape.tokens // 8), :] *= 10  # V outlier tokens
    if shape.dtype == "bfloat16":
        return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return values.astype(DTYPES[shape.dtype]).tobytes()


def as_float(data: bytes, shape: SliceShape) -> np.ndarray:
    raw = np.frombuffer(data, dtype=DTYPES[shape.dtype])
    return (raw.astype(np.uint32) << 16).view(np.float32) if shape.dtype == "bfloat16" else raw.astype(np.float32)


@pytest.mark.parametrize("name", ["none", "bplane-zstd", "bplane-lz4"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.dtype)
def test_lossless_codecs_give_back_every_bit(name: str, shape: SliceShape) -> None:
    data = kv_like(shape)
    c = codec(name)
    encoded = c.encode(data, shape)
    out = bytearray(shape.nbytes)
    c.decode(encoded, shape, memoryview(out))
    assert bytes(out) == data and c.lossless
    if name != "none" and shape.dtype == "bfloat16":
        assert len(encoded) < len(data)  # the high byte plane compresses


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.dtype)
def test_int8_kivi_is_within_half_a_step_per_channel_and_token(shape: SliceShape) -> None:
    data = kv_like(shape, seed=1)
    c = codec("int8-kivi")
    encoded = c.encode(data, shape)
    assert len(encoded) == Int8Kivi.encoded_bytes(shape)
    out = bytearray(shape.nbytes)
    c.decode(encoded, shape, memoryview(out))
    x = as_float(data, shape).reshape(2, shape.tokens, shape.hidden)
    y = as_float(bytes(out), shape).reshape(2, shape.tokens, shape.hidden)
    k_step = (x[0].max(axis=0) - x[0].min(axis=0)) / 255
    v_step = (x[1].max(axis=1) - x[1].min(axis=1)) / 255
    # Half a step, plus the output dtype's own rounding (bfloat16 keeps 8 bits of mantissa).
    slack = np.abs(x) * (2.0**-8 if shape.dtype == "bfloat16" else 2.0**-10) + 1e-5
    assert np.all(np.abs(y[0] - x[0]) <= k_step[None, :] / 2 * 1.001 + slack[0])
    assert np.all(np.abs(y[1] - x[1]) <= v_step[:, None] / 2 * 1.001 + slack[1])
    if shape.dtype == "bfloat16" and shape.tokens >= 64:
        assert shape.nbytes / len(encoded) >= 1.9


def test_wrong_sizes_corrupt_input_and_unknown_names_are_refused() -> None:
    shape = SHAPES[0]
    with pytest.raises(ObjectCacheError) as short:
        codec("bplane-zstd").encode(b"\0" * 10, shape)
    assert short.value.code == "OC_ERR_CLIENT_USAGE"
    with pytest.raises(ObjectCacheError) as small:
        codec("none").decode(b"\0" * shape.nbytes, shape, memoryview(bytearray(10)))
    assert small.value.code == "OC_ERR_CLIENT_TARGET"
    for name in ("bplane-zstd", "bplane-lz4", "int8-kivi"):
        with pytest.raises(ObjectCacheError) as corrupt:
            codec(name).decode(b"not a slice", shape, memoryview(bytearray(shape.nbytes)))
        assert corrupt.value.code == "OC_ERR_CLIENT_PROTOCOL", name
    with pytest.raises(ObjectCacheError) as unknown:
        codec("video")
    assert unknown.value.code == "OC_ERR_CLIENT_USAGE" and "int8-kivi" in unknown.value.message
    with pytest.raises(ObjectCacheError):
        register("none", lambda: codec("none"))
    with pytest.raises(ObjectCacheError):
        SliceShape(4, 4, "int4")
    with pytest.raises(ObjectCacheError):
        SliceShape(0, 4, "bfloat16")


def test_int8_refuses_values_it_cannot_quantise_and_decoding_needs_a_writable_buffer() -> None:
    shape = SliceShape(8, 4, "float32")
    values = np.ones((2, 8, 4), dtype=np.float32)
    for bad in (np.nan, np.inf):
        values[0, 3, 1] = bad
        with pytest.raises(ObjectCacheError) as refused:
            codec("int8-kivi").encode(values.tobytes(), shape)
        assert refused.value.code == "OC_ERR_CLIENT_USAGE"
    # Extremes whose range overflows float32 are refused too, and large finite ones come back finite.
    values[0, 3, 1], values[0, 4, 1] = 3e38, -3e38
    with pytest.raises(ObjectCacheError):
        codec("int8-kivi").encode(values.tobytes(), shape)
    values[0, 3, 1], values[0, 4, 1] = 1e38, -1e38
    out = bytearray(shape.nbytes)
    codec("int8-kivi").decode(codec("int8-kivi").encode(values.tobytes(), shape), shape, memoryview(out))
    assert np.isfinite(np.frombuffer(bytes(out), dtype=np.float32)).all()
    with pytest.raises(ObjectCacheError) as readonly:
        codec("none").decode(values.tobytes(), shape, memoryview(values.tobytes()))
    assert readonly.value.code == "OC_ERR_CLIENT_TARGET"


def test_codecs_can_be_shared_by_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    shape = SliceShape(128, 64, "bfloat16")
    slices = [kv_like(shape, seed) for seed in range(16)]
    c = codec("bplane-zstd")

    def round_trip(data: bytes) -> bool:
        out = bytearray(shape.nbytes)
        c.decode(c.encode(data, shape), shape, memoryview(out))
        return bytes(out) == data

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(round_trip, slices * 4))


def test_bfloat16_rounding_of_finite_values_is_round_to_nearest_even_at_the_extremes() -> None:
    import numpy as np

    from objectcache.codecs import SliceShape, _store_values

    shape = SliceShape(2, 4, "bfloat16")
    f32 = np.finfo(np.float32)
    values = np.array([0.0, -0.0, 1.0, -1.0, f32.max, -f32.max, f32.tiny, 1e-45, 1.00390625, 1.01171875, 3.14159, -2.71828, 65504.0, 1e38, -1e-38, 0.5], dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    expected = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # the reference, in 64 bits
    target = np.zeros(shape.nbytes, dtype=np.uint8)
    _store_values(values.copy(), shape, target)
    assert target.view(np.uint16).tolist() == expected.tolist()
