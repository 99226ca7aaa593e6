"""Errors with the gateway's stable codes (the README's error table)."""
from __future__ import annotations

from typing import Any, Mapping, Optional


class ObjectCacheError(Exception):
    """A failure with a stable ``OC_ERR_*`` code.

    Codes come from the gateway (the ``x-objectcache-error-code`` header of an S3 error response,
    or the ``code`` of an ERROR frame) or from this client (``OC_ERR_CLIENT_*``: a malformed
    stream, a CRC mismatch, a truncated stream, a target too small, a wrong argument).
    """

    def __init__(self, code: str, message: str, *, status: Optional[int] = None, details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        #: The HTTP status of the error response, when there was one.
        self.status = status
        #: Extra fields: the S3 error code, the chunk, key or layer an ERROR frame names.
        self.details: Mapping[str, Any] = dict(details or {})

    @property
    def retryable(self) -> bool:
        return self.status == 503
