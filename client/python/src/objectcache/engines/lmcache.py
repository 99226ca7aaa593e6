# Over 600 lines: LMCache's storage-plugin interface is one class, and its methods (store, retrieve, layerwise) share its state.
"""ObjectCache as an LMCache remote storage backend (``pip install "objectcache[lmcache]"``).

LMCache loads it from its own configuration, no code needed::

    remote_storage_plugins: ["objectcache"]
    extra_config:
      remote_storage_plugin.objectcache.module_path: objectcache.engines.lmcache
      remote_storage_plugin.objectcache.class_name: ObjectCacheAdapter
      remote_storage_plugin.objectcache.endpoint: http://127.0.0.1:9080
      remote_storage_plugin.objectcache.bucket: kvcache

What each LMCache call becomes (docs/engines.md, "LMCache, in process"):

- ``batched_async_contains`` / ``exists``: ONE prefix lookup (``POST /bucket?objectcache-lookup``)
  that also checks every chunk's size against this engine's layout.
- ``batched_get`` / ``batched_get_non_blocking`` / ``get``: ONE layerwise GET for the whole run of
  chunks; every frame's bytes are read straight into the MemoryObjs LMCache allocated (each
  layer's K and V halves into their places in the chunk's KV_2LTD buffer), CRC-32C checked.
- ``put``: one PUT of the chunk with its per-layer CRC-32Cs in its metadata.

With ``remote_storage_plugin.objectcache.codec`` set (``bplane-zstd``, ``bplane-lz4``,
``int8-kivi``, or a codec registered with ``objectcache.codecs.register``) every chunk is stored
encoded, one layer slice at a time, and decoded layer by layer as it is fetched
(docs/compression.md); such objects are read through ObjectCache only, not by LMCache's S3 connector.

With LMCache's ``use_layerwise: true`` the engine asks for one layer of every chunk at a time
(per-layer keys). The plugin serves those from ONE layerwise GET per prefix as well: the request
for layer 0 opens the stream, and the request for layer ``l`` is answered as soon as frame ``l``
has landed (its slices copied into LMCache's per-layer ``[tokens, K/V, hidden]`` MemoryObjs).
The per-layer puts of a chunk are assembled and written as the same chunk object, once its last
layer arrives, so both modes read and write the same objects.

Objects are named and laid out exactly as LMCache's own S3 connector names and lays them out
(``key.to_string()`` with ``/`` as ``_``, the MemoryObj's bytes as they are), so a chunk stored by
either is read by the other. A gateway or network failure is a cache miss, logged and counted
(``objectcache_lmcache_failures_total``), never an exception into the engine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, cast

import torch
from lmcache.utils import CacheEngineKey, LayerCacheEngineKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from .._s3 import recordable_after
from ..client import ObjectCacheClient
from ..errors import ObjectCacheError
from ..types import Descriptor, KVDtype, Layout, Mode
from .failures import EngineFailures, fetch_run
from .settings import DEADLINE_S, client_of, critical, read_settings, unusable_key


class UnusableConfiguration(ValueError):
    """The plugin's configuration cannot work: a setting missing or wrong, or a key pair the
    gateway refuses. LMCache only logs a failed remote backend once and runs on without it, so the
    adapter serves :class:`_Unusable` instead, which says so at every call."""


logger = logging.getLogger("objectcache.lmcache")
T = TypeVar("T")

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
    "retries": "2",  # stores (not on the forward pass): answers the gateway marks retryable, retried after their Retry-After
    "deadline_s": str(DEADLINE_S),  # lookups, loads, layerwise stores: one call's longest, and never a Retry-After wait
    "codec": "none",  # store chunks encoded (bplane-zstd, bplane-lz4, int8-kivi, ...): docs/compression.md
}

#: The settings that are numbers, and the least each may be.
NUMBERS: Dict[str, float] = {"timeout_s": 0.001, "retries": 0, "compute_ms_per_layer": 0}

#: The module path users' configurations name: this module's, or its deprecated alias.
MODULE_PATHS = (__name__, "objectcache.lmcache_backend")

#: LMCache's KV dtypes, by the names objectcache.codecs gives them.
CODEC_DTYPES: Dict[Any, KVDtype] = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


#: Calls that failed and became a miss, by (op, code) (objectcache.failures).
FAILURES = EngineFailures("objectcache_lmcache_failures", "LMCache backend calls that failed and became a miss or a skipped store", logger, "chunk(s)")


def plugin_settings(extra_config: Optional[Mapping[str, Any]], plugin_name: str) -> Dict[str, Optional[str]]:
    """This plugin's settings from LMCache's ``extra_config`` (``remote_storage_plugin.<name>.*``),
    with the environment's credentials as fallback. Raises ValueError naming what is missing."""
    prefix = f"remote_storage_plugin.{plugin_name}."
    return read_settings(dict(extra_config or {}), SETTINGS, prefix, prefix=prefix, unknown="unknown setting(s) {names}; known: {known}", allowed=("module_path", "class_name"), at_least=NUMBERS)


