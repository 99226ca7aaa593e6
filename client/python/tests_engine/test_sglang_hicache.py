"""SGLang 0.5.23's HiCache L3 storage served by ``objectcache.sglang_backend``, on both backends,
loaded as SGLang loads it: ``StorageBackendFactory.create_backend("dynamic", ...)`` from the extra
config alone, then ``register_mem_pool_host`` with the host pool, as the cache controller's
``attach_storage_backend`` does. The host pools are SGLang's own (``MHATokenToKVPoolHost`` on
CPU, in each host layout), holding SmolLM2-135M's real KV of a 512-token prompt in 64-token pages
named by SGLang's own page hashes. Pages come back bit-identical, a batch costs one lookup and one
descriptor GET, and a missing, foreign or unreachable page is a failure value, never wrong bytes.

The comparison test runs SGLang's own S3 backend (``seaweedfs``: boto3, one object per page)
on the same pages, through the gateway and (on the s3 stack) against MinIO directly."""
import json
import os
import time
from typing import Any, Dict, List, Tuple

import pytest
import torch
from engine_docs import filled
from stack import CLIENT_KEY, CLIENT_SECRET, MINIO_KEY, MINIO_SECRET, Stack, free_port, uid
from test_vllm_obj_tier import requests_by

from objectcache import ObjectCacheClient
from objectcache.hf_cache import KVLayout, kv_from_cache

sglang_storage = pytest.importorskip("sglang.srt.mem_cache.storage")
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402

PAGE = 64
PAGES = 8
MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]
#: What a host pool holds before a load: pages a failed load leaves alone keep it.
SENTINEL = 0x5A


@pytest.fixture(scope="module")
def prompt_kv(model: Any, tokenizer: Any) -> Tuple[List[int], torch.Tensor]:
    """The prompt's tokens and its KV, ``[K/V, layer, token, heads x dim]`` in bfloat16."""
    from test_model import PREFIX_TOKENS, prompts

    prefix, _, _ = prompts(tokenizer)
    with torch.no_grad():
        out = model(input_ids=prefix, use_cache=True)
    kv = kv_from_cache(out.past_key_values, KVLayout.of(model, torch.bfloat16), PREFIX_TOKENS)
    assert kv.shape[2] == PAGE * PAGES
    return prefix[0].tolist(), kv


def page_hashes(tokens: List[int]) -> List[str]:
    """SGLang's own names for the prompt's pages (the chained page hashes HiCache stores under)."""
    from sglang.srt.mem_cache.utils import get_hash_str

    hashes = get_hash_str(tokens, None, page_size=PAGE)
    assert isinstance(hashes, list) and len(hashes) == PAGES
    return hashes


