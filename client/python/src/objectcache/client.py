"""The ObjectCache client: store a prefix's chunks, look it up in one round trip, and fetch its
KV layer by layer into a buffer the caller owns.

Requests are S3 requests signed with botocore's SigV4 (``_signing``, path-style), sent over
keep-alive ``http.client`` connections (``_pool``), one request at a time under the one retry
policy (``retry``) and the call's deadline (``_transport``). The S3 calls are in ``_s3``, the
layerwise GET in ``_layerwise``; the settings in one frozen :class:`~objectcache.config.Config`.

Nothing the server says is taken on trust: a redirect is refused (a write behind a redirecting
proxy is not "stored"), a lookup's count must lie between 0 and the keys asked, answers are read
only up to a bound, and every call has one overall ``deadline``, past which its connection is
shut down whatever the server still trickles (``OC_ERR_CLIENT_TIMEOUT``).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from botocore.credentials import Credentials  # type: ignore[import-untyped]

from ._contract import AFTER_META as AFTER_META
from ._contract import DESCRIPTOR_HEADER as DESCRIPTOR_HEADER
from ._contract import MAX_AFTER_KEY as MAX_AFTER_KEY
from ._contract import MAX_HEADER_DESCRIPTOR_BYTES as MAX_HEADER_DESCRIPTOR_BYTES
from ._layerwise import FetchResult as FetchResult
from ._layerwise import LayerwiseCalls
from ._pool import ConnectionPool, endpoints_of
from ._s3 import S3Calls
from ._signing import Signer
from ._transport import ANSWER_BODY_LIMIT as ANSWER_BODY_LIMIT
from ._transport import CALL_BODY_LIMIT as CALL_BODY_LIMIT
from ._transport import ERROR_BODY_LIMIT as ERROR_BODY_LIMIT
from .config import DEFAULT_DEADLINE_S as DEFAULT_DEADLINE_S
from .config import Config
from .errors import ObjectCacheError
from .retry import MAX_RETRY_AFTER_S as MAX_RETRY_AFTER_S
from .types import Buffer as Buffer

#: "Not given", for the deprecated keywords whose None means something (``deadline=None``).
_UNSET: Any = object()

#: boto3's keyword names the constructor took before 0.4 (deprecated): the one spelling's name of each.
_BOTO3_NAMES = {"endpoint_url": "endpoint", "region_name": "region", "aws_access_key_id": "credentials", "aws_secret_access_key": "credentials"}


def _deprecated(what: str, instead: str) -> None:
    # stacklevel 3: the caller of ObjectCacheClient(...), past __init__ and this function.
    warnings.warn(f"ObjectCacheClient({what}=...) is deprecated and will be removed in the next release: {instead}", DeprecationWarning, stacklevel=3)


class ObjectCacheClient(S3Calls, LayerwiseCalls):
    """A client of one gateway (or several in front of one store) and one bucket. Thread-safe;
    close it (or use ``with``) when done."""

    def __init__(
        self,
        endpoint: Union[str, Sequence[str], None] = None,
        bucket: Optional[str] = None,
        credentials: Union[Tuple[str, str], Credentials, None] = None,
        region: Optional[str] = None,
        *,
        config: Optional[Config] = None,
        endpoint_url: Union[str, Sequence[str], None] = None,
        region_name: Optional[str] = None,
        aws_access_key_id: Optional[str] = None,
        aws_secret_access_key: Optional[str] = None,
        timeout: Any = _UNSET,
        retries: Any = _UNSET,
        max_idle_connections: Any = _UNSET,
        deadline: Any = _UNSET,
    ) -> None:
        """``endpoint``: a gateway URL, or several gateways in front of the same store (a request
        that cannot reach one goes to the next; the client keeps the one that answered).
        ``credentials``: ``(access key id, secret)`` or botocore ``Credentials``; ``region``
        defaults to ``us-east-1``. ``config``: timeouts, the overall deadline of a call, retries
        and the connection pool (:class:`~objectcache.config.Config`; its defaults when absent).
        :meth:`with_limits` gives a client sharing this one's connections with other limits (an
        engine's critical path).

        Deprecated, kept working for one release with a ``DeprecationWarning``: boto3's names
        (``endpoint_url``, ``region_name``, ``aws_access_key_id``, ``aws_secret_access_key``)
        and the settings as keywords (``timeout``, ``retries``, ``max_idle_connections``,
        ``deadline``: put them in ``config``)."""
        for name, value in (("endpoint_url", endpoint_url), ("region_name", region_name), ("aws_access_key_id", aws_access_key_id), ("aws_secret_access_key", aws_secret_access_key)):
            if value is not None:
                _deprecated(name, f"pass {_BOTO3_NAMES[name]}" + (" as (key id, secret)" if "aws_" in name else ""))
        settings: Dict[str, Any] = {
            name: value for name, value in (("timeout", timeout), ("retries", retries), ("max_idle_connections", max_idle_connections), ("deadline", deadline)) if value is not _UNSET
        }
        if settings:
            if config is not None:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"give config or {', '.join(settings)}, not both (put them in config)")
            for name in settings:
                _deprecated(name, f"pass config=Config({name}=...)")
            config = Config(**settings)
        if endpoint is not None and endpoint_url is not None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "give endpoint or endpoint_url, not both")
        if region is not None and region_name is not None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "give region or region_name, not both")
        if credentials is not None and (aws_access_key_id is not None or aws_secret_access_key is not None):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "give credentials or aws_access_key_id and aws_secret_access_key, not both")
        if config is not None and not isinstance(config, Config):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"config must be an objectcache.Config, got {type(config).__name__}")
        endpoint = endpoint if endpoint is not None else endpoint_url
        if endpoint is None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs an endpoint")
        if bucket is None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs a bucket")
        if credentials is None:
            if aws_access_key_id is None or aws_secret_access_key is None:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "the client needs credentials: (key id, secret)")
            credentials = (aws_access_key_id, aws_secret_access_key)
        region = region if region is not None else region_name if region_name is not None else "us-east-1"
        self._config = config if config is not None else Config()
        self._pool = ConnectionPool(endpoints_of([endpoint] if isinstance(endpoint, str) else list(endpoint)), self._config.max_idle_connections)
        self._signer = Signer(credentials, region)
        self.bucket = bucket

    @property
    def config(self) -> Config:
        """The client's settings."""
        return self._config

    def with_limits(self, *, deadline: Optional[float] = None, retries: Optional[int] = None) -> ObjectCacheClient:
        """A client of the same gateways, bucket and key that shares this one's connections, with
        another overall ``deadline`` per call and ``retries`` (for an engine's critical path: a
        short deadline and no waiting out a ``Retry-After``). Closing either closes the shared
        idle connections."""
        changes: Dict[str, Any] = {}
        if deadline is not None:
            if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not deadline > 0:
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"deadline must be a positive number of seconds, got {deadline!r}")
            changes["deadline"] = deadline
        if retries is not None:
            changes["retries"] = retries
        return self.with_config(dataclasses.replace(self._config, **changes))

    def with_config(self, config: Config) -> ObjectCacheClient:
        """A client of the same gateways, bucket and key that shares this one's connections (its
        pool, and so its ``max_idle_connections``), with ``config``'s timeout, deadline and retries."""
        if not isinstance(config, Config):
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"config must be an objectcache.Config, got {type(config).__name__}")
        other = copy.copy(self)
        other._config = config
        return other

    @property
    def endpoint(self) -> str:
        """The gateway in use."""
        return self._pool.endpoints[self._pool.current].url

    def close(self) -> None:
        """Closes the idle connections (those of every client sharing them)."""
        self._pool.close()

    def __enter__(self) -> ObjectCacheClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
