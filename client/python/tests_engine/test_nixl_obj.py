"""NIXL's OBJ plugin (``nixl_cu12`` 1.5.1, aws-sdk-cpp inside; the object back end of vLLM's
object tier and of Dynamo KVBM) against the gateway on both backends, in both addressing styles,
with docs/engines.md's parameters and its default checksums: a real model's KV written from DRAM (from an unaligned offset too),
read back at an offset and whole, byte for byte, and ``query_memory`` telling what exists. A read
of an object that does not exist fails. NIXL runs in a child process
(nixl_obj_child.py): NIXL and UCX keep process-wide state."""
import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
from engine_docs import filled
from stack import CLIENT_KEY, CLIENT_SECRET, Stack
from test_vllm_obj_tier import requests_by

from objectcache import ObjectCacheClient
from objectcache.hf_cache import KVLayout, kv_from_cache

HERE = Path(__file__).parent
OFFSET = 4096 + 13  # as in nixl_obj_child.py


def obj_params(stack: Stack, bucket: str, virtual: bool) -> Dict[str, str]:
    """docs/engines.md's OBJ parameters for this stack (virtual-hosted: the --domain host)."""
    text = filled("NIXL's OBJ plugin and Dynamo KVBM", "python", {"endpoint": stack.gateway_url, "bucket": bucket, "access_key": CLIENT_KEY, "secret_key": CLIENT_SECRET})
    params: Dict[str, str] = ast.literal_eval(text[text.index("{") : text.rindex("}") + 1])
    if virtual:
        params.update(use_virtual_addressing="true", endpoint_override=f"http://oc.test:{stack.gateway_url.rsplit(':', 1)[1]}")
    return params


def run_child(stack: Stack, bucket: str, data_file: Path, virtual: bool, tmp_path: Path) -> Any:
    env = dict(os.environ, UCX_RCACHE_MAX_UNRELEASED="1024")
    env.pop("AWS_REQUEST_CHECKSUM_CALCULATION", None)  # NIXL's defaults: aws-sdk-cpp's CRC64NVME
    params = tmp_path / "obj-params.json"
    params.write_text(json.dumps(obj_params(stack, bucket, virtual)))
    if not virtual:
        done = subprocess.run([sys.executable, str(HERE / "nixl_obj_child.py"), str(params), str(data_file)], env=env, capture_output=True, text=True, timeout=300)
    else:
        # Virtual-hosted style: <bucket>.oc.test resolved by a private /etc/hosts (a mount
        # namespace of the child's own; aws-sdk-cpp resolves names in C).
        with tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False) as hosts:
            hosts.write(f"127.0.0.1 localhost\n127.0.0.1 {bucket}.oc.test\n")
        try:
            command = f'mount --bind "{hosts.name}" /etc/hosts && exec "{sys.executable}" "{HERE / "nixl_obj_child.py"}" "{params}" "{data_file}"'
            done = subprocess.run(["unshare", "--mount", "--", "sh", "-c", command], env=env, capture_output=True, text=True, timeout=300)
        finally:
            os.unlink(hosts.name)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("virtual", [False, True], ids=["path-style", "virtual-hosted"])
def test_nixls_obj_plugin_writes_reads_at_offsets_and_queries_through_the_gateway(model: Any, tokenizer: Any, stack: Stack, bucket: str, tmp_path: Path, virtual: bool) -> None:
    from test_model import PREFIX_TOKENS, prompts

    prefix, suffix, _ = prompts(tokenizer)
    with torch.no_grad():
        out = model(input_ids=torch.cat([prefix, suffix], 1), use_cache=True)
    kv = kv_from_cache(out.past_key_values, KVLayout.of(model), PREFIX_TOKENS).to(torch.bfloat16)
    raw = kv.contiguous().view(torch.uint8).flatten().numpy().tobytes()
    data_file = tmp_path / "kv.bin"
    data_file.write_bytes(raw)
    half = len(raw) // 2

    before = requests_by(stack)
    result = run_child(stack, bucket, data_file, virtual, tmp_path)
    after = requests_by(stack)
    grew = lambda name: after.get(name, 0.0) - before.get(name, 0.0)  # noqa: E731

    assert result["before"] == [False, False, False]
    assert result["write_half"] == "DONE" and result["write_tail"] == "DONE"
    assert result["after"] == [True, True, False]
    assert result["read_offset"] == "DONE" and result["read_whole"] == "DONE"
    assert result["offset_sha256"] == hashlib.sha256(raw[OFFSET:half]).hexdigest()
    assert result["whole_sha256"] == hashlib.sha256(raw[OFFSET:]).hexdigest()
    # A read of what was never written fails. (aws-sdk-cpp streams the 404's XML body into the
    # buffer before the status is known, against MinIO direct too: a failed transfer's buffer
    # holds no KV and is not to be used, which is how vLLM's tier treats it.)
    assert result["read_missing"] == "ERR"
    # What the objects hold, read back by another client.
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        assert c.get_object("nixl/kv-first-half") == raw[:half]
        assert c.get_object("nixl/kv-tail") == raw[OFFSET:]
    # On the wire: two PUTs (CRC64NVME, aws-sdk-cpp's default, accepted), a HEAD per query per
    # object, a ranged GET for the read at an offset.
    assert grew("PutObject 200") == 2
    assert grew("HeadObject 200") == 2 and grew("HeadObject 404") == 4
    assert grew("GetObject 206") >= 1
    assert not any(name.split(" ")[1].startswith("4") and not name.startswith("HeadObject") and not name.startswith("GetObject 404") for name in after if grew(name) > 0)
