"""Load a cached prefix's KV layer by layer into a NumPy array shaped as the model wants it, and
start each layer's (here: simulated) compute the moment that layer has landed.

    python client/python/examples/load_kv.py [ENDPOINT] [BUCKET]
    (credentials from OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY, default the gateway's)
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time

import numpy as np

from objectcache import ObjectCacheClient, chunk_keys

# Llama-3.2-1B: 16 layers, 8 KV heads of 64 dims, bfloat16 (stored here as uint16 bit patterns).
LAYERS, KV_HEADS, HEAD_DIM, CHUNK_TOKENS = 16, 8, 64, 64
LAYER_BYTES = 2 * CHUNK_TOKENS * KV_HEADS * HEAD_DIM * 2  # K and V of one chunk, 2 bytes each


def main(endpoint: str, bucket: str, credentials: tuple, compute_ms: float = 5.0) -> dict:
    client = ObjectCacheClient(endpoint, bucket, credentials)
    client.ensure_bucket()
    prompt = list(range(1000, 1000 + 32 * CHUNK_TOKENS))  # the token ids of a shared prefix
    keys = chunk_keys(prompt, "meta-llama/Llama-3.2-1B", "bfloat16", CHUNK_TOKENS, LAYERS, LAYER_BYTES, "KV_L2TD")

    # A writer (another engine, earlier) stored the prefix: one object per chunk, layers in order.
    rng = np.random.default_rng(7)
    chunks = [rng.integers(0, 2**16, size=LAYERS * LAYER_BYTES // 2, dtype=np.uint16) for _ in keys]
    client.put_chunks(keys, chunks, layout=("KV_L2TD", LAYERS, LAYER_BYTES))

    # A reader: how much of the prompt is cached, then fetch it into the model's own buffer.
    matched = client.lookup(keys, layers=LAYERS, layer_bytes=LAYER_BYTES)
    tokens = matched * CHUNK_TOKENS
    # [layers, chunk, K|V, tokens of the chunk, kv_heads, head_dim]: layer l is one contiguous row,
    # the layer-major bytes a layerwise GET delivers.
    kv = np.empty((LAYERS, matched, 2, CHUNK_TOKENS, KV_HEADS, HEAD_DIM), dtype=np.uint16)
    ready: queue.Queue[int] = queue.Queue()
    log = []
    started = time.perf_counter()

    def compute() -> None:  # the model: layer l starts as soon as layer l has landed
        for _ in range(LAYERS):
            layer = ready.get()
            log.append(("compute starts", layer, time.perf_counter() - started))
            time.sleep(compute_ms / 1000)

    gpu = threading.Thread(target=compute)
    gpu.start()
    descriptor = ObjectCacheClient.descriptor(keys[:matched], layers=LAYERS, chunk_tokens=CHUNK_TOKENS, layer_bytes=LAYER_BYTES)
    result = client.fetch(descriptor, target=kv, on_layer_ready=lambda layer, view: (log.append(("layer ready", layer, time.perf_counter() - started)), ready.put(layer)))
    gpu.join()
    client.close()

    # Layer 3, chunk 1, V half: the bytes chunk 1 stored for layer 3's V.
    half = LAYER_BYTES // 4  # uint16 elements in one K or V half
    assert np.array_equal(kv[3, 1, 1].reshape(-1), chunks[1][3 * 2 * half + half : 3 * 2 * half + 2 * half])
    first_compute = next(t for what, layer, t in log if what == "compute starts" and layer == 0)
    last_ready = max(t for what, _, t in log if what == "layer ready")
    return {"tokens": tokens, "shape": kv.shape, "first_compute_s": first_compute, "last_layer_ready_s": last_ready, "summary": result.summary}


if __name__ == "__main__":
    endpoint = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9080"
    bucket = sys.argv[2] if len(sys.argv) > 2 else "kvcache"
    credentials = (os.environ.get("OBJECTCACHE_ACCESS_KEY", "objectcache"), os.environ.get("OBJECTCACHE_SECRET_KEY", "objectcache-secret"))
    out = main(endpoint, bucket, credentials)
    print(
        f"{out['tokens']} cached tokens into a {out['shape']} array; layer 0's compute started at {out['first_compute_s'] * 1000:.1f} ms, "
        f"before the last layer landed at {out['last_layer_ready_s'] * 1000:.1f} ms ({out['summary']['mode']}, {out['summary']['backendReads']} backend reads)"
    )
