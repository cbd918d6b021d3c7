"""A client that half-closes at once gets a FIN back, as from the broker, never a reset.

Found with Trogdor's ConnectionStress CONNECT action (issue 14): the client's EOF reached the
acceptor while the client transport was still being made; the connection then ended as if
evicted, with SO_LINGER 0 (a reset), while the history said `client_eof`.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from typing import Any

import pytest

from acceptor import AcceptorHandle
from acceptor.testing import history_rows, wait_until
from base.admin.client import split_bootstrap


def answer_to_half_close(addr: tuple[str, int], wait_s: float) -> str:
    s = socket.create_connection(addr, timeout=10)
    try:
        if wait_s:
            time.sleep(wait_s)
        s.shutdown(socket.SHUT_WR)
        try:
            return "fin" if s.recv(100) == b"" else "data"
        except ConnectionResetError:
            return "reset"
    finally:
        s.close()


@pytest.fixture
def acceptor(fronted_acceptor: AcceptorHandle) -> AcceptorHandle:
    return fronted_acceptor


@pytest.mark.parametrize("wait_s", [0.0, 0.05])
def test_an_immediate_half_close_gets_a_fin_as_from_the_broker(
    acceptor: AcceptorHandle, kafka_broker: Any, wait_s: float
) -> None:
    direct = Counter(
        answer_to_half_close(split_bootstrap(kafka_broker.bootstrap), wait_s) for _ in range(30)
    )
    fronted = Counter(answer_to_half_close(acceptor.address("CLIENT"), wait_s) for _ in range(30))
    assert direct == fronted == Counter({"fin": 30})
    # the close row follows the FIN (a socket closed at registration is closed at once)
    wait_until(lambda: len(history_rows(acceptor, "close")) >= 30, 10, what="30 close rows")
    closes = history_rows(acceptor, "close")
    assert len(closes) == 30 and {r["reason"] for r in closes} <= {"client_eof", "upstream_eof"}


def pipelined_then_half_close(addr: tuple[str, int]) -> tuple[int, str]:
    """Three ApiVersions in one write, then the client's FIN: (responses read, how it ended)."""
    from acceptor.testing import api_versions_frame
    from base.wire.framing import FrameDecoder

    s = socket.create_connection(addr, timeout=10)
    decoder, answered = FrameDecoder(2**31 - 1), 0
    try:
        s.sendall(b"".join(api_versions_frame(i) for i in (1, 2, 3)))
        s.shutdown(socket.SHUT_WR)
        while True:
            data = s.recv(65536)
            if not data:
                return answered, "fin"
            answered += len(decoder.feed(data))
    except ConnectionResetError:
        return answered, "reset"
    finally:
        s.close()


def test_requests_sent_before_a_half_close_are_all_answered_as_by_the_broker(
    acceptor: AcceptorHandle, kafka_broker: Any
) -> None:
    # the broker reads the requests one at a time, then the EOF; the acceptor holds the
    # client's EOF until every request before it was forwarded (it used to drop them when
    # the EOF came before the upstream connection was up)
    direct = [pipelined_then_half_close(split_bootstrap(kafka_broker.bootstrap)) for _ in range(10)]
    fronted = [pipelined_then_half_close(acceptor.address("CLIENT")) for _ in range(10)]
    assert direct == fronted == [(3, "fin")] * 10
