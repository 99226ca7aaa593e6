"""Reading the ObjectCache response stream (schemas/wire-format.md section 4) straight into the
caller's buffer: every payload byte is read with ``readinto`` into its final place, the CRC-32C is
extended piece by piece while the bytes are still in cache, and nothing is copied per frame.

A version 2 stream (section 6: encoded chunks) carries each frame's slices as segments in their
stored encoding, after a slice-length table: the frame is read whole into a scratch buffer, checked,
and each segment decoded into the slice's place before the layer is announced ready."""

from __future__ import annotations

import json
import struct
from typing import Any, Callable, Generator, List, Optional, Protocol, Sequence, Tuple, cast

from crc32c import crc32c

from ._contract import (
    FRAME_CHUNK,
    FRAME_END,
    FRAME_ERROR,
    FRAME_HEADER_FORMAT,
    FRAME_LAYER,
    KNOWN_CODES,
    MAX_ENCODED_SLICE_EXTRA_BYTES,
    MAX_ENCODED_SLICE_FACTOR,
    PREAMBLE_FORMAT,
    STREAM_MAGIC,
    STREAM_VERSION,
    STREAM_VERSION_SEGMENTED,
)
from ._contract import MAX_JSON_FRAME_BYTES as MAX_JSON_FRAME_BYTES
from .errors import ObjectCacheError
from .types import EndSummary

#: What a payload's CRC32C mismatch leaves the caller to do (schemas/wire-format.md section 1).
_CORRUPT = 'its bytes differ from what their writers stored (changed on the way, or a stored chunk is corrupt: a descriptor with sliceChecks "gateway" has the gateway name the chunk)'

PREAMBLE = STREAM_MAGIC
PREAMBLE_STRUCT = struct.Struct(PREAMBLE_FORMAT)
HEADER = struct.Struct(FRAME_HEADER_FORMAT)
LAYER, CHUNK, ERROR, END = FRAME_LAYER, FRAME_CHUNK, FRAME_ERROR, FRAME_END
#: Payload bytes read (and checksummed) per readinto call.
PIECE_BYTES = 1024 * 1024


class Readable(Protocol):
    def readinto(self, b: memoryview) -> Optional[int]: ...


def _protocol(message: str) -> ObjectCacheError:
    return ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", message)


def _fill(source: Readable, view: memoryview, crc: int = 0) -> int:
    """Fills ``view`` completely from ``source`` and returns the CRC-32C extended over it."""
    got = 0
    size = len(view)
    while got < size:
        piece = view[got : min(size, got + PIECE_BYTES)]
        n = source.readinto(piece)
        if not n:
            # Cut (its connection or the gateway process went): retryable, as the code says.
            raise ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", "the stream ended before its END frame")
        crc = crc32c(piece[:n], crc)
        got += n
    return crc


class Geometry:
    """What a fetch delivers and where: layers ``[first, end)`` of ``chunks`` chunks of ``layer_bytes``, layer ``l`` at ``(l - first) * stride`` of ``target``."""

    def __init__(self, first: int, end: int, chunks: int, layer_bytes: int, target: memoryview, stride: int) -> None:
        self.first, self.end, self.chunks, self.layer_bytes, self.target, self.stride = first, end, chunks, layer_bytes, target, stride
        self.layer_payload = chunks * layer_bytes
        need = (end - first - 1) * stride + self.layer_payload
        if stride < self.layer_payload:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"layer_stride {stride} is smaller than one layer ({self.layer_payload} bytes)")
        if len(target) < need:
            raise ObjectCacheError("OC_ERR_CLIENT_TARGET", f"the target holds {len(target)} bytes; these layers need {need}")

    def layer_view(self, layer: int) -> memoryview:
        at = (layer - self.first) * self.stride
        return self.target[at : at + self.layer_payload]

    def segments(self, layer: int, chunk: int) -> Sequence[memoryview]:
        """Where chunk ``chunk``'s slice of layer ``layer`` goes, in delivered order."""
        at = (layer - self.first) * self.stride + chunk * self.layer_bytes
        return (self.target[at : at + self.layer_bytes],)

    def layer_segments(self, layer: int) -> Sequence[memoryview]:
        """Where a LAYER frame's payload goes, in order (one view: the layer is contiguous)."""
        return (self.layer_view(layer),)


#: ``place(layer, chunk)``: the buffers that receive one chunk's slice of one layer, in delivered
#: order (KV_L2TD: the K half, then the V half), ``layer_bytes`` bytes together.
Place = Callable[[int, int], Sequence[memoryview]]


