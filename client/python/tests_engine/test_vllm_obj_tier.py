"""vLLM 0.33.0's native object tier (``ObjectStoreSecondaryTierManager``: NIXL's OBJ plugin,
aws-sdk-cpp inside) against the gateway on both backends, with its default settings: no
AWS_REQUEST_CHECKSUM_CALCULATION workaround, so every store is an aws-chunked PUT with a
CRC64NVME trailer (refused as an unsupported checksum before). A real model's KV, cut into vLLM
blocks, is stored, found, loaded into other slots bit-identical, and a block never stored is a miss
and a failed load, never wrong bytes. vLLM runs in a child process (vllm_obj_tier_child.py):
NIXL and UCX keep process-wide state."""
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Dict

import torch
from stack import CLIENT_KEY, CLIENT_SECRET, Stack

from objectcache import ObjectCacheClient
from objectcache.hf_cache import KVLayout, kv_from_cache

HERE = Path(__file__).parent
BLOCKS = 4


def requests_by(stack: Stack) -> Dict[str, float]:
    """Requests answered so far, by `operation status`."""
    text = urllib.request.urlopen(f"{stack.admin_url}/metrics", timeout=10).read().decode()
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("objectcache_http_requests_total{"):
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
        name = f"{labels['operation'].strip(chr(34))} {labels['status'].strip(chr(34))}"
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def test_vllms_object_tier_round_trips_a_real_models_kv_with_its_default_checksums(model: Any, tokenizer: Any, stack: Stack, bucket: str, tmp_path: Path) -> None:
    from test_model import PREFIX_TOKENS, prompts

    prefix, first_suffix, _ = prompts(tokenizer)
    with torch.no_grad():
        first = model(input_ids=torch.cat([prefix, first_suffix], 1), use_cache=True)
    kv = kv_from_cache(first.past_key_values, KVLayout.of(model), PREFIX_TOKENS).to(torch.bfloat16)
    raw = kv.contiguous().view(torch.uint8).flatten().numpy().tobytes()
    block_bytes = len(raw) // BLOCKS
    blocks_file = tmp_path / "blocks.bin"
    blocks_file.write_bytes(raw[: block_bytes * BLOCKS])

    env = dict(os.environ, UCX_RCACHE_MAX_UNRELEASED="1024")
    env.pop("AWS_REQUEST_CHECKSUM_CALCULATION", None)  # vLLM's defaults: aws-sdk-cpp's CRC64NVME
    before = requests_by(stack)
    child = subprocess.run(
        [sys.executable, str(HERE / "vllm_obj_tier_child.py"), stack.gateway_url, bucket, CLIENT_KEY, CLIENT_SECRET, str(blocks_file), str(BLOCKS)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    after = requests_by(stack)

    assert result["before"] == ["MISS"] * BLOCKS
    assert result["stored"] is True
    assert result["after"] == ["HIT"] * BLOCKS + ["MISS"]
    assert result["loaded"] is True
    assert result["identical"] is True
    assert result["missing_loaded"] is False
    # On the wire: one PUT per block (aws-chunked, CRC64NVME trailer, all accepted) and ranged
    # GETs to load them; nothing refused but the probe and the lookups of what is not there.
    grew = lambda name: after.get(name, 0.0) - before.get(name, 0.0)  # noqa: E731
    assert grew("PutObject 200") == BLOCKS
    assert grew("GetObject 206") >= BLOCKS
    assert not any(name.startswith("PutObject 4") for name in after if grew(name) > 0)
    # The objects are where vLLM's key names say, each one block of the model's bytes.
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        for i, key in enumerate(result["objects"]):
            stored = c.get_object(key.replace("//", "/"))
            assert stored == raw[i * block_bytes : (i + 1) * block_bytes]
