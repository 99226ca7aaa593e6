"""SigV4 signing of the client's requests, by botocore (no hand-written crypto): path-style S3
requests, the payload hashed."""

from __future__ import annotations

from typing import Dict, Mapping, Tuple, Union

from botocore.auth import S3SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]


class Signer:
    """Signs requests with one key pair for one region."""

    def __init__(self, credentials: Union[Tuple[str, str], Credentials], region: str) -> None:
        creds = credentials if isinstance(credentials, Credentials) else Credentials(credentials[0], credentials[1])
        self._auth = S3SigV4Auth(creds, "s3", region)

    def headers(self, method: str, url: str, body: bytes, headers: Mapping[str, str]) -> Dict[str, str]:
        """``headers`` with the signature's (Authorization, X-Amz-Date, X-Amz-Content-SHA256)."""
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        self._auth.add_auth(request)
        return {name: value for name, value in request.headers.items()}
