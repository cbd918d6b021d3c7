"""A PROXY listener whose admission is stalled leaves new connections in the kernel backlog.

Kafka's acceptor thread accepts one socket, admits it (sleeping out a rate delay, waiting
for a slot) and only then accepts the next, so a stalled admission leaves the rest in the
listen queue, where the kernel holds them (and drops past `socket.listen.backlog.size`).
The acceptor reads a PROXY header before admission; it must not accept ahead of a stalled
admission just because headers can be read: at most `PROXY_PENDING_MAX` sockets wait in
user space besides the hand-off slot and the one in admission. Without PROXY headers only
the one in admission is out of the kernel.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptor import AcceptorHandle, start_in_thread
from acceptor.listener import PROXY_PENDING_MAX
from acceptor.testing import history_rows, listen_backlog, raw
from base.history import read_history
from base.wire.proxy import encode_v2

N = 30


@pytest.fixture(params=["required", "off"])
def handle(request: pytest.FixtureRequest, kafka_broker: Any, tmp_path: Path) -> Iterator[Any]:
    h = start_in_thread(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": kafka_broker.bootstrap,
            "listener.name.client.proxy.protocol": request.param,
            # ~11 admitted at once (the window is padded to 10 s), then one per second
            "max.connection.creation.rate": "1",
            "metrics.port": "-1",
        },
        history_dir=tmp_path / "history",
        run_id="proxy-backlog",
    )
    yield h, request.param
    h.stop()


def _connect(addr: tuple[str, int], mode: str, socks: list[Any]) -> None:
    """N clients from 127.0.0.2, each with a PROXY header unless the listener takes none;
    appended as they connect (the caller closes them)."""
    for i in range(N):
        s = raw(addr, "127.0.0.2", 10)
        if mode != "off":
            s.sendall(encode_v2(f"10.9.0.{i + 1}", 4000 + i, addr[0], addr[1]))
        socks.append(s)


def test_a_stalled_admission_leaves_connections_in_the_kernel_backlog(
    handle: tuple[AcceptorHandle, str],
) -> None:
    h, mode = handle
    addr = h.address("CLIENT")
    socks = []
    try:
        _connect(addr, mode, socks)
        time.sleep(2.0)  # the first ~11 admitted, then the admission waits ~1 s per socket
        backlog = listen_backlog(addr[1])
        decided = len(
            [r for r in history_rows(h) if r["event"] in ("admit", "reject", "throttle_close")]
        )
        in_user_space = N - backlog - decided
        # besides those decided: the one in admission; with PROXY headers also the hand-off
        # slot and the sockets whose header is being read (without, the listening socket is
        # not even watched while an admission waits)
        allowed = 1 if mode == "off" else 1 + 1 + PROXY_PENDING_MAX
        assert backlog > 0, (backlog, decided)
        assert in_user_space <= allowed, (backlog, decided, in_user_space)
    finally:
        for s in socks:
            s.close()


def test_the_stop_records_what_its_close_resets_in_the_backlog(
    handle: tuple[AcceptorHandle, str],
) -> None:
    """Stopped with the backlog full, the acceptor says how many connections its listening
    socket still held (`listener_close.detail.queued`): with the ones it took, each of
    which has a row, all N."""
    h, mode = handle
    addr = h.address("CLIENT")
    writer = h.acceptor.rec.writer
    assert writer is not None
    socks = []
    try:
        _connect(addr, mode, socks)
        time.sleep(0.5)
        h.stop()  # with every client still connected
    finally:
        for s in socks:
            s.close()
    rows = read_history(writer.dir.parent, "acceptor").to_pylist()
    closes = [r for r in rows if r["event"] == "listener_close"]
    assert [r["listener"] for r in closes] == ["CLIENT"]
    queued = json.loads(closes[0]["detail"])["queued"]
    # every socket taken out of the kernel has a row: accepted, or (with PROXY headers)
    # closed at the stop while its header was read or it waited for admission
    taken = len({r["conn_id"] for r in rows if r["conn_id"] is not None})
    assert queued > 0, (queued, taken)
    assert queued + taken == N, (queued, taken)
