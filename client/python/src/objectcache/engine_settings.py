"""Deprecated alias of :mod:`objectcache.engines.settings`, kept for one release: engine configurations name this
module by its dotted path (``objectcache.engine_settings``), which keeps working; name
``objectcache.engines.settings`` instead. Everything here is objectcache.engines.settings's own object (the same classes,
settings and failure counters)."""

from __future__ import annotations

from .engines.settings import (
    DEADLINE_S as DEADLINE_S,
)
from .engines.settings import (
    client_of as client_of,
)
from .engines.settings import (
    complete_common as complete_common,
)
from .engines.settings import (
    critical as critical,
)
from .engines.settings import (
    endpoints_of as endpoints_of,
)
from .engines.settings import (
    read_settings as read_settings,
)
from .engines.settings import (
    unusable_key as unusable_key,
)
