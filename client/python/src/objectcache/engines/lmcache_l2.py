"""ObjectCache as the L2 tier of LMCache's multi-process (MP) mode (``pip install "objectcache[lmcache]"``).

LMCache's MP server (``lmcache server``) loads it from its command line, no code needed, through its
``plugin`` L2 adapter type (which imports ``module_path`` and finds ``ObjectCacheL2AdapterConfig``
beside the class by name)::

    lmcache server --l1-size-gb 20 --eviction-policy LRU \\
      --l2-adapter '{"type": "plugin", "module_path": "objectcache.engines.lmcache_l2",
                     "class_name": "ObjectCacheL2Adapter",
                     "adapter_params": {"endpoint": "http://127.0.0.1:9080", "bucket": "kvcache"}}'

with the key in the server's environment (``OBJECTCACHE_ACCESS_KEY``, ``OBJECTCACHE_SECRET_KEY``) or in
``adapter_params`` (``access_key_id``, ``secret_access_key``); the other settings are in ``SETTINGS``.

What each of LMCache's L2 calls becomes:

- ``submit_lookup_and_lock_task``: ONE prefix lookup (``POST /bucket?objectcache-lookup``) for all
  the keys, which also checks every chunk's size against its layout. LMCache's lookups are prefix
  lookups: keys are asked chunk by chunk (every rank and object group of chunk 0, then of chunk 1
  ...), and the bitmap marks the chunks before the first one missing. Nothing is locked: the store
  does not evict under a lookup, and a chunk gone by the time it is loaded is a failed load.
- ``submit_load_task``: ONE descriptor GET for all the keys (a layout per GET: keys of object
  groups with different layouts take one GET each). Every frame's bytes are read straight into the
  MemoryObjs LMCache reserved, CRC-32C checked. A chunk that vanished since the lookup shortens the
  load to the chunks before it (a second GET); any other failure loads nothing.
- ``submit_store_task``: one PUT per chunk, with its per-layer CRC-32Cs in its metadata, and, where
  LMCache's event bus is on (its default in MP mode), the chunk's token ids, its model and the chunk
  before it (``objectcache-after``), from the ``MP_TOKENS`` event LMCache publishes as it submits a
  store: the gateway's KV events then carry the tokens routers key blocks by (docs/kv-events.md),
  and a budgeted bucket trims each prefix from its tail (docs/capacity.md).

Objects are named as the in-process plugin (``objectcache.engines.lmcache``) names them,
``<model>@<world size>@<worker id>@<chunk hash hex>@<dtype>`` with ``/`` as ``_``, and hold the same
bytes, LMCache's ``[K/V, layer, token, hidden]`` chunk (``[layer, token, hidden]`` for MLA). MP keys
carry the same fields (world size and worker id packed in ``kv_rank``; the dtype is the layout's),
plus two the in-process key lacks, written as tags only when set: ``@object_group%<id>`` and
``@cache_salt%<salt>``. The chunk hashes themselves differ: MP mode hashes tokens its own way (blake3
over the whole previous hash by default), so the same prompt has other names in the two modes and
one mode's objects are not hits for the other's prompts.

A gateway or network failure is a miss or a skipped store, logged and counted
(``objectcache_lmcache_l2_failures_total``), never an exception into LMCache.
"""

from __future__ import annotations

import array
import dataclasses
import itertools
import logging
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, cast

import torch
from lmcache.lmcache_native import Bitmap
from lmcache.utils import TORCH_DTYPE_TO_STR_DTYPE
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface, L2TaskId
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.platform import create_event_notifier

from .._contract import MODEL_NAME_PATTERN
from .._s3 import recordable_after
from ..client import ObjectCacheClient
from ..errors import ObjectCacheError
from ..types import Layout, Mode
from .failures import EngineFailures, fetch_run
from .settings import DEADLINE_S, client_of, critical, read_settings, unusable_key

logger = logging.getLogger("objectcache.lmcache_l2")

