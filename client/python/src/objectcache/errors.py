"""Errors with the gateway's stable codes (the error table in docs/reference.md)."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from botocore.exceptions import ClientError  # type: ignore[import-untyped]

# The registry's codes (schemas/errors.ts, generated into _contract). KNOWN_CODES: an ERROR frame
# with another code (from a newer gateway) is raised as OC_ERR_INTERNAL, its code kept in
# ``details["Code"]``. RETRYABLE_CODES: the code's answer when the gateway does not say whether a
# retry may succeed (a gateway older than ``x-objectcache-retryable`` and the ERROR frame's
# ``retryable``).
from ._contract import KNOWN_CODES as KNOWN_CODES
from ._contract import RETRYABLE_CODES as RETRYABLE_CODES


class ObjectCacheError(ClientError):  # type: ignore[misc]  # botocore has no type information
    """A failure with a stable ``OC_ERR_*`` code.

    Codes come from the gateway (the ``x-objectcache-error-code`` header of an S3 error response,
    or the ``code`` of an ERROR frame) or from this client (``OC_ERR_CLIENT_*``: a malformed
    stream, a CRC mismatch, a truncated stream, a target too small, a wrong argument).

    It is a botocore ``ClientError``, so code written for boto3 catches it as it catches boto3's
    (``except ClientError``) and reads the same ``response``: its ``["Error"]["Code"]`` is the S3
    error code when the gateway answered with one (``NoSuchKey``, ``SlowDown``: what boto3 itself
    sees from the gateway), else the ``OC_ERR_*`` code. ``code`` is always the ``OC_ERR_*`` code.
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
        operation_name: Optional[str] = None,
    ) -> None:
        # Not ClientError.__init__: it would store a fixed ``response`` (the client learns the
        # request id after the fact) and make ``args`` one formatted line; they stay (code, message).
        Exception.__init__(self, code, message)
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
        #: The request that failed, by the gateway's name for it (``GetObject``, ``PutObject``,
        #: ``DescriptorGet``, ``PrefixLookup``, ...); None when no request was made.
        self.operation_name = operation_name

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" + (f" (request {self.request_id})" if self.request_id else "")

    def __reduce__(self) -> Tuple[Any, ...]:
        # ClientError's would unpickle a plain ClientError; this keeps the class and every attribute.
        return (type(self), (self.code, self.message), self.__dict__)

    @property
    def response(self) -> Dict[str, Any]:
        """As botocore's ``ClientError.response``: the parsed answer, for code written for boto3."""
        metadata: Dict[str, Any] = {"RequestId": self.request_id}
        if self.status is not None:
            metadata["HTTPStatusCode"] = self.status
        return {"Error": {"Code": self.details.get("S3Code", self.code), "Message": self.message}, "ResponseMetadata": metadata}
