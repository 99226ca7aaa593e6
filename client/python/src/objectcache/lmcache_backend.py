"""ObjectCache as an LMCache remote storage backend (``pip install "objectcache[lmcache]"``).

LMCache loads it from its own configuration, no code needed::

    remote_storage_plugins: ["objectcache"]
    extra_config:
      remote_storage_plugin.objectcache.module_path: objectcache.lmcache_backend
      remote_storage_plugin.objectcache.class_name: ObjectCacheAdapter
      remote_storage_plugin.objectcache.endpoint: http://127.0.0.1:9080
      remote_storage_plugin.objectcache.bucket: kvcache

What each LMCache call becomes (README, "Use it from LMCache and vLLM"):

- ``batched_async_contains`` / ``exists``: ONE prefix lookup (``POST /bucket?objectcache-lookup``)
  that also checks every chunk's size against this engine's layout.
- ``batched_get`` / ``batched_get_non_blocking`` / ``get``: ONE layerwise GET for the whole run of
  chunks; every frame's bytes are read straight into the MemoryObjs LMCache allocated (each
  layer's K and V halves into their places in the chunk's KV_2LTD buffer), CRC-32C checked.
- ``put``: one PUT of the chunk with its per-layer CRC-32Cs in its metadata.

Objects are named and laid out exactly as LMCache's own S3 connector names and lays them out
(``key.to_string()`` with ``/`` as ``_``, the MemoryObj's bytes as they are), so a chunk stored by
either is read by the other. A gateway or network failure is a cache miss, logged and counted
(``objectcache_lmcache_failures_total``), never an exception into the engine.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from .client import ObjectCacheClient
from .errors import ObjectCacheError

logger = logging.getLogger("objectcache.lmcache")

#: LMCache plugin names are ``{type}`` or ``{type}.{instance}``; ours have this type.
PLUGIN_TYPE = "objectcache"

#: Settings under ``remote_storage_plugin.<name>.`` in LMCache's ``extra_config``, with defaults.
SETTINGS: Dict[str, Optional[str]] = {
    "endpoint": None,  # one gateway URL, or several separated by commas
    "bucket": None,
    "access_key_id": None,  # or the environment's OBJECTCACHE_ACCESS_KEY
    "secret_access_key": None,  # or the environment's OBJECTCACHE_SECRET_KEY
    "region": "us-east-1",
    "tenant": None,  # the bandwidth scheduler's tenant (the key's own when unset)
    "key_prefix": "",  # prepended to every object name ("" names objects as LMCache's S3 connector does)
    "mode": "auto",  # layerwise, chunkwise or auto (the gateway's size threshold)
    "compute_ms_per_layer": None,  # the engine's per-layer compute window, for the scheduler
    "timeout_s": "30",
    "retries": "2",  # 503 SlowDown answers retried after their Retry-After
}


def _counter() -> Any:
    try:
        from prometheus_client import Counter  # LMCache depends on it

        return Counter("objectcache_lmcache_failures", "LMCache backend calls that failed and became a miss or a skipped store", ["op", "code"])
    except Exception:  # pragma: no cover - a registry that already holds it, or no prometheus_client
        return None


_FAILURES = _counter()
_FAILURES_LOCK = threading.Lock()
#: Failures counted in this process, by (op, code): readable without Prometheus.
FAILURES: Dict[Tuple[str, str], int] = {}


def _count_failure(op: str, error: BaseException) -> None:
    code = error.code if isinstance(error, ObjectCacheError) else type(error).__name__
    with _FAILURES_LOCK:
        FAILURES[(op, code)] = FAILURES.get((op, code), 0) + 1
    if _FAILURES is not None:
        _FAILURES.labels(op=op, code=code).inc()


def plugin_settings(extra_config: Optional[Mapping[str, Any]], plugin_name: str) -> Dict[str, Optional[str]]:
    """This plugin's settings from LMCache's ``extra_config`` (``remote_storage_plugin.<name>.*``),
    with the environment's credentials as fallback. Raises ValueError naming what is missing."""
    extra = dict(extra_config or {})
    prefix = f"remote_storage_plugin.{plugin_name}."
    known = set(SETTINGS) | {"module_path", "class_name"}
    unknown = sorted(k[len(prefix):] for k in extra if k.startswith(prefix) and k[len(prefix):] not in known)
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(prefix + k for k in unknown)}; known: {', '.join(sorted(SETTINGS))}")
    values: Dict[str, Optional[str]] = {}
    for name, default in SETTINGS.items():
        value = extra.get(prefix + name)
        values[name] = default if value is None else str(value)
    values["access_key_id"] = values["access_key_id"] or os.environ.get("OBJECTCACHE_ACCESS_KEY")
    values["secret_access_key"] = values["secret_access_key"] or os.environ.get("OBJECTCACHE_SECRET_KEY")
    for required in ("endpoint", "bucket", "access_key_id", "secret_access_key"):
        if not values[required]:
            hint = " (or set OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY)" if "key" in required else ""
            raise ValueError(f"{prefix}{required} is required{hint}")
    if values["mode"] not in ("auto", "layerwise", "chunkwise"):
        raise ValueError(f"{prefix}mode must be auto, layerwise or chunkwise, got {values['mode']!r}")
    return values