#: ``adapter_params`` of the plugin, with defaults (None: required, or unset).
SETTINGS: Dict[str, Any] = {
    "endpoint": None,  # one gateway URL, several separated by commas, or a list
    "bucket": None,
    "access_key_id": None,  # or the environment's OBJECTCACHE_ACCESS_KEY
    "secret_access_key": None,  # or the environment's OBJECTCACHE_SECRET_KEY
    "region": "us-east-1",
    "tenant": None,  # the bandwidth scheduler's tenant (the key's own when unset)
    "key_prefix": "",  # prepended to every object name
    "mode": "auto",  # layerwise, chunkwise or auto (the gateway's size threshold)
    "compute_ms_per_layer": None,  # the engine's per-layer compute window, for the scheduler
    "timeout_s": 30,
    "retries": 2,  # stores: answers the gateway marks retryable, retried after their Retry-After
    "deadline_s": DEADLINE_S,  # lookups and loads: one call's longest, and never a Retry-After wait
    "workers": 4,  # PUTs in flight, and lookups and loads in flight
}


#: The settings that are numbers, and the least each may be.
NUMBERS: Dict[str, float] = {"timeout_s": 0.001, "retries": 0, "workers": 1, "compute_ms_per_layer": 0}


#: Calls that failed and became a miss, by (op, code) (objectcache.failures).
FAILURES = EngineFailures("objectcache_lmcache_l2_failures", "LMCache MP L2 calls that failed and became a miss or a skipped store", logger, "chunk(s)")


class ObjectCacheL2AdapterConfig(L2AdapterConfigBase):  # type: ignore[misc]
    """The plugin's ``adapter_params``, checked at start-up (credentials may come from the
    environment). Raises ValueError naming the setting that is wrong or missing."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> ObjectCacheL2AdapterConfig:
        values = read_settings(d, SETTINGS, "adapter_params.", unknown="unknown adapter_params {names}; known: {known}", allowed=("type",), at_least=NUMBERS, as_text=False)
        return cls(values)

    @classmethod
    def help(cls) -> str:
        return (
            "ObjectCache L2 adapter (objectcache.engines.lmcache_l2), adapter_params:\n"
            "- endpoint (str, required): the gateway URL (several: comma-separated)\n"
            "- bucket (str, required)\n"
            "- access_key_id, secret_access_key (str): or OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY\n"
            "- region (default us-east-1), tenant, key_prefix (default ''), mode (auto|layerwise|chunkwise),\n"
            "  compute_ms_per_layer, timeout_s (30), retries (2), deadline_s (5), workers (4)"
        )


@dataclass(frozen=True)
class ChunkLayout:
    """How one chunk object of an object group is laid out, in the gateway's terms."""

    #: KV_2LTD ([K/V, layer, token, hidden]), or MLA (one plane, layer-major; also any other layout,
    #: stored as a single "layer" of its whole size).
    layout: Layout
    layers: int
    layer_bytes: int
    chunk_tokens: int
    #: LMCache's name of the KV dtype (the last field of the object name).
    dtype: str

    @property
    def size(self) -> int:
        return self.layers * self.layer_bytes

    @staticmethod
    def of(shapes: Sequence[torch.Size], dtypes: Sequence[torch.dtype]) -> ChunkLayout:
        dtype = TORCH_DTYPE_TO_STR_DTYPE.get(dtypes[0], str(dtypes[0]).replace("torch.", ""))
        if len(shapes) == 1:
            shape, itemsize = [int(d) for d in shapes[0]], dtypes[0].itemsize
            if len(shape) == 4 and shape[0] == 2:
                return ChunkLayout("KV_2LTD", shape[1], 2 * shape[2] * shape[3] * itemsize, shape[2], dtype)
            if len(shape) == 4 and shape[0] == 1:
                return ChunkLayout("MLA", shape[1], shape[2] * shape[3] * itemsize, shape[2], dtype)
            if len(shape) == 3:
                return ChunkLayout("MLA", shape[0], shape[1] * shape[2] * itemsize, shape[1], dtype)
        # Several kernel groups in one object (a hybrid model): no per-layer order to stream by.
        total = sum(torch.Size(s).numel() * t.itemsize for s, t in zip(shapes, dtypes))
        return ChunkLayout("MLA", 1, total, 1, dtype)

    @staticmethod
    def of_object(obj: MemoryObj) -> ChunkLayout:
        meta = obj.metadata
        return ChunkLayout.of(meta.shapes or [meta.shape], meta.dtypes or [meta.dtype])

    @staticmethod
    def of_desc(desc: MemoryLayoutDesc) -> ChunkLayout:
        return ChunkLayout.of(desc.shapes, desc.dtypes)


