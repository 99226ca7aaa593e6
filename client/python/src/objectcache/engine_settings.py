"""The settings every engine adapter (lmcache_backend, lmcache_l2, sglang_backend) shares, checked
in one place: the gateway's endpoint and bucket, a key pair (from the engine's configuration, else
``OBJECTCACHE_ACCESS_KEY`` / ``OBJECTCACHE_SECRET_KEY``), the delivery mode, and the deadline of a
call on the engine's critical path."""
from __future__ import annotations

import logging
import os
from typing import Any, MutableMapping, Optional

from ._contract import MODES
from .client import ObjectCacheClient
from .errors import ObjectCacheError

#: What the gateway answers a key it does not know, or a request signed with the wrong secret.
_UNUSABLE_KEY = ("OC_ERR_AUTH_UNKNOWN_KEY", "OC_ERR_AUTH_SIGNATURE")

#: The default of ``deadline_s``: the longest a lookup, a load or a layerwise store may hold the
#: engine, in seconds (a load of a 2 GiB prefix takes 0.2 s at 10 GB/s, 2 s at 1 GB/s).
DEADLINE_S = 5.0


def critical(client: ObjectCacheClient, deadline_s: Any) -> ObjectCacheClient:
    """The client for calls on the engine's critical path (lookups, loads, layerwise stores): one
    overall deadline of ``deadline_s`` per call, and no waiting out a ``Retry-After`` (a refusal
    is a miss at once, which costs the engine less than a wait)."""
    return client.with_limits(deadline=float(deadline_s if deadline_s not in (None, "") else DEADLINE_S), retries=0)


def unusable_key(client: ObjectCacheClient, key_prefix: str, logger: logging.Logger) -> Optional[str]:
    """Why the gateway refuses this adapter's key pair outright (an unknown key, a wrong secret),
    asked with a listing of one key under ``key_prefix`` at start-up: the adapter then refuses to
    start, rather than run as a remote tier that only ever misses. A gateway that cannot be
    reached yet, or a key that may not list, is not refused (warned of): it may work once the
    gateway is up, and reads may still be allowed."""
    try:
        client.list_keys(key_prefix, 1)
    except ObjectCacheError as error:
        if error.code in _UNUSABLE_KEY:
            return f"the gateway at {client.endpoint} refuses the key pair ({error.code}: {error}); set access_key_id and secret_access_key, or OBJECTCACHE_ACCESS_KEY and OBJECTCACHE_SECRET_KEY, to a key the gateway knows"
        logger.warning("ObjectCache: could not check the key pair at start-up (%s); every call tries the gateway", error)
    except Exception as error:  # pragma: no cover - a bug must not keep the engine from starting
        logger.warning("ObjectCache: could not check the key pair at start-up (%s)", error)
    return None


def complete_common(values: MutableMapping[str, Any], where: str) -> None:
    """Fills in the key pair from the environment where the configuration has none, and raises
    ValueError naming the setting (``where`` + its name, as the engine's configuration spells it)
    when a required one is missing or the mode is not one the gateway knows."""
    values["access_key_id"] = values["access_key_id"] or os.environ.get("OBJECTCACHE_ACCESS_KEY")
    values["secret_access_key"] = values["secret_access_key"] or os.environ.get("OBJECTCACHE_SECRET_KEY")
    for required in ("endpoint", "bucket", "access_key_id", "secret_access_key"):
        if not values[required]:
            hint = " (or set OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY)" if "key" in required else ""
            raise ValueError(f"{where}{required} is required{hint}")
    if values["mode"] not in MODES:
        raise ValueError(f"{where}mode must be {', '.join(MODES[:-1])} or {MODES[-1]}, got {values['mode']!r}")
    deadline = values.get("deadline_s")
    if deadline not in (None, ""):
        try:
            seconds = float(deadline)
        except (TypeError, ValueError):
            seconds = -1.0
        if not seconds > 0:
            raise ValueError(f"{where}deadline_s must be a positive number of seconds, got {deadline!r}")
