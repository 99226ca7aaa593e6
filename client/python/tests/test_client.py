"""The Python client against the real gateway and MinIO: byte-exact layers in the caller's
buffer, every transport and mode, per-layer callbacks in order, the stable error codes, early
exit, and the SlowDown retry."""

import base64
import http.client
import itertools
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, free_port, layer_major, send_answer, serve_http, start_stack, synthetic_chunk, uid

from objectcache import Config, ObjectCacheClient, ObjectCacheError, chunk_keys
from objectcache._contract import DESCRIPTOR_HEADER
from objectcache.layouts import LAYER_CRC_META

_PROMPTS = itertools.count(1)


def seed(client: ObjectCacheClient, chunks: int, layers: int, layer_bytes: int, layout: str = "KV_L2TD", tokens: int = 16) -> Tuple[List[str], List[bytes]]:
    start = next(_PROMPTS) * 100_000
    prompt = list(range(start, start + chunks * tokens))
    keys = chunk_keys(prompt, "test/model", "bfloat16", tokens, layers, layer_bytes, layout)
    canonical = [synthetic_chunk(len(keys[0]), c, layers * layer_bytes) for c in range(chunks)]
    stored = [to_stored(c, layout, layers, layer_bytes) for c in canonical]
    client.put_chunks(keys, stored, layout=(layout, layers, layer_bytes))
    return keys, canonical


def to_stored(canonical: bytes, layout: str, layers: int, layer_bytes: int) -> bytes:
    if layout != "KV_2LTD":
        return canonical
    half = layer_bytes // 2
    k = b"".join(canonical[l * layer_bytes : l * layer_bytes + half] for l in range(layers))
    v = b"".join(canonical[l * layer_bytes + half : (l + 1) * layer_bytes] for l in range(layers))
    return k + v


def test_fetches_layer_by_layer_into_a_bytearray_byte_exact(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=6, layers=8, layer_bytes=4096)
    assert client.lookup(keys) == 6
    assert client.lookup(keys, layers=8, layer_bytes=4096) == 6
    assert client.lookup(keys, layers=8, layer_bytes=2048) == 0
    seen: List[int] = []
    expected = layer_major(chunks, 4096, 0, 8)
    views: List[bytes] = []
    result = client.fetch(ObjectCacheClient.descriptor(keys, layers=8, chunk_tokens=16, layer_bytes=4096, mode="layerwise"), on_layer_ready=lambda l, v: (seen.append(l), views.append(bytes(v))))
    assert seen == list(range(8))
    assert bytes(result.target) == expected
    assert views[3] == expected[3 * 6 * 4096 : 4 * 6 * 4096]
    assert result.transport == "get"
    assert result.summary["mode"] == "layerwise" and result.summary["verified"] is True
    assert result.summary["bytes"] == 6 * 8 * 4096
    assert [l for l, _ in result.timeline] == list(range(8))
    # The default mode leaves it to the gateway: 192 KiB is below its threshold, so chunk by chunk.
    auto = client.fetch(ObjectCacheClient.descriptor(keys, layers=8, chunk_tokens=16, layer_bytes=4096))
    assert auto.summary["mode"] == "chunkwise" and bytes(auto.target) == expected


def test_numpy_target_with_a_layer_stride_and_kv_2ltd_chunks(client: ObjectCacheClient) -> None:
    layers, tokens, kv_heads, head_dim = 4, 16, 2, 8
    layer_bytes = 2 * tokens * kv_heads * head_dim * 2  # K and V, bfloat16
    keys, chunks = seed(client, chunks=3, layers=layers, layer_bytes=layer_bytes, layout="KV_2LTD", tokens=tokens)
    stride = 3 * layer_bytes + 512  # padded rows, as an engine's paged buffer might be
    target = np.full(layers * stride, 0xEE, dtype=np.uint8)
    result = client.fetch(ObjectCacheClient.descriptor(keys, layers=layers, chunk_tokens=tokens, layer_bytes=layer_bytes, layout="KV_2LTD"), target=target, layer_stride=stride)
    assert result.target is target
    for l in range(layers):
        row = target[l * stride : l * stride + 3 * layer_bytes].tobytes()
        assert row == layer_major(chunks, layer_bytes, l, l + 1)
        if l < layers - 1:
            assert (target[l * stride + 3 * layer_bytes : (l + 1) * stride] == 0xEE).all()


