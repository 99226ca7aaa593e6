"""The ObjectCache client: store a prefix's chunks, look it up in one round trip, and fetch its
KV layer by layer into a buffer the caller owns.

Requests are S3 requests signed with botocore's SigV4 (path-style), sent over keep-alive
``http.client`` connections. A 503 (SlowDown: the gateway is at its admission limit) is retried
after the ``Retry-After`` it names, up to ``retries`` times, before any byte of a stream is used;
a keep-alive connection the gateway closed meanwhile is replaced once, transparently.

Nothing the server says is taken on trust: a redirect is refused (a write behind a redirecting
proxy is not "stored"), a lookup's count must lie between 0 and the keys asked, answers are read
only up to a bound, and every call has one overall ``deadline``, past which its connection is
shut down whatever the server still trickles (``OC_ERR_CLIENT_TIMEOUT``).
"""
from __future__ import annotations

import base64
import datetime
import http.client
import json
import heapq
import os
import re
import socket
import struct
import threading
import time
import weakref
import xml.etree.ElementTree as ElementTree
import copy
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar, Union, cast, overload
from urllib.parse import quote, urlsplit

from botocore.auth import S3SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]

from crc32c import crc32c

from ._contract import AFTER_KEY_PATTERN, AFTER_META as AFTER_META
from ._contract import CODEC_META, CODES_BY_ANSWER, DESCRIPTOR_VERSION, LAYER_CRC_META, MAX_CHECKSUMMED_LAYERS, RAW_CODEC, SLICE_BYTES_META
from ._contract import DESCRIPTOR_HEADER as DESCRIPTOR_HEADER
from ._contract import MAX_HEADER_DESCRIPTOR_BYTES as MAX_HEADER_DESCRIPTOR_BYTES
from ._contract import MAX_AFTER_KEY as MAX_AFTER_KEY
from .errors import ObjectCacheError
from .layouts import encode_layer_crcs, layer_crcs, to_canonical
from .stream import Geometry, OnLayerReady, Place, ScatterGeometry, SegmentDecoder, read_frames
from .types import Buffer as Buffer
from .types import CodecName, Descriptor, EndSummary, KVDtype, Layout, Mode, Transport

#: The longest Retry-After honoured, in seconds.
MAX_RETRY_AFTER_S = 30.0
#: The part of an error answer's body that is read (the TypeScript client's ERROR_BODY_LIMIT).
ERROR_BODY_LIMIT = 64 * 1024
#: The longest answer to lookup or pin that is read (each is a few bytes of JSON).
ANSWER_BODY_LIMIT = 64 * 1024
#: The longest answer to another call that is read (a page of 1,000 listed keys is about 1 MB).
CALL_BODY_LIMIT = 16 * 1024 * 1024
#: A call's overall deadline unless the client is given another, in seconds.
DEFAULT_DEADLINE_S = 300.0


