"""The types of the client's signatures: the descriptor and its closed string sets (generated from
the gateway's JSON Schema into ``_contract``), the buffers the client reads from and into, and the
END frame's summary. Types only: nothing here changes what the client accepts at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Literal, Optional, TypedDict, Union

from ._contract import Delivery as Delivery
from ._contract import Descriptor as Descriptor
from ._contract import DescriptorTarget as DescriptorTarget
from ._contract import Layout as Layout
from ._contract import Mode as Mode

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Buffer as _BufferProtocol  # PEP 688 (collections.abc.Buffer from 3.12)

#: Anything with the buffer protocol: bytes, bytearray, memoryview, array.array, mmap (PEP 688's
#: protocol), and NumPy arrays, which type checkers see as buffers only from Python 3.12 on.
Buffer = Union["_BufferProtocol", "np.ndarray[Any, Any]"]

#: How a descriptor travels: ``auto`` (a header up to 8 KiB of base64, else a POST body), ``get``
#: (the ``x-objectcache-descriptor`` header) or ``post`` (a JSON body).
Transport = Literal["auto", "get", "post"]
#: KV dtypes the codecs decode (``objectcache.codecs.DTYPES``).
KVDtype = Literal["bfloat16", "float16", "float32"]
#: The codecs this package brings; ``objectcache.codecs.register`` adds more, so any name will do.
BuiltinCodec = Literal["none", "bplane-zstd", "bplane-lz4", "int8-kivi"]
CodecName = Union[BuiltinCodec, str]
#: How the gateway delivered a stream (``auto`` resolved).
DeliveredMode = Literal["layerwise", "chunkwise"]


class StreamTimings(TypedDict):
    """Milliseconds from the request's arrival at the gateway."""

    firstReadMs: float
    firstFrameMs: float
    totalMs: float


class _EndSummaryRequired(TypedDict):
    mode: DeliveredMode
    #: ``[first, end)`` of the delivered layers.
    layers: List[int]
    chunks: int
    #: Payload bytes delivered (frames excluded).
    bytes: int
    backendReads: int
    #: Layer groups of the read plan, as ``[first, end)`` pairs.
    plan: List[List[int]]
    rateBytesPerSec: Optional[float]
    verified: bool
    timings: StreamTimings


class EndSummary(_EndSummaryRequired, total=False):
    """The END frame's summary (schemas/frames.ts EndSummary), as ``FetchResult.summary``."""

    #: Version 2 streams: the encoding of every segment.
    codec: str


__all__ = [
    "Buffer",
    "BuiltinCodec",
    "CodecName",
    "DeliveredMode",
    "Delivery",
    "Descriptor",
    "DescriptorTarget",
    "EndSummary",
    "KVDtype",
    "Layout",
    "Mode",
    "StreamTimings",
    "Transport",
]
