"""KV codecs: one layer slice of one chunk encoded on its own, so that a compressed chunk can still
be read and decoded layer by layer.

A slice is what the gateway serves for one layer of one chunk, in KV_L2TD form: the K half, then
the V half, each ``tokens x hidden`` values of ``dtype`` (``hidden`` = KV heads x head dim).
``encode`` turns it into bytes; ``decode`` writes the slice back, in its dtype, into a buffer the
caller owns. Codecs are looked up by name (``codec("bplane-zstd")``); ``register`` adds one.

- ``none``: the bytes as they are.
- ``bplane-zstd`` / ``bplane-lz4`` (lossless): the bytes of each value split into planes (all
  high bytes, then the next, ...), then compressed. The high bytes of floats (sign, exponent, top
  of the mantissa) repeat far more than the low ones, so planes compress better than the raw
  interleaved bytes.
- ``int8-kivi`` (lossy): each value quantised to 8 bits, K per channel and V per token (as KIVI
  does: K's outliers sit in a few channels, V's in a few tokens), with a float32 minimum and step
  per channel or token stored ahead of the values.

These need the ``codecs`` extra (``zstandard``, ``lz4``) for the compressors and NumPy.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Protocol, Tuple

import numpy as np

from ._contract import CODEC_NAME_PATTERN, RAW_CODEC
from ._contract import MAX_ENCODED_LAYERS as MAX_ENCODED_LAYERS
from .errors import ObjectCacheError
from .types import KVDtype

#: dtypes a slice may have, by name, with their NumPy view (bfloat16 as its raw 16 bits).
DTYPES: Dict[KVDtype, Any] = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32}


@dataclass(frozen=True)
class SliceShape:
    """One layer of one chunk: K then V, each ``tokens x hidden`` values of ``dtype``."""

    tokens: int
    hidden: int
    dtype: KVDtype

    def __post_init__(self) -> None:
        self.check()

    @property
    def itemsize(self) -> int:
        return int(np.dtype(DTYPES[self.dtype]).itemsize)

    @property
    def nbytes(self) -> int:
        return 2 * self.tokens * self.hidden * self.itemsize

    @classmethod
    def of(cls, layer_bytes: int, chunk_tokens: int, dtype: KVDtype) -> SliceShape:
        """The shape of a slice of ``layer_bytes`` for chunks of ``chunk_tokens`` tokens of ``dtype``."""
        if dtype not in DTYPES:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"KV dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        per_token = 2 * chunk_tokens * int(np.dtype(DTYPES[dtype]).itemsize)
        if chunk_tokens <= 0 or layer_bytes <= 0 or layer_bytes % per_token:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"layer_bytes {layer_bytes} is not K and V of {chunk_tokens} tokens of {dtype}")
        return cls(chunk_tokens, layer_bytes // per_token, dtype)

    def check(self) -> None:
        if self.dtype not in DTYPES:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"KV dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.tokens <= 0 or self.hidden <= 0:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "a slice needs tokens and hidden above 0")


class Codec(Protocol):
    name: str
    lossless: bool

    def encode(self, data: Any, shape: SliceShape) -> bytes: ...

    def decode(self, encoded: Any, shape: SliceShape, out: memoryview) -> None: ...


def _bytes(data: Any, shape: SliceShape) -> memoryview:
    view = memoryview(data).cast("B")
    if view.nbytes != shape.nbytes:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"a slice of {shape} is {shape.nbytes} bytes, not {view.nbytes}")
    return view


def _out(out: memoryview, shape: SliceShape) -> np.ndarray:
    if memoryview(out).readonly:
        raise ObjectCacheError("OC_ERR_CLIENT_TARGET", "the buffer a slice is decoded into must be writable")
    target = np.frombuffer(out, dtype=np.uint8)
    if target.nbytes != shape.nbytes:
        raise ObjectCacheError("OC_ERR_CLIENT_TARGET", f"a decoded slice of {shape} is {shape.nbytes} bytes; the buffer holds {target.nbytes}")
    return target


def _corrupt(name: str, why: str) -> ObjectCacheError:
    return ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"a {name} slice does not decode: {why}")


class NoneCodec:
    name = RAW_CODEC
    lossless = True

    def encode(self, data: Any, shape: SliceShape) -> bytes:
        return bytes(_bytes(data, shape))

    def decode(self, encoded: Any, shape: SliceShape, out: memoryview) -> None:
        source = memoryview(encoded).cast("B")
        if source.nbytes != shape.nbytes:
            raise _corrupt(self.name, f"{source.nbytes} bytes where {shape.nbytes} were expected")
        _out(out, shape)[:] = np.frombuffer(source, dtype=np.uint8)


class BytePlanes:
    """Lossless: the byte planes, highest first, each compressed as its own frame (each plane has
    statistics of its own: one frame for all of them compressed 1.37x on SmolLM2's KV, one per plane
    1.45x). Encoded: the compressed length of every plane but the last (uint32, little-endian),
    then the frames."""

    lossless = True

    def __init__(self, name: str, compress: Callable[[bytes], bytes], decompress: Callable[[bytes, int], bytes]) -> None:
        self.name = name
        self._compress = compress
        self._decompress = decompress

    def encode(self, data: Any, shape: SliceShape) -> bytes:
        values = np.frombuffer(_bytes(data, shape), dtype=np.uint8).reshape(-1, shape.itemsize)
        # Little-endian values: the last byte of each is the highest.
        frames = [self._compress(np.ascontiguousarray(values[:, b]).tobytes()) for b in reversed(range(shape.itemsize))]
        lengths = np.array([len(f) for f in frames[:-1]], dtype="<u4").tobytes()
        return b"".join([lengths, *frames])

    def decode(self, encoded: Any, shape: SliceShape, out: memoryview) -> None:
        target = _out(out, shape).reshape(-1, shape.itemsize)
        source = bytes(encoded)
        planes = shape.itemsize
        head = 4 * (planes - 1)
        if len(source) < head:
            raise _corrupt(self.name, "shorter than its plane table")
        lengths = [int(n) for n in np.frombuffer(source, dtype="<u4", count=planes - 1)]
        lengths.append(len(source) - head - sum(lengths))
        if lengths[-1] < 0:
            raise _corrupt(self.name, "its plane table runs past its end")
        plane_bytes = shape.nbytes // planes
        at = head
        for p, length in enumerate(lengths):
            try:
                plane = self._decompress(source[at : at + length], plane_bytes)
            except Exception as error:  # the compressor's own error types
                raise _corrupt(self.name, str(error)) from error
            if len(plane) != plane_bytes:
                raise _corrupt(self.name, f"a plane of {len(plane)} bytes where {plane_bytes} were expected")
            target[:, planes - 1 - p] = np.frombuffer(plane, dtype=np.uint8)
            at += length


def _float_values(data: Any, shape: SliceShape) -> np.ndarray:
    """The slice's values as float32, ``[2, tokens, hidden]``."""
    raw = np.frombuffer(_bytes(data, shape), dtype=DTYPES[shape.dtype]).reshape(2, shape.tokens, shape.hidden)
    if shape.dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def _store_values(values: np.ndarray, shape: SliceShape, target: np.ndarray) -> None:
    """Writes float32 values into ``target`` in the slice's dtype (bfloat16 rounded to nearest even).
    ``values`` may be overwritten."""
    if shape.dtype == "bfloat16" and np.isfinite(values).all():
        # Finite values: the rounding in place, in 32 bits (nothing finite carries past bit 31);
        # measured 16x faster per GiB than the general path below, which keeps NaN a NaN.
        bits = values.view(np.uint32)
        bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        np.right_shift(bits, np.uint32(16), out=bits)
        target.view(np.uint16)[:] = bits.reshape(-1)
        return
    if shape.dtype == "bfloat16":
        floats = values.astype(np.float32)
        bits = floats.view(np.uint32).astype(np.uint64)  # no wrap-around past 0xFFFFFFFF
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        target.view(np.uint16)[:] = np.where(np.isnan(floats), np.uint16(0x7FC0), rounded).reshape(-1)
    else:
        target.view(DTYPES[shape.dtype])[:] = values.astype(DTYPES[shape.dtype]).reshape(-1)