def host_pool(layout: str, model: Any) -> Any:
    """An SGLang host pool for SmolLM2's KV (bfloat16) on CPU, as HiCache builds it from the
    device pool's buffer info."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    config = model.config
    layers, heads, dim = config.num_hidden_layers, config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    device = MHATokenToKVPool(4 * PAGE * PAGES, PAGE, torch.bfloat16, heads, dim, layers, "cpu", False, start_layer=0, end_layer=layers)
    pool = MHATokenToKVPoolHost(device.get_device_pool_infos()[0].buffer_info, 1.0, 0, PAGE, layout, pin_memory=False, device="cpu", device_capacity_tokens=device.size, start_layer=0, end_layer=layers)
    pool.kv_buffer.view(torch.uint8).fill_(SENTINEL)
    return pool


def token_view(pool: Any, start: int) -> torch.Tensor:
    """The page at host index ``start`` as ``[K/V, layer, token, heads, dim]`` (a view into the pool)."""
    kv, T = pool.kv_buffer, PAGE
    if pool.layout == "layer_first":  # (2, L, size, H, D)
        return kv[:, :, start:start + T]
    if pool.layout == "page_first":  # (2, size, L, H, D)
        return kv[:, start:start + T].permute(0, 2, 1, 3, 4)
    if pool.layout == "page_first_direct":  # (2, pages, L, T, H, D)
        return kv[:, start // T]
    if pool.layout == "page_head":  # (2, pages, H, T, L, D)
        return kv[:, start // T].permute(0, 3, 2, 1, 4)
    raise AssertionError(pool.layout)


def starts_of(indices: torch.Tensor) -> List[int]:
    return [int(i) for i in indices[::PAGE].tolist()]


def fill(pool: Any, indices: torch.Tensor, kv: torch.Tensor) -> None:
    """Puts the prompt's KV in the pool's pages at ``indices`` (what HiCache's device-to-host
    backup does before it writes pages to storage)."""
    for page, start in enumerate(starts_of(indices)):
        view = token_view(pool, start)
        view.copy_(kv[:, :, page * PAGE:(page + 1) * PAGE].reshape(view.shape))


def page_equal(pool: Any, start: int, kv: torch.Tensor, page: int) -> bool:
    view = token_view(pool, start)
    want = kv[:, :, page * PAGE:(page + 1) * PAGE].reshape(view.shape)
    return torch.equal(view.contiguous().view(torch.int16), want.contiguous().view(torch.int16))


def untouched(pool: Any, start: int) -> bool:
    return bool((token_view(pool, start).contiguous().view(torch.uint8) == SENTINEL).all())


def storage_config(is_page_first: bool, extra: Dict[str, Any]) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
        enable_storage_metrics=False, is_page_first_layout=is_page_first, model_name=MODEL_NAME, extra_config=extra,
    )


def ours(stack: Stack, bucket: str, pool: Any, endpoint: str = "", **settings: Any) -> Any:
    """The backend as SGLang builds it from ``--hicache-storage-backend dynamic`` and
    docs/engines.md's extra configuration (``settings`` added or replaced)."""
    values = {"endpoint": endpoint or stack.gateway_url, "bucket": bucket}
    extra = {**json.loads(filled("SGLang HiCache", "json", values)), **settings}
    # The key pair from the environment, as docs/engines.md says (SGLang logs the extra config),
    # for this backend only: the rest of the session keeps its own environment.
    names = ("OBJECTCACHE_ACCESS_KEY", "OBJECTCACHE_SECRET_KEY")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(zip(names, (CLIENT_KEY, CLIENT_SECRET)))
    try:
        backend = sglang_storage.StorageBackendFactory.create_backend("dynamic", storage_config(pool.layout != "layer_first", extra), pool)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    backend.register_mem_pool_host(pool)
    return backend


def theirs(endpoint: str, bucket: str, credentials: Tuple[str, str], pool: Any) -> Any:
    """SGLang's own S3 backend (``--hicache-storage-backend seaweedfs``), one object per page."""
    extra = {"endpoint": endpoint, "bucket": bucket, "access_key": credentials[0], "secret_key": credentials[1], "prefix": "seaweedfs"}
    backend = sglang_storage.StorageBackendFactory.create_backend("seaweedfs", storage_config(pool.layout != "layer_first", extra), pool)
    backend.register_mem_pool_host(pool)
    return backend


