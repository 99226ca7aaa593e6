"""vLLM 0.33.0's native object tier against the gateway on both backends, built from docs/engines.md's
``--kv-transfer-config`` by vLLM's own spec factory (a CPU primary tier, an ``obj`` secondary tier:
``ObjectStoreSecondaryTierManager``, NIXL's OBJ plugin, aws-sdk-cpp inside) with its default
settings: no AWS_REQUEST_CHECKSUM_CALCULATION workaround, so every store is an aws-chunked PUT
with a CRC64NVME trailer (refused as an unsupported checksum before). One engine stores a real
model's KV in vLLM blocks; another engine, with an empty CPU tier, finds them in the object tier,
promotes them and loads them bit-identical; a block never stored is a miss. Each engine is a
child process (vllm_obj_tier_child.py): NIXL and UCX keep process-wide state."""
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Dict

import torch
from engine_docs import filled
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, uid

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


def engine(mode: str, config: Path, blocks_file: Path) -> Dict[str, Any]:
    env = dict(os.environ, UCX_RCACHE_MAX_UNRELEASED="1024")
    env.pop("AWS_REQUEST_CHECKSUM_CALCULATION", None)  # vLLM's defaults: aws-sdk-cpp's CRC64NVME
    child = subprocess.run(
        [sys.executable, str(HERE / "vllm_obj_tier_child.py"), mode, str(config), uid("oc-test"), str(blocks_file), str(BLOCKS)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_vllms_object_tier_round_trips_a_real_models_kv_from_the_readmes_configuration(model: Any, tokenizer: Any, stack: Stack, bucket: str, tmp_path: Path) -> None:
    from test_model import PREFIX_TOKENS, prompts

    prefix, first_suffix, _ = prompts(tokenizer)
    with torch.no_grad():
        first = model(input_ids=torch.cat([prefix, first_suffix], 1), use_cache=True)
    kv = kv_from_cache(first.past_key_values, KVLayout.of(model), PREFIX_TOKENS).to(torch.bfloat16)
    raw = kv.contiguous().view(torch.uint8).flatten().numpy().tobytes()
    block_bytes = len(raw) // BLOCKS
    blocks_file = tmp_path / "blocks.bin"
    blocks_file.write_bytes(raw[: block_bytes * BLOCKS])
    config = tmp_path / "kv-transfer.json"
    config.write_text(filled("vLLM's native object tier", "json", {"endpoint": stack.gateway_url, "bucket": bucket, "access_key": CLIENT_KEY, "secret_key": CLIENT_SECRET}))

    before = requests_by(stack)
    stored = engine("store", config, blocks_file)
    between = requests_by(stack)
    loaded = engine("load", config, blocks_file)
    after = requests_by(stack)

    assert stored["tiers"] == ["obj"] and stored["pending"] is False
    assert loaded["lookups"] == ["HIT"] * BLOCKS + ["MISS"]
    assert loaded["steps"] > 1  # found in the object tier and promoted, not already in the CPU tier
    assert loaded["loaded_sha256"] == [hashlib.sha256(raw[i * block_bytes : (i + 1) * block_bytes]).hexdigest() for i in range(BLOCKS)]
    # On the wire: a store is one PUT per block (aws-chunked, CRC64NVME trailer, all accepted); a
    # lookup a HEAD per block; a promotion ranged GETs. Nothing refused but the probe and the
    # lookup of what is not there.
    grew = lambda name, a=before, b=between: b.get(name, 0.0) - a.get(name, 0.0)  # noqa: E731
    assert grew("PutObject 200") == BLOCKS
    assert grew("HeadObject 404") == 1  # the tier's start-up probe, __nixl_probe__/connectivity_test
    assert not any(name.startswith("PutObject 4") for name in between if grew(name) > 0)
    assert grew("HeadObject 200", between, after) == BLOCKS
    assert grew("GetObject 206", between, after) >= BLOCKS
    assert grew("PutObject 200", between, after) == 0
    # The objects are where vLLM's key names say, each one block of the model's bytes, named as
    # docs/engines.md shows: vllm/<model>_<hash of vLLM's KV config>_r<rank>/<3 hex>/<2 hex>_g<group>/<block hash>.bin
    # (vLLM's names hold "vllm//"; aws-sdk-cpp sends one slash).
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        names = sorted(c.list_keys())
        assert len(names) == BLOCKS, names
        assert all(re.fullmatch(r"vllm/HuggingFaceTB_SmolLM2-135M-Instruct_[0-9a-f]{12}_r0/([0-9a-f]{3})/([0-9a-f]{2})_g0/\1\2[0-9a-f]{59}\.bin", n) for n in names), names
        for i, key in enumerate(stored["objects"]):
            assert c.get_object(key.replace("//", "/")) == raw[i * block_bytes : (i + 1) * block_bytes]
