"""One request of the client, on the gateways in turn, under the retry policy
(:mod:`objectcache.retry`) and the call's deadline: signed, sent on a pooled keep-alive connection,
its refusal read as an :class:`~objectcache.ObjectCacheError`. The S3 calls (``_s3``) and the
layerwise GET (``_layerwise``) are made of these.

Nothing the server says is taken on trust: a redirect is refused (a write behind a redirecting
proxy is not "stored"), answers are read only up to a bound, and every call has one overall
deadline, past which its connection is shut down whatever the server still trickles
(``OC_ERR_CLIENT_TIMEOUT``)."""

from __future__ import annotations

import http.client
import json
import time
import xml.etree.ElementTree as ElementTree
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import quote

from ._contract import CODES_BY_ANSWER
from ._deadline import _Deadline
from ._pool import ConnectionPool
from ._signing import Signer
from .config import Config
from .errors import ObjectCacheError
from .retry import retry_delay

#: The part of an error answer's body that is read (the TypeScript client's ERROR_BODY_LIMIT).
ERROR_BODY_LIMIT = 64 * 1024
#: The longest answer to lookup or pin that is read (each is a few bytes of JSON).
ANSWER_BODY_LIMIT = 64 * 1024
#: The longest answer to another call that is read (a page of 1,000 listed keys is about 1 MB).
CALL_BODY_LIMIT = 16 * 1024 * 1024


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


def _early_refusal(conn: http.client.HTTPConnection, reused: bool) -> Optional[http.client.HTTPResponse]:
    """The refusal a server sent before it closed a request whose body was still being sent, or
    None (nothing arrived, or not a refusal: a half-sent request never succeeded). On a reused
    connection only the gateway's own refusal counts (it names its error code): anything else may
    be what a proxy wrote before closing the idle connection, and the request is sent again."""
    try:
        response = conn.getresponse()
    except (OSError, http.client.HTTPException):
        return None
    if response.status < 400:
        return None
    if reused and response.getheader("x-objectcache-error-code") is None:
        return None
    return response