class ScatterGeometry(Geometry):
    """A fetch whose slices land in buffers of the caller's choosing (``place``), such as one
    buffer per chunk in its stored layout: the yielded layer views are empty."""

    def __init__(self, first: int, end: int, chunks: int, layer_bytes: int, place: Place) -> None:
        self.first, self.end, self.chunks, self.layer_bytes = first, end, chunks, layer_bytes
        self.layer_payload = chunks * layer_bytes
        self.stride = self.layer_payload
        self.target = memoryview(b"")
        self._place = place

    def layer_view(self, layer: int) -> memoryview:
        return self.target

    def segments(self, layer: int, chunk: int) -> Sequence[memoryview]:
        views = self._place(layer, chunk)
        if sum(len(v) for v in views) != self.layer_bytes or any(v.readonly for v in views):
            raise ObjectCacheError("OC_ERR_CLIENT_TARGET", f"place({layer}, {chunk}) must give writable buffers of {self.layer_bytes} bytes in all")
        return views

    def layer_segments(self, layer: int) -> Sequence[memoryview]:
        return [view for chunk in range(self.chunks) for view in self.segments(layer, chunk)]


class SegmentDecoder:
    """Decodes the segments of a version 2 stream: every slice of one codec (None: ``none``, raw
    slices), of one shape (objectcache.codecs.SliceShape)."""

    def __init__(self, codec: Any, shape: Any, layer_bytes: int) -> None:
        self.codec, self.shape, self.layer_bytes = codec, shape, layer_bytes
        #: The most bytes a stored slice may take (the gateway's limit, wire-format.md section 6).
        self.max_segment = MAX_ENCODED_SLICE_FACTOR * layer_bytes + MAX_ENCODED_SLICE_EXTRA_BYTES
        self._scratch = bytearray(0)
        self._slice = bytearray(layer_bytes)

    def frame(self, source: Readable, length: int, count: int, what: str, crc: int) -> Tuple[memoryview, List[int]]:
        """Reads a segmented payload of ``count`` segments whole and checks it: its segments and their lengths."""
        if length < 4 * count or length > count * (4 + self.max_segment):
            raise _protocol(f"{what} has {length} bytes, which {count} segments cannot")
        if len(self._scratch) < length:
            self._scratch = bytearray(length)
        payload = memoryview(self._scratch)[:length]
        if _fill(source, payload) != crc:
            raise ObjectCacheError("OC_ERR_CLIENT_CRC", f"the CRC32C of {what} does not match: {_CORRUPT}")
        lengths = list(struct.unpack_from(f"<{count}I", payload))
        if sum(lengths) != length - 4 * count or any(n == 0 or n > self.max_segment for n in lengths):
            raise _protocol(f"the slice-length table of {what} does not describe its payload")
        return payload[4 * count :], lengths

    def decode(self, encoded: memoryview, views: Sequence[memoryview]) -> None:
        """Decodes one slice into its place (one view, or the halves ``place`` gave)."""
        if self.codec is None:  # "none": raw slices
            if len(encoded) != self.layer_bytes:
                raise _protocol(f"a raw segment of {len(encoded)} bytes where {self.layer_bytes} were expected")
            at = 0
            for view in views:
                view[:] = encoded[at : at + len(view)]
                at += len(view)
            return
        if len(views) == 1:
            self.codec.decode(encoded, self.shape, views[0])
            return
        self.codec.decode(encoded, self.shape, memoryview(self._slice))
        at = 0
        for view in views:
            view[:] = self._slice[at : at + len(view)]
            at += len(view)


