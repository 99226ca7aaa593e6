"""LMCache's multi-process (MP) mode with ObjectCache as its L2 tier, on both backends.

The adapter is loaded as ``lmcache server`` loads an L2 adapter: its command line (parsed by the
server's own argument parser) names the ``plugin`` type with ``module_path`` and ``class_name``, and
the storage manager the MP server runs builds it through LMCache's registry. KV goes in and out as
the server's STORE and LOOKUP/RETRIEVE handlers move it: keys from LMCache's token hasher and IPC
key expansion, ``reserve_write``/``finish_write`` into L1 (the store controller then calls the
adapter), and a prefetch (the prefetch controller's lookup and load) into a fresh server's empty L1.
The only part not run is the serving engine's side of the IPC (vLLM's worker and its GPU copies).
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import torch
from engine_docs import filled
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, free_port
from test_vllm_obj_tier import requests_by

import harness
from objectcache import ObjectCacheClient, lmcache_l2
from objectcache.hf_cache import KVLayout, cache_from_kv, kv_from_cache

L, KV_HEADS, HEAD_DIM, CHUNK = 30, 3, 64, 256
HIDDEN = KV_HEADS * HEAD_DIM


def delta(after: Dict[str, float], before: Dict[str, float]) -> Dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def descriptor_gets(counts: Dict[str, float]) -> float:
    return sum(v for k, v in counts.items() if k.split(" ")[0] in ("LayerwiseGet", "ChunkwiseGet", "DescriptorGet"))


def server_argv(endpoint: str, bucket: str, **params: Any) -> List[str]:
    """``lmcache server`` flags that give it 256 MB of L1 and ObjectCache as its L2 tier, the
    ``--l2-adapter`` value as docs/engines.md gives it (``params`` added)."""
    adapter = json.loads(filled("LMCache, multi-process mode", "json", {"endpoint": endpoint, "bucket": bucket, "access_key": CLIENT_KEY, "secret_key": CLIENT_SECRET}))
    adapter["adapter_params"].update(params)
    return ["--l1-size-gb", "0.25", "--no-l1-use-lazy", "--eviction-policy", "LRU", "--l2-adapter", json.dumps(adapter)]


@contextmanager
def mp_storage(argv: List[str]) -> Iterator[Any]:
    """The storage manager ``lmcache server`` runs, from its own argument parser and config."""
    from lmcache.cli.commands.server import ServerCommand
    from lmcache.v1.distributed.config import parse_args_to_config
    from lmcache.v1.distributed.storage_manager import StorageManager

    parser = argparse.ArgumentParser()
    ServerCommand().add_arguments(parser)
    manager = StorageManager(parse_args_to_config(parser.parse_args(argv)))
    try:
        yield manager
    finally:
        manager.close()


def adapter_of(manager: Any) -> lmcache_l2.ObjectCacheL2Adapter:
    adapters = list(manager._l2_adapters.values())
    assert len(adapters) == 1 and isinstance(adapters[0], lmcache_l2.ObjectCacheL2Adapter)
    return adapters[0]


def layout_desc(dtype: torch.dtype) -> Any:
    """The L1 object layout of LMCache's MP server for this model: ``[K/V, layer, token, hidden]``."""
    from lmcache.v1.distributed.api import MemoryLayoutDesc

    return MemoryLayoutDesc(shapes=[torch.Size([2, L, CHUNK, HIDDEN])], dtypes=[dtype])


def mp_key_rows(tokens: torch.Tensor, dtype: torch.dtype, worker_id: Any = 0) -> List[Any]:
    """The key rows the MP server makes for ``tokens`` (its token hasher with its default blake3,
    and its IPC key expansion): one row, world size 1."""
    from lmcache.v1.distributed.api import DEFAULT_ATTN_WINDOW_DESC, ipc_key_to_grouped_object_keys
    from lmcache.v1.multiprocess.custom_types import IPCCacheServerKey
    from lmcache.v1.multiprocess.token_hasher import TokenHasher

    ids = [int(t) for t in tokens]
    hashes = TokenHasher(chunk_size=CHUNK, hash_algorithm="blake3").compute_chunk_hashes(ids)
    key = IPCCacheServerKey.from_token_ids(harness.MODEL_NAME, 1, worker_id, ids, 0, len(ids), request_id="r")
    return ipc_key_to_grouped_object_keys(key, hashes, [0], {0: layout_desc(dtype)}, DEFAULT_ATTN_WINDOW_DESC)