class Requests:
    """The gateway's request counters (`operation status`) grown since the last ``take()``."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.before = requests_by(stack)

    def take(self) -> Dict[str, float]:
        after = requests_by(self.stack)
        grown = {name: after[name] - self.before.get(name, 0.0) for name in after if after[name] != self.before.get(name, 0.0)}
        self.before = after
        return grown


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hicache_pages_round_trip_bit_identical_in_one_lookup_and_one_get_per_batch(model: Any, prompt_kv: Tuple[List[int], torch.Tensor], stack: Stack, bucket: str, layout: str) -> None:
    tokens, kv = prompt_kv
    keys = page_hashes(tokens)
    writer_pool, reader_pool = host_pool(layout, model), host_pool(layout, model)
    written = writer_pool.alloc(PAGE * PAGES)
    reader_pool.alloc(PAGE)  # the reader's pages sit elsewhere in its pool than the writer's
    read = reader_pool.alloc(PAGE * PAGES)
    fill(writer_pool, written, kv)
    writer, reader = ours(stack, bucket, writer_pool), ours(stack, bucket, reader_pool)
    requests = Requests(stack)

    assert writer.batch_exists(keys) == 0
    assert requests.take() == {"PrefixLookup 200": 1}
    assert writer.batch_set_v1(keys, written) == [True] * PAGES
    assert requests.take() == {"PutObject 200": PAGES}
    assert reader.batch_exists(keys) == PAGES
    assert reader.exists(keys[-1])
    assert requests.take() == {"PrefixLookup 200": 2}

    assert reader.batch_get_v1(keys, read) == [True] * PAGES
    assert requests.take() == {"ChunkwiseGet 200": 1}
    for page, start in enumerate(starts_of(read)):
        assert page_equal(reader_pool, start, kv, page), f"page {page}"

    # The controller's older interface (no interface_v1): SGLang's flat pages, the same objects.
    flat = [reader_pool.get_dummy_flat_data_page() for _ in keys]
    got = reader.batch_get(keys, flat)
    assert requests.take() == {"ChunkwiseGet 200": 1}
    for page, start in enumerate(starts_of(written)):
        assert got[page] is flat[page]
        assert torch.equal(got[page].view(torch.int16), writer_pool.get_data_page(start, flat=True).view(torch.int16)), f"page {page}"
    writer.close()
    reader.close()


def test_a_missing_foreign_or_unreachable_page_is_a_failure_value_never_wrong_bytes(model: Any, prompt_kv: Tuple[List[int], torch.Tensor], stack: Stack, bucket: str) -> None:
    from objectcache.sglang_backend import FAILURES

    tokens, kv = prompt_kv
    keys = page_hashes(tokens)
    writer_pool = host_pool("layer_first", model)
    written = writer_pool.alloc(PAGE * PAGES)
    fill(writer_pool, written, kv)
    writer = ours(stack, bucket, writer_pool)
    # Page 3 is never stored.
    stored = [i for i in range(PAGES) if i != 3]
    assert writer.batch_set_v1([keys[i] for i in stored], torch.cat([written[i * PAGE:(i + 1) * PAGE] for i in stored])) == [True] * len(stored)

    reader_pool = host_pool("layer_first", model)
    read = reader_pool.alloc(PAGE * PAGES)
    reader = ours(stack, bucket, reader_pool)
    assert reader.batch_exists(keys) == 3
    assert not reader.exists(keys[3])
    assert reader.get(keys[3], reader_pool.get_dummy_flat_data_page()) is None
    assert reader.batch_get_v1(keys, read) == [True] * 3 + [False] * (PAGES - 3)
    starts = starts_of(read)
    assert all(page_equal(reader_pool, starts[p], kv, p) for p in range(3))
    assert all(untouched(reader_pool, starts[p]) for p in range(3, PAGES))

    # A foreign object under page 0's name (half a page): not found, not loaded, counted.
    with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as client:
        client.put_chunk(reader.object_name(keys[0]), b"\x01" * (reader.form.page_bytes // 2))
    reader_pool.kv_buffer.view(torch.uint8).fill_(SENTINEL)
    size_failures = FAILURES.get(("get", "OC_ERR_CHUNK_SIZE"), 0)
    assert reader.batch_exists(keys) == 0
    assert reader.batch_get_v1(keys[:3], read[:3 * PAGE]) == [False] * 3
    assert FAILURES.get(("get", "OC_ERR_CHUNK_SIZE"), 0) == size_failures + 1
    assert all(untouched(reader_pool, s) for s in starts[:3])

    # A gateway that cannot be reached: every call fails soft and is counted.
    gone = ours(stack, bucket, reader_pool, endpoint=f"http://127.0.0.1:{free_port()}", retries=0)
    unavailable = dict(FAILURES)
    assert gone.batch_exists(keys) == 0
    assert gone.batch_get_v1(keys, read) == [False] * PAGES
    assert gone.batch_set_v1(keys, read) == [False] * PAGES
    assert gone.get(keys[1]) is None and gone.set(keys[1], reader_pool.get_dummy_flat_data_page()) is False
    for op, count in (("lookup", 1), ("get", 2), ("put", PAGES + 1)):
        assert FAILURES.get((op, "OC_ERR_BACKEND_UNAVAILABLE"), 0) == unavailable.get((op, "OC_ERR_BACKEND_UNAVAILABLE"), 0) + count, op

    # Configuration is checked when SGLang builds the backend, naming the setting.
    with pytest.raises(ValueError, match="bucket is required"):
        ours(stack, "", reader_pool)
    for backend in (writer, reader, gone):
        backend.close()


def test_a_backend_whose_key_the_gateway_refuses_does_not_start(model: Any, stack: Stack, bucket: str) -> None:
    """A key the gateway does not know, or a wrong secret: SGLang re-raises the backend's error
    at start-up, so the server does not run with a storage tier that only ever misses."""
    pool = host_pool("layer_first", model)
    for key, secret in (("no-such-key", "whatever-secret"), (CLIENT_KEY, "not-the-secret")):
        with pytest.raises(ValueError, match="refuses the key pair"):
            ours(stack, bucket, pool, access_key_id=key, secret_access_key=secret)


def test_one_descriptor_get_per_load_against_sglangs_s3_backend_with_one_get_per_page(model: Any, prompt_kv: Tuple[List[int], torch.Tensor], stack: Stack, bucket: str) -> None:
    """The same eight pages, loaded by each backend into SGLang's default host layout
    (page_first): request counts asserted, load times printed (best of five)."""
    tokens, kv = prompt_kv
    keys = page_hashes(tokens)
    writer_pool = host_pool("page_first", model)
    written = writer_pool.alloc(PAGE * PAGES)
    fill(writer_pool, written, kv)
    reader_pool = host_pool("page_first", model)
    read = reader_pool.alloc(PAGE * PAGES)
    requests = Requests(stack)

    contenders: List[Tuple[str, Any, Any, bool]] = [
        ("objectcache via gateway", ours(stack, bucket, writer_pool), ours(stack, bucket, reader_pool), True),
        ("sglang S3 via gateway", theirs(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET), writer_pool), theirs(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET), reader_pool), True),
    ]
    if stack.minio_url:
        direct = uid("sgl").lower()
        contenders.append(("sglang S3 on MinIO direct", theirs(stack.minio_url, direct, (MINIO_KEY, MINIO_SECRET), writer_pool), theirs(stack.minio_url, direct, (MINIO_KEY, MINIO_SECRET), reader_pool), False))
    requests.take()
    times: Dict[str, float] = {}
    for name, writer, reader, via_gateway in contenders:
        assert all(writer.batch_set_v1(keys, written))
        requests.take()
        assert reader.batch_exists(keys) == PAGES
        lookups = requests.take()
        best = float("inf")
        for _ in range(5):
            reader_pool.kv_buffer.view(torch.uint8).fill_(SENTINEL)
            started = time.perf_counter()
            assert reader.batch_get_v1(keys, read) == [True] * PAGES
            best = min(best, time.perf_counter() - started)
            assert all(page_equal(reader_pool, s, kv, p) for p, s in enumerate(starts_of(read))), name
        loads = requests.take()
        times[name] = best
        if name.startswith("objectcache"):
            assert lookups == {"PrefixLookup 200": 1}
            assert loads == {"ChunkwiseGet 200": 5}  # one descriptor GET per batch_get, no plain GET
        elif via_gateway:
            assert lookups == {"HeadObject 200": PAGES}
            assert loads == {"GetObject 200": 5 * PAGES}  # one GET per page
        else:
            assert lookups == {} and loads == {}  # around the gateway
        for made in (writer, reader):
            getattr(made, "close", lambda: None)()  # SGLang's S3 backend has no close()
    page_mb = reader_pool.get_dummy_flat_data_page().numel() * 2 / 1e6
    print(f"\nSGLang HiCache load of {PAGES} pages x {page_mb:.2f} MB ({stack.minio_url and 's3' or 'local'} backend), best of 5:")
    for name, seconds in times.items():
        print(f"  {name:28s} {seconds * 1e3:8.1f} ms  ({seconds / times['objectcache via gateway']:.2f}x objectcache)")


def mla_pool(layout: str) -> Any:
    """An SGLang MLA host pool on CPU (a latent of 512 + 64 per token, 6 layers, bfloat16)."""
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

    device = MLATokenToKVPool(2 * PAGE * PAGES, PAGE, torch.bfloat16, 512, 64, 6, "cpu", False, start_layer=0, end_layer=6)
    return MLATokenToKVPoolHost(device.get_device_pool_infos()[0].buffer_info, 1.0, 0, PAGE, layout, pin_memory=False, device="cpu", device_capacity_tokens=device.size, start_layer=0, end_layer=6, target_layer_num=6)


def other_pool(layout: str) -> Any:
    """A host pool this backend has no zero-copy form for (any subclass, as SGLang's variants
    are): served through its flat pages."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    class VariantPoolHost(MHATokenToKVPoolHost):  # type: ignore[misc]
        pass

    device = MHATokenToKVPool(2 * PAGE * PAGES, PAGE, torch.bfloat16, 2, 32, 4, "cpu", False, start_layer=0, end_layer=4)
    return VariantPoolHost(device.get_device_pool_infos()[0].buffer_info, 1.0, 0, PAGE, layout, pin_memory=False, device="cpu", device_capacity_tokens=device.size, start_layer=0, end_layer=4)


