"""Deprecated alias of :mod:`objectcache.engines.lmcache_l2`, kept for one release: engine configurations name this
module by its dotted path (``objectcache.lmcache_l2``), which keeps working; name
``objectcache.engines.lmcache_l2`` instead. Everything here is objectcache.engines.lmcache_l2's own object (the same classes,
settings and failure counters)."""

from __future__ import annotations

from .engines.lmcache_l2 import (
    FAILURES as FAILURES,
)
from .engines.lmcache_l2 import (
    NUMBERS as NUMBERS,
)
from .engines.lmcache_l2 import (
    SETTINGS as SETTINGS,
)
from .engines.lmcache_l2 import (
    ChunkLayout as ChunkLayout,
)
from .engines.lmcache_l2 import (
    ObjectCacheL2Adapter as ObjectCacheL2Adapter,
)
from .engines.lmcache_l2 import (
    ObjectCacheL2AdapterConfig as ObjectCacheL2AdapterConfig,
)
from .engines.lmcache_l2 import (
    chunk_major as chunk_major,
)
from .engines.lmcache_l2 import (
    logger as logger,
)
from .engines.lmcache_l2 import (
    object_name as object_name,
)