def mp_store(manager: Any, stack: Stack, tokens: torch.Tensor, kv: torch.Tensor, timeout: float = 60.0) -> List[Any]:
    """The server's STORE: reserve L1 objects, copy each chunk's KV in, finish the write; then
    waits for the store controller's PUTs (one per chunk). Returns the chunk keys."""
    keys = mp_key_rows(tokens, kv.dtype)[0].keys
    before = requests_by(stack).get("PutObject 200", 0.0)
    objects = manager.reserve_write(keys, layout_desc(kv.dtype))
    assert len(objects) == len(keys)
    for i, key in enumerate(keys):
        objects[key].tensor.copy_(kv[:, :, i * CHUNK:(i + 1) * CHUNK])
    manager.finish_write(keys)
    deadline = time.monotonic() + timeout
    while requests_by(stack).get("PutObject 200", 0.0) - before < len(keys):
        assert time.monotonic() < deadline, "the L2 store did not finish"
        time.sleep(0.05)
    return keys


def mp_retrieve(manager: Any, tokens: torch.Tensor, dtype: torch.dtype, timeout: float = 60.0) -> Tuple[int, torch.Tensor]:
    """The server's LOOKUP then RETRIEVE: a prefetch of every chunk of ``tokens`` (L2 lookup, then
    load into L1), then a read of the prefix it made resident. Returns (chunks hit, their KV)."""
    from lmcache.v1.distributed.api import PrefetchTaskSpec

    rows = mp_key_rows(tokens, dtype, worker_id=None)
    handle = manager.submit_prefetch_task(PrefetchTaskSpec(key_groups=rows), external_request_id="lookup")
    assert manager.wait_prefetch_status(handle, timeout)
    result = manager.query_prefetch_status(handle)
    hits = result.hit_cells[0].popcount()
    assert result.l2_hit_count == hits  # the fresh server's L1 held nothing
    keys = rows[0].keys[:hits]
    out = torch.zeros(2, L, hits * CHUNK, HIDDEN, dtype=dtype)
    if hits:
        with manager.read_prefetched_results(keys) as objects:
            assert objects is not None
            for i, obj in enumerate(objects):
                out[:, :, i * CHUNK:(i + 1) * CHUNK].copy_(obj.tensor)
        manager.finish_read_prefetched(keys)
    return hits, out


def test_a_real_models_kv_round_trips_through_lmcaches_mp_storage_manager(model: Any, tokenizer: Any, stack: Stack, bucket: str) -> None:
    from test_model import PREFIX_TOKENS, prompts

    prefix, first_suffix, suffix = prompts(tokenizer)
    with torch.no_grad():
        first = model(input_ids=torch.cat([prefix, first_suffix], 1), use_cache=True)
    layout = KVLayout.of(model)
    kv = kv_from_cache(first.past_key_values, layout, PREFIX_TOKENS).contiguous()
    with mp_storage(server_argv(stack.gateway_url, bucket)) as writer:
        before = requests_by(stack)
        keys = mp_store(writer, stack, prefix[0], kv)
        stored = delta(requests_by(stack), before)
    assert stored == {"PutObject 200": 2}  # one PUT per chunk, nothing else
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        names = sorted(c.list_keys())
    assert names == sorted(f"HuggingFaceTB_SmolLM2-135M-Instruct@1@0@{k.chunk_hash.hex()}@float" for k in keys)

    # A later request: the shared prefix, then 256 tokens never stored (a third chunk).
    tokens = torch.cat([prefix[0], torch.arange(40000, 40000 + CHUNK)])
    with mp_storage(server_argv(stack.gateway_url, bucket)) as reader:
        before = requests_by(stack)
        hits, out = mp_retrieve(reader, tokens, torch.float32)
        used = delta(requests_by(stack), before)
    assert hits == 2
    assert used.get("PrefixLookup 200") == 1  # one lookup round trip for the 3 chunks
    assert descriptor_gets(used) == 1  # the whole prefix in ONE descriptor GET
    assert sum(used.values()) == 2, used
    assert torch.equal(out, kv)
    with torch.no_grad():
        reused = model(input_ids=suffix, past_key_values=cache_from_kv(out, layout, model.dtype)).logits
        in_memory = model(input_ids=suffix, past_key_values=cache_from_kv(kv, layout, model.dtype)).logits
    assert torch.equal(reused, in_memory)