def read_frames(source: Readable, g: Geometry, decoder: Optional[SegmentDecoder] = None) -> Generator[Tuple[int, memoryview], None, EndSummary]:
    """Yields ``(layer, view)`` as each layer is ready; the generator's return value is the END summary.

    With ``decoder`` the stream must be version 2 (the descriptor named ``codecs``), without it
    version 1. Raises ObjectCacheError: the gateway's code for an ERROR frame, ``OC_ERR_CLIENT_*``
    for a stream that breaks the format, fails a CRC or ends early.
    """
    header = bytearray(HEADER.size)
    preamble = bytearray(PREAMBLE_STRUCT.size)
    _fill(source, memoryview(preamble))
    version = STREAM_VERSION if decoder is None else STREAM_VERSION_SEGMENTED
    if PREAMBLE_STRUCT.unpack(preamble) != (STREAM_MAGIC, version, 0):
        raise _protocol(f"the response does not start with the OCKV version {version} preamble")
    mode: Optional[str] = None
    next_layer = g.first
    next_chunk = 0
    while True:
        _fill(source, memoryview(header))
        ftype, flags, reserved, index, length, crc, reserved2 = HEADER.unpack(header)
        if flags or reserved or reserved2:
            raise _protocol("a frame header has non-zero reserved fields")
        if ftype == LAYER:
            if mode == "chunkwise" or index != next_layer or index >= g.end:
                raise _protocol(f"expected layer {next_layer}, got LAYER {index}")
            if decoder is not None:
                mode = "layerwise"
                segments, lengths = decoder.frame(source, length, g.chunks, f"layer {index}", crc)
                at = 0
                for chunk, n in enumerate(lengths):
                    decoder.decode(segments[at : at + n], g.segments(index, chunk))
                    at += n
                next_layer += 1
                yield index, g.layer_view(index)
                continue
            if length != g.layer_payload:
                raise _protocol(f"LAYER {index} has {length} bytes, expected {g.layer_payload}")
            mode = "layerwise"
            running = 0
            for segment in g.layer_segments(index):
                running = _fill(source, segment, running)
            if running != crc:
                raise ObjectCacheError("OC_ERR_CLIENT_CRC", f"the CRC32C of layer {index} does not match: {_CORRUPT}")
            next_layer += 1
            yield index, g.layer_view(index)
        elif ftype == CHUNK:
            layers = g.end - g.first
            if mode == "layerwise" or index != next_chunk or index >= g.chunks:
                raise _protocol(f"expected chunk {next_chunk}, got CHUNK {index}")
            if decoder is not None:
                mode = "chunkwise"
                segments, lengths = decoder.frame(source, length, layers, f"chunk {index}", crc)
                at = 0
                for i, n in enumerate(lengths):
                    decoder.decode(segments[at : at + n], g.segments(g.first + i, index))
                    at += n
                next_chunk += 1
                if next_chunk == g.chunks:
                    for layer in range(g.first, g.end):
                        yield layer, g.layer_view(layer)
                continue
            if length != layers * g.layer_bytes:
                raise _protocol(f"CHUNK {index} has {length} bytes, expected {layers * g.layer_bytes}")
            mode = "chunkwise"
            running = 0
            for layer in range(g.first, g.end):
                for segment in g.segments(layer, index):
                    running = _fill(source, segment, running)
            if running != crc:
                raise ObjectCacheError("OC_ERR_CLIENT_CRC", f"the CRC32C of chunk {index} does not match: {_CORRUPT}")
            next_chunk += 1
            if next_chunk == g.chunks:
                for layer in range(g.first, g.end):
                    yield layer, g.layer_view(layer)
        elif ftype in (ERROR, END):
            if length > MAX_JSON_FRAME_BYTES:
                raise _protocol("an ERROR or END frame is implausibly large")
            body = bytearray(length)
            if _fill(source, memoryview(body)) != crc:
                raise ObjectCacheError("OC_ERR_CLIENT_CRC", "the CRC32C of a control frame does not match")
            try:
                document = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as error:
                raise _protocol("an ERROR or END frame that is not UTF-8 JSON") from error
            if not isinstance(document, dict):
                raise _protocol("an ERROR or END frame that is not a JSON object")
            if ftype == ERROR:
                details = {k: v for k, v in document.items() if k not in ("code", "message", "retryable")}
                # The names an S3 error document (and the TypeScript client) uses.
                for name, s3_name in (("chunk", "ChunkIndex"), ("key", "Key"), ("layer", "Layer")):
                    if name in details:
                        details[s3_name] = details.pop(name)
                said = document.get("retryable")
                code = document.get("code")
                if not isinstance(code, str) or code not in KNOWN_CODES:
                    # A code this client does not know (a newer gateway): internal, the code kept.
                    if code is not None:
                        details["Code"] = code
                    code = "OC_ERR_INTERNAL"
                raise ObjectCacheError(
                    str(code),
                    str(document.get("message", "the gateway ended the stream")),
                    details=details,
                    retryable=said if isinstance(said, bool) else None,  # older gateways: the code's
                )
            done = next_layer == g.end if mode == "layerwise" else next_chunk == g.chunks
            if not done:
                raise _protocol("END arrived before every layer")
            if source.readinto(memoryview(bytearray(1))):
                raise _protocol("bytes after the END frame")
            return cast(EndSummary, document)  # the gateway's END document, as parsed
        else:
            raise _protocol(f"unknown frame type {ftype}")


OnLayerReady = Callable[[int, memoryview], None]
