"""The gateway's KV events (docs/kv-events.md) read by vLLM's own decoder: chunks stored through
the Python client with their tokens arrive as vLLM ``BlockStored`` events carrying those tokens
and their chain, an eviction as ``BlockRemoved``, both in the tagged form vLLM 0.33 writes, and the
replay socket answers vLLM's replay protocol. The subscriber is pyzmq, as vLLM's example
subscriber (examples/online_serving/kv_events_subscriber.py) is."""
import time
from typing import Any, Iterator, List, Tuple

import msgspec
import pytest
import zmq
from stack import CLIENT_KEY, CLIENT_SECRET, Stack, free_port, stack_with_bucket, uid
from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVEventBatch

from objectcache import ObjectCacheClient
from objectcache.keys import chunk_keys

LAYERS, LAYER_BYTES, G = 4, 4096, 16
CHUNK_BYTES = LAYERS * LAYER_BYTES


@pytest.fixture(params=["local", "s3"])
def published(request: pytest.FixtureRequest) -> Iterator[Tuple[Stack, str, int, int]]:
    bucket = uid("kvev").replace("_", "-")
    port, replay = free_port(), free_port()
    args = ["--budget", f"{bucket}={6 * CHUNK_BYTES}", "--capacity-state-bucket", f"{bucket}-state", "--capacity-sync-ms", "100", "--capacity-lease-ms", "1000", "--evict-rate", "1000"]
    args += ["--kv-events", f"tcp://*:{port}", "--kv-events-replay", f"tcp://*:{replay}", "--kv-events-topic", "kv@pool:objectcache@{model}", "--kv-events-salt", "tenant"]
    with stack_with_bucket(bucket, args, backend=request.param) as stack:
        yield stack, bucket, port, replay


def receive(sub: zmq.Socket, decoder: msgspec.msgpack.Decoder, until: Any, seconds: float = 15) -> List[Any]:
    """Batches' events, decoded by vLLM's KVEventBatch, until ``until(events)`` holds."""
    events: List[Any] = []
    deadline = time.monotonic() + seconds
    while not until(events):
        assert time.monotonic() < deadline, f"not within {seconds} s: {events}"
        if sub.poll(100):
            topic, seq, payload = sub.recv_multipart()
            assert topic.decode().startswith("kv@pool:objectcache@")
            assert len(seq) == 8
            events.extend(decoder.decode(payload).events)
    return events


def test_vllm_decodes_stored_and_removed_events_with_their_tokens(published: Tuple[Stack, str, int, int]) -> None:
    stack, bucket, port, replay = published
    context = zmq.Context.instance()
    sub = context.socket(zmq.SUB)
    sub.connect(f"tcp://127.0.0.1:{port}")
    sub.setsockopt_string(zmq.SUBSCRIBE, "kv@")
    time.sleep(0.3)  # ZeroMQ's slow joiner
    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    tokens = list(range(1000, 1000 + 3 * G))
    keys = chunk_keys(tokens, "org/model", "bfloat16", G, LAYERS, LAYER_BYTES, "KV_L2TD")
    per_chunk = [tokens[i * G : (i + 1) * G] for i in range(len(keys))]
    try:
        with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as client:
            client.put_chunks(keys, [bytes([i]) * CHUNK_BYTES for i in range(len(keys))], tokens=per_chunk, model="org/model")
            events = receive(sub, decoder, lambda e: sum(isinstance(x, BlockStored) for x in e) >= 3)
            # The chunks are written concurrently: their events come in the order the writes end.
            stored = sorted((e for e in events if isinstance(e, BlockStored)), key=lambda e: e.token_ids[0])
            assert [e.token_ids for e in stored] == per_chunk
            assert all(e.block_size == G and e.medium == "SHARED" and e.locality == "REMOTE" for e in stored)
            # The tenant as each block's cache salt: one extra_keys entry per block.
            assert all(e.extra_keys is not None and len(e.extra_keys) == 1 and len(e.extra_keys[0]) == 1 for e in stored)
            # Each chunk's parent is the block before it.
            assert stored[0].parent_block_hash is None
            assert [e.parent_block_hash for e in stored[1:]] == [e.block_hashes[0] for e in stored[:-1]]
            first = stored[0].block_hashes[0]

            # Six more chunks: past the budget, the coldest prefix goes, tail first.
            more = list(range(5000, 5000 + 6 * G))
            more_keys = chunk_keys(more, "org/model", "bfloat16", G, LAYERS, LAYER_BYTES, "KV_L2TD")
            client.put_chunks(more_keys, [b"\x07" * CHUNK_BYTES] * len(more_keys), tokens=[more[i * G : (i + 1) * G] for i in range(len(more_keys))], model="org/model")
            receive(sub, decoder, lambda e: any(isinstance(x, BlockRemoved) and first in x.block_hashes for x in e))

        # The replay socket: every held batch from the first one's sequence number, then the end marker.
        dealer = context.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{replay}")
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        replayed: List[Any] = []
        assert dealer.poll(5000)
        while True:
            _, topic, seq, payload = dealer.recv_multipart()
            if int.from_bytes(seq, "big", signed=True) == -1:
                assert payload == b""
                break
            replayed.extend(decoder.decode(payload).events)
        assert sorted(e.token_ids for e in replayed if isinstance(e, BlockStored))[:3] == per_chunk
        dealer.close(linger=0)
    finally:
        sub.close(linger=0)
