"""The settings of the engine adapters (engines.lmcache, engines.lmcache_l2, engines.sglang), read
by one parser, :func:`read_settings`, from whatever table the engine hands over, and checked in one
place: the gateway's endpoint and bucket, a key pair (from the engine's configuration, else
``OBJECTCACHE_ACCESS_KEY`` / ``OBJECTCACHE_SECRET_KEY``), the delivery mode, numbers, and the
deadline of a call on the engine's critical path. :func:`client_of` makes the adapter's client
from them."""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Iterable, List, Mapping, MutableMapping, Optional

from .._contract import MODES
from ..client import ObjectCacheClient
from ..config import Config
from ..errors import ObjectCacheError

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


def read_settings(
    given: Mapping[str, Any],
    table: Mapping[str, Any],
    where: str,
    *,
    prefix: str = "",
    unknown: Optional[str] = None,
    allowed: Iterable[str] = (),
    at_least: Optional[Mapping[str, float]] = None,
    as_text: bool = True,
) -> Dict[str, Any]:
    """An adapter's settings: each name of ``table`` read from ``given`` under ``prefix`` + name,
    else its default there; as text (``as_text``, the engines' configurations hold strings) or as
    given. Then checked, raising ValueError naming the setting as the engine's configuration spells
    it (``where`` + name): with ``unknown`` (a message with ``{names}`` and ``{known}``), a setting
    under ``prefix`` that neither ``table`` nor ``allowed`` names is refused, named as given; the
    key pair, endpoint, bucket, mode and deadline as :func:`complete_common` checks them; each name
    of ``at_least`` must be a number of at least its value (when set)."""
    if unknown is not None:
        known = set(table) | set(allowed)
        strange = sorted(key for key in given if key.startswith(prefix) and key[len(prefix) :] not in known)
        if strange:
            raise ValueError(unknown.format(names=", ".join(strange), known=", ".join(sorted(table))))
    values: Dict[str, Any] = {}
    for name, default in table.items():
        value = given.get(prefix + name)
        values[name] = default if value is None else str(value) if as_text else value
    complete_common(values, where)
    for name, least in (at_least or {}).items():
        value = values[name]
        if value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if not number >= least:
            raise ValueError(f"{where}{name} must be a number of at least {least:g}, got {value!r}")
    return values


def endpoints_of(setting: Any) -> List[str]:
    """The gateway URLs of an ``endpoint`` setting: one, several separated by commas, or a list."""
    items = setting.split(",") if isinstance(setting, str) else list(setting or [])
    return [str(e).strip() for e in items if str(e).strip()]


def client_of(values: Mapping[str, Any], **config: Any) -> ObjectCacheClient:
    """The adapter's client from its settings (``timeout_s``, ``retries``, and ``config``'s other
    fields, such as ``max_idle_connections``)."""
    settings = Config(timeout=float(values["timeout_s"] or 30), retries=int(float(values["retries"] or 0)), **config)
    return ObjectCacheClient(
        endpoints_of(values["endpoint"]), str(values["bucket"]), (str(values["access_key_id"]), str(values["secret_access_key"])), str(values["region"] or "us-east-1"), config=settings
    )
