"""A front's cost measured without a broker or JVM: a stand-in broker and a floor relay (each
a process of its own: ``python -m bench.toolkit.front_load stand-in PORT`` / ``floor PORT
UPSTREAM``), the Kafka frames and the three loads (bare connections, forwarded connections,
requests) sent from threads, and CPU ratios paired round by round. Used by
``bench.front_cost``, ``bench.front_instructions`` and ``bench.engine_cost``."""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any

from acceptor.config import DEFAULTS as ACCEPTOR_DEFAULTS
from base.wire.framing import FrameDecoder
from bench.toolkit.fronts import stop_process

#: what the stand-in broker answers after the correlation id
BODY = bytes(64)


_CLIENT_ID = b"front-cost"


#: the largest frame either side accepts (Kafka's socket.request.max.bytes default)
_MAX_FRAME = 104_857_600


#: the largest `--response-bytes` a bench takes (the stand-in's answer to each request)
MAX_RESPONSE_BYTES = 64 * 1_048_576


class _Answerer(asyncio.Protocol):
    """Answers every whole request frame with its correlation id and `body`."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.head = struct.pack(">i", 4 + len(body))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.decoder = FrameDecoder(_MAX_FRAME)

    def data_received(self, data: bytes) -> None:
        head, body = self.head, self.body
        out = [head + f[8:12] + body for f in self.decoder.feed(data)]  # f[8:12]: correlation id
        if out:
            self.transport.write(b"".join(out))


class _VersionsAnswerer(_Answerer):
    """`_Answerer`, but ApiVersions gets a real v3 answer (for a client that reads the
    versions it speaks from it: the storm engine, `bench.engine_cost`)."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        from kafka.protocol.metadata import ApiVersionsResponse

        v = ApiVersionsResponse.ApiVersion
        keys = [v(api_key=18, min_version=0, max_version=3),
                v(api_key=3, min_version=0, max_version=12),
                v(api_key=0, min_version=0, max_version=12)]  # fmt: skip
        resp = ApiVersionsResponse(version=3, error_code=0, api_keys=keys, throttle_time_ms=0)
        self.versions = bytes(resp.encode(version=3))
        self.versions_head = struct.pack(">i", 4 + len(self.versions))

    def data_received(self, data: bytes) -> None:
        out = []
        for f in self.decoder.feed(data):
            if f[4:6] == b"\0\x12":  # ApiVersions
                out.append(self.versions_head + f[8:12] + self.versions)
            else:
                out.append(self.head + f[8:12] + self.body)
        if out:
            self.transport.write(b"".join(out))


def serve_stand_in(port: int, response_bytes: int = len(BODY), api_versions: bool = False) -> None:
    import uvloop

    body = bytes(response_bytes)
    answerer = _VersionsAnswerer if api_versions else _Answerer

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: answerer(body), "127.0.0.1", port, backlog=1024)
        print("ready", flush=True)
        await server.serve_forever()

    uvloop.run(main())


def _start_server(what: str, port: int, *args: str) -> subprocess.Popen[str]:
    """This module run as one of its servers (`args`: its command line); returns once it
    said it is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.toolkit.front_load", *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        stop_process(proc)
        raise SystemExit(f"the {what} did not start on 127.0.0.1:{port}")
    return proc


def start_stand_in(
    port: int, response_bytes: int = len(BODY), api_versions: bool = False
) -> subprocess.Popen[str]:
    return _start_server(
        "stand-in broker",
        port,
        "stand-in",
        str(port),
        "--response-bytes",
        str(response_bytes),
        *(["--api-versions"] if api_versions else []),
    )


class _FloorClient(asyncio.Protocol):
    """The client side: bytes to the upstream once it is up (held until then); the upstream
    opened at the first bytes; either side's end closes both."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream_addr = upstream
        self.up: asyncio.Transport | None = None
        self.held: list[bytes] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.up is not None:
            self.up.write(data)
            return
        self.held.append(data)
        if len(self.held) == 1:
            asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        try:
            await asyncio.get_running_loop().create_connection(
                lambda: _FloorUpstream(self), *self.upstream_addr
            )
        except OSError:
            self.transport.close()

    def eof_received(self) -> bool:
        self.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()
            if self.up is not None:
                self.up.close()


