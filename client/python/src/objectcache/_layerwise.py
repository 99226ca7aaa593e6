"""The layerwise GET: a descriptor, its request (a header on GET, or a POST body), and its
framed answer read straight into the caller's buffers (``stream``), each layer announced as it
lands and its CRC-32C checks. The connection goes back to the pool only after a whole stream."""

from __future__ import annotations

import base64
import http.client
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator, List, Optional, Sequence, Tuple, cast
from urllib.parse import quote

from ._contract import DESCRIPTOR_HEADER, DESCRIPTOR_VERSION, MAX_HEADER_DESCRIPTOR_BYTES, RAW_CODEC
from ._deadline import _Deadline
from ._transport import Transport, _writable_bytes
from .errors import ObjectCacheError
from .stream import Geometry, OnLayerReady, Place, ScatterGeometry, SegmentDecoder, read_frames
from .types import Buffer, CodecName, Descriptor, EndSummary, KVDtype, Layout, Mode
from .types import Transport as TransportName


@dataclass
class FetchResult:
    #: The buffer the layers landed in (the caller's, as it passed it, or a new bytearray).
    target: Any
    layer_stride: int
    #: The END frame's summary: mode, layers, chunks, bytes, backendReads, plan, timings, ...
    summary: EndSummary
    #: Seconds from the request to each layer's ready notification, as (layer, seconds).
    timeline: List[Tuple[int, float]] = field(default_factory=list)
    transport: str = "get"
    #: How many of the request's chunks (its first ones) the gateway read from a packed segment
    #: (docs/segments.md), as its x-objectcache-segment-chunks header says; 0 for none.
    segment_chunks: int = 0


def _segment_chunks(response: http.client.HTTPResponse) -> int:
    value = response.getheader("x-objectcache-segment-chunks") or ""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else 0


def _refuses_slice_checks(error: ObjectCacheError) -> bool:
    """Whether ``error`` is a gateway's refusal of the descriptor's sliceChecks as an unknown field
    (a gateway older than it names each problem, joined by '; '), and no other."""
    prefix = "Invalid descriptor: "
    at = error.message.find(prefix)
    return error.code == "OC_ERR_DESCRIPTOR_INVALID" and at >= 0 and "sliceChecks is not a descriptor field" in error.message[at + len(prefix) :].split("; ")


