"""The upstream-latency fault's proxy over real loopback sockets: bytes intact, in order,
delayed while the fault is on, half-closes passed on, a dead upstream closes the client."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from harness.runner.latency_proxy import LatencyProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)
        self.request.shutdown(socket.SHUT_WR)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address  # type: ignore[misc]
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[LatencyProxy]:
    p = LatencyProxy(echo)
    p.start()
    yield p
    p.stop()


def _roundtrip(addr: tuple[str, int], payload: bytes) -> tuple[bytes, float]:
    with socket.create_connection(addr, timeout=20) as s:
        t0 = time.monotonic()
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
        return b"".join(chunks), time.monotonic() - t0


def test_bytes_pass_intact_and_in_order(proxy: LatencyProxy) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, many chunks
    echoed, _ = _roundtrip((proxy.host, proxy.port), payload)
    assert echoed == payload
    assert proxy.stats.bytes_up == len(payload) == proxy.stats.bytes_down


def test_latency_applies_while_set_and_is_removed_after(proxy: LatencyProxy) -> None:
    proxy.set_latency(300)
    echoed, slow = _roundtrip((proxy.host, proxy.port), b"ping")
    assert echoed == b"ping"
    # connect + request + response each wait 300 ms: a lower bound, never flaky
    assert slow >= 0.6
    proxy.set_latency(0)
    assert proxy.latency_ms == 0
    echoed, _ = _roundtrip((proxy.host, proxy.port), b"pong")
    assert echoed == b"pong"
    with pytest.raises(ValueError):
        proxy.set_latency(-1)


def test_dead_upstream_closes_the_client() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()
    p = LatencyProxy(dead)
    p.start()
    try:
        with socket.create_connection((p.host, p.port), timeout=20) as c:
            assert c.recv(10) == b""  # EOF, not a hang
        assert p.stats.upstream_failures == 1
    finally:
        p.stop()


def test_refuses_non_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        LatencyProxy(("127.0.0.1", 1), host="0.0.0.0")
