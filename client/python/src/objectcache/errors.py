"""Errors with the gateway's stable codes (the README's error table)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

#: The codes of the README's error table whose Retry column says yes: sending the same request
#: again may succeed. Used when an answer does not say (a gateway older than the
#: ``x-objectcache-retryable`` header and the ERROR frame's ``retryable``). The TypeScript tests
#: check this set against the gateway's registry (schemas/errors.ts).
RETRYABLE_CODES = frozenset(
    {
        "OC_ERR_ADMISSION_LIMIT",
        "OC_ERR_BACKEND_TIMEOUT",
        "OC_ERR_BACKEND_UNAVAILABLE",
        "OC_ERR_CHUNK_CHANGED",
        "OC_ERR_POOL_BUSY",
        "OC_ERR_SCHEDULER_CLOSED",
    }
)


class ObjectCacheError(Exception):
    """A failure with a stable ``OC_ERR_*`` code.

    Codes come from the gateway (the ``x-objectcache-error-code`` header of an S3 error response,
    or the ``code`` of an ERROR frame) or from this client (``OC_ERR_CLIENT_*``: a malformed
    stream, a CRC mismatch, a truncated stream, a target too small, a wrong argument).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: Optional[int] = None,
        details: Optional[Mapping[str, Any]] = None,
        retryable: Optional[bool] = None,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(f"{code}: {message}" + (f" (request {request_id})" if request_id else ""))
        self.code = code
        self.message = message
        #: The HTTP status of the error response, when there was one.
        self.status = status
        #: Extra fields: the S3 error code, the chunk, key or layer an ERROR frame names.
        self.details: Mapping[str, Any] = dict(details or {})
        #: Whether sending the same request again may succeed: as the gateway answered, else as
        #: the error table says for the code.
        self.retryable: bool = retryable if retryable is not None else code in RETRYABLE_CODES
        #: The gateway's id of the request (``x-amz-request-id``), as its log lines name it.
        self.request_id = request_id
        #: As botocore's ``ClientError.response``: the parsed answer, for code written for boto3.
        self.response: Mapping[str, Any] = {
            "Error": {"Code": self.details.get("S3Code", code), "Message": message},
            "ResponseMetadata": {"RequestId": request_id, **({"HTTPStatusCode": status} if status is not None else {})},
        }
