"""Errors with the gateway's stable codes (the README's error table)."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

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
        "OC_ERR_KEY_CONCURRENCY",
        "OC_ERR_POOL_BUSY",
        "OC_ERR_SCHEDULER_CLOSED",
    }
)


#: Every code of the README's error table (the gateway's registry, schemas/errors.ts). An ERROR
#: frame with another code (from a newer gateway) is raised as OC_ERR_INTERNAL, its code kept in
#: ``details["Code"]``. The TypeScript tests check this set against the registry.
KNOWN_CODES = frozenset(
    {
        "OC_ERR_ACCESS_DENIED",
        "OC_ERR_ACCESS_RESERVED",
        "OC_ERR_ACCESS_TENANT",
        "OC_ERR_ADMISSION_LIMIT",
        "OC_ERR_AUTH_ALGORITHM",
        "OC_ERR_AUTH_CLOCK_SKEW",
        "OC_ERR_AUTH_EXPIRED",
        "OC_ERR_AUTH_EXPIRES_RANGE",
        "OC_ERR_AUTH_FORBIDDEN_HEADER",
        "OC_ERR_AUTH_HEADERS_NOT_SIGNED",
        "OC_ERR_AUTH_MALFORMED",
        "OC_ERR_AUTH_MISSING",
        "OC_ERR_AUTH_MULTIPLE",
        "OC_ERR_AUTH_NOT_YET_VALID",
        "OC_ERR_AUTH_SCOPE",
        "OC_ERR_AUTH_SIGNATURE",
        "OC_ERR_AUTH_SIGV2_DISABLED",
        "OC_ERR_AUTH_UNKNOWN_KEY",
        "OC_ERR_BACKEND_PROTOCOL",
        "OC_ERR_BACKEND_RANGE",
        "OC_ERR_BACKEND_TIMEOUT",
        "OC_ERR_BACKEND_UNAVAILABLE",
        "OC_ERR_CANCELLED",
        "OC_ERR_CAPACITY_UNMANAGED",
        "OC_ERR_CHUNK_CHANGED",
        "OC_ERR_CHUNK_CORRUPT",
        "OC_ERR_CHUNK_INDEX",
        "OC_ERR_CHUNK_MISSING",
        "OC_ERR_CHUNK_SIZE",
        "OC_ERR_CLIENT_CRC",
        "OC_ERR_CLIENT_INCOMPLETE",
        "OC_ERR_CLIENT_PROTOCOL",
        "OC_ERR_CLIENT_STALLED",
        "OC_ERR_CLIENT_TARGET",
        "OC_ERR_CLIENT_USAGE",
        "OC_ERR_CODEC_MIXED",
        "OC_ERR_CODEC_UNACCEPTED",
        "OC_ERR_CONFIG_INVALID",
        "OC_ERR_DESCRIPTOR_ENCODING",
        "OC_ERR_DESCRIPTOR_INVALID",
        "OC_ERR_DESCRIPTOR_KEY_MISMATCH",
        "OC_ERR_DESCRIPTOR_LIMIT",
        "OC_ERR_DESCRIPTOR_UNSIGNED",
        "OC_ERR_INTERNAL",
        "OC_ERR_KEY_CONCURRENCY",
        "OC_ERR_PIN_INVALID",
        "OC_ERR_POOL_BUSY",
        "OC_ERR_POOL_WORKER",
        "OC_ERR_POST_FORM",
        "OC_ERR_POST_POLICY",
        "OC_ERR_POST_TOO_SMALL",
        "OC_ERR_QUOTA_EXCEEDED",
        "OC_ERR_REQUEST_BAD_DIGEST",
        "OC_ERR_REQUEST_CHUNKED_ENCODING",
        "OC_ERR_REQUEST_CHUNK_SIGNATURE",
        "OC_ERR_REQUEST_CONTENT_SHA256",
        "OC_ERR_REQUEST_COPY_TO_ITSELF",
        "OC_ERR_REQUEST_HEADER_TOO_LARGE",
        "OC_ERR_REQUEST_INCOMPLETE_BODY",
        "OC_ERR_REQUEST_INVALID_ARGUMENT",
        "OC_ERR_REQUEST_INVALID_BUCKET_NAME",
        "OC_ERR_REQUEST_INVALID_DIGEST",
        "OC_ERR_REQUEST_INVALID_KEY",
        "OC_ERR_REQUEST_MALFORMED_XML",
        "OC_ERR_REQUEST_METADATA_TOO_LARGE",
        "OC_ERR_REQUEST_METHOD_NOT_ALLOWED",
        "OC_ERR_REQUEST_MISSING_CONTENT_SHA256",
        "OC_ERR_REQUEST_MISSING_LENGTH",
        "OC_ERR_REQUEST_NOT_IMPLEMENTED",
        "OC_ERR_REQUEST_TIMEOUT",
        "OC_ERR_REQUEST_TOO_LARGE",
        "OC_ERR_REQUEST_UNSUPPORTED_CHECKSUM",
        "OC_ERR_SCHEDULER_CLOSED",
        "OC_ERR_STORE_BUCKET_EXISTS",
        "OC_ERR_STORE_BUCKET_NOT_EMPTY",
        "OC_ERR_STORE_ENTITY_TOO_SMALL",
        "OC_ERR_STORE_INVALID_PART",
        "OC_ERR_STORE_INVALID_PART_NUMBER",
        "OC_ERR_STORE_INVALID_PART_ORDER",
        "OC_ERR_STORE_INVALID_RANGE",
        "OC_ERR_STORE_IO",
        "OC_ERR_STORE_NO_SUCH_BUCKET",
        "OC_ERR_STORE_NO_SUCH_KEY",
        "OC_ERR_STORE_NO_SUCH_UPLOAD",
        "OC_ERR_STORE_PRECONDITION_FAILED",
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
        super().__init__(code, message)
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

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" + (f" (request {self.request_id})" if self.request_id else "")

    @property
    def response(self) -> Mapping[str, Any]:
        """As botocore's ``ClientError.response``: the parsed answer, for code written for boto3."""
        metadata: Dict[str, Any] = {"RequestId": self.request_id}
        if self.status is not None:
            metadata["HTTPStatusCode"] = self.status
        return {"Error": {"Code": self.details.get("S3Code", self.code), "Message": self.message}, "ResponseMetadata": metadata}
