"""The settings every engine adapter (lmcache_backend, lmcache_l2, sglang_backend) shares, checked
in one place: the gateway's endpoint and bucket, a key pair (from the engine's configuration, else
``OBJECTCACHE_ACCESS_KEY`` / ``OBJECTCACHE_SECRET_KEY``), and the delivery mode."""
from __future__ import annotations

import os
from typing import Any, MutableMapping

from ._contract import MODES


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