def test_chunkwise_and_a_layer_range(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=4, layers=6, layer_bytes=1024)
    base = ObjectCacheClient.descriptor(keys, layers=6, chunk_tokens=16, layer_bytes=1024)
    chunkwise = client.fetch({**base, "mode": "chunkwise"})
    assert chunkwise.summary["mode"] == "chunkwise"
    assert bytes(chunkwise.target) == layer_major(chunks, 1024, 0, 6)
    ranged = client.fetch({**base, "layerRange": [2, 5]})
    assert bytes(ranged.target) == layer_major(chunks, 1024, 2, 5)
    assert [l for l, _ in ranged.timeline] == [2, 3, 4]


def test_a_large_descriptor_goes_as_a_post_body(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=160, layers=2, layer_bytes=256)
    result = client.fetch(ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=256))
    assert result.transport == "post"
    assert bytes(result.target) == layer_major(chunks, 256, 0, 2)
    again = client.fetch(ObjectCacheClient.descriptor(keys[:3], layers=2, chunk_tokens=16, layer_bytes=256), transport="post")
    assert again.transport == "post" and bytes(again.target) == layer_major(chunks[:3], 256, 0, 2)


def test_the_iterator_yields_ready_layers_and_leaving_early_releases_the_stream(client: ObjectCacheClient, stack: Stack) -> None:
    keys, chunks = seed(client, chunks=4, layers=32, layer_bytes=256 * 1024)
    descriptor = ObjectCacheClient.descriptor(keys, layers=32, chunk_tokens=16, layer_bytes=256 * 1024, tenant="py-leaves-early")
    for layer, view in client.layers(descriptor):
        assert layer == 0 and bytes(view) == layer_major(chunks, 256 * 1024, 0, 1)
        break
    deadline = time.monotonic() + 10
    while stack.metric("objectcache_layerwise_active_requests") > 0:
        assert time.monotonic() < deadline, "the abandoned stream is still served"
        time.sleep(0.05)
    assert stack.metric('objectcache_delivered_bytes_total{tenant="py-leaves-early"}') < 4 * 32 * 256 * 1024
    layers = [l for l, _ in client.layers({**descriptor, "layerRange": [0, 2]})]
    assert layers == [0, 1]


def test_a_key_that_cannot_be_a_header_value_is_not_recorded_as_the_next_chunks_predecessor(client: ObjectCacheClient) -> None:
    # A chain records each chunk's predecessor in a header; one with a line break cannot
    # be a header value: the chunks are stored all the same, the record left out (as the
    # TypeScript client does, schemas/chain.ts recordableAfter).
    prefix = uid("after")
    keys = [f"{prefix}/line\nbreak", f"{prefix}/next"]
    client.put_chunks(keys, [b"a" * 64, b"b" * 64])
    assert client.get_object(keys[0]) == b"a" * 64 and client.get_object(keys[1]) == b"b" * 64


def test_a_store_answer_relayed_as_it_is_gets_the_code_it_stands_for(client: ObjectCacheClient) -> None:
    # The store's own 404 (a passthrough in front of MinIO carries no code of ours) and the
    # embedded store's alike: the stable code, catchable as botocore's ClientError.
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as missing:
        client.get_object("no-such-object-here")
    assert isinstance(missing.value, ObjectCacheError)
    assert missing.value.code == "OC_ERR_STORE_NO_SUCH_KEY" and missing.value.status == 404
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"


