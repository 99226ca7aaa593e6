"""What relaying bytes from one loopback TCP socket to another costs the relay, per GiB, with the
bytes copied through the relay's memory (recv into a buffer, send from it: what the gateway's data
path does, docs/benchmarks.md) and without (splice through a pipe: the kernel moves page
references). A floor under any gateway that sits between a store's socket and a client's, on the
machine it runs on; nothing of ObjectCache runs here.

    python3 bench/relay-floor.py [--gib 4] [--reps 3] [--block-kib 1024] [--sources 8 --slice-kib 256]

Three processes per run: a source sending one buffer again and again, the relay, and a sink that
reads into one buffer. Prints the relay's CPU-seconds (user, system) per GiB and the GB/s, the
median of the repetitions, for each way. Linux only (os.splice, F_SETPIPE_SZ).

With --sources N the source sends on N sockets at once (a thread each, as N chunk reads from the
store) and the relay moves the bytes in the order a layerwise GET sends them: --slice-kib from
each socket in turn (one chunk's slice of one layer), gathered into sends of --block-kib (copying:
received into one buffer, sent in one call; splicing: spliced into one pipe, spliced on in one
call). A layer-major stream interleaves its sources slice by slice, so this is the floor under any
gateway that relays them in that order.
"""

from __future__ import annotations

import argparse
import fcntl
import multiprocessing as mp
import os
import socket
import statistics
import threading
import time
from multiprocessing.connection import Connection

GiB = 1 << 30
BLOCK = 1 << 20  # bytes per recv or splice call (--block-kib): the pipe is sized to hold one
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def source(port: int, total: int, sockets: int = 1) -> None:
    """Sends `total` bytes split evenly over `sockets` connections, each from its own thread."""
    data = memoryview(bytearray(os.urandom(1024)) * (4 * BLOCK // 1024))
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(sockets)]

    def send(conn: socket.socket, size: int) -> None:
        sent = 0
        while sent < size:
            n = min(len(data), size - sent)
            conn.sendall(data[:n])
            sent += n
        conn.close()

    threads = [threading.Thread(target=send, args=(c, total // sockets)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def sink(listener: socket.socket, done: Connection) -> None:
    conn, _ = listener.accept()
    buf = memoryview(bytearray(4 * BLOCK))
    got = 0
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        got += n
    done.send(got)


def relay(way: str, src: socket.socket, dst: socket.socket, block: int) -> int:
    moved = 0
    if way == "copy":
        buf = memoryview(bytearray(block))
        while True:
            n = src.recv_into(buf)
            if n == 0:
                return moved
            dst.sendall(buf[:n])
            moved += n
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, block)
    try:
        while True:
            n = os.splice(src.fileno(), w, block)
            if n == 0:
                return moved
            left = n
            while left > 0:
                left -= os.splice(r, dst.fileno(), left)
            moved += n
    finally:
        os.close(r)
        os.close(w)


def interleaved(way: str, srcs: list[socket.socket], dst: socket.socket, slice_: int, block: int) -> int:
    """Moves `slice_` bytes from each source in turn until they end, sending `block` at a time."""
    moved = pending = 0
    if way == "copy":
        buf = memoryview(bytearray(block))
        while True:
            for src in srcs:
                want = slice_
                while want:
                    n = src.recv_into(buf[pending : pending + want])
                    if n == 0:
                        dst.sendall(buf[:pending])
                        return moved + pending
                    pending += n
                    want -= n
                if pending == block:
                    dst.sendall(buf)
                    moved += pending
                    pending = 0
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, block)

    def drain() -> None:
        left = pending
        while left > 0:
            left -= os.splice(r, dst.fileno(), left)

    try:
        while True:
            for src in srcs:
                want = slice_
                while want:
                    n = os.splice(src.fileno(), w, want)
                    if n == 0:
                        drain()
                        return moved + pending
                    pending += n
                    want -= n
                if pending == block:
                    drain()
                    moved += pending
                    pending = 0
    finally:
        os.close(r)
        os.close(w)


def run(way: str, total: int, block: int, sources: int = 1, slice_: int = 0) -> tuple[float, float, float]:
    """One relay of `total` bytes: (user, system) CPU-seconds per GiB of the relay, and GB/s."""
    front = socket.create_server(("127.0.0.1", 0), backlog=sources)
    back = socket.create_server(("127.0.0.1", 0))
    theirs, ours = mp.Pipe(duplex=False)
    reader = mp.Process(target=sink, args=(back, ours))
    reader.start()
    dst = socket.create_connection(("127.0.0.1", back.getsockname()[1]))
    writer = mp.Process(target=source, args=(front.getsockname()[1], total, sources))
    writer.start()
    srcs = [front.accept()[0] for _ in range(sources)]
    src = srcs[0]
    before, started = os.times(), time.perf_counter()
    moved = relay(way, src, dst, block) if sources == 1 else interleaved(way, srcs, dst, slice_, block)
    dst.shutdown(socket.SHUT_WR)
    received = theirs.recv()
    after, seconds = os.times(), time.perf_counter() - started
    for p in (writer, reader):
        p.join()
    for s in (*srcs, dst, front, back):
        s.close()
    if moved != total or received != total:
        raise SystemExit(f"{way}: moved {moved}, received {received} of {total} bytes")
    gib = total / GiB
    return (after.user - before.user) / gib, (after.system - before.system) / gib, total / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--block-kib", type=int, default=BLOCK // 1024, help="bytes per recv or splice call, in KiB (the gateway's slices are 256 KiB at G=64)")
    parser.add_argument("--sources", type=int, default=1, help="source sockets, relayed slice by slice in turn (a layer-major stream's chunk reads)")
    parser.add_argument("--slice-kib", type=int, default=256, help="with --sources: bytes taken from each source in turn, in KiB")
    args = parser.parse_args()
    total, block, slice_ = int(args.gib * GiB), args.block_kib * 1024, args.slice_kib * 1024
    if not 0 < block <= BLOCK:
        parser.error("--block-kib must be 1 to 1024: a pipe holds at most 1 MiB (/proc/sys/fs/pipe-max-size) without privilege")
    if args.sources < 1:
        parser.error("--sources must be at least 1")
    shape = f"in calls of {args.block_kib} KiB"
    if args.sources > 1:
        if not 0 < slice_ <= block or block % slice_:
            parser.error("--slice-kib must divide --block-kib")
        total -= total % (args.sources * slice_)
        shape = f"from {args.sources} sockets, {args.slice_kib} KiB from each in turn, sent {args.block_kib} KiB at a time"
    print(f"{os.cpu_count()} cores; {args.gib} GiB per run {shape}, {args.reps} runs each, alternated; relay CPU-s per GiB (median)")
    results: dict[str, list[tuple[float, float, float]]] = {"copy": [], "splice": []}
    for _ in range(args.reps):
        for way in results:
            results[way].append(run(way, total, block, args.sources, slice_))
    for way, runs in results.items():
        user = statistics.median(r[0] for r in runs)
        system = statistics.median(r[1] for r in runs)
        total_cpu = statistics.median(r[0] + r[1] for r in runs)
        rate = statistics.median(r[2] for r in runs)
        print(f"{way:>6}: {total_cpu:.3f} CPU-s/GiB (user {user:.3f}, system {system:.3f}); {rate:.2f} GB/s")


if __name__ == "__main__":
    main()
