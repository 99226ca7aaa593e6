"""Deprecated alias of :mod:`objectcache.engines.failures`, kept for one release: engine configurations name this
module by its dotted path (``objectcache.failures``), which keeps working; name
``objectcache.engines.failures`` instead. Everything here is objectcache.engines.failures's own object (the same classes,
settings and failure counters)."""

from __future__ import annotations

from .engines.failures import (
    EngineFailures as EngineFailures,
)
from .engines.failures import (
    fetch_run as fetch_run,
)
from .engines.failures import (
    missing_chunk as missing_chunk,
)
