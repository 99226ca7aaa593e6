"""ObjectCache as an SGLang HiCache L3 storage backend, loaded by SGLang's ``dynamic`` backend
from configuration alone::

    python -m sglang.launch_server --model-path ... --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "objectcache",
        "module_path": "objectcache.engines.sglang", "class_name": "ObjectCacheHiCacheStorage",
        "interface_v1": 1, "endpoint": "http://127.0.0.1:9080", "bucket": "kvcache"}'

with the key pair in the server's environment (``OBJECTCACHE_ACCESS_KEY``,
``OBJECTCACHE_SECRET_KEY``): SGLang logs the extra config at start-up.

``interface_v1: 1`` makes SGLang's cache controller call the zero-copy interface
(``batch_get_v1`` / ``batch_set_v1`` with host-pool indices); without it the controller uses the
older ``batch_get`` / ``batch_set`` on flat staging pages, which it then copies into the host pool
itself. Both read and write the same objects.

What each HiCache call becomes:

- ``batch_exists`` / ``exists``: ONE prefix lookup (``POST /bucket?objectcache-lookup``), which
  also checks every page object's size against this engine's page.
- ``batch_get_v1`` / ``batch_get`` / ``get``: ONE descriptor GET for the whole batch of pages;
  each delivered slice is read straight from the socket into its place in the host pool (or the
  caller's flat page), CRC-32C checked.
- ``batch_set_v1`` / ``batch_set`` / ``set``: one PUT per page, with its per-layer CRC-32Cs.

A page object is HiCache's own flat data page of the host layout (what the host pool's
``get_data_page(index, flat=True)`` returns, and what the controller's older interface hands
over). Which host layouts are served with no copy:

- MHA ``layer_first`` and ``page_first_direct``: a page is ``[K/V][layer][token][heads x dim]``
  (KV_2LTD, one slice per layer); each layer's K and V runs of a page are contiguous in the host
  buffer, so every slice lands in place. Layerwise delivery is possible (``mode``).
- MHA ``page_first`` (SGLang's default) and ``page_head``: a page is token-major
  (``[K/V][token][layer][heads x dim]``, ``[K/V][head][token][layer][dim]``), so no layer slice of
  it is contiguous; the object is stored as one slice (``layers = 1``) whose K and V halves are
  the page's two contiguous blocks in the host buffer. No copy, but chunkwise delivery only.
- MLA ``layer_first`` and ``page_first_direct`` (one slice per layer), ``page_first`` (one slice).
- Any other host pool or layout with a flat page form: the page's flat form is fetched into a
  staging buffer and installed with the pool's ``set_from_flat_data_page``: one copy. A pool
  without one (asymmetric K/V heads, MXFP8, MHA ``page_unified``, MLA ``page_first_kv_split``)
  is refused when the backend attaches, with a message naming it.

Objects are named ``<key_prefix><model>/<rank scope>/<page form>-<dtype>/<page hash>``: the rank
scope is ``tp<rank>of<size>`` for MHA (ranks hold different heads; MLA ranks share pages), plus
``pp``/``cp`` components when those degrees exceed one; the page form names the byte order, so a
page written under one host layout is never read as another. A gateway or network failure, or a
page that is missing or the wrong size, is a miss (``False`` / ``None`` / a shorter prefix),
logged and counted (``objectcache_sglang_failures_total``), never wrong bytes and never an
exception into the engine.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, cast

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo

from .._s3 import recordable_after
from ..client import ObjectCacheClient
from ..errors import ObjectCacheError
from ..types import Descriptor, Layout, Mode
from .failures import EngineFailures, fetch_run
from .settings import DEADLINE_S, client_of, critical, read_settings, unusable_key

logger = logging.getLogger("objectcache.sglang")

#: This backend's settings in ``--hicache-storage-backend-extra-config`` (which SGLang's cache
#: controller shares: it reads ``interface_v1``, ``prefetch_threshold`` ... from the same object).
SETTINGS: Dict[str, Optional[str]] = {
    "endpoint": None,  # one gateway URL, or several separated by commas
    "bucket": None,
    "access_key_id": None,  # or the environment's OBJECTCACHE_ACCESS_KEY
    "secret_access_key": None,  # or the environment's OBJECTCACHE_SECRET_KEY
    "region": "us-east-1",
    "key_prefix": "sglang/",
    # HiCache installs a prefetched batch only once all of it is in host memory, so nothing is
    # gained by layer order; chunkwise reads each page object once per batch.
    "mode": "chunkwise",
    "tenant": None,  # the bandwidth scheduler's tenant (the key's own when unset)
    "timeout_s": "30",
    "retries": "2",  # stores: answers the gateway marks retryable, retried after their Retry-After
    "deadline_s": str(DEADLINE_S),  # lookups and loads: one call's longest, and never a Retry-After wait
    "put_concurrency": "8",  # PUTs in flight per batch_set
}

#: The settings that are numbers, and the least each may be.
NUMBERS: Dict[str, float] = {"timeout_s": 0.001, "retries": 0, "put_concurrency": 1}

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4m3", torch.float8_e5m2: "fp8e5m2", torch.uint8: "u8"}

#: A run of bytes in a host buffer: (offset, length).
Run = Tuple[int, int]


#: Calls that failed and became a miss, by (op, code) (objectcache.failures).
FAILURES = EngineFailures("objectcache_sglang_failures", "SGLang HiCache backend calls that failed and became a miss or a failed store", logger, "page(s)")


def backend_settings(extra_config: Optional[Mapping[str, Any]], overrides: Optional[Mapping[str, Any]] = None) -> Dict[str, Optional[str]]:
    """This backend's settings from the extra config (``overrides``, the factory's ``kwargs``,
    win), with the environment's credentials as fallback. Raises ValueError naming what is wrong."""
    given = {**dict(extra_config or {}), **dict(overrides or {})}
    if given.get("secret_access_key"):
        # SGLang logs its server arguments, this extra config with them, at start-up.
        logger.warning(
            "ObjectCache HiCache backend: the secret key is in the extra config, which SGLang logs at start-up; set OBJECTCACHE_ACCESS_KEY and OBJECTCACHE_SECRET_KEY in the server's environment instead"
        )
    # No unknown settings refused: SGLang's cache controller reads its own from the same object.
    return read_settings(given, SETTINGS, "hicache-storage-backend-extra-config: ", at_least=NUMBERS)


