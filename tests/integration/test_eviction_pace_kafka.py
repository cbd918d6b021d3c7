"""The excess over max.connections is shed one channel per processor loop turn, on Kafka
and on ours.

Kafka 4.3.1's processor ends each loop turn with `closeExcessConnections` (one least
recently used channel), and the turn comes when its `poll(300)` returns: on I/O of its own
channels, else after 300 ms. Six idle CLIENT connections (max.connections=6, three
processors), then six on the protected REPLICATION (its own maximum 100): the six CLIENT
ones are all closed, in two waves a poll timeout apart (three processors, one each per
turn). The assertion is the shape (all shed, not all at once); the numbers side by side
are `python -m bench.eviction_pace`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptor import start_in_thread
from acceptor.testing import api_versions_frame, close_times, raw, read_outcome

N = 6
LISTENERS = ("CLIENT", "REPLICATION")
LIMITS = {"max.connections": str(N), "listener.name.replication.max.connections": "100"}
#: two waves are a poll timeout (300 ms) apart; a slower machine only spreads them more
NOT_ALL_AT_ONCE_S = 0.2


@pytest.fixture(params=["broker", "acceptor"])
def addrs(
    request: pytest.FixtureRequest,
    module_broker_factory: Callable[..., Any],
    kafka_broker: Any,
    tmp_path: Path,
) -> Iterator[dict[str, tuple[str, int]]]:
    if request.param == "broker":
        b = module_broker_factory(
            properties=LIMITS, listeners=LISTENERS, inter_broker_listener="REPLICATION"
        )
        yield {n: ("127.0.0.1", b.listener_ports[n]) for n in LISTENERS}
        return
    h = start_in_thread(
        {
            "listeners": ",".join(f"{n}://127.0.0.1:0" for n in LISTENERS),
            "inter.broker.listener.name": "REPLICATION",
            "metrics.port": "-1",
            **{f"listener.name.{n.lower()}.upstream": kafka_broker.bootstrap for n in LISTENERS},
            **LIMITS,
        },
        history_dir=tmp_path / "history",
        run_id="eviction-pace",
    )
    try:
        yield {n: h.address(n) for n in LISTENERS}
    finally:
        h.stop()


def _answered(addr: tuple[str, int], ip: str) -> socket.socket:
    s = raw(addr, ip, 10)
    s.sendall(api_versions_frame())
    assert read_outcome(s, 10) == "data", (addr, ip)
    return s


def test_idle_excess_is_shed_one_per_processor_turn(addrs: dict[str, tuple[str, int]]) -> None:
    held = [_answered(addrs["CLIENT"], f"127.0.6.{i + 1}") for i in range(N)]
    extra = [_answered(addrs["REPLICATION"], f"127.0.7.{i + 1}") for i in range(N)]
    try:
        closed = close_times(held, 5.0)
        for s in extra:  # the protected listener is never evicted
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
    finally:
        for s in held + extra:
            s.close()
    assert len(closed) == N, closed
    times = sorted(closed.values())
    assert times[-1] - times[0] >= NOT_ALL_AT_ONCE_S, times