def _plugin_for(config: Any) -> str:
    """The plugin name of a connector LMCache built from its class alone (it does not pass the
    name): the one configured plugin whose class is ours."""
    extra = dict(config.extra_config or {})
    ours = [name for name in (config.remote_storage_plugins or []) if extra.get(f"remote_storage_plugin.{name}.module_path") == __name__]
    if len(ours) != 1:
        raise ValueError(f"cannot tell which of {ours or 'no'} remote_storage_plugins is this ObjectCache backend; use class_name ObjectCacheAdapter, which is told its name")
    return str(ours[0])


class ObjectCacheConnector(RemoteConnector):  # type: ignore[misc]
    """An LMCache ``RemoteConnector`` that reads and writes chunks through an ObjectCache gateway."""

    def __init__(self, loop: asyncio.AbstractEventLoop, local_cpu_backend: Any, config: Any, plugin_name: Optional[str] = None) -> None:
        config = config if config is not None else local_cpu_backend.config
        super().__init__(config, local_cpu_backend.metadata)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.plugin_name = plugin_name or _plugin_for(config)
        settings = plugin_settings(config.extra_config, self.plugin_name)
        if len(self.meta_shapes) != 1:
            raise ValueError(f"the ObjectCache backend stores one KV group per chunk; this engine has {len(self.meta_shapes)}")
        shape = self.meta_shapes[0]
        if len(shape) != 4:
            raise ValueError(f"the ObjectCache backend expects chunks shaped [K/V, layers, tokens, hidden], got {list(shape)}")
        kv, layers, tokens, _hidden = (int(d) for d in shape)
        #: The gateway's name for LMCache's layout: [2, L, T, H] is KV_2LTD, [1, L, T, H] one latent (MLA).
        self.layout = "MLA" if self.meta_fmt == MemoryFormat.KV_MLA_FMT or kv == 1 else "KV_2LTD"
        self.layers = layers
        self.chunk_tokens = tokens
        self.layer_bytes = self.full_chunk_size_bytes // layers
        self.key_prefix = settings["key_prefix"] or ""
        self.mode = settings["mode"] or "auto"
        self.extra_descriptor: Dict[str, Any] = {}
        if settings["tenant"]:
            self.extra_descriptor["tenant"] = settings["tenant"]
        if settings["compute_ms_per_layer"]:
            self.extra_descriptor["computeMsPerLayer"] = float(settings["compute_ms_per_layer"])
        endpoints = [e.strip() for e in (settings["endpoint"] or "").split(",") if e.strip()]
        self.client = ObjectCacheClient(
            endpoints, settings["bucket"] or "", (settings["access_key_id"] or "", settings["secret_access_key"] or ""), settings["region"] or "us-east-1",
            timeout=float(settings["timeout_s"] or 30), retries=int(settings["retries"] or 0),
        )
        logger.info("ObjectCache backend %s: %s bucket %s, %s chunks of %d layers x %d bytes", self.plugin_name, self.client.endpoint, self.client.bucket, self.layout, layers, self.layer_bytes)

    # -- names and places -------------------------------------------------------------------

    def object_name(self, key: CacheEngineKey) -> str:
        """The object a chunk is stored as: LMCache's S3 connector's name (``/`` as ``_``)."""
        return self.key_prefix + str(key.to_string()).replace("/", "_")

    def _descriptor(self, names: Sequence[str]) -> Dict[str, Any]:
        return ObjectCacheClient.descriptor(names, layers=self.layers, chunk_tokens=self.chunk_tokens, layer_bytes=self.layer_bytes, layout=self.layout, mode=self.mode, **self.extra_descriptor)

    def _place(self, objs: Sequence[MemoryObj]) -> Any:
        """``place(layer, chunk)`` for the layerwise GET: the chunk's MemoryObj in its stored
        layout receives its slices where they belong (KV_2LTD: K of layer l at l*half, V at
        L*half + l*half; MLA: layer l at l*S)."""
        views = [memoryview(obj.byte_array).cast("B") for obj in objs]
        layers, size = self.layers, self.layer_bytes
        if self.layout == "MLA":
            return lambda layer, chunk: (views[chunk][layer * size:(layer + 1) * size],)
        half = size // 2
        return lambda layer, chunk: (
            views[chunk][layer * half:(layer + 1) * half],
            views[chunk][(layers + layer) * half:(layers + layer + 1) * half],
        )

    def _allocate(self, count: int) -> List[MemoryObj]:
        objs: List[MemoryObj] = []
        for _ in range(count):
            obj = self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt)
            if obj is None:
                break  # the CPU buffer is full: fetch the prefix that fits
            objs.append(obj)
        return objs

    # -- reads ------------------------------------------------------------------------------

    def _fetch_prefix(self, keys: Sequence[CacheEngineKey]) -> List[MemoryObj]:
        """The longest leading run of ``keys`` fetched in one layerwise GET (empty on failure).
        A chunk the gateway reports missing shortens the run to the chunks before it, once."""
        names = [self.object_name(k) for k in keys]
        for _attempt in range(2):
            objs = self._allocate(len(names))
            if not objs:
                return []
            names = names[:len(objs)]
            try:
                self.client.fetch_into(self._descriptor(names), self._place(objs))
                return objs
            except ObjectCacheError as error:
                for obj in objs:
                    obj.ref_count_down()
                missing = error.details.get("ChunkIndex", error.details.get("chunk"))
                if error.code == "OC_ERR_CHUNK_MISSING" and missing is not None and int(missing) > 0:
                    names = names[:int(missing)]
                    continue
                self._miss("get", error, len(names))
                return []
            except Exception as error:  # a broken connection, a bug: a miss, never the engine's crash
                for obj in objs:
                    obj.ref_count_down()
                self._miss("get", error, len(names))
                return []
        return []

    def _miss(self, op: str, error: BaseException, count: int) -> None:
        _count_failure(op, error)
        level = logging.DEBUG if isinstance(error, ObjectCacheError) and error.code == "OC_ERR_CHUNK_MISSING" else logging.WARNING
        logger.log(level, "ObjectCache %s of %d chunk(s) failed, served as a miss: %s", op, count, error)

    async def get(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        objs = await asyncio.to_thread(self._fetch_prefix, [key])
        return objs[0] if objs else None

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        objs = await asyncio.to_thread(self._fetch_prefix, keys)
        return [*objs, *([None] * (len(keys) - len(objs)))]

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[CacheEngineKey]) -> List[MemoryObj]:
        return await asyncio.to_thread(self._fetch_prefix, keys)

    # -- lookups ----------------------------------------------------------------------------

    def _matched(self, keys: Sequence[CacheEngineKey]) -> int:
        try:
            return self.client.lookup([self.object_name(k) for k in keys], layers=self.layers, layer_bytes=self.layer_bytes)
        except Exception as error:
            self._miss("lookup", error, len(keys))
            return 0

    def exists_sync(self, key: CacheEngineKey) -> bool:
        return self._matched([key]) == 1

    async def exists(self, key: CacheEngineKey) -> bool:
        return await asyncio.to_thread(self._matched, [key]) == 1

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        return await asyncio.to_thread(self._matched, keys)

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: List[CacheEngineKey]) -> int:
        return self._matched(keys)

    # -- writes -----------------------------------------------------------------------------

    def _put(self, key: CacheEngineKey, obj: MemoryObj) -> None:
        if obj.get_physical_size() != self.full_chunk_size_bytes:
            # As LMCache's S3 connector: a partial chunk has no fixed-size object to be read as.
            logger.debug("ObjectCache backend skips the partial chunk %s (%d bytes)", key.to_string(), obj.get_physical_size())
            return
        try:
            self.client.put_chunk(self.object_name(key), obj.byte_array, layout=(self.layout, self.layers, self.layer_bytes))
        except Exception as error:
            self._miss("put", error, 1)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        # LMCache's RemoteBackend releases the object once this returns: no ref_count_down here.
        await asyncio.to_thread(self._put, key, memory_obj)

    def remove_sync(self, key: CacheEngineKey) -> bool:
        try:
            self.client.delete(self.object_name(key))
            return True
        except Exception as error:
            self._miss("remove", error, 1)
            return False

    # -- the rest ---------------------------------------------------------------------------

    async def list(self) -> List[str]:
        """The object names under ``key_prefix`` (LMCache keys with ``/`` as ``_``)."""
        names = await asyncio.to_thread(self.client.list_keys, self.key_prefix)
        return [name[len(self.key_prefix):] for name in names]

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        """0 when the gateway answers for the bucket, 1 otherwise."""
        try:
            await asyncio.to_thread(self.client.head_bucket)
            return 0
        except Exception:
            return 1

    async def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"<ObjectCacheConnector {self.plugin_name} {self.client.endpoint}/{self.client.bucket}>"


class ObjectCacheAdapter(ConnectorAdapter):  # type: ignore[misc]
    """The adapter LMCache instantiates from ``class_name: ObjectCacheAdapter``: it claims the
    plugins named ``objectcache`` or ``objectcache.<instance>`` and builds their connectors with
    their own settings."""

    def __init__(self) -> None:
        super().__init__(f"plugin://{PLUGIN_TYPE}")

    def can_parse(self, url: str) -> bool:
        if not url.startswith("plugin://"):
            return False
        return url[len("plugin://"):].split(".", 1)[0] == PLUGIN_TYPE

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        name = context.plugin_name or context.url[len("plugin://"):]
        return ObjectCacheConnector(context.loop, context.local_cpu_backend, context.config, plugin_name=name)