def _plugin_for(config: Any) -> str:
    """The plugin name of a connector LMCache built from its class alone (it does not pass the
    name): the one configured plugin whose class is ours."""
    extra = dict(config.extra_config or {})
    ours = [name for name in (config.remote_storage_plugins or []) if extra.get(f"remote_storage_plugin.{name}.module_path") in MODULE_PATHS]
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
        try:
            settings = plugin_settings(config.extra_config, self.plugin_name)
        except ValueError as error:
            raise UnusableConfiguration(f"ObjectCache backend {self.plugin_name}: {error}") from error
        if len(self.meta_shapes) != 1:
            raise ValueError(f"the ObjectCache backend stores one KV group per chunk; this engine has {len(self.meta_shapes)}")
        shape = self.meta_shapes[0]
        if len(shape) != 4:
            raise ValueError(f"the ObjectCache backend expects chunks shaped [K/V, layers, tokens, hidden], got {list(shape)}")
        kv, layers, tokens, _hidden = (int(d) for d in shape)
        #: The gateway's name for LMCache's layout: [2, L, T, H] is KV_2LTD, [1, L, T, H] one latent (MLA).
        self.layout: Layout = "MLA" if self.meta_fmt == MemoryFormat.KV_MLA_FMT or kv == 1 else "KV_2LTD"
        self.layers = layers
        self.chunk_tokens = tokens
        self.layer_bytes = self.full_chunk_size_bytes // layers
        #: LMCache's layerwise mode (per-layer keys) uses ``[tokens, 2, hidden]`` MemoryObjs.
        self.dtype = self.meta_dtypes[0]
        self.layer_shape = torch.Size([tokens, _hidden]) if self.layout == "MLA" else torch.Size([tokens, 2, _hidden])
        self.layer_fmt = MemoryFormat.KV_MLA_FMT if self.layout == "MLA" else MemoryFormat.KV_T2D
        self._assembling: Dict[str, Tuple[torch.Tensor, set[int]]] = {}
        self._streams: Dict[Tuple[str, ...], _LayerStream] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition()
        self._inflight = 0
        self._closed = False
        self.key_prefix = settings["key_prefix"] or ""
        #: Encoded chunks (None: raw, in LMCache's own layout, readable by its S3 connector too).
        self.codec = None if (settings["codec"] or "none") == "none" else str(settings["codec"])
        self.codec_dtype: Optional[KVDtype] = None
        if self.codec is not None:
            from ..codecs import MAX_ENCODED_LAYERS, SliceShape  # the codecs extra
            from ..codecs import codec as find_codec

            find_codec(self.codec)  # what cannot be encoded fails here, at start-up, not at every put
            if self.dtype not in CODEC_DTYPES:
                raise ValueError(f"the {self.codec} codec encodes {', '.join(CODEC_DTYPES.values())} KV, not {self.dtype}")
            if layers > MAX_ENCODED_LAYERS:
                raise ValueError(f"an encoded chunk has at most {MAX_ENCODED_LAYERS} layers (its index fits in 2 KB of metadata); this engine has {layers}")
            self.codec_dtype = CODEC_DTYPES[self.dtype]
            SliceShape.of(self.layer_bytes, self.chunk_tokens, self.codec_dtype)
        self.mode = cast(Mode, settings["mode"] or "auto")  # one of them: plugin_settings checked it
        self.extra_descriptor: Dict[str, Any] = {}
        if settings["tenant"]:
            self.extra_descriptor["tenant"] = settings["tenant"]
        if settings["compute_ms_per_layer"]:
            self.extra_descriptor["computeMsPerLayer"] = float(settings["compute_ms_per_layer"])
        self.client = client_of(settings)
        self.client_timeout = self.client.config.timeout
        #: Lookups, loads and layerwise stores hold the engine: a short deadline, no Retry-After waits.
        self.critical = critical(self.client, settings["deadline_s"])
        refused = unusable_key(self.critical, self.key_prefix, logger)
        if refused is not None:
            self.client.close()
            raise UnusableConfiguration(f"ObjectCache backend {self.plugin_name}: {refused}")
        logger.info("ObjectCache backend %s: %s bucket %s, %s chunks of %d layers x %d bytes", self.plugin_name, self.client.endpoint, self.client.bucket, self.layout, layers, self.layer_bytes)

    # -- names and places -------------------------------------------------------------------

    def object_name(self, key: CacheEngineKey) -> str:
        """The object a chunk is stored as: LMCache's S3 connector's name (``/`` as ``_``); a
        per-layer key names its whole chunk's object."""
        if isinstance(key, LayerCacheEngineKey):
            key = CacheEngineKey(model_name=key.model_name, world_size=key.world_size, worker_id=key.worker_id, chunk_hash=key.chunk_hash, dtype=key.dtype, request_configs=key.request_configs)
        return self.key_prefix + str(key.to_string()).replace("/", "_")

    def _descriptor(self, names: Sequence[str]) -> Descriptor:
        if self.codec is not None:
            # Encoded chunks hold each layer's slice whole (K then V), whatever LMCache's layout.
            layout: Layout = "MLA" if self.layout == "MLA" else "KV_L2TD"
            return ObjectCacheClient.descriptor(
                names, layers=self.layers, chunk_tokens=self.chunk_tokens, layer_bytes=self.layer_bytes, layout=layout, mode=self.mode, codecs=[self.codec], **self.extra_descriptor
            )
        return ObjectCacheClient.descriptor(names, layers=self.layers, chunk_tokens=self.chunk_tokens, layer_bytes=self.layer_bytes, layout=self.layout, mode=self.mode, **self.extra_descriptor)

    def _place(self, objs: Sequence[MemoryObj]) -> Any:
        """``place(layer, chunk)`` for the layerwise GET: the chunk's MemoryObj in its stored
        layout receives its slices where they belong (KV_2LTD: K of layer l at l*half, V at
        L*half + l*half; MLA: layer l at l*S)."""
        views = [memoryview(obj.byte_array).cast("B") for obj in objs]
        layers, size = self.layers, self.layer_bytes
        if self.layout == "MLA":
            return lambda layer, chunk: (views[chunk][layer * size : (layer + 1) * size],)
        half = size // 2
        return lambda layer, chunk: (
            views[chunk][layer * half : (layer + 1) * half],
            views[chunk][(layers + layer) * half : (layers + layer + 1) * half],
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
        fetched: List[MemoryObj] = []

        def fetch(run: Sequence[str]) -> int:
            objs = self._allocate(len(run))
            try:
                if objs:
                    self.critical.fetch_into(self._descriptor(run[: len(objs)]), self._place(objs), dtype=self.codec_dtype)
            except Exception:
                for obj in objs:
                    obj.ref_count_down()
                raise
            fetched[:] = objs
            return len(objs)

        return fetched if fetch_run([self.object_name(k) for k in keys], fetch, lambda error, count: self._miss("get", error, count)) else []

    def _miss(self, op: str, error: BaseException, count: int) -> None:
        FAILURES.miss(op, error, count)

    async def _get_run(self, keys: Sequence[CacheEngineKey]) -> List[MemoryObj]:
        if self._closed:
            return []
        if keys and isinstance(keys[0], LayerCacheEngineKey):
            return await self._get_layer(keys)
        return await self._in_thread(self._fetch_prefix, keys)

    async def get(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        objs = await self._get_run([key])
        return objs[0] if objs else None

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        objs = await self._get_run(keys)
        return [*objs, *([None] * (len(keys) - len(objs)))]

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[CacheEngineKey]) -> List[MemoryObj]:
        return await self._get_run(keys)

    async def _get_layer(self, keys: Sequence[CacheEngineKey]) -> List[MemoryObj]:
        """One layer of a run of chunks (LMCache's layerwise retrieval asks layer by layer): the
        prefix's stream is opened by the first layer asked for and answers each later layer as
        its frame lands."""
        layer = int(keys[0].layer_id)
        names = tuple(self.object_name(k) for k in keys)
        with self._lock:
            self._drop_stale_streams()
            stream = self._streams.get(names)
            if stream is None or stream.first > layer or stream.taken[layer]:
                if stream is not None:
                    stream.abandon()  # a retrieval that stopped asking: free what it left
                stream = _LayerStream(self, names, layer)
                self._streams[names] = stream
            stream.taken[layer] = True
            if layer == self.layers - 1:
                self._streams.pop(names, None)
        return await asyncio.wrap_future(stream.layers[layer])

    def _drop_stale_streams(self) -> None:
        """Forgets (and frees the layers of) streams whose retrieval stopped asking: ended more
        than a request timeout ago with layers never taken (called under the lock)."""
        now = time.monotonic()
        for names, stream in list(self._streams.items()):
            if stream.ended_at is not None and now - stream.ended_at > self.client_timeout:
                stream.abandon()
                del self._streams[names]

    def _layer_objects(self, staging: memoryview, chunks: int) -> List[MemoryObj]:
        """One delivered layer (per chunk: K then V, token-major) as LMCache's per-layer MemoryObjs."""
        objs: List[MemoryObj] = []
        for _ in range(chunks):
            obj = self.local_cpu_backend.allocate(self.layer_shape, self.dtype, self.layer_fmt)
            if obj is None:
                for taken in objs:
                    taken.ref_count_down()
                raise ObjectCacheError("OC_ERR_CLIENT_TARGET", "LMCache's CPU buffer is full")
            objs.append(obj)
        values = torch.frombuffer(staging, dtype=self.dtype)
        if self.layout == "MLA":
            for i, obj in enumerate(objs):
                obj.tensor.view(-1).copy_(values[i * values.numel() // chunks : (i + 1) * values.numel() // chunks])
        else:
            halves = values.view(chunks, 2, self.chunk_tokens, -1)
            for i, obj in enumerate(objs):
                obj.tensor.copy_(halves[i].transpose(0, 1))  # [2, T, H] -> [T, 2, H]
        return objs

    # -- lookups ----------------------------------------------------------------------------

    def _matched(self, keys: Sequence[CacheEngineKey]) -> int:
        try:
            codecs = None if self.codec is None else [self.codec]
            return self.critical.lookup([self.object_name(k) for k in keys], layers=self.layers, layer_bytes=self.layer_bytes, codecs=codecs)
        except Exception as error:
            self._miss("lookup", error, len(keys))
            return 0

    def exists_sync(self, key: CacheEngineKey) -> bool:
        return self._matched([key]) == 1

    async def exists(self, key: CacheEngineKey) -> bool:
        return await self._in_thread(self._matched, [key]) == 1

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        return await self._in_thread(self._matched, keys)

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: List[CacheEngineKey]) -> int:
        return self._matched(keys)

    # -- writes -----------------------------------------------------------------------------

    def _put(self, name: str, body: Any, client: Optional[ObjectCacheClient] = None, after: Optional[str] = None) -> None:
        """Writes one chunk object (bytes, or an assembled chunk's uint8 array), recording the
        chunk before it in its prefix when known (``after``)."""
        try:
            (client or self.client).put_chunk(name, body, layout=(self.layout, self.layers, self.layer_bytes), codec=self.codec, chunk_tokens=self.chunk_tokens, dtype=self.codec_dtype, after=after)
        except Exception as error:
            self._miss("put", error, 1)

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: List[CacheEngineKey], memory_objs: List[MemoryObj]) -> None:
        """One ``store()`` of LMCache: its chunks in prefix order (LMCache's token database yields
        them so, cache_engine.py ``store``), so each full chunk records the one before it
        (``objectcache-after``) and a budgeted bucket trims the prefix from its tail. The first
        chunk's predecessor is not known here (LMCache hands backends hashes, not the prefix)."""
        if self._closed:
            return
        puts = []
        before: Optional[str] = None
        for key, obj in zip(keys, memory_objs, strict=True):
            if isinstance(key, LayerCacheEngineKey) or obj.get_physical_size() != self.full_chunk_size_bytes:
                await self.put(key, obj)
                before = None  # a gap in the run: the next chunk's predecessor is not this batch's
                continue
            name = self.object_name(key)
            # Copied now, as put() does: LMCache may free the memory once this coroutine is cancelled.
            puts.append(self._in_thread(self._put, name, obj.byte_array.tobytes(), None, before))
            before = name if recordable_after(name) else None
        await asyncio.gather(*puts)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        # LMCache's RemoteBackend releases the object once this returns: no ref_count_down here.
        if self._closed:
            return  # a put queued behind close(): the engine may have freed the object's memory
        if isinstance(key, LayerCacheEngineKey):
            chunk = self._assemble(key, memory_obj)
            if chunk is not None:
                # LMCache's layerwise store is on the forward pass: the critical path's limits.
                await self._in_thread(self._put, self.object_name(key), chunk.view(torch.uint8).numpy(), self.critical)
            return
        if memory_obj.get_physical_size() != self.full_chunk_size_bytes:
            # As LMCache's S3 connector: a partial chunk has no fixed-size object to be read as.
            logger.debug("ObjectCache backend skips the partial chunk %s (%d bytes)", key.to_string(), memory_obj.get_physical_size())
            return
        # Copied before the upload starts: LMCache may free the object's memory once this
        # coroutine is cancelled or the engine closes, while an upload thread still runs.
        body = memory_obj.byte_array.tobytes()
        await self._in_thread(self._put, self.object_name(key), body)

    def _assemble(self, key: Any, obj: MemoryObj) -> Optional[torch.Tensor]:
        """Collects a chunk's per-layer puts into its KV_2LTD object; returns it once complete."""
        tensor = obj.tensor
        if tensor is None or tensor.shape[0] != self.chunk_tokens:
            logger.debug("ObjectCache backend skips a partial chunk's layer %s", key.to_string())
            return None
        name = self.object_name(key)
        layer = int(key.layer_id)
        with self._lock:
            entry = self._assembling.get(name)
            if entry is None:
                kv = 1 if self.layout == "MLA" else 2
                entry = (torch.empty(kv, self.layers, self.chunk_tokens, tensor.shape[-1], dtype=self.dtype), set())
                self._assembling[name] = entry
            chunk, seen = entry
            if self.layout == "MLA":
                chunk[0, layer].copy_(tensor)
            else:
                chunk[:, layer].copy_(tensor.transpose(0, 1))  # [T, 2, H] -> [2, T, H]
            seen.add(layer)
            if len(seen) < self.layers:
                return None
            del self._assembling[name]
            return chunk

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
        names = await self._in_thread(self.client.list_keys, self.key_prefix)
        return [name[len(self.key_prefix) :] for name in names]

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        """0 when the gateway lists this plugin's ``key_prefix`` for its key, 1 otherwise (a list
        of one key: a key confined to its prefix may not HeadBucket, which needs the whole bucket)."""
        try:
            await self._in_thread(self.client.list_keys, self.key_prefix, 1)
            return 0
        except Exception as error:
            self._miss("ping", error, 0)
            return 1

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs a blocking call in a thread, counted until the thread is done with it, so that
        :meth:`close` waits for it (a thread still writing into a MemoryObj must finish before
        LMCache frees its memory)."""
        self._enter()
        return await asyncio.to_thread(self._tracked, fn, *args)

    def _tracked(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        finally:
            self._leave()

    def _enter(self) -> None:
        with self._idle:
            self._inflight += 1

    def _leave(self) -> None:
        with self._idle:
            self._inflight -= 1
            self._idle.notify_all()

    async def close(self) -> None:
        """Waits (up to the request timeout) for calls still running, then closes the client;
        calls queued after it do nothing (puts) or miss (reads)."""
        self._closed = True
        await asyncio.to_thread(self._wait_idle)  # not on LMCache's event loop
        with self._lock:
            for stream in self._streams.values():
                stream.abandon()  # layers delivered but never asked for
            self._streams.clear()
            self._assembling.clear()  # chunks whose layers never all came
        self.client.close()

    def _wait_idle(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=self.client_timeout)

    def __repr__(self) -> str:
        return f"<ObjectCacheConnector {self.plugin_name} {self.client.endpoint}/{self.client.bucket}>"


class _LayerStream:
    """One prefix's layerwise GET in a thread, from layer ``first`` on; ``layers[l]`` resolves to
    layer l's MemoryObjs as its frame lands. If the stream fails, the layers not yet delivered
    fail with its ObjectCacheError: LMCache's layerwise retrieval has counted the tokens as hits
    before the first layer arrives, so an empty answer would let the model run on KV that never
    came; the error is counted and logged like any miss, and LMCache sees it."""

    def __init__(self, connector: ObjectCacheConnector, names: Tuple[str, ...], first: int) -> None:
        self.connector, self.names, self.first = connector, names, first
        self.layers: List[concurrent.futures.Future[List[MemoryObj]]] = [concurrent.futures.Future() for _ in range(connector.layers)]
        self.taken = [False] * connector.layers
        self.abandoned = False
        #: When the stream's thread ended (time.monotonic()), or None while it runs.
        self.ended_at: Optional[float] = None
        connector._enter()
        threading.Thread(target=self._run, name="objectcache-lmcache-layers", daemon=True).start()

    def abandon(self) -> None:
        """Releases the layers delivered but never asked for (called under the connector's lock);
        layers that land later are released as they land."""
        self.abandoned = True
        for layer, future in enumerate(self.layers):
            if not self.taken[layer] and future.done() and future.exception() is None:
                for obj in future.result():
                    obj.ref_count_down()

    def _run(self) -> None:
        try:
            self._stream()
        finally:
            self.ended_at = time.monotonic()
            self.connector._leave()

    def _stream(self) -> None:
        c = self.connector
        chunks, size = len(self.names), c.layer_bytes
        staging = memoryview(bytearray(chunks * size))

        def ready(layer: int) -> None:
            objs = c._layer_objects(staging, chunks)
            with c._lock:
                if self.abandoned:
                    for obj in objs:
                        obj.ref_count_down()
                    objs = []
                self.layers[layer].set_result(objs)

        failure: BaseException = ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", "the layerwise GET ended early")
        try:
            descriptor = c._descriptor(list(self.names))
            descriptor["mode"], descriptor["layerRange"] = "layerwise", [self.first, c.layers]
            c.critical.fetch_into(descriptor, lambda layer, chunk: (staging[chunk * size : (chunk + 1) * size],), ready, dtype=c.codec_dtype)
        except Exception as error:
            c._miss("get", error, chunks)
            failure = error
        finally:
            for future in self.layers[self.first :]:
                if not future.done():
                    future.set_exception(failure)


class _Unusable(RemoteConnector):  # type: ignore[misc]
    """What an ObjectCache plugin whose configuration cannot work serves (no credentials, a key
    the gateway refuses, a setting missing): every call is a miss that is counted
    (``objectcache_lmcache_failures_total``, code OC_ERR_CLIENT_USAGE) and logged as an error
    naming what is wrong, for as long as the engine runs: never a remote tier that silently misses."""

    def __init__(self, config: Any, metadata: Any, why: str) -> None:
        super().__init__(config, metadata)
        self.why = why
        logger.error("%s; every lookup, load and store of this plugin is a miss until it is fixed", why)

    def _refuse(self, op: str, count: int) -> None:
        FAILURES.miss(op, ObjectCacheError("OC_ERR_CLIENT_USAGE", self.why), count)

    async def exists(self, key: CacheEngineKey) -> bool:
        self._refuse("lookup", 1)
        return False

    def exists_sync(self, key: CacheEngineKey) -> bool:
        self._refuse("lookup", 1)
        return False

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: List[CacheEngineKey]) -> int:
        self._refuse("lookup", len(keys))
        return 0

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        self._refuse("lookup", len(keys))
        return 0

    async def get(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        self._refuse("get", 1)
        return None

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        self._refuse("get", len(keys))
        return [None] * len(keys)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        self._refuse("put", 1)

    async def list(self) -> List[str]:
        return []

    async def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<ObjectCache plugin, unusable: {self.why}>"


class ObjectCacheAdapter(ConnectorAdapter):  # type: ignore[misc]
    """The adapter LMCache instantiates from ``class_name: ObjectCacheAdapter``: it claims the
    plugins named ``objectcache`` or ``objectcache.<instance>`` and builds their connectors with
    their own settings."""

    def __init__(self) -> None:
        super().__init__(f"plugin://{PLUGIN_TYPE}")

    def can_parse(self, url: str) -> bool:
        if not url.startswith("plugin://"):
            return False
        return url[len("plugin://") :].split(".", 1)[0] == PLUGIN_TYPE

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        name = context.plugin_name or context.url[len("plugin://") :]
        try:
            return ObjectCacheConnector(context.loop, context.local_cpu_backend, context.config, plugin_name=name)
        except ValueError as error:  # UnusableConfiguration, or an engine shape the plugin cannot store
            config = context.config if context.config is not None else context.local_cpu_backend.config
            return _Unusable(config, context.local_cpu_backend.metadata, str(error))