def object_name(key: ObjectKey, dtype: str, key_prefix: str = "") -> str:
    """The object a chunk is stored as: the in-process plugin's name for the same fields
    (``kv_rank`` packs the world size in its top byte and the worker's global rank in the next)."""
    world_size, worker_id = (key.kv_rank >> 24) & 0xFF, (key.kv_rank >> 16) & 0xFF
    name = f"{key.model_name}@{world_size}@{worker_id}@{key.chunk_hash.hex()}@{dtype}"
    if key.object_group_id:
        name += f"@object_group%{key.object_group_id}"
    if key.cache_salt:
        name += f"@cache_salt%{key.cache_salt}"
    return key_prefix + name.replace("/", "_")


#: Chunks whose tokens are held (from LMCache's MP_TOKENS events) until their stores come, the
#: oldest forgotten first: about 1 KB each at LMCache's 256-token chunks.
MAX_TOKEN_BINDINGS = 8192
#: How long a store waits for its chunk's tokens: LMCache publishes them as it submits the store,
#: and its event bus delivers them on a thread of its own, usually before the L1 write finishes.
TOKENS_WAIT_S = 0.05


class TokenBindings:
    """The token ids and parent chunk hash of recently submitted chunks, by chunk hash, learnt from
    LMCache's ``MP_TOKENS`` events (lmcache/v1/multiprocess/modules/lmcache_driven_transfer.py,
    ``_publish_token_bindings``; the same event LMCache's own KV events read). Bounded; a chunk's
    binding serves every rank and object group of it (they share the chunk hash)."""

    def __init__(self, limit: int = MAX_TOKEN_BINDINGS) -> None:
        self._limit = limit
        self._held: OrderedDict[bytes, Tuple[array.array[int], Optional[bytes]]] = OrderedDict()
        self._changed = threading.Condition()
        self._closed = False
        #: Whether any binding ever came: until one does, stores do not wait for theirs.
        self.heard = False

    def on_event(self, event: Any) -> None:
        """An ``MP_TOKENS`` event (called on the event bus's thread)."""
        if self._closed:
            return
        meta = event.metadata
        with self._changed:
            for chunk_hash, tokens, parent in zip(meta["chunk_hashes"], meta["token_chunks"], meta["parent_hashes"], strict=True):
                self._held[bytes(chunk_hash)] = (array.array("I", tokens), None if parent is None else bytes(parent))
                self._held.move_to_end(bytes(chunk_hash))
            while len(self._held) > self._limit:
                self._held.popitem(last=False)
            self.heard = True
            self._changed.notify_all()

    def get(self, chunk_hash: bytes, wait_s: float = TOKENS_WAIT_S) -> Optional[Tuple[array.array[int], Optional[bytes]]]:
        """The chunk's (tokens, parent hash), waiting up to ``wait_s`` for it once any came."""
        deadline = time.monotonic() + wait_s
        with self._changed:
            while True:
                found = self._held.get(chunk_hash)
                left = deadline - time.monotonic()
                if found is not None or self._closed or not self.heard or left <= 0:
                    return found
                self._changed.wait(left)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._held.clear()
            self._changed.notify_all()


def listen_for_tokens(bus: Any, bindings: TokenBindings) -> bool:
    """Subscribes ``bindings`` to LMCache's ``MP_TOKENS`` events; False where the bus is off
    (``--disable-observability``) or this LMCache has no such event."""
    try:
        from lmcache.v1.mp_observability.event import EventType
    except ImportError:
        return False
    kind = getattr(EventType, "MP_TOKENS", None)
    if bus is None or kind is None or not getattr(bus, "enabled", False):
        return False
    bus.subscribe(kind, bindings.on_event)
    return True


def chunk_major(keys: Sequence[ObjectKey]) -> List[int]:
    """Indices of ``keys`` in prefix order: LMCache lists them row by row (one row per object
    group and rank, each in chunk order); a prefix lookup must ask for every row's chunk 0, then
    every row's chunk 1, ..."""
    rows: Dict[Tuple[int, int], List[int]] = {}
    for index, key in enumerate(keys):
        rows.setdefault((key.object_group_id, key.kv_rank), []).append(index)
    width = max((len(r) for r in rows.values()), default=0)
    return [r[c] for c in range(width) for r in rows.values() if c < len(r)]


