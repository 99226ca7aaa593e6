"""Where compressed KV pays: TTFT of a layerwise load (OC-LW) with raw, lossless and int8 chunks
over links of several rates, emulated with the gateway's egress cap (``--cap``), in one run.

Two workloads:

- **real compute**: SmolLM2-135M (fp32, one torch thread on core 0) answers a prompt whose
  prefix KV (bfloat16, chunks of 256 tokens) is stored in MinIO; ONE layerwise GET feeds each
  decoder layer's pre-hook as its frame lands and is decoded (``LayerwiseLoad``), the fetching
  thread on core 1 with MinIO and the gateways. The floor is the same suffix with the KV
  already in memory. One gateway per link rate, each with its own ``--cap``.
- **table A8**: Llama-3.1-8B's geometry (32 layers, 8 KV heads of 128, bf16) with table A8's
  A100 compute per layer, simulated (a timer per layer that starts once the layer is ready and
  the previous one computed). Links of 5-100 Gbps are emulated as the TTFT testbed does: one
  gateway capped at ``--a8-cap``, and every compute time multiplied by ``link / cap``, so the
  ratio of transfer to compute is the emulated link's. The KV is synthetic: every channel drawn
  from a normal distribution with the mean and spread of a SmolLM2 channel (so the byte planes
  look like real KV's; the measured ratios are reported).

Also measured: each codec's client CPU per GiB of decoded KV (a fetch at full speed, the
thread's CPU time), and the stored size. Results: ``bench/results/ttft-codecs-latest.json``;
``dist/bench/ttft-codecs-report.js`` draws the figure and the README table.

    bash scripts/bench-ttft-codecs.sh [--caps 6.25,12.5,25,50,100,200,0] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "client" / "python" / "tests"))
sys.path.insert(0, str(ROOT / "client" / "python" / "tests_engine"))

CODECS = ["none", "bplane-lz4", "bplane-zstd", "int8-kivi"]
GIB = 1024**3


def median(values: List[float]) -> float:
    return float(statistics.median(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caps", default="6.25,12.5,25,50,100,200,0", help="link rates (gateway --cap) in MB/s for the real-compute workload; 0: no cap")
    parser.add_argument("--codecs", default=",".join(CODECS))
    parser.add_argument("--cached", type=int, default=2048, help="prefix tokens found in the store (real compute)")
    parser.add_argument("--suffix", type=int, default=256, help="suffix tokens computed (real compute)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--a8-cap", type=float, default=200, help="MB/s of the gateway that carries the table A8 workload")
    parser.add_argument("--a8-links", default="5,10,25,50,100", help="emulated link rates in Gbps for table A8")
    parser.add_argument("--a8-rows", default="4096:0.5,4096:0.875", help="table A8 rows as context:hit")
    parser.add_argument(
        "--a8-fetch-cpu", type=int, default=0, help="core of the table A8 fetching (and decoding) thread; the simulated compute is a timer, so core 0 is the client's own, as on a GPU server"
    )
    parser.add_argument("--parts", default="real,a8", help="which workloads to run; a part not run is kept from --out when that file has it")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ttft-codecs-latest.json"))
    args = parser.parse_args()
    codecs = args.codecs.split(",")

    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.sched_setaffinity(0, {0})
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import harness
    from stack import CLIENT_KEY, CLIENT_SECRET, start_gateway, start_stack

    from objectcache import ObjectCacheClient, chunk_keys
    from objectcache.hf_cache import KVLayout, LayerwiseLoad, cache_from_kv, kv_from_cache

    model = harness.load_model()
    tokenizer = harness.load_tokenizer()
    layout = KVLayout.of(model, dtype=torch.bfloat16)
    corpus = tokenizer((ROOT / "README.md").read_text(encoding="utf-8"), return_tensors="pt").input_ids[0]
    stack = start_stack([], backend="s3", launcher=["taskset", "-c", "1"])
    gateways: List[Any] = []

    def gateway(cap_mbs: float) -> ObjectCacheClient:
        extra = ["--cap", f"{cap_mbs}MB/s"] if cap_mbs > 0 else []
        process, url, _admin = start_gateway(["--s3-endpoint", stack.minio_url, *extra], ["taskset", "-c", "1"])
        gateways.append(process)
        return ObjectCacheClient(url, "ttft-codecs", (CLIENT_KEY, CLIENT_SECRET))

    parts = set(args.parts.split(","))
    previous: Dict[str, Any] = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    out: Dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__}, "args": vars(args)}
    for part in ("real", "a8"):
        if part not in parts and part in previous:
            out[part] = {**previous[part], "date": previous[part].get("date", previous.get("date"))}
    try:
        free = gateway(0)
        free.ensure_bucket()

        # -- real compute: SmolLM2 -------------------------------------------------------------
        tokens = corpus[: args.cached + args.suffix].unsqueeze(0)
        prefix, suffix = tokens[:, : args.cached], tokens[:, args.cached :]
        with torch.no_grad():
            prefill = model(input_ids=prefix, use_cache=True)
        kv = kv_from_cache(prefill.past_key_values, layout, args.cached)  # bf16 [2, L, T, H]
        del prefill
        chunks = [kv[:, :, i * 256 : (i + 1) * 256].contiguous() for i in range(args.cached // 256)]
        raw_bytes = kv.numel() * kv.element_size()
        keys: Dict[str, List[str]] = {}
        stored: Dict[str, int] = {}
        for name in codecs:
            keys[name] = chunk_keys(prefix[0].tolist(), "smollm2-135m", "bfloat16", 256, layout.layers, layout.layer_bytes, "KV_2LTD", namespace=f"real-{name}")
            free.put_chunks(keys[name], [c.view(torch.uint8).numpy() for c in chunks], layout=("KV_2LTD", layout.layers, layout.layer_bytes), codec=name, chunk_tokens=256, dtype="bfloat16")
            stored[name] = sum(len(free.get_object(k)) for k in keys[name])
        fields = lambda name: {} if name == "none" else {"codecs": [name]}  # noqa: E731

        # Client CPU per GiB of decoded KV: a fetch at full speed, timed in the fetching thread.
        decode: Dict[str, Dict[str, float]] = {}
        target = torch.empty(raw_bytes, dtype=torch.uint8)
        for name in codecs:
            cpu, wall = [], []
            for _ in range(max(3, args.reps)):
                c0, w0 = time.thread_time(), time.perf_counter()
                free.fetch(layout.descriptor(keys[name], mode="layerwise", **fields(name)), memoryview(target.numpy()), dtype="bfloat16")
                cpu.append(time.thread_time() - c0)
                wall.append(time.perf_counter() - w0)
            decode[name] = {"clientCpuSecondsPerGiB": median(cpu) / (raw_bytes / GIB), "fetchGBps": raw_bytes / median(wall) / 1e9}
            print(f"{name}: stored {raw_bytes / stored[name]:.2f}x smaller; client {decode[name]['clientCpuSecondsPerGiB']:.2f} CPU-s/GiB", flush=True)

        memory_cache_kv = kv.clone()
        caps = [float(c) for c in args.caps.split(",")] if "real" in parts else []
        with torch.no_grad():
            exact_next = int(model(input_ids=suffix, past_key_values=cache_from_kv(memory_cache_kv, layout, model.dtype)).logits[0, -1].argmax())
        real: List[Dict[str, Any]] = []
        for cap in caps:
            client = free if cap == 0 else gateway(cap)
            times: Dict[str, List[float]] = {name: [] for name in ["kv-in-memory", *codecs]}
            waits: Dict[str, List[float]] = {name: [] for name in codecs}
            agree: Dict[str, bool] = {name: True for name in codecs}
            for _ in range(args.reps):
                for method in ["kv-in-memory", *codecs]:  # interleaved: noise hits every method alike
                    started = time.perf_counter()
                    with torch.no_grad():
                        if method == "kv-in-memory":
                            logits = model(input_ids=suffix, past_key_values=cache_from_kv(memory_cache_kv, layout, model.dtype)).logits
                        else:
                            assert client.lookup(keys[method], layers=layout.layers, layer_bytes=layout.layer_bytes, codecs=[method]) == len(keys[method])
                            with LayerwiseLoad(client, model, layout, keys[method], fetch_cpus={1}, **fields(method)) as load:
                                logits = model(input_ids=suffix, past_key_values=load.cache).logits
                            waits[method].append(sum(load.waits))
                    times[method].append(time.perf_counter() - started)
                    if method != "kv-in-memory":
                        agree[method] = agree[method] and int(logits[0, -1].argmax()) == exact_next
            floor = median(times["kv-in-memory"])
            row = {"capMBps": cap, "kvInMemoryS": floor, "methods": {}}
            for name in codecs:
                ttft = median(times[name])
                row["methods"][name] = {"ttftS": ttft, "overheadS": ttft - floor, "hookWaitsS": median(waits[name]), "sameNextToken": agree[name], "allSeconds": times[name]}
            real.append(row)
            print(f"cap {cap or 'none'} MB/s: in memory {floor:.2f} s; " + "; ".join(f"{n} {row['methods'][n]['ttftS']:.2f} s (+{row['methods'][n]['overheadS']:.2f})" for n in codecs), flush=True)
        if "real" in parts:
            out["real"] = {
                "date": out["date"],
                "model": "SmolLM2-135M",
                "cachedTokens": args.cached,
                "suffixTokens": args.suffix,
                "rawBytes": raw_bytes,
                "storedBytes": stored,
                "decode": decode,
                "rows": real,
            }

        # -- table A8: Llama-3.1-8B geometry, simulated A100 compute ---------------------------
        table = json.loads((ROOT / "bench" / "data" / "table-a8.json").read_text())
        layers, hidden, g = 32, 8 * 128, 256
        s_bytes = 2 * g * hidden * 2
        # Per-channel statistics of SmolLM2's real K and V (float32), by layer.
        real_kv = kv.float()
        mean = real_kv.mean(dim=2)  # [2, 30, 192]
        std = real_kv.std(dim=2)
        rng = np.random.default_rng(7)
        a8_client = gateway(args.a8_cap)
        a8: List[Dict[str, Any]] = []
        for spec in args.a8_rows.split(",") if "a8" in parts else []:
            context, hit = int(spec.split(":")[0]), float(spec.split(":")[1])
            row_spec = next(r for r in table["rows"] if r["context"] == context and r["hitRate"] == hit)
            count = row_spec["cachedTokens"] // g
            a8_keys: Dict[str, List[str]] = {}
            a8_stored: Dict[str, int] = {}
            synthetic = []
            for _ in range(count):
                src = rng.integers(0, 192, size=hidden)
                values = np.empty((layers, 2, g, hidden), dtype=np.float32)
                for layer in range(layers):
                    for part in range(2):
                        m = mean[part, layer % 30, src].numpy()
                        s = std[part, layer % 30, src].numpy()
                        values[layer, part] = rng.standard_normal((g, hidden), dtype=np.float32) * s + m
                bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)
                synthetic.append(bf16.tobytes())  # KV_L2TD: per layer K then V
            for name in codecs:
                a8_keys[name] = [f"a8-{context}-{hit}/{name}/{c}" for c in range(count)]
                a8_client.put_chunks(a8_keys[name], synthetic, layout=("KV_L2TD", layers, s_bytes), codec=name, chunk_tokens=g, dtype="bfloat16")
                a8_stored[name] = sum(len(a8_client.get_object(k)) for k in a8_keys[name])
            raw = count * layers * s_bytes
            payload = torch.empty(raw, dtype=torch.uint8)
            links = []
            for link_gbps in [float(x) for x in args.a8_links.split(",")]:
                scale = (link_gbps * 1e9 / 8) / (args.a8_cap * 1e6)
                compute = row_spec["msPerLayer"] * scale / 1000
                result: Dict[str, Any] = {"linkGbps": link_gbps, "scale": scale, "computeMsPerLayerScaled": compute * 1000, "localLwS": layers * compute, "methods": {}}
                for name in codecs:
                    runs = []
                    for _ in range(max(1, args.reps - 1)):
                        runs.append(simulated_ttft(a8_client, a8_keys[name], layers, g, s_bytes, name, payload, compute, args.a8_fetch_cpu))
                    ttft = median(runs)
                    result["methods"][name] = {"ttftS": ttft, "overheadPct": 100 * (ttft / (layers * compute) - 1), "allSeconds": runs}
                links.append(result)
                print(
                    f"A8 {context} {hit}: {link_gbps} Gbps (x{scale:.1f}): Local-LW {layers * compute:.2f} s; " + "; ".join(f"{n} +{result['methods'][n]['overheadPct']:.1f}%" for n in codecs),
                    flush=True,
                )
            a8.append({"context": context, "hitRate": hit, "msPerLayer": row_spec["msPerLayer"], "rawBytes": raw, "storedBytes": a8_stored, "links": links})
        if "a8" in parts:
            out["a8"] = {"date": out["date"], "capMBps": args.a8_cap, "fetchCpu": args.a8_fetch_cpu, "rows": a8}
    finally:
        for process in gateways:
            process.terminate()
        stack.stop()
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


def simulated_ttft(client: Any, keys: List[str], layers: int, g: int, s_bytes: int, codec: str, payload: Any, compute: float, fetch_cpu: int) -> float:
    """One layerwise GET with table A8's compute simulated: layer l computes for ``compute``
    seconds once it is ready and layer l-1 is done. Returns seconds to the last layer's end."""
    ready = [threading.Event() for _ in range(layers)]
    failure: List[BaseException] = []
    descriptor = client.descriptor(keys, layers=layers, chunk_tokens=g, layer_bytes=s_bytes, mode="layerwise", **({} if codec == "none" else {"codecs": [codec]}))

    def fetch() -> None:
        os.sched_setaffinity(0, {fetch_cpu})
        try:
            client.fetch(descriptor, memoryview(payload.numpy()), lambda layer, _v: ready[layer].set(), dtype="bfloat16")
        except BaseException as error:  # noqa: BLE001
            failure.append(error)
            for event in ready:
                event.set()

    started = time.perf_counter()
    thread = threading.Thread(target=fetch)
    thread.start()
    done = started
    for layer in range(layers):
        ready[layer].wait()
        if failure:
            raise failure[0]
        begin = max(done, time.perf_counter())
        time.sleep(max(0.0, begin + compute - time.perf_counter()))
        done = begin + compute
    thread.join()
    return done - started


if __name__ == "__main__":
    main()