def test_a_missing_or_wrong_sized_chunk_is_a_miss_never_wrong_bytes(stack: Stack, bucket: str) -> None:
    tokens = torch.arange(9000, 9000 + 3 * CHUNK)
    kv = torch.randn(2, L, 3 * CHUNK, HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    with mp_storage(server_argv(stack.gateway_url, bucket)) as writer:
        keys = mp_store(writer, stack, tokens, kv)
    names = [lmcache_l2.object_name(k, "bfloat16") for k in keys]
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        c.delete(names[1])
        # A load that names a chunk deleted after its lookup fills the chunks before it only
        # (LMCache drops the other buffers).
        with mp_storage(server_argv(stack.gateway_url, bucket)) as reader:
            adapter = adapter_of(reader)
            reserved = reader.reserve_write(keys, layout_desc(torch.bfloat16))
            objects = [reserved[k] for k in keys]
            for obj in objects:
                obj.tensor.fill_(7)
            task = adapter.submit_load_task(keys, objects)
            deadline = time.monotonic() + 30
            while (loaded := adapter.query_load_result(task)) is None:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert [loaded.test(i) for i in range(3)] == [True, False, False]
            assert torch.equal(objects[0].tensor, kv[:, :, :CHUNK])

        with mp_storage(server_argv(stack.gateway_url, bucket)) as reader:
            before = requests_by(stack)
            hits, out = mp_retrieve(reader, tokens, torch.bfloat16)
            assert hits == 1 and torch.equal(out, kv[:, :, :CHUNK])  # the prefix before the hole
            assert delta(requests_by(stack), before).get("PrefixLookup 200") == 1

            # A prompt never stored: one lookup, no load, no hit.
            before = requests_by(stack)
            assert mp_retrieve(reader, torch.arange(70000, 70000 + CHUNK), torch.bfloat16)[0] == 0
            never = delta(requests_by(stack), before)
            assert never.get("PrefixLookup 200") == 1 and descriptor_gets(never) == 0

        # A chunk object of another size under the first chunk's name (another layout, or a
        # truncated write) is not a hit.
        c.put_chunk(names[0], torch.zeros(2, L, CHUNK, HIDDEN // 2, dtype=torch.bfloat16).view(torch.uint8).numpy())
        with mp_storage(server_argv(stack.gateway_url, bucket)) as reader:
            assert mp_retrieve(reader, tokens, torch.bfloat16)[0] == 0


def test_a_server_whose_key_the_gateway_refuses_does_not_start(stack: Stack, bucket: str) -> None:
    """A key the gateway does not know, or a wrong secret: the adapter refuses to start, and so
    does ``lmcache server``, rather than run an L2 tier that only ever misses."""
    for key, secret in (("no-such-key", "whatever-secret"), (CLIENT_KEY, "not-the-secret")):
        with pytest.raises(ValueError, match="refuses the key pair"):
            with mp_storage(server_argv(stack.gateway_url, bucket, access_key_id=key, secret_access_key=secret)):
                pass


def test_a_gateway_that_is_down_is_a_counted_miss() -> None:
    tokens = torch.arange(5000, 5000 + 2 * CHUNK)
    kv = torch.randn(2, L, 2 * CHUNK, HIDDEN).to(torch.bfloat16)
    failures = dict(lmcache_l2.FAILURES)
    down = f"http://127.0.0.1:{free_port()}"
    with mp_storage(server_argv(down, "nowhere", timeout_s=2, retries=0)) as manager:
        keys = mp_key_rows(tokens, kv.dtype)[0].keys
        objects = manager.reserve_write(keys, layout_desc(kv.dtype))
        for i, key in enumerate(keys):
            objects[key].tensor.copy_(kv[:, :, i * CHUNK:(i + 1) * CHUNK])
        manager.finish_write(keys)  # no exception: the store controller's PUTs fail and are counted
        deadline = time.monotonic() + 30
        put = ("put", "OC_ERR_BACKEND_UNAVAILABLE")
        while lmcache_l2.FAILURES.get(put, 0) - failures.get(put, 0) < 2:
            assert time.monotonic() < deadline, "the failed PUTs were not counted"
            time.sleep(0.05)
        closed = adapter_of(manager)
    # A call that comes after the server closed the adapter is answered at once, as a miss.
    task = closed.submit_lookup_and_lock_task(keys, {0: layout_desc(kv.dtype)})
    assert closed.query_lookup_and_lock_result(task).popcount() == 0
    with mp_storage(server_argv(down, "nowhere", timeout_s=2, retries=0)) as manager:
        assert mp_retrieve(manager, tokens, kv.dtype)[0] == 0
    lookup = ("lookup", "OC_ERR_BACKEND_UNAVAILABLE")
    assert lmcache_l2.FAILURES.get(lookup, 0) - failures.get(lookup, 0) == 1


def test_stores_carry_the_tokens_and_chain_lmcache_publishes_for_their_chunks(stack: Stack, bucket: str) -> None:
    """With LMCache's event bus on (its default in ``lmcache server``), the MP_TOKENS event it
    publishes as it submits a store (lmcache_driven_transfer.py ``_publish_token_bindings``, the
    same metadata) gives each chunk's PUT its token ids, its model and the chunk before it, which
    the gateway's KV events and capacity chains read; without the bus, chunks go without them."""
    import boto3
    from lmcache.v1.mp_observability import event_bus as bus_module
    from lmcache.v1.mp_observability.event import Event, EventType
    from lmcache.v1.mp_observability.event_bus import EventBusConfig, init_event_bus

    from objectcache.keys import encode_tokens

    s3 = boto3.client("s3", endpoint_url=stack.gateway_url, aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET, region_name="us-east-1")
    tokens = torch.arange(21000, 21000 + 3 * CHUNK)
    ids = [int(t) for t in tokens]
    kv = torch.randn(2, L, 3 * CHUNK, HIDDEN, generator=torch.Generator().manual_seed(11)).to(torch.bfloat16)
    previous, was_on = bus_module.get_event_bus(), bus_module.is_observability_enabled()
    bus = init_event_bus(EventBusConfig(enabled=True))
    bus.start()
    try:
        with mp_storage(server_argv(stack.gateway_url, bucket)) as writer:
            keys = mp_key_rows(tokens, kv.dtype)[0].keys
            bus.publish(Event(event_type=EventType.MP_TOKENS, session_id="r", metadata={
                "chunk_hashes": [k.chunk_hash for k in keys],
                "token_chunks": [ids[i * CHUNK:(i + 1) * CHUNK] for i in range(len(keys))],
                "token_offsets": [i * CHUNK for i in range(len(keys))],
                "parent_hashes": [None, *[k.chunk_hash for k in keys[:-1]]],
            }))
            mp_store(writer, stack, tokens, kv)
    finally:
        bus.stop()
        bus_module._global_bus, bus_module._observability_enabled = previous, was_on
    names = [lmcache_l2.object_name(k, "bfloat16") for k in keys]
    for i, name in enumerate(names):
        meta = s3.head_object(Bucket=bucket, Key=name)["Metadata"]
        assert meta["objectcache-tokens"] == encode_tokens(ids[i * CHUNK:(i + 1) * CHUNK])
        assert meta["objectcache-model"] == harness.MODEL_NAME
        assert meta.get("objectcache-after") == (None if i == 0 else names[i - 1])

    # The bus off (the default outside ``lmcache server``): stored without them, at once.
    other = torch.arange(26000, 26000 + CHUNK)
    with mp_storage(server_argv(stack.gateway_url, bucket)) as writer:
        [key] = mp_store(writer, stack, other, kv[:, :, :CHUNK].contiguous())
    meta = s3.head_object(Bucket=bucket, Key=lmcache_l2.object_name(key, "bfloat16"))["Metadata"]
    assert "objectcache-tokens" not in meta and "objectcache-after" not in meta


def test_mp_objects_are_the_in_process_plugins_objects_for_the_same_key_fields(stack: Stack, bucket: str) -> None:
    """The byte layout and the name are the in-process plugin's: given the MP key's fields
    (model, world size, worker, chunk hash, dtype) it reads what MP mode stored, bit for bit. The
    two modes hash a prompt's tokens differently, so for the same prompt their names differ."""
    from lmcache.utils import CacheEngineKey

    tokens = torch.arange(15000, 15000 + 2 * CHUNK)
    kv = torch.randn(2, L, 2 * CHUNK, HIDDEN, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    with mp_storage(server_argv(stack.gateway_url, bucket)) as writer:
        mp_keys = mp_store(writer, stack, tokens, kv)
    engine = harness.lmcache_engine("mp-interop", layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.bfloat16,
                                    **harness.plugin_config(stack.gateway_url, bucket, CLIENT_KEY, CLIENT_SECRET))
    try:
        remote = engine.storage_manager.storage_backends["RemoteBackend-objectcache"]
        connector = remote.connection.getWrappedConnector()
        same = [CacheEngineKey(harness.MODEL_NAME, 1, 0, k.chunk_hash, torch.bfloat16) for k in mp_keys]
        assert [connector.object_name(k) for k in same] == [lmcache_l2.object_name(k, "bfloat16") for k in mp_keys]
        got = asyncio.run_coroutine_threadsafe(connector.batched_get(same), remote.loop).result(60)
        for i, obj in enumerate(got):
            assert obj is not None and torch.equal(obj.tensor, kv[:, :, i * CHUNK:(i + 1) * CHUNK])
            obj.ref_count_down()
        in_process = [key for _, _, key in engine.token_database.process_tokens(tokens=tokens)]
        assert len(in_process) == 2
        assert not {connector.object_name(k) for k in in_process} & {lmcache_l2.object_name(k, "bfloat16") for k in mp_keys}
    finally:
        harness.destroy_engine("mp-interop")


def test_lmcache_server_loads_the_adapter_from_its_command_line(tmp_path: Any) -> None:
    """The real ``lmcache server`` process (CPU, no engine attached) builds the adapter from the
    flags alone and reports it in its status (its HTTP front end's httpx and uvicorn are pinned
    in engine/requirements.txt). Its observability stays on, as docs/engines.md's command leaves
    it: with opentelemetry-api past 1.40 (what fastapi 0.137 and later ask for) the server exits at
    start-up with ImportError _ExtendedAttributes."""
    http_port, zmq_port = free_port(), free_port()
    argv = [sys.executable, "-m", "lmcache.cli.main", "server", "--host", "127.0.0.1", "--port", str(zmq_port), "--http-port", str(http_port),
            *server_argv("http://127.0.0.1:9", "kvcache")]
    argv[argv.index("0.25")] = "0.05"
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, LMCACHE_DISABLE_BANNER="1"))
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "lmcache server did not answer"
            try:
                status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/status", timeout=5).read())
                break
            except OSError:
                time.sleep(0.5)
        adapters = status["storage_manager"]["l2_adapters"]
        assert [(a["type"], a["bucket"], a["is_healthy"]) for a in adapters] == [("ObjectCacheL2Adapter", "kvcache", True)]
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_settings_are_checked_at_start_up_with_clear_messages() -> None:
    with pytest.raises(ValueError, match=r"adapter_params\.bucket is required"):
        with mp_storage(server_argv("http://127.0.0.1:1", "")):
            pass
    with pytest.raises(ValueError, match=r"unknown adapter_params bukket"):
        with mp_storage(server_argv("http://127.0.0.1:1", "b", bukket="x")):
            pass
    with pytest.raises(ValueError, match=r"adapter_params\.mode must be"):
        with mp_storage(server_argv("http://127.0.0.1:1", "b", mode="fast")):
            pass


def test_a_prefix_lookup_asks_for_every_rows_chunk_before_the_next_chunk() -> None:
    """With several ranks (or object groups) LMCache lists the keys row by row; a hit needs every
    row's chunk, so the one prefix lookup asks chunk by chunk."""
    from lmcache.v1.distributed.api import ObjectKey

    keys = [ObjectKey(chunk_hash=bytes([c]), model_name="m", kv_rank=ObjectKey.ComputeKVRank(2, r, 2, r)) for r in range(2) for c in range(3)]
    assert lmcache_l2.chunk_major(keys) == [0, 3, 1, 4, 2, 5]
