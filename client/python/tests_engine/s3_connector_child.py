"""LMCache with its own S3 connector (awscrt), unchanged: stores or loads a KV tensor through the
gateway. Run by test_lmcache.py in a private mount namespace whose /etc/hosts resolves the
bucket's virtual host to 127.0.0.1 (awscrt resolves names in C, not through Python).

    python s3_connector_child.py store|load s3://<bucket>.oc.test:<port> KEY SECRET TENSOR_FILE TOKENS
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402


def main() -> None:
    action, url, key, secret, path, tokens_path = sys.argv[1:7]
    tokens = torch.load(tokens_path)
    engine = harness.lmcache_engine(
        "lmcache-s3-connector", layers=30, kv_heads=3, head_dim=64, dtype=torch.bfloat16, remote_url=url, remote_serde="naive",
        extra_config={"s3_region": "us-east-1", "disable_tls": True, "s3_prefer_http2": False, "aws_access_key_id": key, "aws_secret_access_key": secret, "save_chunk_meta": False},
    )
    if action == "store":
        engine.store(tokens, kvcaches=torch.load(path))
        # LMCache's remote puts run in the background: wait until every chunk is there.
        deadline = time.monotonic() + 60
        while engine.lookup(tokens) < len(tokens) // 256 * 256 and time.monotonic() < deadline:
            time.sleep(0.1)
        print("stored", engine.lookup(tokens), flush=True)
    else:
        out = torch.zeros(2, 30, len(tokens), 192, dtype=torch.bfloat16)
        print("matched", engine.lookup(tokens), flush=True)
        mask = engine.retrieve(tokens, kvcaches=out)
        torch.save(out, path)
        print("retrieved", int(mask.sum()), flush=True)
    os._exit(0)  # LMCache's threads may keep the process alive


if __name__ == "__main__":
    main()