def test_errors_carry_the_stable_codes(client: ObjectCacheClient) -> None:
    keys, _ = seed(client, chunks=2, layers=2, layer_bytes=512)
    descriptor = ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=512)
    with pytest.raises(ObjectCacheError) as missing:
        client.fetch({**descriptor, "keys": [keys[0], keys[1] + "-absent"]})
    assert missing.value.code.startswith("OC_ERR_") and missing.value.status == 404
    # As the gateway answered: final, with the request id its log line names (as botocore's ClientError).
    assert missing.value.retryable is False
    assert missing.value.request_id and missing.value.request_id in str(missing.value)
    assert missing.value.response["ResponseMetadata"]["RequestId"] == missing.value.request_id
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ObjectCacheError) as wrong_size:
        client.fetch({**descriptor, "layerBytes": 256})
    assert wrong_size.value.code == "OC_ERR_CHUNK_SIZE"
    with pytest.raises(ObjectCacheError) as invalid:
        client.fetch({**descriptor, "layers": 0}, transport="post")
    assert invalid.value.code.startswith("OC_ERR_DESCRIPTOR") and invalid.value.status == 400
    with pytest.raises(ObjectCacheError) as small:
        client.fetch(descriptor, target=bytearray(100))
    assert small.value.code == "OC_ERR_CLIENT_TARGET"
    with pytest.raises(ObjectCacheError) as readonly:
        client.fetch(descriptor, target=bytes(4096))
    assert readonly.value.code == "OC_ERR_CLIENT_USAGE"


def test_a_corrupt_chunk_ends_the_stream_with_its_code(client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=2, layers=2, layer_bytes=512)
    # Overwrite chunk 1 with other bytes but the old checksums: its bytes must never be delivered.
    client._call("PUT", client._object_path(keys[1]), synthetic_chunk(99, 1, 1024), {f"x-amz-meta-{LAYER_CRC_META}": _crc_meta(chunks[1])})
    # By default the client checks the slices (it asks the gateway to leave them to it): its frame check fails.
    with pytest.raises(ObjectCacheError) as unchecked:
        client.fetch(ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=512))
    assert unchecked.value.code == "OC_ERR_CLIENT_CRC" and unchecked.value.retryable is False
    # A descriptor that asks the gateway to check: the gateway refuses the chunk, naming it.
    with pytest.raises(ObjectCacheError) as corrupt:
        client.fetch(ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=512, sliceChecks="gateway"))
    assert corrupt.value.code == "OC_ERR_CHUNK_CORRUPT" and keys[1] in str(corrupt.value)
    assert corrupt.value.retryable is False and corrupt.value.request_id


def test_a_gateway_older_than_slice_checks_is_asked_again_without_them(stack: Stack, client: ObjectCacheClient) -> None:
    keys, chunks = seed(client, chunks=2, layers=2, layer_bytes=512)
    upstream = urllib.parse.urlsplit(stack.gateway_url)
    asked: List[object] = []
    refusing: List[str] = []  # when set, every descriptor is refused with this problem

    def older(h: BaseHTTPRequestHandler) -> None:
        """What a gateway before the field answers a descriptor that names it (schemas/descriptor.ts); the rest, relayed."""
        header = h.headers.get(DESCRIPTOR_HEADER)
        descriptor = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))) if header else {}
        asked.append(descriptor.get("sliceChecks"))
        if "sliceChecks" in descriptor or refusing:
            problem = refusing[0] if refusing else "sliceChecks is not a descriptor field"
            body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidArgument</Code><Message>Invalid descriptor: {problem}</Message></Error>'.encode()
            status, headers = 400, [("Content-Type", "application/xml"), ("x-objectcache-error-code", "OC_ERR_DESCRIPTOR_INVALID"), ("x-objectcache-retryable", "false")]
        else:
            relay = http.client.HTTPConnection(upstream.hostname or "127.0.0.1", upstream.port, timeout=30)
            relay.request(h.command, h.path, headers=dict(h.headers.items()))  # Host as it came: the signature covers it
            answer = relay.getresponse()
            body, status = answer.read(), answer.status
            headers = [(k, v) for k, v in answer.getheaders() if k.lower() not in ("content-length", "transfer-encoding", "connection", "keep-alive")]
            relay.close()
        send_answer(h, status, body, headers)

    server, url = serve_http(older)
    try:
        with ObjectCacheClient(url, client.bucket, (CLIENT_KEY, CLIENT_SECRET), config=Config(retries=0)) as older:
            descriptor = ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=512)
            for _ in range(2):
                result = older.fetch(descriptor)
                assert bytes(result.target) == layer_major(chunks, 512, 0, 2)
            assert asked == ["client", None, None]
        # Another refusal of the descriptor is the caller's, and is not asked again.
        refusing.append("target.sliceChecks is not a descriptor field")
        with ObjectCacheClient(url, client.bucket, (CLIENT_KEY, CLIENT_SECRET), config=Config(retries=0)) as fresh:
            with pytest.raises(ObjectCacheError) as refused:
                fresh.fetch(descriptor)
            assert refused.value.code == "OC_ERR_DESCRIPTOR_INVALID" and asked[3:] == ["client"]
    finally:
        server.shutdown()


