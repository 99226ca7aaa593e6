"""The client against a broken or hostile server (docs/reliability.md, Trust model): every number
it answers is checked against what was asked, a redirect is never taken for success, and one
overall deadline bounds a call whatever the server trickles or asks it to wait."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Callable, Iterator, Tuple

import pytest
from stack import send_answer, serve_http

from objectcache import Config, ObjectCacheClient, ObjectCacheError


def _answer(status: int, body: bytes = b"", headers: Tuple[Tuple[str, str], ...] = ()) -> Callable[[BaseHTTPRequestHandler], None]:
    def handle(h: BaseHTTPRequestHandler) -> None:
        send_answer(h, status, body, headers)

    return handle


@pytest.mark.parametrize("answer", [b'{"matched": 1000000000}', b'{"matched": -3}', b'{"matched": true}', b'{"matched": 4}', b'{"matched": 1.5}'])
def test_a_lookup_count_outside_what_was_asked_is_a_protocol_error(answer: bytes) -> None:
    server, url = serve_http(_answer(200, answer, (("Content-Type", "application/json"),)))
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    try:
        with pytest.raises(ObjectCacheError) as broken:
            client.lookup(["a", "b", "c"])
        assert broken.value.code == "OC_ERR_CLIENT_PROTOCOL"
    finally:
        client.close()
        server.shutdown()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_never_taken_as_stored(status: int) -> None:
    server, url = serve_http(_answer(status, b"", (("Location", "http://elsewhere.example/bucket/k"),)))
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    try:
        with pytest.raises(ObjectCacheError) as refused:
            client.put_chunk("k", b"bytes")
        assert refused.value.code == "OC_ERR_CLIENT_PROTOCOL"
        assert "redirect" in str(refused.value)
        with pytest.raises(ObjectCacheError):
            client.lookup(["k"])
    finally:
        client.close()
        server.shutdown()


@pytest.fixture()
def trickler() -> Iterator[str]:
    """A server that answers 200 and then one byte of its body every 0.3 s (a stream's preamble, then zeros)."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n")
                # A stream's preamble, then zeros: a byte at a time, each well within the socket timeout.
                body = b"OCKV\x01\x00\x00\x00" + b"\0" * 100
                until = time.monotonic() + 25
                for byte in body:
                    if stop.is_set() or time.monotonic() >= until:
                        break
                    conn.sendall(bytes([byte]))
                    time.sleep(0.3)
            except OSError:
                pass

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    listener.close()


def test_one_deadline_bounds_a_call_whatever_the_server_trickles(trickler: str) -> None:
    # Every byte comes within the socket timeout: only the call's deadline can end it.
    client = ObjectCacheClient(trickler, "bucket", ("key", "secret"), config=Config(timeout=5, deadline=2, retries=0))
    descriptor = ObjectCacheClient.descriptor(["a", "b"], layers=2, chunk_tokens=16, layer_bytes=64)
    try:
        for call in (lambda: client.fetch(descriptor), lambda: client.get_object("k"), lambda: client.lookup(["a"])):
            started = time.monotonic()
            with pytest.raises(ObjectCacheError) as late:
                call()
            assert late.value.code == "OC_ERR_CLIENT_TIMEOUT"
            assert time.monotonic() - started < 5
        # The same, for a client made for an engine's critical path.
        quick = client.with_limits(deadline=0.5)
        started = time.monotonic()
        with pytest.raises(ObjectCacheError) as late:
            quick.fetch(descriptor)
        assert late.value.code == "OC_ERR_CLIENT_TIMEOUT"
        assert time.monotonic() - started < 3
    finally:
        client.close()


def test_a_retry_after_past_the_deadline_is_not_waited_out() -> None:
    busy = (("Content-Type", "application/xml"), ("Retry-After", "30"), ("x-objectcache-error-code", "OC_ERR_ADMISSION_LIMIT"), ("x-objectcache-retryable", "true"))
    server, url = serve_http(_answer(503, b"<Error><Code>SlowDown</Code><Message>busy</Message></Error>", busy))
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=2, deadline=3))
    try:
        started = time.monotonic()
        with pytest.raises(ObjectCacheError) as refused:
            client.lookup(["a"])
        assert refused.value.code == "OC_ERR_ADMISSION_LIMIT"
        assert time.monotonic() - started < 2
        # With no retries (an engine's critical path), not even a short wait.
        started = time.monotonic()
        with pytest.raises(ObjectCacheError):
            client.with_limits(retries=0).lookup(["a"])
        assert time.monotonic() - started < 1
    finally:
        client.close()
        server.shutdown()