class _Watchdog:
    """One daemon thread for every call's deadline: at each one's time it runs its ``expire``."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: List[Tuple[float, int, List[Any]]] = []
        self._seq = 0
        self._cancelled = 0
        self._thread: Optional[threading.Thread] = None

    def add(self, at: float, expire: Callable[[], None]) -> List[Any]:
        entry: List[Any] = [expire]
        with self._cv:
            self._seq += 1
            # Cancelled deadlines (most calls end well before theirs) are dropped once they are
            # half the heap, rather than kept until their time.
            if self._cancelled > 1024 and self._cancelled * 2 > len(self._heap):
                self._heap = [item for item in self._heap if item[2][0] is not None]
                heapq.heapify(self._heap)
                self._cancelled = 0
            heapq.heappush(self._heap, (at, self._seq, entry))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="objectcache-deadlines", daemon=True)
                self._thread.start()
            self._cv.notify()
        return entry

    def cancel(self, entry: List[Any]) -> None:
        with self._cv:
            if entry[0] is not None:
                entry[0] = None
                self._cancelled += 1

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap:
                    self._cv.wait()
                at, _, entry = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                heapq.heappop(self._heap)
                expire = entry[0]
                if expire is None:
                    self._cancelled = max(0, self._cancelled - 1)
            if expire is not None:
                try:
                    expire()
                except Exception:  # pragma: no cover - an expiry never fails the watchdog
                    pass


_WATCHDOG = _Watchdog()


def _new_watchdog() -> None:
    """A forked child has no watchdog thread (only the forking thread is copied): a fresh one."""
    global _WATCHDOG
    _WATCHDOG = _Watchdog()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_watchdog)


class _Deadline:
    """One call's overall deadline. Past it the connection the call uses is shut down (a server
    that trickles bytes cannot hold the call), and the call fails with OC_ERR_CLIENT_TIMEOUT."""

    def __init__(self, seconds: Optional[float], operation: Optional[str]) -> None:
        self.seconds = seconds
        self.operation = operation
        self.at = None if seconds is None else time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None
        self._entry = None if self.at is None else _WATCHDOG.add(self.at, self._expire)

    def _expire(self) -> None:
        # Shut while holding the lock: a connection the call has let go of (unwatch) is never shut.
        with self._lock:
            self.expired = True
            if self._conn is not None:
                _shut(self._conn)

    def watch(self, conn: http.client.HTTPConnection, timeout: float) -> None:
        """The connection the call uses from now on (shut down at the deadline); ``timeout``, the
        client's wait for one socket operation, is cut to what is left of the deadline."""
        with self._lock:
            self._conn = conn
            expired = self.expired
        if expired:
            _shut(conn)
        remaining = self.remaining()
        conn.timeout = timeout if remaining is None else max(0.001, min(timeout, remaining))
        if conn.sock is not None:
            conn.sock.settimeout(conn.timeout)

    def remaining(self) -> Optional[float]:
        return None if self.at is None else self.at - time.monotonic()

    def error(self) -> ObjectCacheError:
        return ObjectCacheError("OC_ERR_CLIENT_TIMEOUT", f"{self.operation or 'the call'} did not finish within its deadline of {self.seconds} s", operation_name=self.operation)

    def check(self) -> None:
        remaining = self.remaining()
        if self.expired or (remaining is not None and remaining <= 0):
            raise self.error()

    def unwatch(self) -> bool:
        """The call is done with its connection (about to be pooled): the deadline no longer shuts
        it. Returns whether the deadline had passed first (then the connection is not to be pooled)."""
        with self._lock:
            self._conn = None
            return self.expired

    def cancel(self) -> None:
        if self._entry is not None:
            _WATCHDOG.cancel(self._entry)
        self.unwatch()


def _shut(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

_B = TypeVar("_B", bound=Buffer)


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


def _writable_bytes(target: Any) -> memoryview:
    try:
        view = memoryview(target)
    except TypeError as error:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "target must support the buffer protocol (bytearray, memoryview, numpy array)") from error
    if view.readonly:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "target is read-only")
    if not view.c_contiguous:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "target must be C-contiguous")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _error_from_response(status: int, headers: http.client.HTTPMessage, body: bytes, operation: Optional[str]) -> ObjectCacheError:
    """A refused request as an ObjectCacheError: the stable code (``x-objectcache-error-code``, else
    one for the status), whether a retry may succeed (``x-objectcache-retryable``, else the code's),
    and the request id (``x-amz-request-id``, else the XML document's RequestId)."""
    s3_code, message = "Unknown", f"the gateway answered {status}"
    details: Dict[str, Any] = {}
    try:
        root = ElementTree.fromstring(body)
        s3_code = root.findtext("Code") or s3_code
        message = root.findtext("Message") or message
        # The error document's other elements (Key, ChunkIndex, BucketName, RequestId ...).
        details = {child.tag: child.text for child in root if child.tag not in ("Code", "Message")}
    except ElementTree.ParseError:
        pass
    # An answer of the store relayed as it is carries no code of ours: the one its status and S3
    # code stand for (404 NoSuchKey is OC_ERR_STORE_NO_SUCH_KEY), where one does.
    code = headers.get("x-objectcache-error-code") or CODES_BY_ANSWER.get((status, s3_code)) or ("OC_ERR_BACKEND_UNAVAILABLE" if status == 503 else "OC_ERR_INTERNAL")
    said = headers.get("x-objectcache-retryable")
    retryable = said == "true" if said in ("true", "false") else None
    request_id = headers.get("x-amz-request-id") or details.get("RequestId")
    return ObjectCacheError(code, message, status=status, details={**details, "S3Code": s3_code}, retryable=retryable, request_id=request_id, operation_name=operation)