class _StoreTask:
    """The PUTs of one store task, finished when the last one is."""

    def __init__(self, task_id: L2TaskId, count: int) -> None:
        self.task_id, self.remaining, self.ok = task_id, count, True
        self.stored: List[Tuple[ObjectKey, int]] = []


class ObjectCacheL2Adapter(L2AdapterInterface):  # type: ignore[misc]
    """An LMCache MP L2 adapter that keeps chunks in an ObjectCache gateway's bucket.

    Thread-safe: LMCache's store and prefetch controllers call it from their threads; the requests
    run on its own worker threads, and each finished task is signalled on its event fd."""

    def __init__(self, config: ObjectCacheL2AdapterConfig, l1_memory_desc: Any = None) -> None:
        """``l1_memory_desc``, which LMCache passes to adapters that register L1 memory with a
        transport (NIXL, RDMA), is not used: every byte goes through the gateway."""
        super().__init__(max_capacity_bytes=0)  # the bucket's capacity is the store's to manage
        settings = config.settings
        self.client = client_of(settings, max_idle_connections=2 * int(settings["workers"]))
        self.timeout = self.client.config.timeout
        #: Lookups and loads hold a request: a short deadline, no Retry-After waits.
        self.critical = critical(self.client, settings["deadline_s"])
        self.key_prefix = str(settings["key_prefix"] or "")
        refused = unusable_key(self.critical, self.key_prefix, logger)
        if refused is not None:
            self.client.close()
            raise ValueError(f"ObjectCache L2 adapter: {refused}")
        self.mode = cast(Mode, str(settings["mode"]))  # one of them: from_dict checked it
        self.extra_descriptor: Dict[str, Any] = {}
        if settings["tenant"]:
            self.extra_descriptor["tenant"] = str(settings["tenant"])
        if settings["compute_ms_per_layer"]:
            self.extra_descriptor["computeMsPerLayer"] = float(settings["compute_ms_per_layer"])
        workers = int(settings["workers"])
        # Stores apart from reads: a burst of PUTs must not hold back a lookup or a load.
        self._reads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="objectcache-l2-read")
        self._writes = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="objectcache-l2-put")
        self._store_efd, self._lookup_efd, self._load_efd = create_event_notifier(), create_event_notifier(), create_event_notifier()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._stores: Dict[L2TaskId, L2StoreResult] = {}
        self._lookups: Dict[L2TaskId, Bitmap] = {}
        self._loads: Dict[L2TaskId, Bitmap] = {}
        self._closed = False
        self._fds_closed = False
        self._tokens = TokenBindings()
        # LMCache has no unsubscribe: once closed, the bindings ignore what comes.
        tokens = listen_for_tokens(getattr(self, "_event_bus", None), self._tokens)
        logger.info("ObjectCache L2 adapter: %s bucket %s (chunk tokens for KV events: %s)", self.client.endpoint, self.client.bucket, "on" if tokens else "off, LMCache's event bus is off")

    # -- event fds ----------------------------------------------------------------------------

    def get_store_event_fd(self) -> int:
        return int(self._store_efd.fileno())

    def get_lookup_and_lock_event_fd(self) -> int:
        return int(self._lookup_efd.fileno())

    def get_load_event_fd(self) -> int:
        return int(self._load_efd.fileno())

    def _next_id(self) -> L2TaskId:
        with self._lock:
            return next(self._ids)

    # -- stores -------------------------------------------------------------------------------

    def submit_store_task(self, keys: List[ObjectKey], objects: List[MemoryObj]) -> L2TaskId:
        """One PUT per chunk, ``workers`` at a time. LMCache keeps each object read-locked in L1
        until the task is popped, so the PUTs read its memory in place."""
        task = _StoreTask(self._next_id(), len(keys))
        if not keys or self._closed:
            self._finish_store(task, ok=not keys)
            return task.task_id
        # A chunk's tokens are waited for from here: a PUT queued behind others does not wait again.
        submitted = time.monotonic()
        for key, obj in zip(keys, objects, strict=True):
            try:
                self._writes.submit(self._put, task, key, obj, submitted)
            except RuntimeError:  # closed meanwhile: the chunk is not stored
                self._put_done(task, key, 0)
        return task.task_id

    def _put(self, task: _StoreTask, key: ObjectKey, obj: MemoryObj, submitted: float) -> None:
        size = 0
        try:
            if self._closed:
                raise ObjectCacheError("OC_ERR_CANCELLED", "the adapter is closed")
            chunk = ChunkLayout.of_object(obj)
            body = memoryview(obj.byte_array).cast("B")[: chunk.size]
            bound = self._tokens.get(bytes(key.chunk_hash), max(0.0, submitted + TOKENS_WAIT_S - time.monotonic()))
            tokens, after = (None, None) if bound is None else (bound[0], None if bound[1] is None else object_name(dataclasses.replace(key, chunk_hash=bound[1]), chunk.dtype, self.key_prefix))
            if after is not None and not recordable_after(after):
                after = None
            model = key.model_name if tokens is not None and re.fullmatch(MODEL_NAME_PATTERN, key.model_name) else None
            self.client.put_chunk(object_name(key, chunk.dtype, self.key_prefix), body, layout=(chunk.layout, chunk.layers, chunk.layer_bytes), tokens=tokens, model=model, after=after)
            size = chunk.size
        except Exception as error:
            self._miss("put", error, 1)
        self._put_done(task, key, size)

    def _put_done(self, task: _StoreTask, key: ObjectKey, size: int) -> None:
        """Records one PUT (``size`` 0: failed); the last one finishes the task."""
        ok = size > 0
        with self._lock:
            task.remaining -= 1
            task.ok = task.ok and ok
            if ok:
                task.stored.append((key, size))
            done = task.remaining == 0
        if done:
            self._finish_store(task, ok=task.ok)

    def _finish_store(self, task: _StoreTask, ok: bool) -> None:
        try:
            if task.stored:
                self._notify_keys_stored([k for k, _ in task.stored], [s for _, s in task.stored])
        except Exception as error:  # a listener's failure must not leave the task unfinished
            logger.warning("ObjectCache: notifying LMCache of stored keys failed: %s", error)
        finally:
            with self._lock:
                self._stores[task.task_id] = L2StoreResult(ok, sum(s for _, s in task.stored))
            self._signal(self._store_efd)

    def pop_completed_store_tasks(self) -> Dict[L2TaskId, L2StoreResult]:
        with self._lock:
            done, self._stores = self._stores, {}
        return done

    # -- lookups ------------------------------------------------------------------------------

    def submit_lookup_and_lock_task(self, keys: List[ObjectKey], group_layout_descs: Dict[int, MemoryLayoutDesc]) -> L2TaskId:
        task_id = self._next_id()
        self._run(self._lookup, task_id, list(keys), dict(group_layout_descs))
        return task_id

    def _lookup(self, task_id: L2TaskId, keys: List[ObjectKey], descs: Dict[int, MemoryLayoutDesc]) -> None:
        found = Bitmap(len(keys))
        try:
            order = chunk_major(keys)
            layouts = {group: ChunkLayout.of_desc(desc) for group, desc in descs.items()}
            # Keys of a group without a layout cannot be named: the prefix ends before them.
            named = list(itertools.takewhile(lambda i: keys[i].object_group_id in layouts, order))
            if named and not self._closed:
                sizes = {(layouts[keys[i].object_group_id].layers, layouts[keys[i].object_group_id].layer_bytes) for i in named}
                # One geometry: the gateway counts only chunks of exactly that size.
                layers, layer_bytes = next(iter(sizes)) if len(sizes) == 1 else (None, None)
                names = [object_name(keys[i], layouts[keys[i].object_group_id].dtype, self.key_prefix) for i in named]
                matched = self.critical.lookup(names, layers=layers, layer_bytes=layer_bytes)
                found.batched_set(named[:matched])
        except Exception as error:
            self._miss("lookup", error, len(keys))
        with self._lock:
            self._lookups[task_id] = found
        self._signal(self._lookup_efd)

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Optional[Bitmap]:
        with self._lock:
            return self._lookups.pop(task_id, None)

    def submit_unlock(self, keys: List[ObjectKey]) -> None:
        """Nothing to release: a lookup locks nothing (see the module's docstring)."""

    # -- loads --------------------------------------------------------------------------------

    def submit_load_task(self, keys: List[ObjectKey], objects: List[MemoryObj]) -> L2TaskId:
        task_id = self._next_id()
        self._run(self._load, task_id, list(keys), list(objects))
        return task_id

    def _load(self, task_id: L2TaskId, keys: List[ObjectKey], objects: List[MemoryObj]) -> None:
        loaded = Bitmap(len(keys))
        try:
            accessed: List[ObjectKey] = []
            runs: Dict[ChunkLayout, List[int]] = {}
            for index, obj in enumerate(objects):
                runs.setdefault(ChunkLayout.of_object(obj), []).append(index)
            for chunk, indices in runs.items():
                if self._closed:
                    break
                got = self._fetch(chunk, [keys[i] for i in indices], [objects[i] for i in indices])
                loaded.batched_set(indices[:got])
                accessed.extend(keys[i] for i in indices[:got])
            if accessed:
                self._notify_keys_accessed(accessed)
        except Exception as error:
            # Whatever failed, the task ends (as a miss: nothing counts as loaded) and LMCache
            # hears of it; a task that never signals would hold its buffers for good.
            self._miss("get", error, len(keys))
            loaded = Bitmap(len(keys))
        finally:
            with self._lock:
                self._loads[task_id] = loaded
            self._signal(self._load_efd)

    def _fetch(self, chunk: ChunkLayout, keys: List[ObjectKey], objects: List[MemoryObj]) -> int:
        """How many leading ``objects`` one descriptor GET filled (0 on failure: LMCache then drops
        every buffer, so bytes of a broken stream are never used). A chunk the gateway reports
        missing shortens the run to the chunks before it, once."""

        def fetch(run: Sequence[str]) -> int:
            descriptor = ObjectCacheClient.descriptor(
                run, layers=chunk.layers, chunk_tokens=chunk.chunk_tokens, layer_bytes=chunk.layer_bytes, layout=chunk.layout, mode=self.mode, **self.extra_descriptor
            )
            self.critical.fetch_into(descriptor, self._place(chunk, objects[: len(run)]))
            return len(run)

        return fetch_run([object_name(k, chunk.dtype, self.key_prefix) for k in keys], fetch, lambda error, count: self._miss("get", error, count))

    @staticmethod
    def _place(chunk: ChunkLayout, objects: Sequence[MemoryObj]) -> Callable[[int, int], Tuple[memoryview, ...]]:
        """``place(layer, chunk)`` for the descriptor GET: each layer's slice lands where it
        belongs in the chunk's MemoryObj (KV_2LTD: K of layer l at l*half, V at L*half + l*half)."""
        views = [memoryview(obj.byte_array).cast("B") for obj in objects]
        layers, size = chunk.layers, chunk.layer_bytes
        if chunk.layout != "KV_2LTD":
            return lambda layer, c: (views[c][layer * size : (layer + 1) * size],)
        half = size // 2
        return lambda layer, c: (
            views[c][layer * half : (layer + 1) * half],
            views[c][(layers + layer) * half : (layers + layer + 1) * half],
        )

    def query_load_result(self, task_id: L2TaskId) -> Optional[Bitmap]:
        with self._lock:
            return self._loads.pop(task_id, None)

    # -- the rest -----------------------------------------------------------------------------

    def _run(self, fn: Callable[..., None], *args: Any) -> None:
        """Runs a lookup or a load on a read thread (on the caller's after close, as a miss)."""
        try:
            self._reads.submit(fn, *args)
        except RuntimeError:  # the pool is shut down: answer at once, as a miss
            fn(*args)

    def _signal(self, notifier: Any) -> None:
        """Signals a finished task, unless the adapter is closed (its fds are gone, and nobody
        polls them any more)."""
        with self._lock:
            if not self._fds_closed:
                notifier.notify()

    def _miss(self, op: str, error: BaseException, count: int) -> None:
        FAILURES.miss(op, error, count)

    def report_status(self) -> Dict[str, Any]:
        failures = FAILURES.total()
        return {"is_healthy": not self._closed, "type": "ObjectCacheL2Adapter", "endpoint": self.client.endpoint, "bucket": self.client.bucket, "failures": failures}

    def close(self) -> None:
        """Lets the requests under way finish (each bounded by ``timeout_s``), then closes the
        client and the event fds; tasks submitted later complete at once as misses."""
        self._closed = True
        self._tokens.close()
        # Queued PUTs are not sent: each fails at once as closed (_put), so that its store task
        # still finishes; cancelling them would leave their tasks unfinished for good.
        self._writes.shutdown(wait=True)
        self._reads.shutdown(wait=True)
        self.client.close()
        with self._lock:
            self._fds_closed = True
            for notifier in (self._store_efd, self._lookup_efd, self._load_efd):
                notifier.close()