@pytest.mark.parametrize("pool_kind,layout,form", [("mla", "layer_first", "mla-ltd"), ("mla", "page_first", "mla-tld"), ("mla", "page_first_direct", "mla-ltd"), ("other", "page_first", "flat-VariantPoolHost-page_first")])
def test_mla_and_other_host_pools_round_trip_bit_identical(stack: Stack, bucket: str, pool_kind: str, layout: str, form: str) -> None:
    make = mla_pool if pool_kind == "mla" else other_pool
    writer_pool, reader_pool = make(layout), make(layout)
    writer_pool.kv_buffer.view(torch.uint8).copy_(torch.randint(0, 256, writer_pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(7)))
    written = writer_pool.alloc(PAGE * 4)
    reader_pool.alloc(PAGE)
    read = reader_pool.alloc(PAGE * 4)
    writer, reader = ours(stack, bucket, writer_pool), ours(stack, bucket, reader_pool)
    assert writer.form.name == form and (writer.form.slices is None) == (pool_kind == "other")
    keys = [f"{i:064x}" for i in range(1, 5)]
    requests = Requests(stack)
    assert writer.batch_set_v1(keys, written) == [True] * 4
    assert reader.batch_exists(keys) == 4
    assert reader.batch_get_v1(keys, read) == [True] * 4
    assert requests.take() == {"PutObject 200": 4, "PrefixLookup 200": 1, "ChunkwiseGet 200": 1}
    for a, b in zip(starts_of(written), starts_of(read)):
        assert torch.equal(writer_pool.get_data_page(a, flat=True).view(torch.int16), reader_pool.get_data_page(b, flat=True).view(torch.int16))
    writer.close()
    reader.close()


