"""Drives vLLM 0.33.0's native object tier (``ObjectStoreSecondaryTierManager``, which writes and
reads through NIXL's OBJ plugin, aws-sdk-cpp inside) against an S3 endpoint, with its default
settings, in a process of its own (NIXL and UCX keep process-wide state). Called by
test_vllm_obj_tier.py:

    python vllm_obj_tier_child.py ENDPOINT BUCKET ACCESS_KEY SECRET_KEY BLOCKS_FILE BLOCKS

BLOCKS_FILE holds BLOCKS blocks of the primary tier, back to back (a real model's KV). The blocks
are stored, looked up, loaded into other slots and compared; one JSON line reports what happened.
"""
import hashlib
import json
import sys
import time
import types
from pathlib import Path
from typing import Any, List

import numpy as np

# vLLM imports `nixl`; the CUDA-12 wheel is the one whose OBJ plugin loads without a GPU library.
import nixl_cu12
import nixl_cu12._api
import nixl_cu12._bindings

sys.modules["nixl"] = nixl_cu12
sys.modules["nixl._api"] = nixl_cu12._api
sys.modules["nixl._bindings"] = nixl_cu12._bindings

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key  # noqa: E402
from vllm.v1.kv_offload.tiering.base import TransferJob  # noqa: E402
from vllm.v1.kv_offload.tiering.obj.manager import ObjectStoreSecondaryTierManager  # noqa: E402


def main() -> None:
    endpoint, bucket, access_key, secret_key, blocks_file, count_text = sys.argv[1:7]
    count = int(count_text)
    data = np.frombuffer(Path(blocks_file).read_bytes(), dtype=np.uint8)
    block_bytes = data.size // count
    # The spec vLLM's offloading connector hands its tiers, reduced to what this tier reads.
    ns = types.SimpleNamespace
    spec = ns(
        config=ns(
            groups=[ns(tokens_per_block=16, layer_names=["model.layers.0.self_attn.attn"])],
            parallel=ns(tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, rank=0, is_parallelism_agnostic=True),
            canonical_layout=False,
            kv_cache_layout=None,
            replicated_layout=False,
            model=ns(name="HuggingFaceTB/SmolLM2-135M-Instruct", dtype="bfloat16"),
            cache=ns(tokens_per_hash=16),
        ),
        blocks_per_chunk=1,
        kv_events_config=ns(enable_kv_cache_events=False),
    )
    primary = np.zeros((2 * count, block_bytes), dtype=np.uint8)
    primary[:count] = data.reshape(count, block_bytes)
    store = dict(bucket=bucket, endpoint_override=endpoint, scheme="http", access_key=access_key, secret_key=secret_key, region="us-east-1")
    tier = ObjectStoreSecondaryTierManager(spec, memoryview(primary), "obj", store, prefix="vllm", io_threads=4)
    keys = [make_offload_key(hashlib.sha256(data[i * block_bytes : (i + 1) * block_bytes].tobytes()).digest(), 0) for i in range(count)]
    unknown = make_offload_key(b"\xee" * 32, 0)

    def lookup(request: str, wanted: List[Any]) -> List[str]:
        ctx = ReqContext(req_id=request)
        results = [tier.lookup(k, ctx) for k in wanted]
        deadline = time.monotonic() + 30
        while any(r == LookupResult.RETRY for r in results) and time.monotonic() < deadline:
            tier.on_schedule_end(None)
            time.sleep(0.05)
            results = [tier.lookup(k, ctx) for k in wanted]
        tier.on_request_finished(ctx)
        return [r.name for r in results]

    def run(job: TransferJob) -> bool:
        tier.submit_store(job) if not job.is_promotion else tier.submit_load(job)
        tier.drain_jobs()
        finished = list(tier.get_finished_jobs())
        return len(finished) == 1 and finished[0].job_id == job.job_id and bool(finished[0].success)

    before = lookup("before", keys)
    stored = run(TransferJob(job_id=1, keys=keys, chunk_ids=np.arange(count, dtype=np.int32), is_promotion=False, req_context=ReqContext(req_id="store")))
    after = lookup("after", [*keys, unknown])
    loaded = run(TransferJob(job_id=2, keys=keys, chunk_ids=np.arange(2 * count - 1, count - 1, -1, dtype=np.int32), is_promotion=True, req_context=ReqContext(req_id="load")))
    identical = all(np.array_equal(primary[2 * count - 1 - i], primary[i]) for i in range(count))
    missing = run(TransferJob(job_id=3, keys=[unknown], chunk_ids=np.array([count], dtype=np.int32), is_promotion=True, req_context=ReqContext(req_id="missing")))
    names = [tier._file_mapper.get_file_name(k) for k in keys]  # noqa: SLF001 (for the test to find the objects)
    print(json.dumps({"before": before, "stored": stored, "after": after, "loaded": loaded, "identical": identical, "missing_loaded": missing, "objects": names, "block_bytes": block_bytes}))


if __name__ == "__main__":
    main()
