"""Python client vs TypeScript client on the same fetch, in one run.

Starts the pinned MinIO and a gateway (as the tests do), seeds a Llama-3.1-8B prefix (default 16K
context at 87.5% hit, G=64: 224 chunks of 8 MiB, 1.75 GiB), then alternates: the Python client
fetching it into a preallocated NumPy array, and the TypeScript client (bench/client-fetch.ts, a
separate node process) fetching it into a preallocated Uint8Array. Both use the POST form and the
same gateway; each side is measured warm (after one fetch into the same target). Prints GB/s and
CPU seconds per GiB of each client (and of the gateway and MinIO during the Python runs), the
clients' CPU for their first fetch (into a target whose pages were never touched), and the CLI's
(`objectcache fetch`, one process per fetch), and writes bench/results/python-client-latest.json.

With --boto3 (needs `pip install boto3`, the `bench` extra), also boto3 GETting the same chunk
objects whole, straight from MinIO (32 threads, each body copied into its place in the same
preallocated array): what a Python engine gets from plain S3. --gateway-args passes settings to
the gateway (for example "--chunk-reads auto").

    .venv-python/bin/python client/python/benchmarks/fetch_throughput.py [--reps 3] [--context 16384] [--chunk-tokens 64] [--boto3] [--gateway-args "--chunk-reads auto"]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from stack import CLIENT_KEY, CLIENT_SECRET, MINIO_KEY, MINIO_SECRET, REPO, start_stack, synthetic_chunk, uid  # noqa: E402

from objectcache import ObjectCacheClient, chunk_keys  # noqa: E402

LAYERS, BYTES_PER_TOKEN_PER_LAYER, HIT = 32, 4096, 0.875


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def boto3_whole_objects(endpoint: str, bucket: str, keys: list[str], target: np.ndarray, object_bytes: int, minio_pid: int) -> dict[str, object]:
    """Every chunk object GET whole from MinIO with boto3, 32 at a time, copied into its place in `target`."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3  # the `bench` extra
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=MINIO_KEY, aws_secret_access_key=MINIO_SECRET, region_name="us-east-1", config=Config(max_pool_connections=32))

    def get(i: int) -> None:
        body = s3.get_object(Bucket=bucket, Key=keys[i])["Body"].read()
        assert len(body) == object_bytes
        target[i * object_bytes : (i + 1) * object_bytes] = np.frombuffer(body, dtype=np.uint8)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(get, range(len(keys))))  # warm: connections open, target pages touched
        before = (self_cpu(), proc_cpu(minio_pid))
        started = time.perf_counter()
        list(pool.map(get, range(len(keys))))
        seconds = time.perf_counter() - started
        after = (self_cpu(), proc_cpu(minio_pid))
    payload = len(keys) * object_bytes
    gib = payload / 2**30
    return {"seconds": seconds, "gbPerSec": payload / seconds / 1e9, "cpuSecondsPerGiB": {"client": (after[0] - before[0]) / gib, "minio": (after[1] - before[1]) / gib}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--context", type=int, default=16384)
    parser.add_argument("--chunk-tokens", type=int, default=64)
    parser.add_argument("--boto3", action="store_true", help="also boto3 whole-object GETs straight from MinIO")
    parser.add_argument("--gateway-args", default="", help="settings for the gateway, space-separated")
    args = parser.parse_args()
    G = args.chunk_tokens
    N = int(args.context * HIT) // G
    S = G * BYTES_PER_TOKEN_PER_LAYER
    payload = N * LAYERS * S
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {args.context // 1024}K context, G={G}: {N} chunks, {payload / 2**20:.0f} MiB, {args.reps} reps")
    stack = start_stack(gateway_args=args.gateway_args.split())
    gateway_pid, minio_pid = stack.processes[1].pid, stack.processes[0].pid
    try:
        client = ObjectCacheClient(stack.gateway_url, uid("pybench"), (CLIENT_KEY, CLIENT_SECRET))
        client.ensure_bucket()
        keys = chunk_keys(list(range(N * G)), "meta-llama/Llama-3.1-8B", "bfloat16", G, LAYERS, S, "KV_L2TD")
        for start in range(0, N, 16):
            batch = range(start, min(N, start + 16))
            client.put_chunks([keys[i] for i in batch], [synthetic_chunk(1, i, LAYERS * S) for i in batch], layout=("KV_L2TD", LAYERS, S))
        descriptor = ObjectCacheClient.descriptor(keys, layers=LAYERS, chunk_tokens=G, layer_bytes=S)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(descriptor, f)
            descriptor_file = f.name
        target = np.empty(payload, dtype=np.uint8)
        gib = payload / 2**30
        before = self_cpu()
        client.fetch(descriptor, target=target, transport="post")  # warm-up, into pages never touched
        python_first = (self_cpu() - before) / gib
        python_runs, ts_runs, ts_first, cli_runs, boto3_runs = [], [], [], [], []
        env = dict(os.environ, OBJECTCACHE_ACCESS_KEY=CLIENT_KEY, OBJECTCACHE_SECRET_KEY=CLIENT_SECRET)
        for _ in range(args.reps):
            before = (self_cpu(), proc_cpu(gateway_pid), proc_cpu(minio_pid))
            started = time.perf_counter()
            result = client.fetch(descriptor, target=target, transport="post")
            seconds = time.perf_counter() - started
            after = (self_cpu(), proc_cpu(gateway_pid), proc_cpu(minio_pid))
            assert result.summary["bytes"] == payload
            python_runs.append(
                {
                    "seconds": seconds,
                    "gbPerSec": payload / seconds / 1e9,
                    "cpuSecondsPerGiB": {"client": (after[0] - before[0]) / gib, "gateway": (after[1] - before[1]) / gib, "minio": (after[2] - before[2]) / gib},
                }
            )
            out = subprocess.run(
                [
                    "node",
                    "--initial-old-space-size=64",
                    str(REPO / "dist" / "bench" / "client-fetch.js"),
                    "--endpoint",
                    stack.gateway_url,
                    "--bucket",
                    client.bucket,
                    "--descriptor",
                    descriptor_file,
                    "--reps",
                    "2",
                ],
                env=env,
                check=True,
                stdout=subprocess.PIPE,
                text=True,
            )
            # The second of two fetches in the node process: its target's pages touched and its code warm, as the Python side's.
            first, run = json.loads(out.stdout)["runs"]
            ts_runs.append({"seconds": run["seconds"], "gbPerSec": run["bytes"] / run["seconds"] / 1e9, "cpuSecondsPerGiB": {"client": run["cpuSeconds"] / gib}})
            ts_first.append(first["cpuSeconds"] / gib)
            # The CLI: one fetch per process, into a target it allocates (node's start-up included).
            before = children_cpu()
            started = time.perf_counter()
            subprocess.run(
                ["node", str(REPO / "dist" / "cli" / "main.js"), "fetch", "--endpoint", stack.gateway_url, "--bucket", client.bucket, "--descriptor", descriptor_file, "--transport", "post"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            cli_runs.append({"seconds": time.perf_counter() - started, "cpuSecondsPerGiB": (children_cpu() - before) / gib})
            if args.boto3:
                boto3_runs.append(boto3_whole_objects(stack.minio_url, client.bucket, keys, target, LAYERS * S, minio_pid))
        client.close()
    finally:
        stack.stop()
    py = statistics.median(r["gbPerSec"] for r in python_runs)
    ts = statistics.median(r["gbPerSec"] for r in ts_runs)
    py_cpu = statistics.median(r["cpuSecondsPerGiB"]["client"] for r in python_runs)
    ts_cpu = statistics.median(r["cpuSecondsPerGiB"]["client"] for r in ts_runs)
    print(
        f"Python client     {py:.3f} GB/s, client CPU {py_cpu:.2f} s/GiB (gateway {statistics.median(r['cpuSecondsPerGiB']['gateway'] for r in python_runs):.2f}, MinIO {statistics.median(r['cpuSecondsPerGiB']['minio'] for r in python_runs):.2f})"
    )
    print(f"TypeScript client {ts:.3f} GB/s, client CPU {ts_cpu:.2f} s/GiB")
    print(
        f"first fetch into a fresh target, client CPU: Python {python_first:.2f} s/GiB, TypeScript {statistics.median(ts_first):.2f} s/GiB; objectcache fetch (one process per fetch) {statistics.median(r['cpuSecondsPerGiB'] for r in cli_runs):.2f} s/GiB"
    )
    print(f"Python / TypeScript = {py / ts:.2f}x (target >= 0.8)")
    if boto3_runs:
        b3 = statistics.median(r["gbPerSec"] for r in boto3_runs)
        print(
            f"boto3 whole objects from MinIO {b3:.3f} GB/s, client CPU {statistics.median(r['cpuSecondsPerGiB']['client'] for r in boto3_runs):.2f} s/GiB (MinIO {statistics.median(r['cpuSecondsPerGiB']['minio'] for r in boto3_runs):.2f})"
        )
        print(f"Python client through the gateway / boto3 whole objects = {py / b3:.2f}x (target >= 0.8)")
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "python-client-latest.json").write_text(
        json.dumps(
            {
                "benchmark": "python-client-fetch",
                "date": datetime.now(timezone.utc).isoformat(),
                "python": sys.version.split()[0],
                "settings": {"context": args.context, "chunkTokens": G, "chunks": N, "layers": LAYERS, "layerBytes": S, "payloadBytes": payload, "reps": args.reps, "transport": "post"},
                "gatewayArgs": args.gateway_args.split(),
                "python_runs": python_runs,
                "typescript_runs": ts_runs,
                "first_fetch_cpu_seconds_per_gib": {"python": python_first, "typescript": ts_first},
                "cli_runs": cli_runs,
                "boto3_runs": boto3_runs,
                "ratio": py / ts,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