class _FloorUpstream(asyncio.Protocol):
    def __init__(self, client: _FloorClient) -> None:
        self.client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        t: asyncio.Transport = transport  # type: ignore[assignment]
        if self.client.closed:
            t.close()
            return
        self.client.up = t
        t.write(b"".join(self.client.held))
        self.client.held.clear()

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def eof_received(self) -> bool:
        self.client.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


def serve_floor(port: int, upstream_port: int) -> None:
    import uvloop

    backlog = int(ACCEPTOR_DEFAULTS["socket.listen.backlog.size"])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        upstream = ("127.0.0.1", upstream_port)
        server = await loop.create_server(
            lambda: _FloorClient(upstream), "127.0.0.1", port, backlog=backlog
        )
        print("ready", flush=True)
        await server.serve_forever()

    uvloop.run(main())


def start_floor(port: int, upstream_port: int) -> subprocess.Popen[str]:
    return _start_server("floor relay", port, "floor", str(port), str(upstream_port))


def frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(header) + len(body)) + header + body


class FrameReader:
    """Whole frames from a socket, one at a time (answers may arrive together)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder(_MAX_FRAME)
        self.frames: deque[bytes] = deque()

    def next(self) -> bytes:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the front closed the connection")
            self.frames.extend(self.decoder.feed(data))
        return self.frames.popleft()


API_VERSIONS = frame(18, 3, 1, bytes(20))


METADATA = frame(3, 1, 2, b"\xff\xff\xff\xff")  # all topics


def bare_load(port: int, conns: int) -> None:
    for _ in range(conns):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()


def conn_load(port: int, conns: int) -> None:
    for _ in range(conns):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            reader = FrameReader(s)
            s.sendall(API_VERSIONS)
            reader.next()
            s.sendall(METADATA)
            reader.next()


def req_load(port: int, requests: int, size: int, in_flight: int) -> None:
    """`requests` Produce requests on one connection, up to `in_flight` sent before their
    answers are read (a producer's max.in.flight.requests.per.connection)."""
    body = struct.pack(">hhi", -1, 1, 30_000) + bytes(size)  # no transactional id, acks=1
    frames = [frame(0, 3, i, body) for i in range(in_flight + 1)]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = FrameReader(s)
        sent = answered = 0
        while answered < requests:
            while sent < requests and sent - answered < in_flight:
                s.sendall(frames[sent % len(frames)])
                sent += 1
            reader.next()
            answered += 1


def run_threads(target: Any, threads: int, *args: Any) -> float:
    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            target(*args)
        except (OSError, ConnectionError) as exc:
            errors.append(exc)

    ts = [threading.Thread(target=guarded) for _ in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit(f"load failed: {errors[0]!r} ({len(errors)} threads)")
    return time.monotonic() - t0


PHASES = ("bare", "conn", "req")


def paired_ratios(
    rows: list[dict[str, Any]], path: str, other: str, phase: str
) -> dict[str, float] | None:
    """`path`'s CPU over `other`'s in `phase`, round by round: each round measures the
    paths one after the other in each phase, so a ratio within a round is taken on the
    same stretch of a shared machine's speed, which drifts more between rounds than
    within one. The median of those ratios, and the lowest and highest (None: no round
    where `other` spent a clock tick)."""
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["path"]] = row[phase]["cpu_us"]
    each = [r[path] / r[other] for r in by_round.values() if path in r and other in r and r[other]]
    if not each:
        return None
    return {"median": statistics.median(each), "low": min(each), "high": max(each)}


def main(argv: list[str] | None = None) -> int:
    """One of the servers, until killed: it prints ``ready`` once it listens."""
    ap = argparse.ArgumentParser(prog="python -m bench.toolkit.front_load")
    sub = ap.add_subparsers(dest="server", required=True)
    si = sub.add_parser("stand-in", help="a broker that answers every request at once")
    si.add_argument("port", type=int)
    si.add_argument("--response-bytes", type=int, default=len(BODY))
    si.add_argument("--api-versions", action="store_true")
    fl = sub.add_parser("floor", help="a relay of two uvloop Protocols")
    fl.add_argument("port", type=int)
    fl.add_argument("upstream_port", type=int)
    args = ap.parse_args(argv)
    if args.server == "stand-in":
        serve_stand_in(args.port, args.response_bytes, args.api_versions)
    else:
        serve_floor(args.port, args.upstream_port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
