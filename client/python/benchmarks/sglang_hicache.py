"""SGLang HiCache L3 loads: objectcache.sglang_backend through the gateway vs SGLang's own S3
backend (``seaweedfs``: boto3, one GET per page) through the same gateway and straight from MinIO.

Starts the pinned MinIO and a gateway in front of it (as the tests do), builds SGLang host pools
(``MHATokenToKVPoolHost`` on CPU, in ``--layout``) for a model shape (default Llama-3.1-8B: 32
layers, 8 KV heads of 128, bfloat16), fills ``--pages`` pages of ``--page-size`` tokens with
random KV, stores them with each backend's ``batch_set_v1``, then loads them with
``batch_get_v1`` ``--reps`` times each, round robin. Prints, per backend, the median load time,
its throughput, the client CPU per load and the gateway requests per load, and the ratios; every
load is checked bit for bit. Needs the engine virtualenv (scripts/engine-venv.sh) with SGLang.

    ~/.cache/objectcache/venv-engine/bin/python client/python/benchmarks/sglang_hicache.py [--pages 32] [--page-size 64] [--layout page_first] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from stack import CLIENT_KEY, CLIENT_SECRET, MINIO_KEY, MINIO_SECRET, start_stack, uid  # noqa: E402

from objectcache import ObjectCacheClient  # noqa: E402


def requests_by(admin_url: str) -> Dict[str, float]:
    """The gateway's objectcache_http_requests_total, by `operation status`."""
    text = urllib.request.urlopen(f"{admin_url}/metrics", timeout=10).read().decode()
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("objectcache_http_requests_total{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
            name = f"{labels['operation'].strip(chr(34))} {labels['status'].strip(chr(34))}"
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def host_pool(layout: str, layers: int, heads: int, dim: int, page: int, pages: int) -> Any:
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    device = MHATokenToKVPool(page * pages, page, torch.bfloat16, heads, dim, layers, "cpu", False, start_layer=0, end_layer=layers)
    return MHATokenToKVPoolHost(
        device.get_device_pool_infos()[0].buffer_info, 1.0, 0, page, layout, pin_memory=False, device="cpu", device_capacity_tokens=device.size, start_layer=0, end_layer=layers
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=32, help="pages per batch (HiCache batches at most 128)")
    parser.add_argument("--page-size", type=int, default=64)
    parser.add_argument("--layout", default="page_first", choices=["layer_first", "page_first", "page_first_direct", "page_head"])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)

    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage import StorageBackendFactory

    page_bytes = 2 * args.layers * args.page_size * args.kv_heads * args.head_dim * 2
    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} cores; {args.layout} host layout, {args.pages} pages of {args.page_size} tokens x {page_bytes / 2**20:.1f} MiB ({args.pages * page_bytes / 2**20:.0f} MiB per load), {args.reps} reps"
    )
    stack = start_stack(backend="s3")
    try:
        writer_pool = host_pool(args.layout, args.layers, args.kv_heads, args.head_dim, args.page_size, args.pages)
        reader_pool = host_pool(args.layout, args.layers, args.kv_heads, args.head_dim, args.page_size, args.pages)
        written, read = writer_pool.alloc(args.page_size * args.pages), reader_pool.alloc(args.page_size * args.pages)
        writer_pool.kv_buffer.view(torch.uint8).copy_(torch.randint(0, 256, writer_pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8))
        keys = [f"{i:064x}" for i in range(1, args.pages + 1)]
        bucket = uid("sglbench").lower()

        def config(extra: Dict[str, Any]) -> Any:
            return HiCacheStorageConfig(
                tp_rank=0,
                tp_size=1,
                pp_rank=0,
                pp_size=1,
                attn_cp_rank=0,
                attn_cp_size=1,
                is_mla_model=False,
                enable_storage_metrics=False,
                is_page_first_layout=args.layout != "layer_first",
                model_name="bench/model",
                extra_config=extra,
            )

        def backend(name: str, extra: Dict[str, Any], pool: Any) -> Any:
            made = StorageBackendFactory.create_backend(name, config(dict(extra)), pool)
            made.register_mem_pool_host(pool)
            return made

        ours = {
            "backend_name": "objectcache",
            "module_path": "objectcache.sglang_backend",
            "class_name": "ObjectCacheHiCacheStorage",
            "interface_v1": 1,
            "endpoint": stack.gateway_url,
            "bucket": bucket,
            "access_key_id": CLIENT_KEY,
            "secret_access_key": CLIENT_SECRET,
        }
        via_gateway = {"endpoint": stack.gateway_url, "bucket": bucket, "access_key": CLIENT_KEY, "secret_key": CLIENT_SECRET, "prefix": "seaweedfs"}
        direct = {"endpoint": stack.minio_url, "bucket": bucket + "-direct", "access_key": MINIO_KEY, "secret_key": MINIO_SECRET, "prefix": "seaweedfs"}
        with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as client:
            client.ensure_bucket()
        contenders = {
            "objectcache via gateway": (backend("dynamic", ours, writer_pool), backend("dynamic", ours, reader_pool)),
            "sglang S3 via gateway": (backend("seaweedfs", via_gateway, writer_pool), backend("seaweedfs", via_gateway, reader_pool)),
            "sglang S3 on MinIO direct": (backend("seaweedfs", direct, writer_pool), backend("seaweedfs", direct, reader_pool)),
        }
        for name, (writer, _) in contenders.items():
            if not all(writer.batch_set_v1(keys, written)):
                raise SystemExit(f"{name}: batch_set_v1 failed")
        want = torch.stack([writer_pool.get_data_page(int(s), flat=True).view(torch.uint8) for s in written[:: args.page_size]])
        times: Dict[str, List[float]] = {name: [] for name in contenders}
        cpus: Dict[str, List[float]] = {name: [] for name in contenders}
        requests: Dict[str, Dict[str, float]] = {name: {} for name in contenders}
        for rnd in range(args.reps + 1):  # round 0 warms connections and is not counted
            for name, (_, reader) in contenders.items():
                reader_pool.kv_buffer.view(torch.uint8).zero_()
                before, cpu, started = requests_by(stack.admin_url), cpu_seconds(), time.perf_counter()
                ok = reader.batch_get_v1(keys, read)
                elapsed, used, after = time.perf_counter() - started, cpu_seconds() - cpu, requests_by(stack.admin_url)
                got = torch.stack([reader_pool.get_data_page(int(s), flat=True).view(torch.uint8) for s in read[:: args.page_size]])
                if not all(ok) or not torch.equal(got, want):
                    raise SystemExit(f"{name}: a load came back wrong")
                if rnd > 0:
                    times[name].append(elapsed)
                    cpus[name].append(used)
                    for op in after:
                        grown = after[op] - before.get(op, 0.0)
                        if grown:
                            requests[name][op] = requests[name].get(op, 0.0) + grown / args.reps
        base = statistics.median(times["objectcache via gateway"])
        payload = args.pages * page_bytes
        for name in contenders:
            median = statistics.median(times[name])
            ops = ", ".join(f"{op}: {count:g}" for op, count in sorted(requests[name].items())) or "none (around the gateway)"
            print(
                f"{name:26s} {median * 1e3:8.1f} ms  {payload / median / 1e9:6.2f} GB/s  client CPU {statistics.median(cpus[name]) * 1e3:7.1f} ms  {median / base:5.2f}x objectcache  gateway requests per load: {ops}"
            )
        for pair in contenders.values():
            for made in pair:
                getattr(made, "close", lambda: None)()
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
