"""The client's settings in one frozen object, as botocore's ``Config`` is: passed as
``ObjectCacheClient(endpoint, bucket, credentials, config=Config(...))``, shared safely between
threads and clients, changed only by making another (``dataclasses.replace``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ._contract import DEFAULT_RETRIES
from .errors import ObjectCacheError

#: A call's overall deadline unless the client is given another, in seconds.
DEFAULT_DEADLINE_S = 300.0


@dataclass(frozen=True)
class Config:
    """How an :class:`~objectcache.ObjectCacheClient` talks to its gateways.

    ``timeout``: the longest wait for one socket operation, in seconds. ``deadline``: the longest
    one call may take in all, waits for ``Retry-After`` included (``None``: no overall deadline).
    ``retries``: how often a retryable refusal is tried again, as the one retry policy says
    (schemas/retry-policy.ts; :mod:`objectcache.retry`). ``max_idle_connections``: keep-alive
    connections kept for reuse. A value out of range is ``OC_ERR_CLIENT_USAGE``, naming it."""

    timeout: float = 60.0
    deadline: Optional[float] = DEFAULT_DEADLINE_S
    retries: int = DEFAULT_RETRIES
    max_idle_connections: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or not self.timeout > 0:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.deadline is not None and (isinstance(self.deadline, bool) or not isinstance(self.deadline, (int, float)) or not self.deadline > 0):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"deadline must be a positive number of seconds or None, got {self.deadline!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"retries must be a whole number of at least 0, got {self.retries!r}")
        if isinstance(self.max_idle_connections, bool) or not isinstance(self.max_idle_connections, int) or self.max_idle_connections < 0:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"max_idle_connections must be a whole number of at least 0, got {self.max_idle_connections!r}")