class Transport:
    """What every call of the client is sent with: the bucket, the settings, the connection pool
    and the signer (set by ObjectCacheClient's constructor)."""

    bucket: str
    _config: Config
    _pool: ConnectionPool
    _signer: Signer

    def _send(
        self, method: str, path: str, body: bytes = b"", headers: Optional[Mapping[str, str]] = None, *, operation: Optional[str] = None, deadline: Optional[_Deadline] = None
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a signed request and returns the open response of a 1xx or 2xx status (or raises:
        a refusal as its error, a redirect as OC_ERR_CLIENT_PROTOCOL). ``operation`` names the
        request in errors, as the gateway's classification does; ``deadline`` bounds it all."""
        headers = dict(headers or {})
        if body:
            headers.setdefault("Content-Length", str(len(body)))
        attempt = 0
        unreachable = 0  # endpoints tried in turn that could not be reached
        while True:
            pool = self._pool
            index = pool.current
            timeout = self._config.timeout
            if deadline is not None:
                deadline.check()
            conn, reused = pool.take(index, timeout)
            if deadline is not None:
                deadline.watch(conn, timeout)
            elif conn.timeout != timeout:
                conn.timeout = timeout  # an idle connection a deadline (or another client's timeout) had set
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
            failure: Optional[OSError] = None
            early = False
            try:
                try:
                    conn.request(method, path, body=body or None, headers=self._signer.headers(method, pool.endpoints[index].url + path, body, headers))
                except (ConnectionResetError, BrokenPipeError):
                    # A refusal from the request line comes before the body is read: the gateway
                    # drains some of it, answers and closes. That answer, if it arrived, is the one.
                    early_response = _early_refusal(conn, reused)
                    if early_response is None:
                        raise
                    response, early = early_response, True
                else:
                    response = conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as error:
                conn.close()
                if deadline is not None and deadline.passed():
                    raise deadline.error() from error
                if reused:
                    continue  # a keep-alive connection the gateway had closed: once more, on a fresh one
                failure = error
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                if deadline is not None and deadline.passed():
                    raise deadline.error() from error
                if not isinstance(error, OSError):
                    raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the gateway's answer to {operation or method} is not HTTP: {error}", operation_name=operation) from error
                failure = error
            if failure is not None:
                unreachable += 1
                if unreachable >= len(pool.endpoints):
                    raise ObjectCacheError("OC_ERR_BACKEND_UNAVAILABLE", f"cannot reach the gateway at {pool.endpoints[index].url}: {failure}", operation_name=operation) from failure
                pool.current = (index + 1) % len(pool.endpoints)  # the next gateway
                continue
            if 200 <= response.status < 300:
                return conn, response
            if response.status < 200:
                # An interim answer (103 Early Hints ...) is never the final one: http.client skips only 100.
                conn.close()
                raise ObjectCacheError(
                    "OC_ERR_CLIENT_PROTOCOL", f"the gateway answered {operation or method} with an interim status {response.status} as if final", status=response.status, operation_name=operation
                )
            if response.status < 400:
                # Never followed, never taken as success: a write behind a redirecting proxy was not stored.
                conn.close()
                location = response.getheader("Location") or "nowhere"
                raise ObjectCacheError(
                    "OC_ERR_CLIENT_PROTOCOL",
                    f"the gateway answered {operation or method} with a redirect ({response.status} to {location[:200]}); redirects are not followed",
                    status=response.status,
                    operation_name=operation,
                )
            try:
                # Only so much of it: a broken or hostile server cannot make the client hold more.
                text = response.read(ERROR_BODY_LIMIT)
            except (http.client.HTTPException, OSError):
                text = b""  # cut off: the status and headers still say what went wrong
            refused = _error_from_response(response.status, response.headers, text, operation)
            if deadline is not None and deadline.unwatch():
                conn.close()
                raise deadline.error()
            if early:
                conn.close()  # it broke off mid-request: never pooled
            else:
                pool.give(conn, response)
            if refused.retryable and attempt < self._config.retries:
                attempt += 1
                delay = retry_delay(response.getheader("Retry-After"), attempt)
                remaining = None if deadline is None else deadline.remaining()
                # A wait that would outlast the call's deadline is not begun: the refusal is the answer.
                if remaining is not None and delay >= remaining:
                    raise refused
                time.sleep(delay)
                continue
            raise refused

    def _call(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Optional[Mapping[str, str]] = None,
        *,
        operation: Optional[str] = None,
        limit: int = CALL_BODY_LIMIT,
        deadline: Optional[_Deadline] = None,
    ) -> bytes:
        """One request and its whole answer (up to ``limit`` bytes), within ``deadline`` (the
        call's own, unless a caller making several requests gives one for all of them)."""
        own = deadline is None
        deadline = deadline if deadline is not None else _Deadline(self._config.deadline, operation)
        try:
            conn, response = self._send(method, path, body, headers, operation=operation, deadline=deadline)
            try:
                data = response.read(limit + 1)
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                if deadline.passed():
                    raise deadline.error() from error
                raise ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"the answer to {operation} broke off: {error}", operation_name=operation) from error
            if len(data) > limit:
                conn.close()
                raise ObjectCacheError("OC_ERR_CLIENT_PROTOCOL", f"the answer to {operation} is longer than {limit} bytes", operation_name=operation)
            # Let go of the connection before it is pooled: the watchdog must not shut it then.
            if deadline.unwatch():
                conn.close()
                raise deadline.error()
            self._pool.give(conn, response)
            return data
        finally:
            if own:
                deadline.cancel()

    def _object_path(self, key: str) -> str:
        return f"/{quote(self.bucket, safe='')}/{quote(key, safe='/~')}"