class Int8Kivi:
    """Lossy: 8 bits a value, asymmetric (a minimum and a step), K per channel and V per token, as
    KIVI does. (Symmetric int8, a scale around zero, agreed on 98.8% of SmolLM2's next tokens on the
    fixed text; asymmetric uses all 256 levels for channels whose values sit off zero.)

    Encoded, little-endian: K's ``hidden`` minimums and steps, V's ``tokens`` minimums and steps
    (float32), then K's and V's uint8 codes, row-major. A value is ``minimum + code * step``.
    """

    name = "int8-kivi"
    lossless = False

    def encode(self, data: Any, shape: SliceShape) -> bytes:
        values = _float_values(data, shape)
        if not np.isfinite(values).all():
            # A NaN or an infinity would turn its whole channel or token into NaN: refuse it.
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "int8-kivi encodes finite values only; this slice holds a NaN or an infinity")
        k, v = values[0], values[1]
        k_min, k_max = k.min(axis=0), k.max(axis=0)  # per channel
        v_min, v_max = v.min(axis=1), v.max(axis=1)  # per token
        k_span = k_max.astype(np.float64) - k_min
        v_span = v_max.astype(np.float64) - v_min
        if max(k_span.max(), v_span.max()) > np.finfo(np.float32).max:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "int8-kivi: a channel's or token's range of values overflows float32")
        k_step = (k_span / 255.0).astype(np.float32)
        v_step = (v_span / 255.0).astype(np.float32)
        k_step[k_step == 0] = 1.0
        v_step[v_step == 0] = 1.0
        qk = np.clip(np.rint((k - k_min[None, :]) / k_step[None, :]), 0, 255).astype(np.uint8)
        qv = np.clip(np.rint((v - v_min[:, None]) / v_step[:, None]), 0, 255).astype(np.uint8)
        head = [a.astype("<f4").tobytes() for a in (k_min, k_step, v_min, v_step)]
        return b"".join([*head, qk.tobytes(), qv.tobytes()])

    @staticmethod
    def encoded_bytes(shape: SliceShape) -> int:
        return 8 * (shape.hidden + shape.tokens) + 2 * shape.tokens * shape.hidden

    def decode(self, encoded: Any, shape: SliceShape, out: memoryview) -> None:
        target = _out(out, shape)
        source = memoryview(encoded).cast("B")
        if source.nbytes != self.encoded_bytes(shape):
            raise _corrupt(self.name, f"{source.nbytes} bytes where {self.encoded_bytes(shape)} were expected")
        t, h = shape.tokens, shape.hidden
        k_min = np.frombuffer(source, dtype="<f4", count=h)
        k_step = np.frombuffer(source, dtype="<f4", count=h, offset=4 * h)
        v_min = np.frombuffer(source, dtype="<f4", count=t, offset=8 * h)
        v_step = np.frombuffer(source, dtype="<f4", count=t, offset=8 * h + 4 * t)
        q = np.frombuffer(source, dtype=np.uint8, offset=8 * (h + t)).reshape(2, t, h)
        values = np.empty((2, t, h), dtype=np.float32)
        np.multiply(q[0], k_step[None, :], out=values[0], dtype=np.float32)
        values[0] += k_min[None, :]
        np.multiply(q[1], v_step[:, None], out=values[1], dtype=np.float32)
        values[1] += v_min[:, None]
        _store_values(values, shape, target)


