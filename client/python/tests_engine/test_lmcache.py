"""LMCache's own engine with the ObjectCache plugin, configured as docs/engines.md says, on both
backends: a real model's KV stored by one engine is retrieved bit-identical by a fresh one (with
ONE layerwise GET for the whole prefix) and gives the same logits; chunks stored by LMCache's own
S3 connector (unchanged, virtual-hosted-style through ``--domain``) are read by the plugin and
the other way round, byte for byte; a gateway that is down is a miss, never an exception."""
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, free_port

import harness
from engine_docs import block
from objectcache import ObjectCacheClient
from objectcache import lmcache_backend
from objectcache.hf_cache import KVLayout, cache_from_kv, kv_from_cache

HERE = Path(__file__).parent
L, KV_HEADS, HEAD_DIM = 30, 3, 64


def descriptor_gets(stack: Stack) -> float:
    """Descriptor GETs answered (layerwise or, under the size threshold, chunkwise)."""
    import urllib.request

    text = urllib.request.urlopen(f"{stack.admin_url}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("objectcache_http_requests_total{") and ('operation="LayerwiseGet"' in line or 'operation="ChunkwiseGet"' in line))


def engine_with_plugin(name: str, stack: Stack, bucket: str, dtype: torch.dtype, use_layerwise: bool = False, **settings: str) -> Any:
    return harness.lmcache_engine(name, layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=dtype, use_layerwise=use_layerwise, **harness.plugin_config(stack.gateway_url, bucket, CLIENT_KEY, CLIENT_SECRET, **settings))


def test_a_real_models_kv_round_trips_through_lmcache_and_the_plugin(model: Any, tokenizer: Any, stack: Stack, bucket: str) -> None:
    from test_model import PREFIX_TOKENS, prompts

    prefix, first_suffix, suffix = prompts(tokenizer)
    with torch.no_grad():
        first = model(input_ids=torch.cat([prefix, first_suffix], 1), use_cache=True)
    layout = KVLayout.of(model)
    kv = kv_from_cache(first.past_key_values, layout, PREFIX_TOKENS)
    tokens = prefix[0]
    writer = engine_with_plugin("plugin-writer", stack, bucket, torch.float32)
    try:
        harness.store_and_wait(writer, tokens, kv, PREFIX_TOKENS)
    finally:
        harness.destroy_engine("plugin-writer")
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
        names = c.list_keys()
    assert len(names) == 2 and all(n.startswith("HuggingFaceTB_SmolLM2-135M-Instruct@1@0@") and n.endswith("@float") for n in names)
    # One store() is one prefix in order: its second chunk records its first (objectcache-after).
    import boto3

    s3 = boto3.client("s3", endpoint_url=stack.gateway_url, aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET, region_name="us-east-1")
    after = {n: s3.head_object(Bucket=bucket, Key=n)["Metadata"].get("objectcache-after") for n in names}
    first = [n for n in names if after[n] is None]
    assert len(first) == 1
    second = [n for n in names if n != first[0]]
    assert after[second[0]] == first[0]

    reader = engine_with_plugin("plugin-reader", stack, bucket, torch.float32)
    try:
        shared = torch.cat([prefix, suffix], 1)[0]
        assert reader.lookup(shared) == PREFIX_TOKENS
        out = torch.zeros(2, L, len(shared), KV_HEADS * HEAD_DIM)
        before = descriptor_gets(stack)
        mask = reader.retrieve(shared, kvcaches=out)
        assert int(mask.sum()) == PREFIX_TOKENS
        assert descriptor_gets(stack) - before == 1  # the whole prefix in ONE descriptor GET
        assert torch.equal(out[:, :, :PREFIX_TOKENS], kv)
    finally:
        harness.destroy_engine("plugin-reader")
    with torch.no_grad():
        reused = model(input_ids=suffix, past_key_values=cache_from_kv(out[:, :, :PREFIX_TOKENS], layout, model.dtype)).logits
        in_memory = model(input_ids=suffix, past_key_values=cache_from_kv(kv, layout, model.dtype)).logits
    assert torch.equal(reused, in_memory)


def run_s3_connector(action: str, stack: Stack, bucket: str, tensor: Path, tokens: Path) -> str:
    """LMCache's S3 connector in a child process whose /etc/hosts (a private mount namespace,
    nothing changes outside it) maps ``<bucket>.oc.test`` to 127.0.0.1."""
    port = stack.gateway_url.rsplit(":", 1)[1]
    with tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False) as hosts:
        hosts.write(f"127.0.0.1 localhost\n127.0.0.1 {bucket}.oc.test\n")
    try:
        command = f'mount --bind "{hosts.name}" /etc/hosts && exec "{sys.executable}" "{HERE / "s3_connector_child.py"}" {action} s3://{bucket}.oc.test:{port} {CLIENT_KEY} {CLIENT_SECRET} "{tensor}" "{tokens}"'
        done = subprocess.run(["unshare", "--mount", "--", "sh", "-c", command], capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONHASHSEED="0"))
    finally:
        os.unlink(hosts.name)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_chunks_are_interchangeable_with_lmcaches_own_s3_connector(stack: Stack, bucket: str, tmp_path: Path) -> None:
    tokens = torch.arange(1000, 1000 + 1024)
    torch.save(tokens, tmp_path / "tokens.pt")
    kv = torch.randn(2, L, 1024, KV_HEADS * HEAD_DIM, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    torch.save(kv, tmp_path / "kv.pt")
    # LMCache's S3 connector writes; the plugin reads (one layerwise GET).
    assert "stored 1024" in run_s3_connector("store", stack, bucket, tmp_path / "kv.pt", tmp_path / "tokens.pt")
    reader = engine_with_plugin("interop-reader", stack, bucket, torch.bfloat16)
    try:
        assert reader.lookup(tokens) == 1024
        out = torch.zeros_like(kv)
        assert int(reader.retrieve(tokens, kvcaches=out).sum()) == 1024
        assert torch.equal(out, kv)
    finally:
        harness.destroy_engine("interop-reader")

    # The plugin writes (another prefix); LMCache's S3 connector reads.
    other = torch.arange(5000, 5000 + 768)
    torch.save(other, tmp_path / "other.pt")
    kv2 = torch.randn(2, L, 768, KV_HEADS * HEAD_DIM, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
    writer = engine_with_plugin("interop-writer", stack, bucket, torch.bfloat16)
    try:
        harness.store_and_wait(writer, other, kv2, 768)
    finally:
        harness.destroy_engine("interop-writer")
    output = run_s3_connector("load", stack, bucket, tmp_path / "loaded.pt", tmp_path / "other.pt")
    assert "retrieved 768" in output, output
    assert torch.equal(torch.load(tmp_path / "loaded.pt"), kv2)


def test_a_gateway_that_is_down_is_a_miss_and_a_missing_chunk_shortens_the_prefix(stack: Stack, bucket: str) -> None:
    tokens = torch.arange(9000, 9000 + 768)
    kv = torch.randn(2, L, 768, KV_HEADS * HEAD_DIM).to(torch.bfloat16)
    dead = harness.lmcache_engine("dead", layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.bfloat16, **harness.plugin_config(f"http://127.0.0.1:{free_port()}", bucket, CLIENT_KEY, CLIENT_SECRET, timeout_s="2", retries="0"))
    try:
        failures = sum(lmcache_backend.FAILURES.values())
        puts = lmcache_backend.FAILURES.get(("put", "OC_ERR_BACKEND_UNAVAILABLE"), 0)
        dead.store(tokens, kvcaches=kv)  # no exception
        assert dead.lookup(tokens) == 0
        assert int(dead.retrieve(tokens, kvcaches=torch.zeros_like(kv)).sum()) == 0
        # Every one of the three puts must have failed (and been counted) before the engine is
        # destroyed: LMCache frees its buffers before it closes its remote backend, so a put still
        # queued then would read freed memory (LMCache's own S3 connector included).
        deadline = time.monotonic() + 30
        while lmcache_backend.FAILURES.get(("put", "OC_ERR_BACKEND_UNAVAILABLE"), 0) < puts + 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lmcache_backend.FAILURES.get(("put", "OC_ERR_BACKEND_UNAVAILABLE"), 0) >= puts + 3
        assert sum(lmcache_backend.FAILURES.values()) >= failures + 4
        assert lmcache_backend.FAILURES.get(("lookup", "OC_ERR_BACKEND_UNAVAILABLE"), 0) >= 1
    finally:
        harness.destroy_engine("dead")

    live = engine_with_plugin("partial", stack, bucket, torch.bfloat16)
    try:
        harness.store_and_wait(live, tokens, kv, 768)
        with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
            names = sorted(c.list_keys())
            assert len(names) == 3
        remote = live.storage_manager.storage_backends["RemoteBackend-objectcache"]
        connector = remote.connection.getWrappedConnector()
        assert isinstance(connector, lmcache_backend.ObjectCacheConnector)
        keys = [key for _, _, key in live.token_database.process_tokens(tokens=tokens)]
        with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
            c.delete(connector.object_name(keys[1]))
        out = torch.zeros_like(kv)
        assert int(live.retrieve(tokens, kvcaches=out).sum()) == 256
        assert torch.equal(out[:, :, :256], kv[:, :, :256])
        # A batched get that names the vanished chunk (a lookup raced with its deletion) returns
        # the chunks before it, then None: the run is shortened, not lost.
        got = asyncio.run_coroutine_threadsafe(connector.batched_get(keys), remote.loop).result(60)
        assert got[0] is not None and got[1] is None and got[2] is None
        assert torch.equal(got[0].tensor, kv[:, :, :256])
        got[0].ref_count_down()
    finally:
        harness.destroy_engine("partial")


def test_a_fleet_key_confined_to_its_prefix_serves_lmcache_and_nothing_else(stack: Stack, bucket: str) -> None:
    """The plugin with a key whose access policy confines it to ``fleet/``: with that key_prefix
    LMCache stores, finds and retrieves its KV; with another prefix every call is refused by the
    policy and becomes a counted miss (OC_ERR_ACCESS_DENIED), never an exception or a stale hit."""
    from conftest import FLEET_KEY, FLEET_SECRET

    tokens = torch.arange(12000, 12000 + 512)
    kv = torch.randn(2, L, 512, KV_HEADS * HEAD_DIM).to(torch.bfloat16)
    config = harness.plugin_config(stack.gateway_url, bucket, FLEET_KEY, FLEET_SECRET, key_prefix="fleet/", tenant="fleet")
    confined = harness.lmcache_engine("fleet", layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.bfloat16, **config)
    try:
        harness.store_and_wait(confined, tokens, kv, 512)
        out = torch.zeros_like(kv)
        assert int(confined.retrieve(tokens, kvcaches=out).sum()) == 512
        assert torch.equal(out, kv)
        remote = confined.storage_manager.storage_backends["RemoteBackend-objectcache"]
        connector = remote.connection.getWrappedConnector()
        assert asyncio.run_coroutine_threadsafe(connector.ping(), remote.loop).result(30) == 0
    finally:
        harness.destroy_engine("fleet")
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as admin:
        assert len(admin.list_keys("fleet/")) == 2 and admin.list_keys() == admin.list_keys("fleet/")

    denied = ("put", "OC_ERR_ACCESS_DENIED")
    puts = lmcache_backend.FAILURES.get(denied, 0)
    outside = harness.plugin_config(stack.gateway_url, bucket, FLEET_KEY, FLEET_SECRET, key_prefix="", tenant="fleet")
    stray = harness.lmcache_engine("stray", layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.bfloat16, **outside)
    try:
        stray.store(tokens, kvcaches=kv)  # no exception
        deadline = time.monotonic() + 30
        while lmcache_backend.FAILURES.get(denied, 0) < puts + 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lmcache_backend.FAILURES.get(denied, 0) >= puts + 2
        assert stray.lookup(tokens) == 0
        assert lmcache_backend.FAILURES.get(("lookup", "OC_ERR_ACCESS_DENIED"), 0) >= 1
    finally:
        harness.destroy_engine("stray")
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as admin:
        assert admin.list_keys() == admin.list_keys("fleet/")


def test_a_plugin_whose_key_cannot_work_says_so_at_every_call(stack: Stack, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials, a key the gateway does not know, or a wrong secret: LMCache would log one
    line and run with no remote tier, every call a silent miss. The plugin serves every call as a
    miss that is counted (OC_ERR_CLIENT_USAGE) and logged as an error saying what is wrong."""
    tokens = torch.arange(3000, 3000 + 256)
    for key, secret, why in (("", "", "access_key_id is required"), ("no-such-key", "whatever-secret", "refuses the key pair"), (CLIENT_KEY, "not-the-secret", "refuses the key pair")):
        monkeypatch.delenv("OBJECTCACHE_ACCESS_KEY", raising=False)
        monkeypatch.delenv("OBJECTCACHE_SECRET_KEY", raising=False)
        engine = harness.lmcache_engine("unusable", layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.bfloat16, **harness.plugin_config(stack.gateway_url, bucket, key, secret))
        try:
            remote = engine.storage_manager.storage_backends["RemoteBackend-objectcache"]
            assert why in repr(remote.connection.getWrappedConnector())
            before = lmcache_backend.FAILURES.get(("lookup", "OC_ERR_CLIENT_USAGE"), 0)
            for _ in range(3):
                assert engine.lookup(tokens) == 0
            assert lmcache_backend.FAILURES.get(("lookup", "OC_ERR_CLIENT_USAGE"), 0) >= before + 3
        finally:
            harness.destroy_engine("unusable")


def test_a_refusing_gateway_is_a_miss_at_once_never_a_held_engine() -> None:
    """A gateway answering every request 503 with Retry-After: 30: a lookup, a retrieval and a
    layerwise store each give up at once (a miss), instead of waiting out the Retry-After."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Busy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b"<Error><Code>SlowDown</Code><Message>busy</Message></Error>"
            self.send_response(503)
            for name, value in (("Retry-After", "30"), ("x-objectcache-error-code", "OC_ERR_ADMISSION_LIMIT"), ("x-objectcache-retryable", "true"), ("Content-Length", str(len(body)))):
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_HEAD = _any  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tokens = torch.arange(7000, 7000 + 512)
    kv = torch.randn(2, L, 512, KV_HEADS * HEAD_DIM).to(torch.bfloat16)
    busy = harness.lmcache_engine("busy", layers=L, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype=torch.bfloat16, use_layerwise=True, **harness.plugin_config(f"http://127.0.0.1:{server.server_address[1]}", "b", CLIENT_KEY, CLIENT_SECRET))
    try:
        started = time.monotonic()
        assert busy.lookup(tokens) == 0
        assert time.monotonic() - started < 5
        # The layerwise store is on the forward pass: each layer's call returns at once, and
        # each chunk's put, assembled from its layers, is refused at once (no Retry-After wait).
        puts = lmcache_backend.FAILURES.get(("put", "OC_ERR_ADMISSION_LIMIT"), 0)
        started = time.monotonic()
        harness.store_layerwise(busy, tokens, kv)
        # Both chunks' puts must have ended before the engine is destroyed (it frees their buffers).
        while lmcache_backend.FAILURES.get(("put", "OC_ERR_ADMISSION_LIMIT"), 0) < puts + 2 and time.monotonic() - started < 30:
            time.sleep(0.05)
        assert lmcache_backend.FAILURES.get(("put", "OC_ERR_ADMISSION_LIMIT"), 0) == puts + 2
        assert time.monotonic() - started < 5
        assert lmcache_backend.FAILURES.get(("lookup", "OC_ERR_ADMISSION_LIMIT"), 0) >= 1
    finally:
        harness.destroy_engine("busy")
        server.shutdown()


def test_settings_are_checked_with_clear_messages() -> None:
    with pytest.raises(ValueError, match=r"remote_storage_plugin\.objectcache\.bucket is required"):
        lmcache_backend.plugin_settings({"remote_storage_plugin.objectcache.endpoint": "http://x"}, "objectcache")
    with pytest.raises(ValueError, match="unknown setting"):
        lmcache_backend.plugin_settings({"remote_storage_plugin.objectcache.bukket": "x"}, "objectcache")
    with pytest.raises(ValueError, match="mode must be"):
        lmcache_backend.plugin_settings({"remote_storage_plugin.objectcache.endpoint": "http://x", "remote_storage_plugin.objectcache.bucket": "b", "remote_storage_plugin.objectcache.access_key_id": "k", "remote_storage_plugin.objectcache.secret_access_key": "s", "remote_storage_plugin.objectcache.mode": "fast"}, "objectcache")
    settings = lmcache_backend.plugin_settings({"remote_storage_plugin.objectcache.endpoint": "http://x", "remote_storage_plugin.objectcache.bucket": "b", "remote_storage_plugin.objectcache.access_key_id": "k", "remote_storage_plugin.objectcache.secret_access_key": "s"}, "objectcache")
    assert settings["mode"] == "auto" and settings["key_prefix"] == "" and settings["region"] == "us-east-1"


def test_lmcache_layerwise_mode_is_served_by_one_stream_and_shares_the_chunk_objects(stack: Stack, bucket: str) -> None:
    """LMCache's ``use_layerwise: true`` (what vLLM's connector drives layer by layer): the
    per-layer puts become the same chunk objects, and the per-layer gets of a prefix are answered
    from ONE layerwise GET, each layer as its frame lands."""
    tokens = torch.arange(20000, 20000 + 512)
    kv = torch.randn(2, L, 512, KV_HEADS * HEAD_DIM, generator=torch.Generator().manual_seed(11)).to(torch.bfloat16)
    writer = engine_with_plugin("layerwise-writer", stack, bucket, torch.bfloat16, use_layerwise=True)
    try:
        harness.store_layerwise(writer, tokens, kv)
        deadline = time.monotonic() + 60
        with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
            while len(c.list_keys()) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            names = sorted(c.list_keys())
        assert len(names) == 2 and all(n.endswith("@bfloat16") for n in names)  # chunk objects, not per-layer ones
    finally:
        harness.destroy_engine("layerwise-writer")

    reader = engine_with_plugin("layerwise-reader", stack, bucket, torch.bfloat16, use_layerwise=True)
    try:
        landed: list = []
        reader.gpu_connector.on_layer_loaded = landed.append
        out = torch.zeros_like(kv)
        before = descriptor_gets(stack)
        mask = harness.retrieve_layerwise(reader, tokens, out)
        assert int(mask.sum()) == 512
        assert landed == list(range(L))
        assert descriptor_gets(stack) - before == 1  # 30 per-layer requests, one stream
        assert torch.equal(out, kv)
    finally:
        harness.destroy_engine("layerwise-reader")

    # The objects are the ordinary chunk objects: a non-layerwise engine reads them too.
    plain = engine_with_plugin("layerwise-plain", stack, bucket, torch.bfloat16)
    try:
        out = torch.zeros_like(kv)
        assert int(plain.retrieve(tokens, kvcaches=out).sum()) == 512
        assert torch.equal(out, kv)
    finally:
        harness.destroy_engine("layerwise-plain")


def test_the_documented_lmcache_yaml_works_as_written(stack: Stack, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The YAML of docs/engines.md's "LMCache, in process", loaded by LMCache's own config reader
    with only the endpoint and bucket changed (credentials from the environment, as the page
    says): a fresh engine retrieves what another stored."""
    import re

    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata

    yaml_text = block("LMCache, in process (vLLM's LMCacheConnectorV1)", "yaml")
    assert "ObjectCacheAdapter" in yaml_text and "local_cpu: true" in yaml_text
    yaml_text = re.sub(r"(endpoint: ).*", rf"\g<1>{stack.gateway_url}", yaml_text)
    yaml_text = re.sub(r"(bucket: ).*", rf"\g<1>{bucket}", yaml_text)
    yaml_text = re.sub(r"(tenant: ).*", rf"\g<1>{CLIENT_KEY}", yaml_text)
    (tmp_path / "lmcache.yaml").write_text(yaml_text)
    monkeypatch.setenv("OBJECTCACHE_ACCESS_KEY", CLIENT_KEY)
    monkeypatch.setenv("OBJECTCACHE_SECRET_KEY", CLIENT_SECRET)
    config = LMCacheEngineConfig.from_file(str(tmp_path / "lmcache.yaml"))

    def engine(name: str) -> Any:
        metadata = LMCacheMetadata(model_name=harness.MODEL_NAME, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=(L, 2, 256, KV_HEADS, HEAD_DIM))
        built = LMCacheEngineBuilder.get_or_create(name, config, metadata, harness._connector_class()(L, KV_HEADS * HEAD_DIM), lambda t, r: None, lambda o, r: o)
        built.post_init()
        return built

    tokens = torch.arange(30000, 30000 + 512)
    kv = torch.randn(2, L, 512, KV_HEADS * HEAD_DIM).to(torch.bfloat16)
    writer = engine("readme-writer")
    try:
        writer.store(tokens, kvcaches=kv)
        # local_cpu: true answers lookups from CPU memory at once: wait for the objects themselves.
        with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
            deadline = time.monotonic() + 60
            while len(c.list_keys()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(c.list_keys()) == 2
    finally:
        harness.destroy_engine("readme-writer")
    reader = engine("readme-reader")
    try:
        out = torch.zeros_like(kv)
        assert reader.lookup(tokens) == 512
        assert int(reader.retrieve(tokens, kvcaches=out).sum()) == 512
        assert torch.equal(out, kv)
    finally:
        harness.destroy_engine("readme-reader")
