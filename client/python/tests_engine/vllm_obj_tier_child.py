"""One vLLM engine's KV offloading, scheduler side, as vLLM 0.33.0 builds it from
``--kv-transfer-config``: vLLM's own ``KVTransferConfig`` parses the configuration,
``OffloadingSpecFactory`` makes the ``TieringOffloadingSpec`` it names, and that spec's
``TieringOffloadingManager`` holds the CPU primary tier and the ``obj`` secondary tier
(``ObjectStoreSecondaryTierManager``: NIXL's OBJ plugin, aws-sdk-cpp inside), with its default
settings. In a process of its own (NIXL and UCX keep process-wide state; two engines are two
processes). Called by test_vllm_obj_tier.py:

    python vllm_obj_tier_child.py store|load KV_TRANSFER_CONFIG_FILE ENGINE_ID BLOCKS_FILE BLOCKS

``store`` does what the scheduler and GPU worker do when a request's blocks are offloaded: the
manager's prepare_store gives primary-tier slots, the blocks (BLOCKS_FILE: a real model's KV, one
vLLM block after another) are written there, and complete_store cascades them to the object tier;
the process waits until the tier has nothing in flight. ``load`` is another engine with an empty
primary tier: its lookups find the blocks in the object tier and promote them (RETRY, then
HIT_PENDING, then HIT over scheduler steps), and prepare_load says which primary slots hold them.
One JSON line reports what happened, with the loaded blocks' digests.

What is not vLLM's here: the model facts that vLLM derives from a GPU's KV cache
(OffloadingConfig's block geometry), and the GPU<->primary copies, which a CPU-only machine
cannot make (the bytes are copied into and out of the primary tier's memory instead).
"""
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

# vLLM imports `nixl._api`; the CUDA-12 wheel (the one whose OBJ plugin loads without a GPU
# library) installs `nixl_cu12`. Nothing is done about that here: the engine venv is set up as
# docs/engines.md says, with `python -m objectcache.engines.nixl_compat install`.
from vllm.config import KVTransferConfig
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

LAYERS, TOKENS_PER_BLOCK = 30, 16  # SmolLM2-135M


def manager_for(kv_transfer_config: Dict[str, Any], engine_id: str, block_bytes: int) -> Any:
    transfer = KVTransferConfig(**kv_transfer_config)
    assert transfer.kv_connector == "OffloadingConnector"
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=TOKENS_PER_BLOCK, layer_names=tuple(f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)), group_id=0),),
        worker_kv_bytes_per_block=block_bytes,
        enable_kv_cache_events=False,
        extra_config=transfer.kv_connector_extra_config,
        engine_id=engine_id,
        model=OffloadingModelConfig(name="HuggingFaceTB/SmolLM2-135M-Instruct", dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=TOKENS_PER_BLOCK, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=0, is_parallelism_agnostic=True),
    )
    return OffloadingSpecFactory.create_spec(config).get_manager()


def step(manager: Any, new: List[str]) -> None:
    """The end of one scheduler step (where vLLM flushes promotions and polls its tiers)."""
    manager.on_schedule_end(ScheduleEndContext(new_req_ids=new, preempted_req_ids=[]))


def main() -> None:
    mode, config_file, engine_id, blocks_file, count_text = sys.argv[1:6]
    count = int(count_text)
    data = np.fromfile(blocks_file, dtype=np.uint8).reshape(count, -1)
    manager = manager_for(json.loads(Path(config_file).read_text()), engine_id, data.shape[1])
    primary = np.asarray(manager.primary_tier.get_kv_memoryview())
    # vLLM's offload keys are the blocks' token hashes; these hash the blocks' bytes instead.
    keys = [make_offload_key(hashlib.sha256(block.tobytes()).digest(), 0) for block in data]
    unknown = make_offload_key(b"\xee" * 32, 0)
    request = ReqContext(req_id=f"{mode}-request")
    manager.on_new_request(request)
    report: Dict[str, Any] = {"tiers": [tier.tier_type for tier in manager.secondary_tiers]}
    deadline = time.monotonic() + 60
    if mode == "store":
        prepared = manager.prepare_store(keys, request)
        for block, slot in zip(data, prepared.store_spec.block_ids):
            primary[slot, : block.size] = block  # the GPU worker's copy
        manager.complete_store(keys, request)  # cascades to the object tier
        step(manager, [request.req_id])
        while manager.has_pending_work() and time.monotonic() < deadline:
            time.sleep(0.02)
            step(manager, [])
        report["pending"] = manager.has_pending_work()
        report["objects"] = [manager.secondary_tiers[0]._file_mapper.get_file_name(k) for k in keys]  # noqa: SLF001
    else:
        steps, results = 0, []
        while time.monotonic() < deadline:
            results = [manager.lookup(k, request) for k in [*keys, unknown]]
            step(manager, [request.req_id] if steps == 0 else [])
            steps += 1
            if all(r in (LookupResult.HIT, LookupResult.MISS) for r in results):
                break
            time.sleep(0.02)
        report["lookups"] = [r.name for r in results]
        report["steps"] = steps
        if all(r == LookupResult.HIT for r in results[:count]):
            loaded = manager.prepare_load(keys, request)
            report["loaded_sha256"] = [hashlib.sha256(primary[slot, : data.shape[1]].tobytes()).hexdigest() for slot in loaded.block_ids]
            manager.complete_load(keys, request)
    manager.on_request_finished(request)
    manager.shutdown()
    print(json.dumps(report), flush=True)
    os._exit(0)  # the shared primary region stays mapped while NIXL holds it


if __name__ == "__main__":
    main()