def _zstd() -> BytePlanes:
    try:
        import zstandard
    except ImportError as error:  # pragma: no cover - the codecs extra
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the bplane-zstd codec needs zstandard: pip install 'objectcache[codecs]'") from error
    # zstandard's (de)compressor objects may not be used by two threads at once: one per thread.
    local = threading.local()

    def compress(data: bytes) -> bytes:
        if not hasattr(local, "c"):
            local.c = zstandard.ZstdCompressor(level=1)
        return bytes(local.c.compress(data))

    def decompress(data: bytes, size: int) -> bytes:
        if not hasattr(local, "d"):
            local.d = zstandard.ZstdDecompressor()
        return bytes(local.d.decompress(data, max_output_size=size))

    return BytePlanes("bplane-zstd", compress, decompress)


def _lz4() -> BytePlanes:
    try:
        import lz4.block
    except ImportError as error:  # pragma: no cover - the codecs extra
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the bplane-lz4 codec needs lz4: pip install 'objectcache[codecs]'") from error
    return BytePlanes("bplane-lz4", lambda data: lz4.block.compress(data, store_size=False), lambda data, size: lz4.block.decompress(data, uncompressed_size=size))


_FACTORIES: Dict[str, Callable[[], Codec]] = {RAW_CODEC: NoneCodec, "bplane-zstd": _zstd, "bplane-lz4": _lz4, "int8-kivi": Int8Kivi}
_MADE: Dict[str, Codec] = {}


#: Codec names as the gateway and the stored metadata take them (schemas/encoded-chunk.ts). An
#: encoded chunk has at most MAX_ENCODED_LAYERS layers: its index must fit in S3's 2 KB of metadata.
CODEC_NAME = re.compile(CODEC_NAME_PATTERN)


def register(name: str, factory: Callable[[], Codec]) -> None:
    """Adds a codec (the gateway only moves its bytes, so nothing else needs to know it)."""
    if not CODEC_NAME.match(name):
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"a codec name is 1-32 of a-z, 0-9, '.', '_', '-' (starting with a letter or digit), not {name!r}")
    if name in _FACTORIES:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"a codec named {name!r} exists already")
    _FACTORIES[name] = factory


def codec(name: str) -> Codec:
    """The codec of that name."""
    if name not in _FACTORIES:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"unknown codec {name!r}; known: {', '.join(sorted(_FACTORIES))}")
    if name not in _MADE:
        _MADE[name] = _FACTORIES[name]()
    return _MADE[name]


def encode_chunk(canonical: Any, layers: int, shape: SliceShape, name: str) -> Tuple[List[bytes], List[int]]:
    """A chunk's layers (``canonical``: KV_L2TD, ``layers x shape.nbytes`` bytes) encoded one slice
    at a time: the encoded slices, and their lengths (the chunk's ``oc-slice-bytes`` index)."""
    view = memoryview(canonical).cast("B")
    if view.nbytes != layers * shape.nbytes:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"a chunk of {layers} layers of {shape} is {layers * shape.nbytes} bytes, not {view.nbytes}")
    if layers > MAX_ENCODED_LAYERS:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"an encoded chunk has at most {MAX_ENCODED_LAYERS} layers (its index must fit in 2 KB of metadata), not {layers}")
    c = codec(name)
    slices = [c.encode(view[l * shape.nbytes : (l + 1) * shape.nbytes], shape) for l in range(layers)]
    return slices, [len(s) for s in slices]
