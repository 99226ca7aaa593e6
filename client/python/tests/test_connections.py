"""Keep-alive connections go back to the gateway they were opened to, whatever other threads did
meanwhile (two small HTTP servers stand in for two gateways; no store is needed)."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, Tuple

import pytest
from stack import send_answer, serve_http

from objectcache import Config, ObjectCacheClient, ObjectCacheError


def _gateway(name: bytes, arrived: threading.Event, release: threading.Event) -> ThreadingHTTPServer:
    """Answers every GET with its name, keeping the connection alive; ``/bucket/slow`` sets
    ``arrived`` and answers only once ``release`` is set."""

    def answer(h: BaseHTTPRequestHandler) -> None:
        if h.path.endswith("/slow"):
            arrived.set()
            release.wait(10)
        send_answer(h, 200, name)

    return serve_http(answer)[0]


@pytest.fixture()
def gateways() -> Iterator[Tuple[ThreadingHTTPServer, ThreadingHTTPServer, threading.Event, threading.Event]]:
    arrived, release = threading.Event(), threading.Event()
    a, b = _gateway(b"A", arrived, release), _gateway(b"B", arrived, release)
    yield a, b, arrived, release
    release.set()
    for server in (a, b):
        server.shutdown()
        server.server_close()


def test_a_connection_returns_to_the_gateway_it_was_opened_to(gateways: Tuple[ThreadingHTTPServer, ThreadingHTTPServer, threading.Event, threading.Event]) -> None:
    a, b, arrived, release = gateways
    url = lambda s: f"http://127.0.0.1:{s.server_address[1]}"  # noqa: E731
    client = ObjectCacheClient([url(a), url(b)], "bucket", ("key", "secret"), config=Config(retries=0))
    # One thread's GET is in flight on gateway A ...
    slow: list = []
    reader = threading.Thread(target=lambda: slow.append(client.get_object("slow")))
    reader.start()
    assert arrived.wait(10)
    # ... when A stops taking connections: another request moves the client on to B.
    a.shutdown()
    a.socket.close()
    assert client.get_object("x") == b"B"
    assert client.endpoint == url(b)
    # A answers the first GET over its open connection, which goes back to the idle pool.
    release.set()
    reader.join(10)
    assert slow == [b"A"]
    # Every later request goes to B, the gateway in use: never over A's leftover connection.
    for _ in range(3):
        assert client.get_object("y") == b"B"
    client.close()


def test_no_endpoint_is_a_usage_error() -> None:
    with pytest.raises(ObjectCacheError) as caught:
        ObjectCacheClient([], "bucket", ("key", "secret"))
    assert caught.value.code == "OC_ERR_CLIENT_USAGE"


def test_boto3_keyword_names_still_reach_the_gateway_with_a_deprecation_warning(gateways: Tuple[ThreadingHTTPServer, ThreadingHTTPServer, threading.Event, threading.Event]) -> None:
    a = gateways[0]
    with pytest.warns(DeprecationWarning, match="endpoint_url"):
        client = ObjectCacheClient(endpoint_url=f"http://127.0.0.1:{a.server_address[1]}", bucket="bucket", aws_access_key_id="key", aws_secret_access_key="secret", region_name="eu-west-1")
    with client:
        assert client.get_object("x") == b"A"


def test_settings_as_keywords_still_work_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"config=Config\(retries=\.\.\.\)"):
        client = ObjectCacheClient("http://127.0.0.1:1", "bucket", ("key", "secret"), retries=0, timeout=5, deadline=None, max_idle_connections=2)
    assert client.config == Config(timeout=5, deadline=None, retries=0, max_idle_connections=2)
    with pytest.raises(ObjectCacheError) as caught:
        ObjectCacheClient("http://127.0.0.1:1", "bucket", ("key", "secret"), retries=0, config=Config())
    assert caught.value.code == "OC_ERR_CLIENT_USAGE"


def test_the_config_is_frozen_checked_and_shared_by_clients_with_other_limits() -> None:
    import dataclasses

    config = Config(timeout=5.0, retries=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.retries = 2  # type: ignore[misc]
    assert Config() == Config(timeout=60.0, deadline=300.0, retries=3, max_idle_connections=8)
    for wrong in ({"timeout": 0}, {"deadline": -1}, {"retries": -1}, {"retries": 1.5}, {"retries": True}, {"max_idle_connections": -1}, {"timeout": "5"}):
        with pytest.raises(ObjectCacheError) as caught:
            Config(**wrong)  # type: ignore[arg-type]
        assert caught.value.code == "OC_ERR_CLIENT_USAGE" and next(iter(wrong)) in str(caught.value), wrong
    with pytest.raises(ObjectCacheError):
        ObjectCacheClient("http://127.0.0.1:1", "bucket", ("key", "secret"), config={"retries": 0})  # type: ignore[arg-type]
    client = ObjectCacheClient("http://127.0.0.1:1", "bucket", ("key", "secret"), config=config)
    quick = client.with_limits(deadline=2, retries=0)
    assert quick.config == Config(timeout=5.0, deadline=2, retries=0) and client.config is config
    assert client.with_config(Config(retries=7)).config.retries == 7
    with pytest.raises(ObjectCacheError):
        client.with_limits(retries=-1)


def test_the_retry_policy_is_the_contract_s() -> None:
    from objectcache import _contract
    from objectcache.retry import retry_delay

    assert (_contract.DEFAULT_RETRIES, _contract.FIRST_BACKOFF_S, _contract.MAX_RETRY_AFTER_S) == (3, 0.2, 30.0)
    assert [retry_delay(None, attempt) for attempt in (1, 2, 3)] == [0.2, 0.4, 0.8]
    assert retry_delay("1", 1) == 1.0 and retry_delay(" 0.5 ", 3) == 0.5 and retry_delay("3600", 1) == 30.0
    # Not delay-seconds (an HTTP-date, a negative number, junk, NaN): the backoff, as the TypeScript client does.
    for junk in ("Wed, 21 Oct 2015 07:28:00 GMT", "-1", "soon", "", "1e3", "nan", "inf"):
        assert retry_delay(junk, 2) == 0.4, junk
    assert retry_delay(None, 10_000) == 30.0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # boto3's names, deprecated
@pytest.mark.parametrize(
    "kwargs",
    [
        {"endpoint": "http://127.0.0.1:1", "endpoint_url": "http://127.0.0.1:2", "bucket": "b", "credentials": ("k", "s")},
        {"endpoint": "http://127.0.0.1:1", "bucket": "b", "credentials": ("k", "s"), "aws_access_key_id": "k"},
        {"endpoint": "http://127.0.0.1:1", "bucket": "b", "credentials": ("k", "s"), "region": "r", "region_name": "r"},
        {"endpoint": "http://127.0.0.1:1", "bucket": "b", "aws_access_key_id": "k"},
        {"bucket": "b", "credentials": ("k", "s")},
        {"endpoint": "http://127.0.0.1:1", "credentials": ("k", "s")},
    ],
)
def test_missing_or_doubled_constructor_arguments_are_usage_errors(kwargs: dict) -> None:
    with pytest.raises(ObjectCacheError) as caught:
        ObjectCacheClient(**kwargs)
    assert caught.value.code == "OC_ERR_CLIENT_USAGE"


def test_a_descriptor_leaves_the_delivery_mode_to_the_gateway_unless_asked() -> None:
    assert ObjectCacheClient.descriptor(["k"], layers=2, chunk_tokens=16, layer_bytes=64)["mode"] == "auto"
    assert ObjectCacheClient.descriptor(["k"], layers=2, chunk_tokens=16, layer_bytes=64, mode="layerwise")["mode"] == "layerwise"
    assert ObjectCacheClient.descriptor(["k"], layers=2, chunk_tokens=16, layer_bytes=64, key_prefix="kv/ab/")["keyPrefix"] == "kv/ab/"
    assert "keyPrefix" not in ObjectCacheClient.descriptor(["k"], layers=2, chunk_tokens=16, layer_bytes=64)


@pytest.fixture()
def endless() -> Iterator[Tuple[str, dict]]:
    """A server that answers every request with ``state["status"]`` and then a chunked body
    without end (until the client goes, or 20 s)."""
    state = {"status": 503}
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                ok = state["status"] == 200
                headers = "Content-Type: application/json" if ok else "Content-Type: application/xml\r\nx-objectcache-error-code: OC_ERR_KEY_CONCURRENCY\r\nx-objectcache-retryable: true"
                conn.sendall(f"HTTP/1.1 {state['status']} X\r\n{headers}\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
                piece = b"10000\r\n" + (b" " if ok else b"<") * 0x10000 + b"\r\n"
                deadline = time.monotonic() + 20
                while not stop.is_set() and time.monotonic() < deadline:
                    conn.sendall(piece)
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
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", state
    stop.set()
    listener.close()


def test_reads_at_most_so_much_of_an_answer_that_never_ends(endless: Tuple[str, dict]) -> None:
    url, state = endless
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    calls = [lambda: client.lookup(["a", "b"]), lambda: client.pin(["a"], None)]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(ObjectCacheError) as refused:
            call()
        # The refusal's own code, from its headers, long before the server's 20 s are up.
        assert refused.value.code == "OC_ERR_KEY_CONCURRENCY"
        assert time.monotonic() - started < 10
    state["status"] = 200
    for call in calls:
        with pytest.raises(ObjectCacheError) as broken:
            call()
        assert broken.value.code == "OC_ERR_CLIENT_PROTOCOL"
        assert "longer than 65536 bytes" in str(broken.value)
    client.close()


@pytest.mark.parametrize(
    "call,answer", [("lookup", b"null"), ("lookup", b"[1]"), ("lookup", b'{"matched": "x"}'), ("lookup", b"not json"), ("pin", b"null"), ("pin", b'{"until": 5}'), ("pin", b'{"until": "never"}')]
)
def test_an_answer_that_is_not_the_json_object_it_should_be_is_a_protocol_error(call: str, answer: bytes) -> None:
    def json_answer(h: BaseHTTPRequestHandler) -> None:
        send_answer(h, 200, answer, [("Content-Type", "application/json")])

    server, url = serve_http(json_answer)
    client = ObjectCacheClient(url, "bucket", ("key", "secret"), config=Config(retries=0))
    try:
        with pytest.raises(ObjectCacheError) as broken:
            client.lookup(["a"]) if call == "lookup" else client.pin(["a"], None)
        assert broken.value.code == "OC_ERR_CLIENT_PROTOCOL"
    finally:
        client.close()
        server.shutdown()
        server.server_close()