def test_a_full_batch_of_128_pages_is_one_lookup_and_one_descriptor_request(stack: Stack, bucket: str) -> None:
    """HiCache's batches are up to 128 pages: the descriptor then no longer fits a header and the
    client POSTs it; still one lookup and ONE descriptor request for the batch, bit-identical.
    Each page records the one before it, the first the last page of the prefix before the batch."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    pages = 128

    def pool() -> Any:
        device = MHATokenToKVPool(PAGE * (pages + 2), PAGE, torch.bfloat16, 2, 32, 4, "cpu", False, start_layer=0, end_layer=4)
        return MHATokenToKVPoolHost(device.get_device_pool_infos()[0].buffer_info, 1.0, 0, PAGE, "layer_first", pin_memory=False, device="cpu", device_capacity_tokens=device.size, start_layer=0, end_layer=4)

    writer_pool, reader_pool = pool(), pool()
    writer_pool.kv_buffer.view(torch.uint8).copy_(torch.randint(0, 256, writer_pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(11)))
    written, read = writer_pool.alloc(PAGE * pages), reader_pool.alloc(PAGE * pages)
    writer, reader = ours(stack, bucket, writer_pool), ours(stack, bucket, reader_pool)
    keys = [f"{i:064x}" for i in range(1000, 1000 + pages)]
    requests = Requests(stack)
    assert writer.batch_set_v1(keys, written, HiCacheStorageExtraInfo(prefix_keys=["f" * 64])) == [True] * pages
    assert reader.batch_exists(keys) == pages
    assert reader.batch_get_v1(keys, read) == [True] * pages
    assert requests.take() == {"PutObject 200": pages, "PrefixLookup 200": 1, "ChunkwiseGet 200": 1}
    for a, b in zip(starts_of(written), starts_of(read)):
        assert torch.equal(writer_pool.get_data_page(a, flat=True).view(torch.int16), reader_pool.get_data_page(b, flat=True).view(torch.int16))
    # The chain, recorded with each object.
    import boto3

    names = [writer.object_name(k) for k in keys]
    s3 = boto3.client("s3", endpoint_url=stack.gateway_url, aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET, region_name="us-east-1")
    assert s3.head_object(Bucket=bucket, Key=names[0])["Metadata"]["objectcache-after"] == writer.object_name("f" * 64)
    assert s3.head_object(Bucket=bucket, Key=names[5])["Metadata"]["objectcache-after"] == names[4]
    writer.close()
    reader.close()