def _crc_meta(canonical: bytes) -> str:
    from objectcache.layouts import encode_layer_crcs, layer_crcs

    return encode_layer_crcs(layer_crcs(canonical, 2, 512))


def test_a_busy_gateway_is_retried_after_retry_after() -> None:
    # One layerwise GET at a time, paced at 4 MB/s: the second request meets 503 SlowDown.
    busy = start_stack(["--max-layerwise-requests", "1", "--cap", "4MB/s", "--threshold", "0"])
    try:
        with ObjectCacheClient(busy.gateway_url, uid("busy"), (CLIENT_KEY, CLIENT_SECRET), config=Config(retries=20)) as client:
            client.ensure_bucket()
            keys, chunks = seed(client, chunks=4, layers=4, layer_bytes=256 * 1024)  # 4 MiB: about a second
            descriptor = ObjectCacheClient.descriptor(keys, layers=4, chunk_tokens=16, layer_bytes=256 * 1024)
            first_started = threading.Event()
            results: List[bytes] = []
            slow = threading.Thread(target=lambda: results.append(bytes(client.fetch(descriptor, on_layer_ready=lambda l, v: first_started.set()).target)))
            slow.start()
            assert first_started.wait(10)
            refused_before = busy.metric('objectcache_http_requests_total{operation="LayerwiseGet",status="503"}')
            second = client.fetch(descriptor)
            slow.join(30)
            assert busy.metric('objectcache_http_requests_total{operation="LayerwiseGet",status="503"}') > refused_before
            assert bytes(second.target) == layer_major(chunks, 256 * 1024, 0, 4) == results[0]
    finally:
        busy.stop()


def test_the_readme_example_loads_a_numpy_kv_buffer_with_overlap(stack: Stack) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import load_kv

    out = load_kv.main(stack.gateway_url, uid("example"), (CLIENT_KEY, CLIENT_SECRET))
    assert out["tokens"] == 32 * 64 and out["shape"] == (16, 32, 2, 64, 8, 64)
    assert out["summary"]["mode"] == "layerwise" and out["summary"]["verified"] is True
    # Layer 0 was computed on before the whole prefix had arrived.
    assert out["first_compute_s"] < out["last_layer_ready_s"]


def test_a_client_with_several_endpoints_moves_past_one_that_is_down(stack: Stack) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with ObjectCacheClient([down, stack.gateway_url], uid("failover"), (CLIENT_KEY, CLIENT_SECRET)) as client:
        client.ensure_bucket()
        keys, chunks = seed(client, chunks=2, layers=2, layer_bytes=1024)
        assert client.endpoint == stack.gateway_url
        assert bytes(client.fetch(ObjectCacheClient.descriptor(keys, layers=2, chunk_tokens=16, layer_bytes=1024)).target) == layer_major(chunks, 1024, 0, 2)
    with ObjectCacheClient([down], uid("down"), (CLIENT_KEY, CLIENT_SECRET)) as alone:
        with pytest.raises(ObjectCacheError) as unreachable:
            alone.ensure_bucket()
        assert unreachable.value.code == "OC_ERR_BACKEND_UNAVAILABLE"


