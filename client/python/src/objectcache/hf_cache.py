"""Prefix KV of a Hugging Face transformers model through ObjectCache, layer by layer into the
model (``pip install "objectcache[torch]"``; tested with transformers 5 on Llama-architecture
models such as SmolLM2).

Chunks are stored in LMCache's KV_2LTD layout, ``[K/V, layer, token, kv_heads * head_dim]``, so
the same objects serve LMCache and this loader. :class:`LayerwiseLoad` fetches a prefix with ONE
layerwise GET in a background thread and feeds the model as the frames land: layer 0 before the
forward pass (positions and the attention mask come from it), every later layer from a forward
pre-hook on its decoder layer, which waits only if that layer's frame has not arrived yet. The
arithmetic is the same as with the whole cache in memory, so the logits are identical.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Set

import torch
from transformers import DynamicCache

from .client import FetchResult, ObjectCacheClient
from .errors import ObjectCacheError
from .types import Descriptor, KVDtype, Layout

_DTYPES: Dict[Any, KVDtype] = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


class KVLayout:
    """A model's KV geometry: ``layers`` decoder layers of ``kv_heads`` x ``head_dim`` per token."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, chunk_tokens: int = 256) -> None:
        if dtype not in _DTYPES:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"KV dtype must be one of {', '.join(_DTYPES.values())}")
        self.layers, self.kv_heads, self.head_dim, self.dtype, self.chunk_tokens = layers, kv_heads, head_dim, dtype, chunk_tokens
        self.itemsize = torch.empty((), dtype=dtype).element_size()
        self.hidden = kv_heads * head_dim
        #: One chunk's slice of one layer: its K then its V, ``chunk_tokens x hidden`` values each.
        self.layer_bytes = 2 * chunk_tokens * self.hidden * self.itemsize
        self.chunk_bytes = layers * self.layer_bytes

    @classmethod
    def of(cls, model: Any, dtype: Optional[torch.dtype] = None, chunk_tokens: int = 256) -> KVLayout:
        """The layout of a transformers model's KV cache (its config's layers, KV heads, head size)."""
        config = model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(config.num_hidden_layers, config.num_key_value_heads, head_dim, dtype or model.dtype, chunk_tokens)

    @property
    def dtype_name(self) -> KVDtype:
        return _DTYPES[self.dtype]

    def descriptor(self, keys: Sequence[str], **extra: Any) -> Descriptor:
        """A descriptor of chunks stored in this layout (KV_2LTD; with ``codecs``, encoded chunks,
        whose slices are whole: KV_L2TD)."""
        codecs = extra.get("codecs")
        if codecs is not None and "none" in codecs:
            # Raw chunks are stored KV_2LTD here; a version 2 stream serves raw slices whole (KV_L2TD).
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "codecs must name encodings only: raw chunks stored from a cache are KV_2LTD, fetched without codecs")
        layout: Layout = "KV_L2TD" if codecs else "KV_2LTD"
        return ObjectCacheClient.descriptor(keys, layers=self.layers, chunk_tokens=self.chunk_tokens, layer_bytes=self.layer_bytes, layout=layout, **extra)


def kv_from_cache(cache: Any, layout: KVLayout, tokens: Optional[int] = None) -> torch.Tensor:
    """The first ``tokens`` positions (all, by default) of a transformers cache (batch 1) as one
    KV_2LTD tensor ``[2, layers, tokens, kv_heads * head_dim]`` in ``layout.dtype``."""
    seq = cache.get_seq_length() if tokens is None else tokens
    per_layer = []
    for layer in range(layout.layers):
        keys, values = cache.layers[layer].keys, cache.layers[layer].values
        if keys.shape[0] != 1:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", "kv_from_cache takes a cache of batch size 1")
        # [1, heads, seq, dim] -> [seq, heads * dim]
        per_layer.append(torch.stack([t[0, :, :seq].permute(1, 0, 2).reshape(-1, layout.hidden) for t in (keys, values)]))
    return torch.stack(per_layer, dim=1).to(layout.dtype).contiguous()


def chunks_from_cache(cache: Any, layout: KVLayout, tokens: Optional[int] = None) -> List[torch.Tensor]:
    """The full chunks of a transformers cache (batch 1) as KV_2LTD tensors
    ``[2, layers, chunk_tokens, kv_heads * head_dim]`` in ``layout.dtype``, ready to store."""
    seq = cache.get_seq_length() if tokens is None else tokens
    count = seq // layout.chunk_tokens
    kv = kv_from_cache(cache, layout, count * layout.chunk_tokens)
    return [kv[:, :, i * layout.chunk_tokens : (i + 1) * layout.chunk_tokens].contiguous() for i in range(count)]


def cache_from_kv(kv: torch.Tensor, layout: KVLayout, dtype: torch.dtype) -> Any:
    """A ``DynamicCache`` (in the model's ``dtype``) holding a KV_2LTD tensor ``[2, layers, tokens, hidden]``."""
    cache = DynamicCache()
    tokens = kv.shape[2]
    for layer in range(layout.layers):
        keys, values = (kv[i, layer].reshape(tokens, layout.kv_heads, layout.head_dim).permute(1, 0, 2).unsqueeze(0).to(dtype).contiguous() for i in (0, 1))
        cache.update(keys, values, layer)
    return cache