class LayerwiseCalls(Transport):
    """The layerwise GET of :class:`~objectcache.ObjectCacheClient`."""

    #: Whether a gateway refused the descriptor's sliceChecks (one older than the field): not sent again.
    _slice_checks_refused: bool = False

    @staticmethod
    def descriptor(
        keys: Sequence[str],
        *,
        layers: int,
        chunk_tokens: int,
        layer_bytes: int,
        layout: Layout = "KV_L2TD",
        mode: Mode = "auto",
        key_prefix: Optional[str] = None,
        codecs: Optional[Sequence[CodecName]] = None,
        **extra: Any,
    ) -> Descriptor:
        """A descriptor for ``keys`` (other fields, such as layerRange, tenant or computeMsPerLayer, as keywords).

        ``mode``: ``auto`` (the gateway streams layer by layer at or above its size threshold,
        chunk by chunk below it, as the TypeScript client's default), ``layerwise`` or ``chunkwise``.
        ``key_prefix``: prepended to every key (the descriptor's ``keyPrefix``, as ``objectcache
        seed`` writes it), so long prefixes need not repeat it.
        ``codecs``: the encodings this client decodes (``"none"``: raw chunks); the chunks come as
        stored and each layer is decoded into the target before it is announced (fetch with the
        KV ``dtype``)."""
        document: Descriptor = {
            "version": DESCRIPTOR_VERSION,
            "keys": list(keys),
            "layers": layers,
            "chunkTokens": chunk_tokens,
            "layerBytes": layer_bytes,
            "layout": layout,
            "delivery": "layer-major",
            "mode": mode,
        }
        if key_prefix is not None:
            document["keyPrefix"] = key_prefix
        if codecs is not None:
            document["codecs"] = list(codecs)
        document.update(cast(Descriptor, extra))  # the caller's fields as given; the gateway checks them
        return document

    def _open(self, descriptor: Descriptor, transport: TransportName, deadline: _Deadline) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse, str]:
        if "sliceChecks" not in descriptor and not self._slice_checks_refused:
            # This client checks every frame's CRC32C (stream.py): the gateway may leave the slice
            # checks to it (schemas/wire-format.md section 2), unless the descriptor says otherwise.
            try:
                return self._open_as_is(cast(Descriptor, {**descriptor, "sliceChecks": "client"}), transport, deadline)
            except ObjectCacheError as error:
                # A gateway older than the field refuses it before the stream begins: the same request
                # without it; once that is answered, the field is not sent again.
                if not _refuses_slice_checks(error):
                    raise
                opened = self._open_as_is(descriptor, transport, deadline)
                self._slice_checks_refused = True
                return opened
        return self._open_as_is(descriptor, transport, deadline)

    def _open_as_is(self, descriptor: Descriptor, transport: TransportName, deadline: _Deadline) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse, str]:
        text = json.dumps(descriptor, separators=(",", ":")).encode("utf-8")
        encoded = base64.urlsafe_b64encode(text).rstrip(b"=").decode("ascii")
        if transport == "auto":
            transport = "post" if len(encoded) > MAX_HEADER_DESCRIPTOR_BYTES else "get"
        if transport == "post":
            conn, response = self._send("POST", f"/{quote(self.bucket, safe='')}?objectcache=", text, {"Content-Type": "application/json"}, operation="DescriptorGet", deadline=deadline)
        elif transport == "get":
            last = str(descriptor.get("keyPrefix", "")) + str(descriptor["keys"][-1])
            conn, response = self._send("GET", self._object_path(last), b"", {DESCRIPTOR_HEADER: encoded}, operation="DescriptorGet", deadline=deadline)
        else:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"transport is auto, get or post, not {transport!r}")
        return conn, response, transport

    def _geometry(self, descriptor: Descriptor, target: Optional[Buffer], layer_stride: Optional[int]) -> Tuple[Geometry, Any]:
        try:
            layers, layer_bytes, chunks = int(descriptor["layers"]), int(descriptor["layerBytes"]), len(descriptor["keys"])
        except (KeyError, TypeError, ValueError) as error:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the descriptor needs keys, layers and layerBytes") from error
        first, end = descriptor.get("layerRange", [0, layers])
        stride = layer_stride or int(descriptor.get("target", {}).get("layerStride", chunks * layer_bytes))
        if target is None:
            target = bytearray((end - first - 1) * stride + chunks * layer_bytes)
        return Geometry(first, end, chunks, layer_bytes, _writable_bytes(target), stride), target

    def _decoder(self, descriptor: Descriptor, response: http.client.HTTPResponse, dtype: Optional[KVDtype]) -> Optional[SegmentDecoder]:
        """The decoder of a version 2 answer (a descriptor naming ``codecs``), for the codec the gateway says it sent."""
        accepted = descriptor.get("codecs")
        if accepted is None:
            return None
        name = response.getheader("x-objectcache-codec") or ""
        if name not in accepted:
            raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the gateway sent codec {name!r}, not one of {list(accepted)}")
        layer_bytes = int(descriptor["layerBytes"])
        if name == RAW_CODEC:
            return SegmentDecoder(None, None, layer_bytes)
        assert dtype is not None  # _stream refused a descriptor naming a codec without it, before the request
        from .codecs import SliceShape, codec  # the codecs extra

        return SegmentDecoder(codec(name), SliceShape.of(layer_bytes, int(descriptor["chunkTokens"]), dtype), layer_bytes)

    def _stream(
        self, descriptor: Descriptor, geometry: Geometry, transport: TransportName, opened: List[Tuple[str, int]], dtype: Optional[KVDtype] = None
    ) -> Generator[Tuple[int, memoryview], None, EndSummary]:
        """The ready layers of one fetch, then (as the generator's value) the END summary. The
        connection goes back to the pool only after a complete stream; closing the generator
        early closes it, which the gateway sees as the client leaving."""
        codecs = descriptor.get("codecs")
        if codecs is not None and dtype is None and any(c != RAW_CODEC for c in codecs):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "decoding encoded chunks needs the KV dtype: fetch(..., dtype=...)")
        deadline = _Deadline(self._config.deadline, "DescriptorGet")
        try:
            conn, response, used = self._open(descriptor, transport, deadline)
        except BaseException:
            deadline.cancel()
            raise
        opened.append((used, _segment_chunks(response)))
        finished = False
        try:
            try:
                summary = yield from read_frames(response, geometry, self._decoder(descriptor, response, dtype))
            except (OSError, http.client.HTTPException) as error:
                raise deadline.error() if deadline.passed() else ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"the stream broke off: {error}") from error
            except ObjectCacheError as error:
                # Cut off at the deadline: the stream's end was the watchdog's, not the gateway's.
                if deadline.passed() and error.code.startswith("OC_ERR_CLIENT_"):
                    raise deadline.error() from error
                # An ERROR frame (or a broken stream) names the request, as an error answer does.
                error.request_id = error.request_id or response.getheader("x-amz-request-id")
                error.operation_name = error.operation_name or "DescriptorGet"
                raise
            finished = True
            return summary
        finally:
            # Let go of the connection before it is pooled: the watchdog must not shut it then.
            if deadline.unwatch():
                finished = False
            deadline.cancel()
            if finished:
                self._pool.give(conn, response)
            else:
                conn.close()

    def layers(
        self, descriptor: Descriptor, target: Optional[Buffer] = None, *, layer_stride: Optional[int] = None, transport: TransportName = "auto", dtype: Optional[KVDtype] = None
    ) -> Iterator[Tuple[int, memoryview]]:
        """Yields ``(layer, view)`` as each layer lands in ``target``; leaving the loop early
        cancels the download (the connection is closed, the gateway stops reading)."""
        geometry, _ = self._geometry(descriptor, target, layer_stride)
        yield from self._stream(descriptor, geometry, transport, [], dtype)

    def fetch(
        self,
        descriptor: Descriptor,
        target: Optional[Buffer] = None,
        on_layer_ready: Optional[OnLayerReady] = None,
        *,
        layer_stride: Optional[int] = None,
        transport: TransportName = "auto",
        dtype: Optional[KVDtype] = None,
    ) -> FetchResult:
        """Fetches the prefix's KV: every layer lands in ``target`` (allocated when absent) at
        ``(layer - first) * layer_stride``, each announced through ``on_layer_ready(layer, view)``
        as its frame ends and its CRC-32C checks (decoded first, when the descriptor names
        ``codecs``: then ``dtype`` is the KV's, bfloat16, float16 or float32). Raises
        ObjectCacheError with the stable codes."""
        geometry, target = self._geometry(descriptor, target, layer_stride)
        return self._run(descriptor, geometry, target, on_layer_ready, transport, dtype)

    def fetch_into(
        self, descriptor: Descriptor, place: Place, on_layer_ready: Optional[Callable[[int], None]] = None, *, transport: TransportName = "auto", dtype: Optional[KVDtype] = None
    ) -> FetchResult:
        """Fetches the prefix's KV into buffers of the caller's choosing: ``place(layer, chunk)``
        returns the writable views that receive chunk ``chunk``'s slice of ``layer`` in delivered
        order (its K half, then its V half), ``layerBytes`` in all; for example the two halves of
        that layer inside the chunk's own buffer in its stored KV_2LTD layout. Each byte is read
        once, straight into its place; ``on_layer_ready(layer)`` runs as each layer's frame ends
        and its CRC-32C checks."""
        try:
            layers, layer_bytes, chunks = int(descriptor["layers"]), int(descriptor["layerBytes"]), len(descriptor["keys"])
        except (KeyError, TypeError, ValueError) as error:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the descriptor needs keys, layers and layerBytes") from error
        first, end = descriptor.get("layerRange", [0, layers])
        ready = None if on_layer_ready is None else (lambda layer, _view: on_layer_ready(layer))
        return self._run(descriptor, ScatterGeometry(first, end, chunks, layer_bytes, place), None, ready, transport, dtype)

    def _run(self, descriptor: Descriptor, geometry: Geometry, target: Any, on_layer_ready: Optional[OnLayerReady], transport: TransportName, dtype: Optional[KVDtype] = None) -> FetchResult:
        started = time.perf_counter()
        timeline: List[Tuple[int, float]] = []
        used: List[Tuple[str, int]] = []
        stream = self._stream(descriptor, geometry, transport, used, dtype)
        try:
            while True:
                try:
                    layer, view = next(stream)
                except StopIteration as end:
                    summary: EndSummary = end.value
                    break
                timeline.append((layer, time.perf_counter() - started))
                if on_layer_ready is not None:
                    on_layer_ready(layer, view)
        finally:
            stream.close()  # a callback that raised: the connection is closed, not left to the GC
        return FetchResult(target=target, layer_stride=geometry.stride, summary=summary, timeline=timeline, transport=used[0][0], segment_chunks=used[0][1])
