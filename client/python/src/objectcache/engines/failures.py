"""What the engine adapters (engines.lmcache, engines.lmcache_l2, engines.sglang) do with a call
that failed: it becomes a miss or a skipped store, never an exception into the engine, and it is
counted and logged so that an operator sees it. A chunk missing from a run shortens the run, in
one place (:func:`fetch_run`)."""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, TypeVar

from ..errors import ObjectCacheError

_Name = TypeVar("_Name")

#: Codes that mean the configuration is wrong (the key, its secret or its policy), not that
#: something failed once: logged as errors at every call, so that an engine never runs for long
#: on a remote tier that only ever misses.
_POLICY_CODES = ("OC_ERR_ACCESS_DENIED", "OC_ERR_ACCESS_TENANT", "OC_ERR_AUTH_UNKNOWN_KEY", "OC_ERR_AUTH_SIGNATURE", "OC_ERR_CLIENT_USAGE")


def missing_chunk(error: BaseException, count: int) -> Optional[int]:
    """The index of the chunk a fetch of ``count`` chunks found missing (OC_ERR_CHUNK_MISSING's
    ``ChunkIndex``), when it is a whole number between 1 and ``count - 1``: what the run can be cut
    to. Anything else the server says there (``"x"``, ``"\u00b2"``, ``-1``, ``true``) is None."""
    if not isinstance(error, ObjectCacheError) or error.code != "OC_ERR_CHUNK_MISSING":
        return None
    value = error.details.get("ChunkIndex")
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value, flags=re.ASCII):
        value = int(value)
    return value if isinstance(value, int) and 0 < value < count else None


def fetch_run(names: Sequence[_Name], fetch: Callable[[Sequence[_Name]], int], failed: Callable[[BaseException, int], None]) -> int:
    """Fetches the leading run ``names`` with ``fetch(run)``, which returns how many of its leading
    names it filled; a chunk the gateway reports missing (:func:`missing_chunk`) shortens the run
    to the chunks before it, and it is tried once more. Any other failure, or a second one, is
    ``failed(error, len(run))`` and 0: a miss, never an exception into the engine."""
    run = names
    for attempt in range(2):
        try:
            return fetch(run)
        except Exception as error:  # a broken connection, a bug: a miss, never the engine's crash
            shorter = missing_chunk(error, len(run))
            if attempt == 0 and shorter is not None:
                run = run[:shorter]
                continue
            failed(error, len(run))
            return 0
    return 0


class EngineFailures(Dict[Tuple[str, str], int]):
    """Failures counted by ``(op, code)``: this dict itself (readable without Prometheus) and, when
    prometheus_client is importable (the engines depend on it), the counter ``metric``."""

    def __init__(self, metric: str, description: str, logger: logging.Logger, unit: str = "chunk(s)") -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._logger = logger
        self._unit = unit
        self._counter: Any = None
        try:
            from prometheus_client import Counter

            self._counter = Counter(metric, description, ["op", "code"])
        except Exception:  # pragma: no cover - a registry that already holds it, or no prometheus_client
            self._counter = None

    def miss(self, op: str, error: BaseException, count: int) -> None:
        """Counts one failed call of ``op`` (by its code) and logs it with the ``count`` items it
        served as a miss because of ``error``."""
        code = error.code if isinstance(error, ObjectCacheError) else type(error).__name__
        with self._lock:
            self[(op, code)] = self.get((op, code), 0) + 1
        if self._counter is not None:
            self._counter.labels(op=op, code=code).inc()
        if code in _POLICY_CODES:
            self._logger.error(
                "ObjectCache %s of %d %s refused for the key, served as a miss: check the key pair, and key_prefix and tenant against the key's policy (docs/access-control.md): %s",
                op,
                count,
                self._unit,
                error,
            )
            return
        level = logging.DEBUG if code == "OC_ERR_CHUNK_MISSING" else logging.WARNING
        self._logger.log(level, "ObjectCache %s of %d %s failed, served as a miss: %s", op, count, self._unit, error)

    def total(self) -> int:
        with self._lock:
            return sum(self.values())
