"""Deprecated alias of :mod:`objectcache.engines.lmcache`, kept for one release: engine configurations name this
module by its dotted path (``objectcache.lmcache_backend``), which keeps working; name
``objectcache.engines.lmcache`` instead. Everything here is objectcache.engines.lmcache's own object (the same classes,
settings and failure counters)."""

from __future__ import annotations

from .engines.lmcache import (
    CODEC_DTYPES as CODEC_DTYPES,
)
from .engines.lmcache import (
    FAILURES as FAILURES,
)
from .engines.lmcache import (
    MODULE_PATHS as MODULE_PATHS,
)
from .engines.lmcache import (
    NUMBERS as NUMBERS,
)
from .engines.lmcache import (
    PLUGIN_TYPE as PLUGIN_TYPE,
)
from .engines.lmcache import (
    SETTINGS as SETTINGS,
)
from .engines.lmcache import (
    ObjectCacheAdapter as ObjectCacheAdapter,
)
from .engines.lmcache import (
    ObjectCacheConnector as ObjectCacheConnector,
)
from .engines.lmcache import (
    UnusableConfiguration as UnusableConfiguration,
)
from .engines.lmcache import (
    logger as logger,
)
from .engines.lmcache import (
    plugin_settings as plugin_settings,
)