@pytest.mark.parametrize("mode", ["layerwise", "chunkwise"])
def test_fetch_into_lands_each_slice_in_the_chunks_own_kv_2ltd_buffer(client: ObjectCacheClient, mode: str) -> None:
    layers, tokens, layer_bytes = 5, 16, 2048
    keys, chunks = seed(client, chunks=3, layers=layers, layer_bytes=layer_bytes, layout="KV_2LTD", tokens=tokens)
    # One buffer per chunk in its stored layout (how LMCache allocates its MemoryObjs).
    buffers = [bytearray(layers * layer_bytes) for _ in keys]
    half = layer_bytes // 2

    def place(layer: int, chunk: int) -> Tuple[memoryview, memoryview]:
        view = memoryview(buffers[chunk])
        return view[layer * half : (layer + 1) * half], view[(layers + layer) * half : (layers + layer + 1) * half]

    ready: List[int] = []
    result = client.fetch_into(ObjectCacheClient.descriptor(keys, layers=layers, chunk_tokens=tokens, layer_bytes=layer_bytes, layout="KV_2LTD", mode=mode), place, ready.append)
    assert result.summary["mode"] == mode
    assert ready == list(range(layers))
    for c in range(3):
        assert bytes(buffers[c]) == to_stored(chunks[c], "KV_2LTD", layers, layer_bytes)
    with pytest.raises(ObjectCacheError) as wrong:
        client.fetch_into(ObjectCacheClient.descriptor(keys, layers=layers, chunk_tokens=tokens, layer_bytes=layer_bytes, layout="KV_2LTD"), lambda layer, chunk: (memoryview(bytearray(half)),))
    assert wrong.value.code == "OC_ERR_CLIENT_TARGET"


def test_put_list_delete_and_missing_chunk_details(client: ObjectCacheClient) -> None:
    client.head_bucket()
    client.put_chunk("kv/a/1", b"x" * 64, layout=("KV_L2TD", 2, 32))
    client.put_chunk("kv/a/2", b"y" * 64)
    client.put_chunk("kv/b/1", b"z" * 64)
    assert client.list_keys("kv/a/") == ["kv/a/1", "kv/a/2"]
    assert len(client.list_keys()) == 3
    with pytest.raises(ObjectCacheError) as missing:
        client.fetch(ObjectCacheClient.descriptor(["kv/a/1", "kv/a/gone", "kv/a/2"], layers=2, chunk_tokens=16, layer_bytes=32))
    assert missing.value.code == "OC_ERR_CHUNK_MISSING"
    assert missing.value.status == 404
    client.delete("kv/a/1")
    client.delete("kv/a/1")  # S3: deleting what is gone succeeds
    assert client.list_keys("kv/a/") == ["kv/a/2"]


