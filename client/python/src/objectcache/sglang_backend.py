"""Deprecated alias of :mod:`objectcache.engines.sglang`, kept for one release: engine configurations name this
module by its dotted path (``objectcache.sglang_backend``), which keeps working; name
``objectcache.engines.sglang`` instead. Everything here is objectcache.engines.sglang's own object (the same classes,
settings and failure counters)."""

from __future__ import annotations

from .engines.sglang import (
    DTYPE_NAMES as DTYPE_NAMES,
)
from .engines.sglang import (
    FAILURES as FAILURES,
)
from .engines.sglang import (
    NUMBERS as NUMBERS,
)
from .engines.sglang import (
    SETTINGS as SETTINGS,
)
from .engines.sglang import (
    ObjectCacheHiCacheStorage as ObjectCacheHiCacheStorage,
)
from .engines.sglang import (
    PageForm as PageForm,
)
from .engines.sglang import (
    Run as Run,
)
from .engines.sglang import (
    backend_settings as backend_settings,
)
from .engines.sglang import (
    logger as logger,
)
from .engines.sglang import (
    page_form as page_form,
)
from .engines.sglang import (
    rank_scope as rank_scope,
)
