"""The client's S3 calls: create and check the bucket, write chunks (their per-layer CRC-32Cs,
chain and encoding in the object's metadata), read, list and delete objects, and the gateway's
own prefix lookup and pins. Each is one request (``_transport``) or, for a listing, one per page
within one deadline."""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import re
import struct
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, TypeVar, cast, overload
from urllib.parse import quote

from crc32c import crc32c

from ._contract import (
    AFTER_KEY_PATTERN,
    AFTER_META,
    CODEC_META,
    LAYER_CRC_META,
    MAX_AFTER_KEY,
    MAX_CHECKSUMMED_LAYERS,
    MAX_USER_METADATA_BYTES,
    MODEL_META,
    MODEL_NAME_PATTERN,
    RAW_CODEC,
    SLICE_BYTES_META,
    TOKENS_META,
)
from ._deadline import _Deadline
from ._transport import ANSWER_BODY_LIMIT, Transport, _json_answer, _writable_bytes
from .errors import ObjectCacheError
from .keys import encode_tokens
from .layouts import encode_layer_crcs, layer_crcs, to_canonical
from .types import Buffer, CodecName, KVDtype, Layout

_B = TypeVar("_B", bound=Buffer)


def recordable_after(key: str) -> bool:
    """Whether ``key`` can be recorded as the chunk before another (``objectcache-after``): at most
    MAX_AFTER_KEY printable ASCII characters (schemas/chain.ts ``recordableAfter``)."""
    return len(key) <= MAX_AFTER_KEY and re.fullmatch(AFTER_KEY_PATTERN, key) is not None


def _fit_metadata(headers: Dict[str, str]) -> Dict[str, str]:
    """Leaves the chunk's tokens out when they would take its user metadata past S3's 2 KB (many
    layers' CRC-32Cs, a long chain key): they serve KV events only, the CRCs and chain are kept."""
    used = sum(len(name) + len(value) for name, value in headers.items() if name.startswith("x-amz-meta-"))
    if used > MAX_USER_METADATA_BYTES:
        headers.pop(f"x-amz-meta-{TOKENS_META}", None)
    return headers