def _layer_tensors(payload: torch.Tensor, layout: KVLayout, chunks: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A LAYER frame's bytes (per chunk: K then V, token-major) as the cache's ``[1, heads, seq, dim]`` K and V."""
    values = payload.view(layout.dtype).view(chunks, 2, layout.chunk_tokens, layout.kv_heads, layout.head_dim)
    keys = values[:, 0].reshape(chunks * layout.chunk_tokens, layout.kv_heads, layout.head_dim).permute(1, 0, 2).unsqueeze(0)
    vals = values[:, 1].reshape(chunks * layout.chunk_tokens, layout.kv_heads, layout.head_dim).permute(1, 0, 2).unsqueeze(0)
    return keys.to(dtype).contiguous(), vals.to(dtype).contiguous()


class LayerwiseLoad:
    """One prefix fetched layer by layer into a new ``DynamicCache`` while the model runs.

    Use it as a context manager around the forward pass of the suffix::

        with LayerwiseLoad(client, model, layout, keys) as load:
            logits = model(input_ids=suffix, past_key_values=load.cache).logits

    Entering starts the fetch and waits for layer 0; the pre-hooks install layers 1.. as the
    model reaches them. Leaving removes the hooks and joins the fetch; a fetch that failed raises
    its ObjectCacheError (the forward pass that waited for a missing layer raised it already).
    """

    def __init__(
        self, client: ObjectCacheClient, model: Any, layout: KVLayout, keys: Sequence[str], *, timeout: float = 120.0, fetch_cpus: Optional[Set[int]] = None, **descriptor_fields: Any
    ) -> None:
        """``fetch_cpus``: the CPUs the fetching thread may run on (Linux), to keep its socket
        reads off the cores the model computes on; unset, it runs where the process may."""
        self.client, self.model, self.layout, self.keys = client, model, layout, list(keys)
        self.timeout = timeout
        self.fetch_cpus = fetch_cpus
        self.descriptor = layout.descriptor(self.keys, mode="layerwise", **descriptor_fields)
        self.chunks = len(self.keys)
        self.cache = DynamicCache()
        self._payload = torch.empty(layout.layers * self.chunks * layout.layer_bytes, dtype=torch.uint8)
        self._ready = [threading.Event() for _ in range(layout.layers)]
        self._failure: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._hooks: List[Any] = []
        self.result: Optional[FetchResult] = None
        #: Seconds each decoder layer's pre-hook waited for its frame.
        self.waits: List[float] = [0.0] * layout.layers

    def _fetch(self) -> None:
        if self.fetch_cpus is not None:
            os.sched_setaffinity(0, self.fetch_cpus)  # this thread only (Linux)
        try:
            self.result = self.client.fetch(self.descriptor, memoryview(self._payload.numpy()), lambda layer, _view: self._ready[layer].set(), dtype=self.layout.dtype_name)
        except BaseException as error:  # noqa: BLE001 - handed to the waiting model thread
            self._failure = error
        finally:
            for event in self._ready:
                event.set()  # wake every waiter: a failure is seen by the next one

    def _install(self, layer: int) -> None:
        started = time.perf_counter()
        if not self._ready[layer].wait(self.timeout):
            raise ObjectCacheError("OC_ERR_CLIENT_INCOMPLETE", f"layer {layer} did not arrive within {self.timeout} s")
        self.waits[layer] = time.perf_counter() - started
        if self._failure is not None and self.result is None:
            raise self._failure
        stride = self.chunks * self.layout.layer_bytes
        keys, values = _layer_tensors(self._payload[layer * stride : (layer + 1) * stride], self.layout, self.chunks, self.model.dtype)
        self.cache.update(keys, values, layer)

    def __enter__(self) -> LayerwiseLoad:
        decoder_layers = self.model.model.layers
        if len(decoder_layers) != self.layout.layers:
            raise ObjectCacheError("OC_ERR_CLIENT_USAGE", f"the model has {len(decoder_layers)} decoder layers; the layout says {self.layout.layers}")
        self._thread = threading.Thread(target=self._fetch, name="objectcache-layerwise-load", daemon=True)
        self._thread.start()
        try:
            self._install(0)
        except BaseException:
            self._thread.join(self.timeout)
            raise
        for index in range(1, self.layout.layers):
            self._hooks.append(decoder_layers[index].register_forward_pre_hook(lambda _module, _args, index=index: self._install(index)))
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        if self._thread is not None:
            self._thread.join(self.timeout)
        if exc[0] is None and self._failure is not None:
            raise self._failure


def load_cache(client: ObjectCacheClient, model: Any, layout: KVLayout, keys: Sequence[str], **descriptor_fields: Any) -> Any:
    """The whole prefix fetched first (every layer), as a ``DynamicCache``: the 'KV in memory'
    way of using a stored prefix, and the reference the layerwise load must match."""
    chunks = len(keys)
    payload = torch.empty(layout.layers * chunks * layout.layer_bytes, dtype=torch.uint8)
    client.fetch(layout.descriptor(list(keys), **descriptor_fields), memoryview(payload.numpy()), dtype=layout.dtype_name)
    cache = DynamicCache()
    stride = chunks * layout.layer_bytes
    for layer in range(layout.layers):
        keys_t, values_t = _layer_tensors(payload[layer * stride : (layer + 1) * stride], layout, chunks, model.dtype)
        cache.update(keys_t, values_t, layer)
    return cache