def test_botocore_virtual_hosted_style_reaches_the_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3/botocore with ``addressing_style: virtual`` against a gateway given ``--domain``
    (names resolved in this process only: a client-side resolver for *.oc.test)."""
    import socket

    import botocore.session
    from botocore.config import Config

    real = socket.getaddrinfo

    def resolve(host: str, *args: object, **kwargs: object) -> object:
        return real("127.0.0.1" if str(host).endswith(".oc.test") or host == "oc.test" else host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    vhost = start_stack(["--domain", "oc.test"], backend="local")
    try:
        port = vhost.gateway_url.rsplit(":", 1)[1]
        s3 = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=f"http://oc.test:{port}",
            region_name="us-east-1",
            aws_access_key_id=CLIENT_KEY,
            aws_secret_access_key=CLIENT_SECRET,
            config=Config(s3={"addressing_style": "virtual"}, retries={"max_attempts": 1}),
        )
        sent: List[str] = []
        s3.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.url))
        s3.create_bucket(Bucket="vhost-bucket")
        s3.put_object(Bucket="vhost-bucket", Key="dir/chunk 1", Body=b"kv" * 1000)
        assert s3.get_object(Bucket="vhost-bucket", Key="dir/chunk 1", Range="bytes=0-3")["Body"].read() == b"kvkv"
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="vhost-bucket")["Contents"]] == ["dir/chunk 1"]
        assert all(url.startswith(f"http://vhost-bucket.oc.test:{port}/") for url in sent), sent
        # The same object path-style, through the ObjectCache client.
        with ObjectCacheClient(vhost.gateway_url, "vhost-bucket", (CLIENT_KEY, CLIENT_SECRET)) as oc:
            assert oc.list_keys() == ["dir/chunk 1"]
    finally:
        vhost.stop()


def test_says_how_many_chunks_came_from_a_packed_segment() -> None:
    packing = start_stack(["--segments", "on", "--segment-after-reads", "1", "--segment-min-bytes", "0"], backend="local")
    try:
        with ObjectCacheClient(packing.gateway_url, uid("pyseg"), (CLIENT_KEY, CLIENT_SECRET)) as c:
            c.ensure_bucket()
            keys, chunks = seed(c, chunks=5, layers=4, layer_bytes=8192)
            descriptor = ObjectCacheClient.descriptor(keys, layers=4, chunk_tokens=16, layer_bytes=8192, mode="layerwise")
            first = c.fetch(descriptor)  # read from the chunks, and packed
            assert first.segment_chunks == 0
            deadline = time.monotonic() + 30
            while packing.metric('objectcache_segment_events_total{event="packed"}') < 1:
                assert time.monotonic() < deadline, "the prefix was not packed"
                time.sleep(0.1)
            for transport in ("get", "post"):
                again = c.fetch(descriptor, transport=transport)
                assert again.segment_chunks == 5 and bytes(again.target) == layer_major(chunks, 8192, 0, 4)
            shorter = c.fetch(ObjectCacheClient.descriptor(keys[:3], layers=4, chunk_tokens=16, layer_bytes=8192, mode="layerwise"))
            assert shorter.segment_chunks == 3 and bytes(shorter.target) == layer_major(chunks[:3], 8192, 0, 4)
    finally:
        packing.stop()


def test_tokens_without_room_in_the_metadata_are_left_out_and_an_after_that_cannot_be_recorded_is_refused(stack: Stack, client: ObjectCacheClient) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=stack.gateway_url, aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET, region_name="us-east-1")
    # 250 layers' CRC-32Cs take 1,334 characters of S3's 2 KB: 16 small tokens fit beside them, 300 large ones (1,200 characters) do not.
    layers, layer_bytes = 250, 64
    body = bytes(layers * layer_bytes)
    client.put_chunk("fits", body, layout=("KV_L2TD", layers, layer_bytes), tokens=list(range(16)), model="test/model")
    client.put_chunk("too-many", body, layout=("KV_L2TD", layers, layer_bytes), tokens=[2_000_000] * 300, model="test/model", after="fits")
    fits = s3.head_object(Bucket=client.bucket, Key="fits")["Metadata"]
    too_many = s3.head_object(Bucket=client.bucket, Key="too-many")["Metadata"]
    assert "objectcache-tokens" in fits and "oc-layer-crc32c" in fits
    assert "objectcache-tokens" not in too_many and too_many["objectcache-after"] == "fits" and "oc-layer-crc32c" in too_many

    for after in ("a\nb", "k" * 513):
        with pytest.raises(ObjectCacheError) as refused:
            client.put_chunk("refused", body, after=after)
        assert refused.value.code == "OC_ERR_CLIENT_USAGE"
    with pytest.raises(ObjectCacheError) as refused:
        client.put_chunks(["a", "b"], [body, body], after="x" * 600)
    assert refused.value.code == "OC_ERR_CLIENT_USAGE"
    # Refused before any PUT: nothing of the batch is stored.
    assert not {"refused", "a", "b"} & set(client.list_keys())