class S3Calls(Transport):
    """The S3 calls of :class:`~objectcache.ObjectCacheClient`."""

    def ensure_bucket(self) -> None:
        """Creates the bucket unless it exists."""
        try:
            self._call("PUT", f"/{quote(self.bucket, safe='')}", operation="CreateBucket")
        except ObjectCacheError as error:
            if error.details.get("S3Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def put_chunk(
        self,
        key: str,
        data: Buffer,
        *,
        layout: Optional[Tuple[Layout, int, int]] = None,
        codec: Optional[CodecName] = None,
        chunk_tokens: Optional[int] = None,
        dtype: Optional[KVDtype] = None,
        after: Optional[str] = None,
        tokens: Optional[Sequence[int]] = None,
        model: Optional[str] = None,
    ) -> None:
        """Writes one chunk object (already in its stored layout). With
        ``layout=(layout, layers, layer_bytes)`` every layer's CRC-32C is recorded in the object's
        metadata, so the gateway verifies each slice it serves (up to 256 layers). ``after`` names
        the chunk before it in its prefix (recorded with the object, ``objectcache-after``): a
        budgeted bucket then never evicts that one first (docs/capacity.md). ``tokens`` (the chunk's
        token ids) and ``model`` are recorded with it (``objectcache-tokens``, ``objectcache-model``)
        for the gateway's KV events (docs/kv-events.md); a token list too long for S3's metadata is
        not recorded.

        With ``codec`` (a name of :mod:`objectcache.codecs` other than ``none``; needs ``layout``,
        ``chunk_tokens`` and the KV ``dtype``) the chunk is stored encoded: each layer's slice (in
        KV_L2TD form, whatever ``layout``) encoded on its own, back to back, with the index and
        the encoded slices' CRC-32Cs in its metadata (schemas/wire-format.md section 6). Fetch it
        with a descriptor that names the codec (``descriptor(..., codecs=[codec], layout="KV_L2TD")``)."""
        # Any: NumPy arrays are buffers, which typeshed says only from Python 3.12 on.
        body = data if isinstance(data, bytes) else memoryview(cast(Any, data)).tobytes()
        headers = {"Content-Type": "application/octet-stream"}
        if after is not None:
            if not recordable_after(after):
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"after must be a key of at most {MAX_AFTER_KEY} printable ASCII characters")
            headers[f"x-amz-meta-{AFTER_META}"] = after
        if tokens is not None:
            encoded = encode_tokens(tokens)
            if encoded is not None:
                headers[f"x-amz-meta-{TOKENS_META}"] = encoded
        if model is not None:
            if not re.fullmatch(MODEL_NAME_PATTERN, model):
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "model must be 1 to 256 printable ASCII characters, without spaces or @")
            headers[f"x-amz-meta-{MODEL_META}"] = model
        if codec is not None and codec != RAW_CODEC:
            if layout is None or chunk_tokens is None or dtype is None:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "an encoded chunk needs layout=(layout, layers, layer_bytes), chunk_tokens and dtype")
            from .codecs import SliceShape, encode_chunk  # NumPy and the compressors: the codecs extra

            name, layers, layer_bytes = layout
            if len(body) != layers * layer_bytes:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"chunk {key!r} has {len(body)} bytes, not layers x layer_bytes")
            slices, lengths = encode_chunk(to_canonical(body, name, layers, layer_bytes), layers, SliceShape.of(layer_bytes, chunk_tokens, dtype), codec)
            headers[f"x-amz-meta-{CODEC_META}"] = codec
            headers[f"x-amz-meta-{SLICE_BYTES_META}"] = base64.b64encode(struct.pack(f">{layers}I", *lengths)).decode("ascii")
            headers[f"x-amz-meta-{LAYER_CRC_META}"] = encode_layer_crcs([crc32c(s) for s in slices])
            self._call("PUT", self._object_path(key), b"".join(slices), _fit_metadata(headers), operation="PutObject")
            return
        if layout is not None and layout[1] <= MAX_CHECKSUMMED_LAYERS:
            name, layers, layer_bytes = layout
            if len(body) != layers * layer_bytes:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"chunk {key!r} has {len(body)} bytes, not layers x layer_bytes")
            headers[f"x-amz-meta-{LAYER_CRC_META}"] = encode_layer_crcs(layer_crcs(to_canonical(body, name, layers, layer_bytes), layers, layer_bytes))
        self._call("PUT", self._object_path(key), body, _fit_metadata(headers), operation="PutObject")

    def put_chunks(
        self,
        keys: Sequence[str],
        objects: Sequence[Buffer],
        *,
        layout: Optional[Tuple[Layout, int, int]] = None,
        concurrency: int = 8,
        codec: Optional[CodecName] = None,
        chunk_tokens: Optional[int] = None,
        dtype: Optional[KVDtype] = None,
        chain: bool = True,
        after: Optional[str] = None,
        tokens: Optional[Sequence[Sequence[int]]] = None,
        model: Optional[str] = None,
    ) -> None:
        """Writes chunk objects (each already in its stored layout), ``concurrency`` at a time,
        each as :meth:`put_chunk` does (encoded with ``codec`` when given). With ``chain`` (the
        default) the keys are one prefix in order: each chunk records the one before it, and the
        first records ``after`` (the chunk before ``keys[0]`` when they continue a prefix stored
        before). ``tokens``: each chunk's token ids, one list per key."""
        if len(keys) != len(objects):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "put_chunks needs one object per key")
        if tokens is not None and len(tokens) != len(keys):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "put_chunks needs one token list per key")

        if chain and after is not None and not recordable_after(after):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"after must be a key of at most {MAX_AFTER_KEY} printable ASCII characters")

        def before(i: int) -> Optional[str]:
            # A key of the batch that cannot be recorded (long, or not ASCII) starts no chain.
            key = None if not chain else keys[i - 1] if i > 0 else after
            return key if key is not None and recordable_after(key) else None

        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(keys)))) as pool:
            put = lambda i: self.put_chunk(  # noqa: E731
                keys[i], objects[i], layout=layout, codec=codec, chunk_tokens=chunk_tokens, dtype=dtype, after=before(i), tokens=None if tokens is None else tokens[i], model=model
            )
            for _ in pool.map(put, range(len(keys))):
                pass

    @overload
    def get_object(self, key: str, into: None = None) -> bytes: ...

    @overload
    def get_object(self, key: str, into: _B) -> _B: ...

    def get_object(self, key: str, into: Optional[Buffer] = None) -> Any:
        """A whole object (a plain S3 GET), read into ``into`` when given (it must be exactly the
        object's size) and returned, or returned as bytes."""
        deadline = _Deadline(self._config.deadline, "GetObject")
        try:
            return self._get_object(key, into, deadline)
        except (OSError, http.client.HTTPException) as error:
            if deadline.passed():
                raise deadline.error() from error
            raise ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"{key!r} broke off: {error}", operation_name="GetObject") from error
        except ObjectCacheError as error:
            if deadline.passed() and error.code.startswith("OC_ERR_CLIENT_"):
                raise deadline.error() from error
            raise
        finally:
            deadline.cancel()

    def _get_object(self, key: str, into: Optional[Buffer], deadline: _Deadline) -> Any:
        conn, response = self._send("GET", self._object_path(key), operation="GetObject", deadline=deadline)
        try:
            if into is None:
                data: Any = response.read()
            else:
                view = _writable_bytes(into)
                length = int(response.getheader("Content-Length") or -1)
                if length != len(view):
                    raise ObjectCacheError("OC_ERR_CLIENT_TARGET", f"{key!r} has {length} bytes; the buffer holds {len(view)}")
                got = 0
                while got < length:
                    n = response.readinto(view[got:])
                    if not n:
                        raise ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"{key!r} ended after {got} of {length} bytes")
                    got += n
                data = into
        except BaseException:
            conn.close()
            raise
        # Let go of the connection before it is pooled: the watchdog must not shut it then.
        if deadline.unwatch():
            conn.close()
            raise deadline.error()
        self._pool.give(conn, response)
        return data

    def head_bucket(self) -> None:
        """Raises ObjectCacheError unless the bucket exists and the key may use it."""
        self._call("HEAD", f"/{quote(self.bucket, safe='')}", operation="HeadBucket")

    def delete(self, key: str) -> None:
        """Deletes one object (S3 answers success whether or not it existed)."""
        self._call("DELETE", self._object_path(key), operation="DeleteObject")

    def list_keys(self, prefix: str = "", limit: Optional[int] = None) -> List[str]:
        """Every object key under ``prefix`` (ListObjectsV2, page by page), or the first
        ``limit`` of them."""
        keys: List[str] = []
        token: Optional[str] = None
        seen: Set[str] = set()
        # One deadline for every page: a server that never stops saying "truncated" cannot hold the call.
        deadline = _Deadline(self._config.deadline, "ListObjectsV2")
        try:
            while True:
                page = "" if limit is None else f"&max-keys={max(1, min(1000, limit - len(keys)))}"
                query = f"list-type=2&prefix={quote(prefix, safe='')}{page}" + (f"&continuation-token={quote(token, safe='')}" if token else "")
                root = ElementTree.fromstring(self._call("GET", f"/{quote(self.bucket, safe='')}?{query}", operation="ListObjectsV2", deadline=deadline))
                ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
                keys.extend(item.findtext(f"{ns}Key") or "" for item in root.iter(f"{ns}Contents"))
                token = root.findtext(f"{ns}NextContinuationToken")
                if limit is not None and len(keys) >= limit:
                    return keys[:limit]
                if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                    return keys
                if token in seen:
                    raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", "the listing repeats a continuation token: it would never end", operation_name="ListObjectsV2")
                seen.add(token)
        except ElementTree.ParseError as error:
            raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the listing is not XML: {error}", operation_name="ListObjectsV2") from error
        finally:
            deadline.cancel()

    def lookup(self, keys: Sequence[str], key_prefix: str = "", *, layers: Optional[int] = None, layer_bytes: Optional[int] = None, codecs: Optional[Sequence[str]] = None) -> int:
        """How many leading chunks of ``keys`` the store holds (one round trip); with the geometry,
        only chunks of exactly ``layers x layer_bytes`` bytes count, or with ``codecs`` chunks
        stored in one of those encodings ("none": raw) with a valid index."""
        document: Dict[str, Any] = {"keys": list(keys), "keyPrefix": key_prefix}
        if (layers is None) != (layer_bytes is None) or (codecs is not None and layers is None):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "layers and layer_bytes come together, and codecs needs them")
        if layers is not None:
            document.update(layers=layers, layerBytes=layer_bytes)
        if codecs is not None:
            document["codecs"] = list(codecs)
        body = json.dumps(document).encode("utf-8")
        answer = self._call("POST", f"/{quote(self.bucket, safe='')}?objectcache-lookup=", body, {"Content-Type": "application/json"}, operation="PrefixLookup", limit=ANSWER_BODY_LIMIT)
        matched = _json_answer(answer, "PrefixLookup").get("matched")
        # A count of what was asked: a whole number from 0 to the keys named (a bool is no count).
        if isinstance(matched, bool) or not isinstance(matched, int) or not 0 <= matched <= len(keys):
            raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the answer to PrefixLookup has no matched count between 0 and {len(keys)}: {answer[:200]!r}", operation_name="PrefixLookup")
        return matched

    def pin(self, keys: Sequence[str], until: Optional[datetime.datetime]) -> Optional[datetime.datetime]:
        """Retains ``keys`` of a budgeted bucket until ``until`` (an aware datetime): eviction never
        takes them before then; ``None`` removes their pins. Needs ``objectcache:PinObject`` on each
        key. Returns the time the pins hold until, or None."""
        if until is not None and until.tzinfo is None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "until must be an aware datetime (with a time zone)")
        stamp = None if until is None else until.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        body = json.dumps({"keys": list(keys), "until": stamp}).encode("utf-8")
        answer = _json_answer(
            self._call("POST", f"/{quote(self.bucket, safe='')}?objectcache-pin=", body, {"Content-Type": "application/json"}, operation="PinObjects", limit=ANSWER_BODY_LIMIT), "PinObjects"
        )
        held = answer.get("until")
        if held is None:
            return None
        try:
            if not isinstance(held, str):
                raise ValueError(held)
            return datetime.datetime.fromisoformat(held.replace("Z", "+00:00"))
        except ValueError as error:
            raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the answer to PinObjects has no time: {held!r}", operation_name="PinObjects") from error