def _json_answer(data: bytes, operation: str) -> Dict[str, Any]:
    """A JSON object the gateway answered; anything else is OC_ERR_CLIENT_PROTOCOL."""
    try:
        answer = json.loads(data)
    except (ValueError, RecursionError) as error:  # RecursionError: nesting deeper than the parser goes
        raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the answer to {operation} is not JSON: {data[:200]!r}", operation_name=operation) from error
    if not isinstance(answer, dict):
        raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the answer to {operation} is not a JSON object: {data[:200]!r}", operation_name=operation)
    return answer

class ObjectCacheClient:
    """A client of one gateway and bucket. Thread-safe; close it (or use ``with``) when done."""

    def __init__(
        self,
        endpoint: Union[str, Sequence[str], None] = None,
        bucket: Optional[str] = None,
        credentials: Union[Tuple[str, str], Credentials, None] = None,
        region: Optional[str] = None,
        *,
        endpoint_url: Union[str, Sequence[str], None] = None,
        region_name: Optional[str] = None,
        aws_access_key_id: Optional[str] = None,
        aws_secret_access_key: Optional[str] = None,
        timeout: float = 60.0,
        retries: int = 3,
        max_idle_connections: int = 8,
        deadline: Optional[float] = DEFAULT_DEADLINE_S,
    ) -> None:
        """``endpoint``: a gateway URL, or several gateways in front of the same store (a request
        that cannot reach one goes to the next; the client keeps the one that answered).

        ``timeout``: the longest wait for one socket operation; ``deadline``: the longest one call
        may take in all, waits for ``Retry-After`` included (``None``: no overall deadline);
        ``retries``: how often a retryable refusal is tried again. :meth:`with_limits` gives a
        client sharing this one's connections with other limits (an engine's critical path).

        boto3's names work too: ``ObjectCacheClient(endpoint_url=..., bucket=...,
        aws_access_key_id=..., aws_secret_access_key=..., region_name=...)``. ``region`` defaults
        to ``us-east-1``."""
        if endpoint is not None and endpoint_url is not None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "give endpoint or endpoint_url, not both")
        if region is not None and region_name is not None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "give region or region_name, not both")
        if credentials is not None and (aws_access_key_id is not None or aws_secret_access_key is not None):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "give credentials or aws_access_key_id and aws_secret_access_key, not both")
        endpoint = endpoint if endpoint is not None else endpoint_url
        if endpoint is None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs an endpoint (endpoint or endpoint_url)")
        if bucket is None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs a bucket")
        if credentials is None:
            if aws_access_key_id is None or aws_secret_access_key is None:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs credentials: (key id, secret), or aws_access_key_id and aws_secret_access_key")
            credentials = (aws_access_key_id, aws_secret_access_key)
        region = region if region is not None else region_name if region_name is not None else "us-east-1"
        urls = [endpoint] if isinstance(endpoint, str) else list(endpoint)
        if not urls:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs at least one endpoint")
        self._endpoints: List[Tuple[str, bool, str, Optional[int]]] = []
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"endpoint must be an http(s) URL, got {url!r}")
            self._endpoints.append((f"{parts.scheme}://{parts.netloc}", parts.scheme == "https", parts.hostname, parts.port))
        self._current = 0
        self.bucket = bucket
        creds = credentials if isinstance(credentials, Credentials) else Credentials(credentials[0], credentials[1])
        self._auth = S3SigV4Auth(creds, "s3", region)
        if deadline is not None and not deadline > 0:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"deadline must be a positive number of seconds or None, got {deadline!r}")
        if retries < 0:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"retries must be at least 0, got {retries!r}")
        self._timeout = timeout
        self._deadline = deadline
        self._retries = retries
        self._idle: List[Tuple[int, http.client.HTTPConnection]] = []
        #: The endpoint each connection was opened to (forgotten with the connection).
        self._opened_to: "weakref.WeakKeyDictionary[http.client.HTTPConnection, int]" = weakref.WeakKeyDictionary()
        self._max_idle = max_idle_connections
        self._lock = threading.Lock()

    def with_limits(self, *, deadline: Optional[float] = None, retries: Optional[int] = None) -> "ObjectCacheClient":
        """A client of the same gateways, bucket and key that shares this one's connections, with
        another overall ``deadline`` per call and ``retries`` (for an engine's critical path: a
        short deadline and no waiting out a ``Retry-After``). Closing either closes the shared
        idle connections."""
        other = copy.copy(self)
        if deadline is not None:
            if not deadline > 0:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"deadline must be a positive number of seconds, got {deadline!r}")
            other._deadline = deadline
        if retries is not None:
            if retries < 0:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"retries must be at least 0, got {retries!r}")
            other._retries = retries
        return other

    # -- connections -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The gateway in use."""
        return self._endpoints[self._current][0]

    def _connect(self, index: int) -> http.client.HTTPConnection:
        _, https, host, port = self._endpoints[index]
        cls = http.client.HTTPSConnection if https else http.client.HTTPConnection
        conn = cls(host, port, timeout=self._timeout)
        with self._lock:
            self._opened_to[conn] = index
        return conn

    def _take(self, index: int) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i][0] == index:
                    return self._idle.pop(i)[1], True
        return self._connect(index), False

    def _give(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """Files a connection whose response has been read to its end as idle, under the gateway
        it was opened to (not the one in use now: another thread may have moved on meanwhile)."""
        if response.will_close or not response.isclosed():
            conn.close()
            return
        with self._lock:
            index = self._opened_to.get(conn)
            # A connection to a gateway the client has moved on from is closed, not kept.
            if index == self._current and len(self._idle) < self._max_idle:
                self._idle.append((index, conn))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            # Emptied in place: a client made by with_limits() shares this very list.
            idle = list(self._idle)
            self._idle.clear()
        for _, conn in idle:
            conn.close()

    def __enter__(self) -> "ObjectCacheClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------------

    def _sign(self, index: int, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Dict[str, str]:
        request = AWSRequest(method=method, url=self._endpoints[index][0] + path, data=body, headers=dict(headers))
        self._auth.add_auth(request)
        return {name: value for name, value in request.headers.items()}

    def _send(self, method: str, path: str, body: bytes = b"", headers: Optional[Mapping[str, str]] = None, *, operation: Optional[str] = None, deadline: Optional[_Deadline] = None) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a signed request and returns the open response of a 1xx or 2xx status (or raises:
        a refusal as its error, a redirect as OC_ERR_CLIENT_PROTOCOL). ``operation`` names the
        request in errors, as the gateway's classification does; ``deadline`` bounds it all."""
        headers = dict(headers or {})
        if body:
            headers.setdefault("Content-Length", str(len(body)))
        attempt = 0
        unreachable = 0  # endpoints tried in turn that could not be reached
        while True:
            index = self._current
            if deadline is not None:
                deadline.check()
            conn, reused = self._take(index)
            if deadline is not None:
                deadline.watch(conn, self._timeout)
            elif conn.timeout != self._timeout:
                conn.timeout = self._timeout  # an idle connection a deadline had cut short
                if conn.sock is not None:
                    conn.sock.settimeout(self._timeout)
            failure: Optional[OSError] = None
            try:
                conn.request(method, path, body=body or None, headers=self._sign(index, method, path, body, headers))
                response = conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as error:
                conn.close()
                if deadline is not None and deadline.expired:
                    raise deadline.error() from error
                if reused:
                    continue  # a keep-alive connection the gateway had closed: once more, on a fresh one
                failure = error
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                if deadline is not None and deadline.expired:
                    raise deadline.error() from error
                if not isinstance(error, OSError):
                    raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the gateway's answer to {operation or method} is not HTTP: {error}", operation_name=operation) from error
                failure = error
            if failure is not None:
                unreachable += 1
                if unreachable >= len(self._endpoints):
                    raise ObjectCacheError("OC_ERR_BACKEND_UNAVAILABLE", f"cannot reach the gateway at {self._endpoints[index][0]}: {failure}", operation_name=operation) from failure
                self._current = (index + 1) % len(self._endpoints)  # the next gateway
                continue
            if 200 <= response.status < 300:
                return conn, response
            if response.status < 200:
                # An interim answer (103 Early Hints ...) is never the final one: http.client skips only 100.
                conn.close()
                raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the gateway answered {operation or method} with an interim status {response.status} as if final", status=response.status, operation_name=operation)
            if response.status < 400:
                # Never followed, never taken as success: a write behind a redirecting proxy was not stored.
                conn.close()
                location = response.getheader("Location") or "nowhere"
                raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the gateway answered {operation or method} with a redirect ({response.status} to {location[:200]}); redirects are not followed", status=response.status, operation_name=operation)
            try:
                # Only so much of it: a broken or hostile server cannot make the client hold more.
                text = response.read(ERROR_BODY_LIMIT)
            except (http.client.HTTPException, OSError):
                text = b""  # cut off: the status and headers still say what went wrong
            refused = _error_from_response(response.status, response.headers, text, operation)
            if deadline is not None and deadline.unwatch():
                conn.close()
                raise deadline.error()
            self._give(conn, response)
            if refused.retryable and attempt < self._retries:
                attempt += 1
                retry_after = response.getheader("Retry-After")
                try:
                    delay = float(retry_after) if retry_after is not None else 0.1 * 2**attempt
                except ValueError:
                    delay = 0.1 * 2**attempt
                delay = min(max(delay, 0.0), MAX_RETRY_AFTER_S) if delay == delay else MAX_RETRY_AFTER_S
                remaining = None if deadline is None else deadline.remaining()
                # A wait that would outlast the call's deadline is not begun: the refusal is the answer.
                if remaining is not None and delay >= remaining:
                    raise refused
                time.sleep(delay)
                continue
            raise refused

    def _call(self, method: str, path: str, body: bytes = b"", headers: Optional[Mapping[str, str]] = None, *, operation: Optional[str] = None, limit: int = CALL_BODY_LIMIT, deadline: Optional[_Deadline] = None) -> bytes:
        """One request and its whole answer (up to ``limit`` bytes), within ``deadline`` (the
        call's own, unless a caller making several requests gives one for all of them)."""
        own = deadline is None
        deadline = deadline if deadline is not None else _Deadline(self._deadline, operation)
        try:
            conn, response = self._send(method, path, body, headers, operation=operation, deadline=deadline)
            try:
                data = response.read(limit + 1)
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                if deadline.expired:
                    raise deadline.error() from error
                raise ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"the answer to {operation} broke off: {error}", operation_name=operation) from error
            if len(data) > limit:
                conn.close()
                raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the answer to {operation} is longer than {limit} bytes", operation_name=operation)
            # Let go of the connection before it is pooled: the watchdog must not shut it then.
            if deadline.unwatch():
                conn.close()
                raise deadline.error()
            self._give(conn, response)
            return data
        finally:
            if own:
                deadline.cancel()

    def _object_path(self, key: str) -> str:
        return f"/{quote(self.bucket, safe='')}/{quote(key, safe='/~')}"

    # -- S3 ----------------------------------------------------------------------------------

    def ensure_bucket(self) -> None:
        """Creates the bucket unless it exists."""
        try:
            self._call("PUT", f"/{quote(self.bucket, safe='')}", operation="CreateBucket")
        except ObjectCacheError as error:
            if error.details.get("S3Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def put_chunk(self, key: str, data: Buffer, *, layout: Optional[Tuple[Layout, int, int]] = None, codec: Optional[CodecName] = None, chunk_tokens: Optional[int] = None, dtype: Optional[KVDtype] = None, after: Optional[str] = None) -> None:
        """Writes one chunk object (already in its stored layout). With
        ``layout=(layout, layers, layer_bytes)`` every layer's CRC-32C is recorded in the object's
        metadata, so the gateway verifies each slice it serves (up to 256 layers). ``after`` names
        the chunk before it in its prefix (recorded with the object, ``objectcache-after``): a
        budgeted bucket then never evicts that one first (docs/capacity.md).

        With ``codec`` (a name of :mod:`objectcache.codecs` other than ``none``; needs ``layout``,
        ``chunk_tokens`` and the KV ``dtype``) the chunk is stored encoded: each layer's slice (in
        KV_L2TD form, whatever ``layout``) encoded on its own, back to back, with the index and
        the encoded slices' CRC-32Cs in its metadata (schemas/wire-format.md section 6). Fetch it
        with a descriptor that names the codec (``descriptor(..., codecs=[codec], layout="KV_L2TD")``)."""
        # Any: NumPy arrays are buffers, which typeshed says only from Python 3.12 on.
        body = data if isinstance(data, bytes) else memoryview(cast(Any, data)).tobytes()
        headers = {"Content-Type": "application/octet-stream"}
        if after is not None and len(after) <= MAX_AFTER_KEY and re.fullmatch(AFTER_KEY_PATTERN, after):
            headers[f"x-amz-meta-{AFTER_META}"] = after
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
            self._call("PUT", self._object_path(key), b"".join(slices), headers, operation="PutObject")
            return
        if layout is not None and layout[1] <= MAX_CHECKSUMMED_LAYERS:
            name, layers, layer_bytes = layout
            if len(body) != layers * layer_bytes:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"chunk {key!r} has {len(body)} bytes, not layers x layer_bytes")
            headers[f"x-amz-meta-{LAYER_CRC_META}"] = encode_layer_crcs(layer_crcs(to_canonical(body, name, layers, layer_bytes), layers, layer_bytes))
        self._call("PUT", self._object_path(key), body, headers, operation="PutObject")

    def put_chunks(self, keys: Sequence[str], objects: Sequence[Buffer], *, layout: Optional[Tuple[Layout, int, int]] = None, concurrency: int = 8, codec: Optional[CodecName] = None, chunk_tokens: Optional[int] = None, dtype: Optional[KVDtype] = None, chain: bool = True) -> None:
        """Writes chunk objects (each already in its stored layout), ``concurrency`` at a time,
        each as :meth:`put_chunk` does (encoded with ``codec`` when given). With ``chain`` (the
        default) the keys are one prefix in order: each chunk records the one before it."""
        if len(keys) != len(objects):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "put_chunks needs one object per key")
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(keys)))) as pool:
            put = lambda i: self.put_chunk(keys[i], objects[i], layout=layout, codec=codec, chunk_tokens=chunk_tokens, dtype=dtype, after=keys[i - 1] if chain and i > 0 else None)  # noqa: E731
            for _ in pool.map(put, range(len(keys))):
                pass

    @overload
    def get_object(self, key: str, into: None = None) -> bytes: ...

    @overload
    def get_object(self, key: str, into: _B) -> _B: ...

    def get_object(self, key: str, into: Optional[Buffer] = None) -> Any:
        """A whole object (a plain S3 GET), read into ``into`` when given (it must be exactly the
        object's size) and returned, or returned as bytes."""
        deadline = _Deadline(self._deadline, "GetObject")
        try:
            return self._get_object(key, into, deadline)
        except (OSError, http.client.HTTPException) as error:
            if deadline.expired:
                raise deadline.error() from error
            raise ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"{key!r} broke off: {error}", operation_name="GetObject") from error
        except ObjectCacheError as error:
            if deadline.expired and error.code.startswith("OC_ERR_CLIENT_"):
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
        self._give(conn, response)
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
        deadline = _Deadline(self._deadline, "ListObjectsV2")
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
        answer = _json_answer(self._call("POST", f"/{quote(self.bucket, safe='')}?objectcache-pin=", body, {"Content-Type": "application/json"}, operation="PinObjects", limit=ANSWER_BODY_LIMIT), "PinObjects")
        held = answer.get("until")
        if held is None:
            return None
        try:
            if not isinstance(held, str):
                raise ValueError(held)
            return datetime.datetime.fromisoformat(held.replace("Z", "+00:00"))
        except ValueError as error:
            raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the answer to PinObjects has no time: {held!r}", operation_name="PinObjects") from error

    # -- the layerwise GET -------------------------------------------------------------------

    @staticmethod
    def descriptor(keys: Sequence[str], *, layers: int, chunk_tokens: int, layer_bytes: int, layout: Layout = "KV_L2TD", mode: Mode = "auto", key_prefix: Optional[str] = None, codecs: Optional[Sequence[CodecName]] = None, **extra: Any) -> Descriptor:
        """A descriptor for ``keys`` (other fields, such as layerRange, tenant or computeMsPerLayer, as keywords).

        ``mode``: ``auto`` (the gateway streams layer by layer at or above its size threshold,
        chunk by chunk below it, as the TypeScript client's default), ``layerwise`` or ``chunkwise``.
        ``key_prefix``: prepended to every key (the descriptor's ``keyPrefix``, as ``objectcache
        seed`` writes it), so long prefixes need not repeat it.
        ``codecs``: the encodings this client decodes (``"none"``: raw chunks); the chunks come as
        stored and each layer is decoded into the target before it is announced (fetch with the
        KV ``dtype``)."""
        document: Descriptor = {"version": DESCRIPTOR_VERSION, "keys": list(keys), "layers": layers, "chunkTokens": chunk_tokens, "layerBytes": layer_bytes, "layout": layout, "delivery": "layer-major", "mode": mode}
        if key_prefix is not None:
            document["keyPrefix"] = key_prefix
        if codecs is not None:
            document["codecs"] = list(codecs)
        document.update(cast(Descriptor, extra))  # the caller's fields as given; the gateway checks them
        return document

    def _open(self, descriptor: Descriptor, transport: Transport, deadline: _Deadline) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse, str]:
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

    def _stream(self, descriptor: Descriptor, geometry: Geometry, transport: Transport, opened: List[Tuple[str, int]], dtype: Optional[KVDtype] = None) -> Generator[Tuple[int, memoryview], None, EndSummary]:
        """The ready layers of one fetch, then (as the generator's value) the END summary. The
        connection goes back to the pool only after a complete stream; closing the generator
        early closes it, which the gateway sees as the client leaving."""
        codecs = descriptor.get("codecs")
        if codecs is not None and dtype is None and any(c != RAW_CODEC for c in codecs):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "decoding encoded chunks needs the KV dtype: fetch(..., dtype=...)")
        deadline = _Deadline(self._deadline, "DescriptorGet")
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
                raise deadline.error() if deadline.expired else ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"the stream broke off: {error}") from error
            except ObjectCacheError as error:
                # Cut off at the deadline: the stream's end was the watchdog's, not the gateway's.
                if deadline.expired and error.code.startswith("OC_ERR_CLIENT_"):
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
                self._give(conn, response)
            else:
                conn.close()

    def layers(self, descriptor: Descriptor, target: Optional[Buffer] = None, *, layer_stride: Optional[int] = None, transport: Transport = "auto", dtype: Optional[KVDtype] = None) -> Iterator[Tuple[int, memoryview]]:
        """Yields ``(layer, view)`` as each layer lands in ``target``; leaving the loop early
        cancels the download (the connection is closed, the gateway stops reading)."""
        geometry, _ = self._geometry(descriptor, target, layer_stride)
        yield from self._stream(descriptor, geometry, transport, [], dtype)

    def fetch(self, descriptor: Descriptor, target: Optional[Buffer] = None, on_layer_ready: Optional[OnLayerReady] = None, *, layer_stride: Optional[int] = None, transport: Transport = "auto", dtype: Optional[KVDtype] = None) -> FetchResult:
        """Fetches the prefix's KV: every layer lands in ``target`` (allocated when absent) at
        ``(layer - first) * layer_stride``, each announced through ``on_layer_ready(layer, view)``
        as its frame ends and its CRC-32C checks (decoded first, when the descriptor names
        ``codecs``: then ``dtype`` is the KV's, bfloat16, float16 or float32). Raises
        ObjectCacheError with the stable codes."""
        geometry, target = self._geometry(descriptor, target, layer_stride)
        return self._run(descriptor, geometry, target, on_layer_ready, transport, dtype)

    def fetch_into(self, descriptor: Descriptor, place: Place, on_layer_ready: Optional[Callable[[int], None]] = None, *, transport: Transport = "auto", dtype: Optional[KVDtype] = None) -> FetchResult:
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

    def _run(self, descriptor: Descriptor, geometry: Geometry, target: Any, on_layer_ready: Optional[OnLayerReady], transport: Transport, dtype: Optional[KVDtype] = None) -> FetchResult:
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
