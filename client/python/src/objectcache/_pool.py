"""The client's keep-alive connections to its gateways: one or several endpoints in front of the
same store, the one in use (the last that answered), and idle connections filed under the
endpoint each was opened to. Shared by the clients :meth:`ObjectCacheClient.with_limits` makes."""

from __future__ import annotations

import http.client
import threading
import weakref
from typing import List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from .errors import ObjectCacheError


class Endpoint(NamedTuple):
    #: scheme://host[:port], as requests are signed for it.
    url: str
    https: bool
    host: str
    port: Optional[int]


def endpoints_of(urls: Sequence[str]) -> List[Endpoint]:
    """The endpoints of gateway URLs, checked: at least one, each an http(s) URL."""
    if not urls:
        raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs at least one endpoint")
    endpoints = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"endpoint must be an http(s) URL, got {url!r}")
        endpoints.append(Endpoint(f"{parts.scheme}://{parts.netloc}", parts.scheme == "https", parts.hostname, parts.port))
    return endpoints


class ConnectionPool:
    """Connections to the endpoints, at most ``max_idle`` of them kept idle. Thread-safe."""

    def __init__(self, endpoints: Sequence[Endpoint], max_idle: int) -> None:
        self.endpoints: Tuple[Endpoint, ...] = tuple(endpoints)
        #: The endpoint in use: the last one that answered.
        self.current = 0
        self.idle: List[Tuple[int, http.client.HTTPConnection]] = []
        #: The endpoint each connection was opened to (forgotten with the connection).
        self._opened_to: weakref.WeakKeyDictionary[http.client.HTTPConnection, int] = weakref.WeakKeyDictionary()
        self._max_idle = max_idle
        self._lock = threading.Lock()

    def connect(self, index: int, timeout: float) -> http.client.HTTPConnection:
        _, https, host, port = self.endpoints[index]
        cls = http.client.HTTPSConnection if https else http.client.HTTPConnection
        conn = cls(host, port, timeout=timeout)
        with self._lock:
            self._opened_to[conn] = index
        return conn

    def take(self, index: int, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        """An idle connection to endpoint ``index`` (and True), else a new one (and False)."""
        with self._lock:
            for i in range(len(self.idle) - 1, -1, -1):
                if self.idle[i][0] == index:
                    return self.idle.pop(i)[1], True
        return self.connect(index, timeout), False

    def give(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """Files a connection whose response has been read to its end as idle, under the gateway
        it was opened to (not the one in use now: another thread may have moved on meanwhile)."""
        if response.will_close or not response.isclosed():
            conn.close()
            return
        with self._lock:
            index = self._opened_to.get(conn)
            # A connection to a gateway the client has moved on from is closed, not kept.
            if index == self.current and len(self.idle) < self._max_idle:
                self.idle.append((index, conn))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle = list(self.idle)
            self.idle.clear()
        for _, conn in idle:
            conn.close()