def rank_scope(config: HiCacheStorageConfig) -> List[str]:
    """The model and rank components of an object name: pages are shared only between ranks
    that hold the same bytes for the same tokens."""
    parts = ["-".join((config.model_name or "model").split("/"))]
    if not config.is_mla_model:
        parts.append(f"tp{config.tp_rank}of{config.tp_size}")
    if config.pp_size > 1:
        parts.append(f"pp{config.pp_rank}of{config.pp_size}")
    if config.attn_cp_size > 1:
        parts.append(f"cp{config.attn_cp_rank}of{config.attn_cp_size}")
    return parts


@dataclass(frozen=True)
class PageForm:
    """How one page is stored and where its delivered slices go.

    ``slices(index, layer)`` gives the runs of the host buffer (byte offsets into ``kv_buffer``)
    that receive layer ``layer`` of the page at host index ``index``, in delivered order (K run,
    then V run, for MHA). ``slices`` is None for a pool served through its flat pages (staged)."""

    name: str
    layout: Layout  # the gateway's name for the object's layout
    layers: int
    layer_bytes: int
    page_bytes: int
    slices: Optional[Callable[[int, int], Tuple[Run, ...]]] = None

    def flat_runs(self, layer: int) -> Tuple[Run, ...]:
        """Where layer ``layer`` sits in the object (a flat page), in delivered order."""
        if self.layout == "KV_2LTD":
            half = self.layer_bytes // 2
            return ((layer * half, half), (self.layers * half + layer * half, half))
        return ((layer * self.layer_bytes, self.layer_bytes),)

    def object_runs(self, index: int) -> List[Run]:
        """The host runs of the page at ``index`` in the object's byte order."""
        assert self.slices is not None
        per_layer = [self.slices(index, layer) for layer in range(self.layers)]
        if self.layout == "KV_2LTD":
            return [runs[0] for runs in per_layer] + [runs[1] for runs in per_layer]
        return [run for runs in per_layer for run in runs]