@pytest.mark.parametrize("index,expected", [("3", 3), (3, 3), ("x", None), ("\u00b2", None), ("-1", None), (True, None), ("0", None), ("10", None), ("3.0", None), (None, None)])
def test_a_missing_chunk_the_server_names_is_taken_only_as_a_whole_number_within_the_run(index: object, expected: object) -> None:
    from objectcache.failures import missing_chunk

    error = ObjectCacheError("OC_ERR_CHUNK_MISSING", "gone", details={"ChunkIndex": index})
    assert missing_chunk(error, 10) == expected
    assert missing_chunk(ObjectCacheError("OC_ERR_CHUNK_CORRUPT", "bad", details={"ChunkIndex": "3"}), 10) is None


def test_an_interim_answer_is_never_taken_for_the_final_one() -> None:
    def early_hints(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n")

    server, url = serve_http(early_hints)
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    try:
        with pytest.raises(ObjectCacheError) as refused:
            client.put_chunk("k", b"bytes")
        assert refused.value.code == "OC_ERR_CLIENT_PROTOCOL"
    finally:
        client.close()
        server.shutdown()


def test_a_lookup_answer_nested_past_the_parser_is_a_protocol_error() -> None:
    server, url = serve_http(_answer(200, b"[" * 60_000, (("Content-Type", "application/json"),)))
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    try:
        with pytest.raises(ObjectCacheError) as broken:
            client.lookup(["a"])
        assert broken.value.code == "OC_ERR_CLIENT_PROTOCOL"
    finally:
        client.close()
        server.shutdown()


def test_a_listing_that_never_ends_is_bounded_by_one_deadline() -> None:
    counter = {"page": 0}

    def endless(h: BaseHTTPRequestHandler) -> None:
        counter["page"] += 1
        body = f"<ListBucketResult><Contents><Key>k{counter['page']}</Key></Contents><IsTruncated>true</IsTruncated><NextContinuationToken>t{counter['page']}</NextContinuationToken></ListBucketResult>".encode()
        time.sleep(0.05)
        _answer(200, body, (("Content-Type", "application/xml"),))(h)

    server, url = serve_http(endless)
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0, deadline=1.5))
    try:
        started = time.monotonic()
        with pytest.raises(ObjectCacheError) as late:
            client.list_keys()
        assert late.value.code == "OC_ERR_CLIENT_TIMEOUT"
        assert time.monotonic() - started < 4
    finally:
        client.close()
        server.shutdown()

    def repeating(h: BaseHTTPRequestHandler) -> None:
        _answer(
            200,
            b"<ListBucketResult><Contents><Key>k</Key></Contents><IsTruncated>true</IsTruncated><NextContinuationToken>same</NextContinuationToken></ListBucketResult>",
            (("Content-Type", "application/xml"),),
        )(h)

    server, url = serve_http(repeating)
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    try:
        with pytest.raises(ObjectCacheError) as looping:
            client.list_keys()
        assert looping.value.code == "OC_ERR_CLIENT_PROTOCOL"
    finally:
        client.close()
        server.shutdown()


def test_deadlines_survive_fork_and_cancelled_ones_do_not_pile_up() -> None:
    import os

    from objectcache import _deadline as module

    for _ in range(5000):
        deadline = module._Deadline(300.0, "test")
        deadline.cancel()
    # Cancelled deadlines are dropped once they are half of what is kept, not held for 300 s.
    assert len(module._WATCHDOG._heap) < 3000
    before = module._WATCHDOG
    pid = os.fork()
    if pid == 0:  # the child: a watchdog of its own (the parent's thread is not copied)
        os._exit(0 if module._WATCHDOG is not before and module._WATCHDOG._thread is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_a_client_with_other_limits_shares_the_connections_after_close() -> None:
    server, url = serve_http(_answer(200, b'{"matched": 1}', (("Content-Type", "application/json"),)))
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    quick = client.with_limits(deadline=1, retries=0)
    try:
        assert quick.lookup(["a"]) == 1
        client.close()
        assert quick._pool is client._pool and client._pool.idle == []
        assert quick.lookup(["a"]) == 1
    finally:
        quick.close()
        server.shutdown()
