"""The broker sees a fronted connection only once its client has sent a byte.

Kafka's broker never hears of a client that connects and closes (or stays silent), apart
from its own accept; through the acceptor, such a client used to cost an upstream
connection each (Trogdor's CONNECT storm doubled the broker's accepts). The acceptor now
opens the upstream on the client's first bytes, and a client that closed before sending
anything is closed at registration without a transport. A stand-in upstream that counts
its accepts shows both; the bytes a client sends first still arrive whole and in order.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptor import AcceptorHandle, start_in_thread
from acceptor.testing import (
    StandInUpstream,
    api_versions_frame,
    history_rows,
    wait_until,
)
from tests.integration.conftest import acceptor_fronting


class CountingUpstream(StandInUpstream):
    """A listener that counts accepted connections and keeps what each sends."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self._received_lock = threading.Lock()
        super().__init__(self._read)

    def _read(self, conn: socket.socket) -> None:
        chunks = []
        with conn:
            while data := conn.recv(65536):
                chunks.append(data)
        with self._received_lock:
            self.received.append(b"".join(chunks))


@pytest.fixture
def upstream() -> Iterator[CountingUpstream]:
    up = CountingUpstream()
    yield up
    up.close()


@pytest.fixture
def acceptor(
    request: pytest.FixtureRequest, upstream: CountingUpstream, tmp_path: Path
) -> Iterator[AcceptorHandle]:
    yield from acceptor_fronting(f"127.0.0.1:{upstream.port}", request.node.name, tmp_path)


def test_connect_and_close_never_reaches_the_upstream(
    acceptor: AcceptorHandle, upstream: CountingUpstream
) -> None:
    addr = acceptor.address("CLIENT")
    for _ in range(40):
        socket.create_connection(addr, timeout=5).close()
    wait_until(lambda: len(history_rows(acceptor, "close")) == 40, 10, what="40 closes")
    assert upstream.accepted == 0
    closes = history_rows(acceptor, "close")
    assert {r["reason"] for r in closes} == {"client_eof"}
    assert len(history_rows(acceptor, "register")) == 40  # registered, then closed


def test_a_silent_client_opens_no_upstream_until_it_sends(
    acceptor: AcceptorHandle, upstream: CountingUpstream
) -> None:
    addr = acceptor.address("CLIENT")
    s = socket.create_connection(addr, timeout=5)
    try:
        wait_until(lambda: len(history_rows(acceptor, "register")) == 1, 10, what="registered")
        assert upstream.accepted == 0
        # a request in two pieces: the first opens the upstream, both arrive, in order
        payload = api_versions_frame(7)
        s.sendall(payload[:3])
        time.sleep(0.05)
        s.sendall(payload[3:])
        wait_until(lambda: upstream.accepted == 1, 10, what="upstream opened")
        s.shutdown(socket.SHUT_WR)
        wait_until(lambda: len(upstream.received) == 1, 10, what="upstream read to EOF")
    finally:
        s.close()
    assert upstream.received == [payload]


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_both_sides_of_a_forwarded_connection_have_nodelay(
    upstream: CountingUpstream, tmp_path: Path, loop_kind: str
) -> None:
    """TCP_NODELAY on the client's socket (admission sets it, as Kafka's acceptor does) and
    on the upstream's (each loop's create_connection sets it): no second setsockopt."""
    handle = start_in_thread(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": f"127.0.0.1:{upstream.port}",
            "metrics.port": "-1",
        },
        loop_kind=loop_kind,
    )
    s = socket.create_connection(handle.address("CLIENT"), timeout=5)
    try:
        s.sendall(api_versions_frame(3))
        wait_until(lambda: upstream.accepted == 1, 10, what="upstream opened")
        (conn,) = list(handle.acceptor.conns.open)
        client_side, upstream_side = wait_until(
            lambda: all(conn.wire.transports()) and conn.wire.transports(),
            10,
            what="both transports",
        )
        for side in (client_side, upstream_side):
            sock = side.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        s.close()
        handle.stop()
