"""KIP-402 / KIP-612 limits enforced by the acceptor in front of a real broker.

Every test uses real sockets from distinct 127.0.0.x source addresses and the session Kafka
broker as upstream; outcomes are read from the sockets and from the acceptor's history.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptor import AcceptorHandle
from acceptor.testing import (
    api_versions_frame,
    connect,
    ping,
    raw,
    read_outcome,
    round_trip,
    wait_until,
)
from acceptor.testing import (
    history_rows as rows,
)
from base.admin.client import alter_ip_quota
from tests.integration.conftest import acceptor_starter

Start = Callable[..., AcceptorHandle]


@pytest.fixture
def start(kafka_broker: Any, tmp_path: Path) -> Iterator[Start]:
    with acceptor_starter(kafka_broker.bootstrap, tmp_path, "t", check_rows=True) as start:
        yield start


def _props(**kw: str) -> dict[str, str]:
    return {k.replace("_", "."): v for k, v in kw.items()}


def test_sixth_connection_from_one_ip_sees_eof_and_a_slot_frees_on_close(start: Start) -> None:
    h = start(**_props(max_connections_per_ip="5"))
    addr = h.address("CLIENT")
    conns = [connect(addr, "127.0.0.2") for _ in range(5)]
    for c in conns:
        assert ping(c).error_code == 0
    sixth = raw(addr, "127.0.0.2")
    assert read_outcome(sixth, 15) in ("eof", "reset")
    sixth.close()
    for c in conns:  # the first five keep working
        assert ping(c).error_code == 0
    assert round_trip(addr, "127.0.0.3") == "ok"  # another IP is not affected
    conns.pop().close()
    wait_until(lambda: h.call(lambda: h.acceptor.quotas.ip_count("127.0.0.2")) == 4, what="release")
    again = connect(addr, "127.0.0.2")
    assert ping(again).error_code == 0
    for c in [*conns, again]:
        c.close()
    rejects = rows(h, "reject")
    assert len(rejects) == 1
    assert rejects[0]["client_ip"] == "127.0.0.2" and rejects[0]["reason"] == "ip_count"
    assert '"max": 5' in rejects[0]["detail"]


def test_per_ip_overrides_by_ip_and_by_host_name(start: Start) -> None:
    h = start(
        **{
            "max.connections.per.ip": "100",
            "max.connections.per.ip.overrides": "127.0.0.2:2,localhost:1",
        }
    )
    addr = h.address("CLIENT")
    a = [connect(addr, "127.0.0.2") for _ in range(2)]
    for c in a:
        ping(c)
    assert round_trip(addr, "127.0.0.2") in ("eof", "reset")
    b = connect(addr, "127.0.0.1")  # localhost resolves to 127.0.0.1
    ping(b)
    assert round_trip(addr, "127.0.0.1") in ("eof", "reset")
    others = [connect(addr, "127.0.0.3") for _ in range(5)]
    for c in others:
        ping(c)
    for c in [*a, b, *others]:
        c.close()
    assert sorted(r["client_ip"] for r in rows(h, "reject")) == ["127.0.0.1", "127.0.0.2"]


def test_connection_beyond_max_connections_waits_until_another_closes(start: Start) -> None:
    h = start(**{"max.connections": "3"})
    addr = h.address("CLIENT")
    conns = [connect(addr, "127.0.0.2") for _ in range(3)]
    for c in conns:
        ping(c)
    waiting = raw(addr, "127.0.0.4")
    waiting.sendall(api_versions_frame())
    assert read_outcome(waiting, 1.5) == "timeout"  # accepted by TCP, not served
    conns.pop(0).close()
    assert read_outcome(waiting, 20) == "data"
    waiting.close()
    for c in conns:
        c.close()
    blocked = rows(h, "blocked")
    assert any(r["reason"] == "slot" and r["delay_ms"] >= 1000 for r in blocked)


def _hammer(addr: tuple[str, int], ip: str, seconds: float, results: list[str]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        results.append(round_trip(addr, ip, timeout=20))


def test_listener_creation_rate_keeps_accepts_within_kafkas_band(start: Start) -> None:
    rate, n, w_s, seconds = 10, 2, 1, 3.0
    h = start(
        **{
            "listener.name.client.max.connection.creation.rate": str(rate),
            "quota.window.num": str(n),
            "quota.window.size.seconds": str(w_s),
        }
    )
    addr = h.address("CLIENT")
    results: list[str] = []
    t0 = time.monotonic_ns()
    threads = [
        threading.Thread(target=_hammer, args=(addr, f"127.0.0.{10 + i}", seconds, results))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    t1 = time.monotonic_ns()
    assert set(results) == {"ok"}  # delayed, never refused
    admits = [r for r in rows(h, "admit") if t0 <= r["mono_ns"] <= t1]
    span_s = (t1 - t0) / 1e9
    # Kafka's meter admits at most bound x (elapsed + (n-1) w) (the padded window), plus one
    # per window for the record-then-check step; and delays never drop a connection.
    upper = rate * (span_s + (n - 1) * w_s) * 1.25 + 3
    lower = rate * span_s * 0.5
    assert lower <= len(admits) <= upper, (len(admits), lower, upper)
    delays = rows(h, "delay")
    assert delays and all(r["reason"] == "listener_rate" for r in delays)
    assert all(0 < r["delay_ms"] <= 1000 for r in delays)


def test_protected_listener_keeps_connecting_while_others_are_throttled(
    start: Start, kafka_broker: Any
) -> None:
    h = start(
        **{
            "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.upstream": kafka_broker.bootstrap,
            "max.connection.creation.rate": "5",
            # its own rate: without one it would take the broker-wide 5/s (Kafka 4.3.1;
            # test_protected_listener_inherits_the_broker_wide_rate_as_its_own)
            "listener.name.internal.max.connection.creation.rate": "100000",
            "quota.window.num": "2",
        }
    )
    client, internal = h.address("CLIENT"), h.address("INTERNAL")
    res_c: list[str] = []
    res_i: list[str] = []
    threads = [
        threading.Thread(target=_hammer, args=(client, f"127.0.0.{20 + i}", 2.5, res_c))
        for i in range(3)
    ]
    threads.append(threading.Thread(target=_hammer, args=(internal, "127.0.0.30", 2.5, res_i)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(res_i) == {"ok"} and set(res_c) == {"ok"}
    delays = rows(h, "delay")
    assert {r["listener"] for r in delays} == {"CLIENT"}
    assert all(r["reason"] == "broker_rate" for r in delays)
    admits_i = [r for r in rows(h, "admit") if r["listener"] == "INTERNAL"]
    admits_c = [r for r in rows(h, "admit") if r["listener"] == "CLIENT"]
    # the broker-wide rate would allow ~5/s x (2.5 s + 1 s); the protected listener is exempt
    assert len(admits_i) > 5 * 3.5 * 1.25 + 3 > len(admits_c) * 0.5


def test_protected_listener_inherits_the_broker_wide_rate_as_its_own(
    start: Start, kafka_broker: Any
) -> None:
    """Kafka 4.3.1 (bench.protected_listener_rate): INTERNAL, exempt from the broker-wide
    sensor, is delayed by its own listener sensor at the broker-wide rate."""
    h = start(
        **{
            "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.upstream": kafka_broker.bootstrap,
            "max.connection.creation.rate": "5",
            "quota.window.num": "2",
        }
    )
    res: list[str] = []
    _hammer(h.address("INTERNAL"), "127.0.0.30", 2.5, res)
    assert res and set(res) == {"ok"}
    delays = rows(h, "delay")
    assert delays and {r["listener"] for r in delays} == {"INTERNAL"}
    assert all(r["reason"] == "listener_rate" for r in delays)
    assert all(json.loads(r["detail"])["broker_delay_ms"] == 0 for r in delays)


@pytest.mark.parametrize("model", ["single", "split"])
def test_protected_listener_over_max_connections_evicts_lru_on_other_listener(
    start: Start, kafka_broker: Any, model: str
) -> None:
    """One over: the least recently used client connection is evicted, and only it (in
    `split`, by a processor process reading the count from shared memory, which must not
    evict again while its release is on its way)."""
    h = start(
        **{
            "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.upstream": kafka_broker.bootstrap,
            "max.connections": "3",
            "num.network.threads": "1",
            "acceptor.process.model": model,
        }
    )
    client = h.address("CLIENT")
    conns = [connect(client, "127.0.0.2") for _ in range(3)]
    for c in conns:
        ping(c)
    for c in conns[1:]:  # conns[0] becomes the least recently used
        ping(c)
    inter = connect(h.address("INTERNAL"), "127.0.0.3")
    ping(inter)  # admitted past max.connections: protected
    assert read_outcome(conns[0].sock, 15) in ("eof", "reset")
    time.sleep(0.7)  # a second eviction would come at the next turns (poll 300 ms)
    for c in conns[1:]:
        ping(c)
    h.stop()  # every process's rows written
    evicts = rows(h, "evict")
    assert (
        len(evicts) == 1
        and evicts[0]["listener"] == "CLIENT"
        and evicts[0]["reason"] == "max_connections"
    )
    for c in [*conns, inter]:
        c.close()


def test_ip_over_its_rate_quota_is_closed_within_the_window_others_unaffected(start: Start) -> None:
    h = start(**{"quota.window.num": "2", "quota.window.size.seconds": "1"})
    addr = h.address("CLIENT")
    alter_ip_quota(f"{addr[0]}:{addr[1]}", "127.0.0.2", 2)  # through the acceptor's admin path
    outcomes: list[tuple[str, float]] = []
    for _ in range(8):
        s = raw(addr, "127.0.0.2")
        t = time.monotonic()
        s.sendall(api_versions_frame())
        out = read_outcome(s, 15)
        outcomes.append((out, time.monotonic() - t))
        s.close()
    throttled = [(o, d) for o, d in outcomes if o != "data"]
    assert throttled, outcomes
    assert all(o in ("eof", "reset") for o, _ in throttled)
    assert all(d <= 1.0 + 2.0 for _, d in throttled)  # at most the window, plus generous slack
    assert [round_trip(addr, "127.0.0.3") for _ in range(8)] == ["ok"] * 8
    closes = rows(h, "throttle_close")
    assert {r["client_ip"] for r in closes} == {"127.0.0.2"}
    assert all(r["reason"] == "ip_rate" and 0 < r["delay_ms"] <= 1000 for r in closes)
    # never counted, never registered
    throttled_ids = {r["conn_id"] for r in closes}
    assert not throttled_ids & {r["conn_id"] for r in rows(h, "register")}
    assert h.call(lambda: h.acceptor.quotas.total) == 0


def test_the_loop_is_measured_while_a_throttled_socket_is_parked(start: Start) -> None:
    """A parked socket's close is timed by the acceptor loop's turn: while one is parked
    the heartbeat runs, so a stall of the loop then is measured (a `loop_lag` row the
    checker credits to a late close). Here the loop is held 200 ms by hand."""
    h = start(**{"quota.window.num": "2", "quota.window.size.seconds": "1"})
    addr = h.address("CLIENT")
    alter_ip_quota(f"{addr[0]}:{addr[1]}", "127.0.0.2", 1)
    socks = [raw(addr, "127.0.0.2") for _ in range(4)]
    listener = h.acceptor.listeners["CLIENT"]
    wait_until(lambda: h.call(lambda: len(listener.admission.parked)) > 0, what="a socket parked")
    h.call(lambda: time.sleep(0.2))  # the loop stands still while it is parked
    wait_until(lambda: rows(h, "throttle_close"), 15, what="the parked socket closed")
    stalls = [r for r in rows(h, "loop_lag") if r["reason"] == "stall"]
    assert stalls and max(r["delay_ms"] for r in stalls) >= 150, stalls
    for s in socks:
        s.close()


def test_queue_of_20_and_registrations_per_iteration_with_a_paused_processor(start: Start) -> None:
    h = start(**{"num.network.threads": "1"})
    addr = h.address("CLIENT")
    h.pause_processor("CLIENT", 0)
    socks = []
    for i in range(30):
        s = raw(addr, f"127.0.1.{i + 1}")
        s.sendall(api_versions_frame())
        socks.append(s)
    proc = h.acceptor.listeners["CLIENT"].processors[0]
    wait_until(lambda: h.call(lambda: proc.queue.qsize()) == 20, what="queue of 20 full")
    # the 21st is admitted and the acceptor blocks handing it over; the rest wait unaccepted
    wait_until(lambda: len(rows(h, "admit")) == 21, what="21 admits")
    time.sleep(0.5)
    assert len(rows(h, "admit")) == 21
    assert len(rows(h, "accept")) <= 22
    assert rows(h, "register") == []
    h.resume_processor("CLIENT", 0)
    for s in socks:
        assert read_outcome(s, 20) == "data"
        s.close()
    regs = rows(h, "register")
    assert len(regs) == 30
    import json

    per_iter: dict[int, int] = {}
    for r in regs:
        it = json.loads(r["detail"])["iteration"]
        per_iter[it] = per_iter.get(it, 0) + 1
    assert max(per_iter.values()) == 20  # the 20 queued ones in one iteration, never more
    blocked = rows(h, "blocked")
    assert any(r["reason"] == "queue_full" for r in blocked)


def test_round_robin_skips_a_full_queue(start: Start) -> None:
    h = start(**{"num.network.threads": "2"})
    addr = h.address("CLIENT")
    h.pause_processor("CLIENT", 0)
    results = [round_trip(addr, f"127.0.2.{i + 1}", timeout=0.5) for i in range(10)]
    # processor 0 holds every other connection unserved; processor 1 serves the rest
    assert results.count("ok") == 5 and results.count("timeout") == 5
    socks = []
    for i in range(30):
        s = raw(addr, f"127.0.3.{i + 1}")
        s.sendall(api_versions_frame())
        socks.append(s)
    p0 = h.acceptor.listeners["CLIENT"].processors[0]
    wait_until(lambda: h.call(lambda: p0.queue.qsize()) == 20, what="processor 0 queue full")
    # processor 0 took 15 more until its queue was full; the other 15 went to processor 1
    wait_until(lambda: len(rows(h, "request")) == 5 + 15, what="processor 1 served its share")
    served = sum(read_outcome(s, 0.05) == "data" for s in socks)
    assert served == 15
    h.resume_processor("CLIENT", 0)
    for s in socks:
        s.close()
