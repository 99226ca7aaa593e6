"""The real parts the Python client is tested against: the pinned MinIO build (built by
scripts/install-minio.sh when missing, as the Node tests do) and an ``objectcache serve`` process
from the repository's dist/ build in front of it (or on its embedded store), on free loopback
ports. The engine tests (tests_engine) use the same stack."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[3]
CLIENT_KEY, CLIENT_SECRET = "py-client", "py-client-secret"
MINIO_KEY, MINIO_SECRET = "minio-test-admin", "minio-test-secret-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def minio_binary() -> str:
    out = subprocess.run(["bash", str(REPO / "scripts" / "install-minio.sh")], check=True, stdout=subprocess.PIPE, text=True, timeout=25 * 60)
    return out.stdout.strip().splitlines()[-1]


def ensure_built() -> None:
    if not (REPO / "dist" / "cli" / "main.js").exists():
        subprocess.run(["node", str(REPO / "node_modules" / "typescript" / "bin" / "tsc"), "-p", str(REPO / "tsconfig.json")], check=True, timeout=600)


@dataclass
class Stack:
    minio_url: str
    gateway_url: str
    admin_url: str
    processes: List[subprocess.Popen] = field(default_factory=list)
    data_dir: str = ""
    log: List[dict] = field(default_factory=list)

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(f"{self.admin_url}/metrics", timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ") or line.startswith(name + "{"))

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_stack(gateway_args: Sequence[str] = (), backend: str = "s3", launcher: Sequence[str] = ()) -> Stack:
    """MinIO and a gateway in front of it (``backend="s3"``), or a gateway on its embedded
    store in a fresh data directory (``backend="local"``). ``launcher`` prefixes both commands
    (a benchmark pins them to a core with ``["taskset", "-c", "1"]``)."""
    ensure_built()
    data_dir = tempfile.mkdtemp(prefix=f"objectcache-py-{backend}-")
    stack = Stack(minio_url="", gateway_url="", admin_url="", processes=[], data_dir=data_dir)
    if backend == "s3":
        port, console = free_port(), free_port()
        env = dict(os.environ, MINIO_ROOT_USER=MINIO_KEY, MINIO_ROOT_PASSWORD=MINIO_SECRET, MINIO_BROWSER="off", MINIO_UPDATE="off", CI="true")
        minio = subprocess.Popen(
            [*launcher, minio_binary(), "server", data_dir, "--address", f"127.0.0.1:{port}", "--console-address", f"127.0.0.1:{console}", "--quiet"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stack.processes.append(minio)
        stack.minio_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{stack.minio_url}/minio/health/cluster", timeout=1).status == 200:
                    break
            except OSError:
                pass
            if minio.poll() is not None or time.monotonic() > deadline:
                stack.stop()
                raise RuntimeError("MinIO did not start")
            time.sleep(0.2)
        store_args = ["--s3-endpoint", stack.minio_url]
    elif backend == "local":
        store_args = ["--data-dir", data_dir]
    else:
        raise ValueError(f"backend is s3 or local, not {backend!r}")
    try:
        gateway, stack.gateway_url, stack.admin_url = start_gateway([*store_args, *gateway_args], launcher, stack.log)
        stack.processes.append(gateway)
    except BaseException:
        stack.stop()
        raise
    return stack


@contextlib.contextmanager
def stack_with_bucket(bucket: str, gateway_args: Sequence[str] = (), backend: str = "s3") -> Iterator[Stack]:
    """``start_stack`` with ``bucket`` made by the administrator key; stopped on leaving."""
    from objectcache import ObjectCacheClient

    stack = start_stack(gateway_args, backend)
    try:
        with ObjectCacheClient(stack.gateway_url, bucket, (CLIENT_KEY, CLIENT_SECRET)) as c:
            c.ensure_bucket()
        yield stack
    finally:
        stack.stop()


def start_gateway(args: Sequence[str], launcher: Sequence[str] = (), log: Optional[List[dict]] = None) -> Tuple[subprocess.Popen, str, str]:
    """A gateway process (``args``: its store and settings): the process, its URL and its admin
    URL, once it listens. Its start-up log lines go to ``log``; later lines are drained."""
    gateway_env = dict(os.environ, OBJECTCACHE_ACCESS_KEY=CLIENT_KEY, OBJECTCACHE_SECRET_KEY=CLIENT_SECRET, OBJECTCACHE_BACKEND_ACCESS_KEY=MINIO_KEY, OBJECTCACHE_BACKEND_SECRET_KEY=MINIO_SECRET)
    gateway = subprocess.Popen(
        [*launcher, "node", str(REPO / "dist" / "cli" / "main.js"), "serve", "--port", "0", "--metrics-port", "0", *args], env=gateway_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert gateway.stdout is not None
    for line in gateway.stdout:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if log is not None:
            log.append(record)
        if record.get("msg") == "gateway listening":
            # Keep draining its log so the pipe never fills (the lines are not kept).
            threading.Thread(target=lambda: [None for _ in gateway.stdout], daemon=True).start()  # type: ignore[union-attr]
            return gateway, record["url"], record["admin"]
    gateway.wait()
    raise RuntimeError(f"the gateway exited: {log}")


def synthetic_chunk(seed: int, chunk: int, size: int) -> bytes:
    """Deterministic pseudo-random bytes per chunk, so any misplaced byte shows."""
    return random.Random(seed * 1_000_003 + chunk).randbytes(size)


def layer_major(chunks: Sequence[bytes], layer_bytes: int, first: int, end: int) -> bytes:
    return b"".join(c[l * layer_bytes : (l + 1) * layer_bytes] for l in range(first, end) for c in chunks)


def uid(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


def serve_http(handle: Callable[[BaseHTTPRequestHandler], None]) -> Tuple[ThreadingHTTPServer, str]:
    """A small HTTP/1.1 server on a free loopback port, answering every request (its body read
    first) with ``handle``, on threads of its own: the server and its URL. ``server.shutdown()``
    stops it."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            handle(self)

        do_GET = do_PUT = do_POST = do_HEAD = _any  # noqa: N815 (http.server's naming)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def send_answer(h: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: Sequence[Tuple[str, str]] = ()) -> None:
    """Writes a whole answer of ``status`` and ``body`` (with its Content-Length) from a handler of :func:`serve_http`."""
    h.send_response(status)
    for name, value in headers:
        h.send_header(name, value)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
