"""Every call's overall deadline: one watchdog thread shuts down the connection of a call whose
time has passed, whatever the server still trickles, and the call fails with
``OC_ERR_CLIENT_TIMEOUT``."""

from __future__ import annotations

import heapq
import http.client
import os
import socket
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

from .errors import ObjectCacheError


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

    def passed(self) -> bool:
        """Whether the deadline has passed: the watchdog has expired it, or its time is up (a
        socket timeout cut to what was left of it may fire just before the watchdog does)."""
        remaining = self.remaining()
        return self.expired or (remaining is not None and remaining <= 0)

    def remaining(self) -> Optional[float]:
        return None if self.at is None else self.at - time.monotonic()

    def error(self) -> ObjectCacheError:
        return ObjectCacheError("OC_ERR_CLIENT_TIMEOUT", f"{self.operation or 'the call'} did not finish within its deadline of {self.seconds} s", operation_name=self.operation)

    def check(self) -> None:
        if self.passed():
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