def page_form(pool: Any) -> PageForm:
    """The page form of a host pool: zero-copy for SGLang's MHA and MLA host pools in the layouts
    whose pages are contiguous runs, staged through flat pages for anything else."""
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

    T, layout = int(pool.page_size), str(pool.layout)
    kv: Any = getattr(pool, "kv_buffer", None)
    try:
        flat_bytes = pool.get_dummy_flat_data_page().numel() * pool.dtype.itemsize
    except (NotImplementedError, ValueError) as error:
        raise ValueError(f"the ObjectCache HiCache backend cannot store pages of this host pool ({type(pool).__name__}, layout {layout}): it has no flat page form ({error})") from error
    zero_copy = isinstance(kv, torch.Tensor) and kv.is_contiguous() and kv.device.type == "cpu"
    if zero_copy and type(pool) is MHATokenToKVPoolHost and pool.head_dim == pool.v_head_dim:
        it = kv.element_size()
        s = [stride * it for stride in kv.stride()]
        L, row = int(pool.layer_num), int(pool.head_num * pool.head_dim * it)
        if layout == "layer_first":  # (2, L, size, H, D)
            return PageForm("kv2ltd", "KV_2LTD", L, 2 * T * row, flat_bytes, lambda i, layer: ((layer * s[1] + i * s[2], T * row), (s[0] + layer * s[1] + i * s[2], T * row)))
        if layout == "page_first_direct":  # (2, pages, L, T, H, D)
            return PageForm("kv2ltd", "KV_2LTD", L, 2 * T * row, flat_bytes, lambda i, layer: ((i // T * s[1] + layer * s[2], T * row), (s[0] + i // T * s[1] + layer * s[2], T * row)))
        if layout == "page_first":  # (2, size, L, H, D): token-major, one slice
            return PageForm("kv2tld", "KV_2LTD", 1, 2 * T * L * row, flat_bytes, lambda i, layer: ((i * s[1], T * L * row), (s[0] + i * s[1], T * L * row)))
        if layout == "page_head":  # (2, pages, H, T, L, D): head-major, one slice
            return PageForm("kv2htld", "KV_2LTD", 1, 2 * T * L * row, flat_bytes, lambda i, layer: ((i // T * s[1], T * L * row), (s[0] + i // T * s[1], T * L * row)))
    if zero_copy and type(pool) is MLATokenToKVPoolHost and getattr(pool, "dcp_size", 1) == 1:
        it = kv.element_size()
        s = [stride * it for stride in kv.stride()]
        L, row = int(pool.layer_num), int(pool.kv_cache_dim * it)
        if layout == "layer_first":  # (L, size, 1, D)
            return PageForm("mla-ltd", "MLA", L, T * row, flat_bytes, lambda i, layer: ((layer * s[0] + i * s[1], T * row),))
        if layout == "page_first_direct":  # (pages, L, T, 1, D)
            return PageForm("mla-ltd", "MLA", L, T * row, flat_bytes, lambda i, layer: ((i // T * s[0] + layer * s[1], T * row),))
        if layout == "page_first":  # (size, L, 1, D): token-major, one slice
            return PageForm("mla-tld", "MLA", 1, T * L * row, flat_bytes, lambda i, layer: ((i * s[0], T * L * row),))
    # Anything else goes through the pool's own flat pages, if it has them for this layout.
    try:
        pool.get_data_page(0, flat=True)
    except (NotImplementedError, ValueError) as error:
        raise ValueError(f"the ObjectCache HiCache backend cannot store pages of this host pool ({type(pool).__name__}, layout {layout}): {error}") from error
    return PageForm(f"flat-{type(pool).__name__}-{layout}", "KV_L2TD", 1, flat_bytes, flat_bytes)


class ObjectCacheHiCacheStorage(HiCacheStorage):  # type: ignore[misc]
    """HiCache pages through an ObjectCache gateway: one lookup per existence check, one
    descriptor GET per batch read, one PUT per page."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[Mapping[str, Any]] = None) -> None:
        settings = backend_settings(storage_config.extra_config, kwargs if isinstance(kwargs, Mapping) else None)
        if storage_config.should_split_heads:
            raise ValueError("the ObjectCache HiCache backend does not split heads across TP sizes (tp_lcm_size); leave it unset")
        self.storage_config = storage_config
        self.key_prefix = settings["key_prefix"] or ""
        self.scope = "/".join(rank_scope(storage_config))
        self.mode = cast(Mode, settings["mode"] or "chunkwise")  # one of them: backend_settings checked it
        self.extra_descriptor: Dict[str, Any] = {"tenant": settings["tenant"]} if settings["tenant"] else {}
        self.client = client_of(settings)
        #: Lookups (the scheduler's) and loads (prefetches) hold requests: a short deadline, no Retry-After waits.
        self.critical = critical(self.client, settings["deadline_s"])
        refused = unusable_key(self.critical, self.key_prefix, logger)
        if refused is not None:
            self.client.close()
            raise ValueError(f"ObjectCache HiCache backend: {refused}")
        self._puts = ThreadPoolExecutor(max_workers=max(1, int(float(settings["put_concurrency"] or 8))), thread_name_prefix="objectcache-sglang-put")
        self.form: Optional[PageForm] = None
        self._host: Optional[memoryview] = None
        if not (storage_config.extra_config or {}).get("interface_v1"):
            logger.info('ObjectCache HiCache backend: add "interface_v1": 1 to the extra config so that pages land in the host pool with no copy')

    # -- the host pool ----------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self.form = page_form(mem_pool_host)
        if self.form.slices is not None:
            # One byte view of the whole host buffer, kept for the pool's life.
            self._host = memoryview(mem_pool_host.kv_buffer.view(-1).view(torch.uint8).numpy())
        dtype = DTYPE_NAMES.get(mem_pool_host.dtype, str(mem_pool_host.dtype).replace("torch.", ""))
        self.prefix = f"{self.key_prefix}{self.scope}/{self.form.name}-{dtype}/"
        logger.info(
            "ObjectCache HiCache backend: %s bucket %s, %s host layout as %s (%d layer(s) x %d bytes)%s, objects under %s",
            self.client.endpoint,
            self.client.bucket,
            mem_pool_host.layout,
            self.form.layout,
            self.form.layers,
            self.form.layer_bytes,
            "" if self.form.slices is not None else ", staged through flat pages",
            self.prefix,
        )

    def _page_form(self) -> PageForm:
        if self.form is None:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "no host pool registered (register_mem_pool_host)")
        return self.form

    def object_name(self, key: str) -> str:
        return self.prefix + key

    def _descriptor(self, names: Sequence[str]) -> Descriptor:
        form = self._page_form()
        return ObjectCacheClient.descriptor(
            names, layers=form.layers, chunk_tokens=int(self.mem_pool_host.page_size), layer_bytes=form.layer_bytes, layout=form.layout, mode=self.mode, **self.extra_descriptor
        )

    def _miss(self, op: str, error: BaseException, count: int) -> None:
        FAILURES.miss(op, error, count)

    # -- reads ------------------------------------------------------------------------------

    def _fetch(self, keys: Sequence[str], place: Callable[[int, int], Sequence[memoryview]]) -> int:
        """Fetches the pages of ``keys`` in one descriptor GET, each slice into ``place(layer,
        page)``; returns how many leading pages arrived whole (0 on failure). A page the gateway
        reports missing shortens the batch to the pages before it, once."""
        if not keys:
            return 0

        def fetch(run: Sequence[str]) -> int:
            self.critical.fetch_into(self._descriptor(run), place)
            return len(run)

        return fetch_run([self.object_name(k) for k in keys], fetch, lambda error, count: self._miss("get", error, count))

    def _placed(self, keys: Sequence[str], host_indices: torch.Tensor, op: str) -> Optional[Tuple[PageForm, List[int]]]:
        """The page form and each key's first host index (page_size per key), or None (counted
        as a failed ``op``) when no pool is registered or the indices do not match the keys."""
        try:
            form = self._page_form()
            starts = [int(i) for i in host_indices[:: self.mem_pool_host.page_size].tolist()]
            if len(starts) != len(keys):
                raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"{len(keys)} keys but host indices for {len(starts)} pages")
        except Exception as error:
            self._miss(op, error, len(keys))
            return None
        return form, starts

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Reads pages straight into the host pool at ``host_indices`` (page_size per key)."""
        placed = self._placed(keys, host_indices, "get")
        if placed is None:
            return [False] * len(keys)
        form, starts = placed
        if form.slices is None:
            return self._get_staged(keys, starts)
        host, slices = self._host, form.slices
        assert host is not None
        got = self._fetch(keys, lambda layer, page: tuple(host[at : at + n] for at, n in slices(starts[page], layer)))
        return [True] * got + [False] * (len(keys) - got)

    def _get_staged(self, keys: Sequence[str], starts: Sequence[int]) -> List[bool]:
        """Pools without a zero-copy form: flat pages into a staging buffer, then the pool's own copy."""
        form = self._page_form()
        staging = torch.empty(len(keys) * form.page_bytes, dtype=torch.uint8)
        view = memoryview(staging.numpy())
        got = self._fetch(keys, self._flat_place([view[p * form.page_bytes : (p + 1) * form.page_bytes] for p in range(len(keys))]))
        pool = self.mem_pool_host
        for page in range(got):
            pool.set_from_flat_data_page(starts[page], staging[page * form.page_bytes : (page + 1) * form.page_bytes].view(pool.dtype))
        return [True] * got + [False] * (len(keys) - got)

    def _flat_place(self, pages: Sequence[memoryview]) -> Callable[[int, int], Tuple[memoryview, ...]]:
        form = self._page_form()
        runs = [form.flat_runs(layer) for layer in range(form.layers)]
        return lambda layer, page: tuple(pages[page][at : at + n] for at, n in runs[layer])

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None) -> List[Optional[torch.Tensor]]:
        """The older interface: each page into its flat page tensor (``target_locations``, one
        per key; allocated when absent), in one descriptor GET; None for the pages that failed."""
        try:
            form = self._page_form()
            targets = list(target_locations) if target_locations is not None else [torch.empty(form.page_bytes, dtype=torch.uint8) for _ in keys]
            views = [memoryview(t.view(-1).view(torch.uint8).numpy()) for t in targets]
            if len(targets) != len(keys) or any(len(v) != form.page_bytes or not t.is_contiguous() for t, v in zip(targets, views)):
                raise ObjectCacheError("OC_ERR_CLIENT_TARGET", f"batch_get needs one contiguous flat page of {form.page_bytes} bytes per key")
        except Exception as error:
            self._miss("get", error, len(keys))
            return [None] * len(keys)
        got = self._fetch(keys, self._flat_place(views))
        return [*targets[:got], *([None] * (len(keys) - got))]

    def get(self, key: str, target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    # -- lookups ----------------------------------------------------------------------------

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """How many leading pages of ``keys`` are stored whole (one lookup request)."""
        if not keys:
            return 0
        try:
            form = self._page_form()
            return self.critical.lookup([self.object_name(k) for k in keys], layers=form.layers, layer_bytes=form.layer_bytes)
        except Exception as error:
            self._miss("lookup", error, len(keys))
            return 0

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- writes -----------------------------------------------------------------------------

    def _put(self, key: str, body: Callable[[], bytes], after: Optional[str] = None) -> bool:
        try:
            form = self._page_form()
            name = None if after is None else self.object_name(after)
            self.client.put_chunk(self.object_name(key), body(), layout=(form.layout, form.layers, form.layer_bytes), after=name if name is not None and recordable_after(name) else None)
            return True
        except Exception as error:
            self._miss("put", error, 1)
            return False

    def _put_all(self, keys: Sequence[str], bodies: Callable[[int], bytes], before: Optional[str] = None) -> List[bool]:
        """One PUT per page, ``put_concurrency`` at a time; each body is gathered in its own task.
        A batch's pages are one sequence in order: each records the page before it (the first,
        ``before``: the last page of the prefix before the batch), so a budgeted bucket trims a
        sequence from its tail."""
        try:
            return list(self._puts.map(lambda i: self._put(keys[i], lambda: bodies(i), keys[i - 1] if i > 0 else before), range(len(keys))))
        except RuntimeError as error:  # closed meanwhile
            self._miss("put", error, len(keys))
            return [False] * len(keys)

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Writes the pages at ``host_indices`` (page_size per key), one object each."""
        placed = self._placed(keys, host_indices, "put")
        if placed is None:
            return [False] * len(keys)
        form, starts = placed
        prefix = getattr(extra_info, "prefix_keys", None) or []
        before = prefix[-1] if prefix and isinstance(prefix[-1], str) else None
        if form.slices is None:
            pool = self.mem_pool_host
            return self._put_all(keys, lambda i: _tensor_bytes(pool.get_data_page(starts[i], flat=True)), before)
        host = self._host
        assert host is not None
        return self._put_all(keys, lambda i: b"".join(host[at : at + n] for at, n in form.object_runs(starts[i])), before)

    def batch_set(self, keys: List[str], values: Optional[Any] = None, target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None) -> bool:
        """The older interface: each flat page tensor (``values``) as its page's object."""
        pages = values if values is not None else target_locations
        if pages is None or len(pages) != len(keys):
            self._miss("put", ObjectCacheError("OC_ERR_CLIENT_USAGE", "batch_set needs one flat page per key"), len(keys))
            return False
        return all(self._put_all(keys, lambda i: _tensor_bytes(pages[i])))

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], [value if value is not None else target_location])

    # -- the rest ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Deletes this engine's pages (its model, ranks and page form), one DELETE per object."""
        try:
            for name in self.client.list_keys(self.prefix):
                self.client.delete(name)
        except Exception as error:
            self._miss("clear", error, 0)

    def close(self) -> None:
        self._puts.shutdown(wait=True)
        self.client.close()

    def __repr__(self) -> str:
        return f"<ObjectCacheHiCacheStorage {self.client.endpoint}/{self.client.bucket}>"


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A flat page's bytes, whatever its dtype (through uint8: NumPy has no bfloat16)."""
    data: bytes = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return data
