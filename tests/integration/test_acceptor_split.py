"""The split process model (`acceptor.process.model=split`) in front of the real broker.

An accepting process (here: the test's thread) owns admission and the connection engine;
`num.network.threads` processor processes register, forward, evict and close. What is
checked is what crosses between them: the sockets (served by the processor processes), the
releases (the engine's counts fall back), eviction (read from shared counts: one excess,
one eviction), the rows of both kinds of process in one history, and what the mode
refuses.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from acceptor import AcceptorHandle, start_in_thread
from acceptor.config import MODEL_KEY, PROCESSES_KEY
from acceptor.testing import (
    connect,
    ping,
    raw,
    read_outcome,
    round_trip,
    until_throttled,
    wait_until,
)
from base.admin.client import (
    KafkaWire,
    alter_broker_config,
    alter_client_quota,
    alter_ip_quota,
    describe_ip_quotas,
)
from base.history import read_history
from base.history.events import conformance
from base.quota.config import ConfigError
from tests.integration.conftest import acceptor_starter

Start = Callable[..., AcceptorHandle]


@pytest.fixture
def start(kafka_broker: Any, tmp_path: Path) -> Iterator[Start]:
    defaults = {MODEL_KEY: "split", "history.flush.interval.ms": "50"}
    with acceptor_starter(kafka_broker.bootstrap, tmp_path, "t", defaults) as start:
        yield start


def _count(h: AcceptorHandle) -> int:
    return int(h.call(lambda: h.acceptor.quotas.broker_count()[0]))


def _rows(h: AcceptorHandle) -> list[dict[str, Any]]:
    """Every acceptor row of both kinds of process (after `stop`: all flushed)."""
    writer = h.acceptor.rec.writer
    assert writer is not None
    return read_history(writer.dir.parent, "acceptor").to_pylist()


def test_connections_are_served_by_the_processor_processes_and_released_on_close(
    start: Start,
) -> None:
    h = start(**{"num.network.threads": "3", PROCESSES_KEY: "2"})
    pids = h.acceptor.split.pids()  # type: ignore[union-attr]
    assert len(pids) == 2 and os.getpid() not in pids
    addr = h.address("CLIENT")
    conns = [connect(addr, f"127.0.0.{10 + i}") for i in range(6)]
    for c in conns:
        assert ping(c).error_code == 0
    assert _count(h) == 6
    for c in conns:
        c.close()
    wait_until(lambda: _count(h) == 0, 15, what="every release counted in the engine")
    assert round_trip(addr, "127.0.0.20") == "ok"
    h.stop()
    rows = _rows(h)
    assert conformance(rows) == []
    registers = [r for r in rows if r["event"] == "register"]
    assert sorted(r["processor"] for r in registers) == [0, 0, 0, 1, 1, 2, 2]  # round-robin
    # processors 0 and 2 in process 0, processor 1 in process 1, each writing its own file
    folder = h.acceptor.rec.writer.dir  # type: ignore[union-attr]
    for pid, mine in zip(pids, ({0, 2}, {1}), strict=True):
        table = pq.read_table(sorted(folder.glob(f"acceptor-{pid}-*.parquet")))
        served = {r["processor"] for r in table.to_pylist() if r["event"] == "register"}
        assert served == mine
    closes = Counter(r["reason"] for r in rows if r["event"] == "close")
    assert closes == {"client_eof": 7}
    # the processor processes' counts reach the accepting process's metrics
    counts = h.acceptor.metrics.listener_counts
    assert counts[("CLIENT", "accepted")] == counts[("CLIENT", "closed")] == 7
    assert sum(n for n, _ in h.acceptor.metrics.request_time.values()) >= 7


def test_per_ip_count_rejects_in_the_accepting_process_and_a_close_frees_the_slot(
    start: Start,
) -> None:
    h = start(**{"max.connections.per.ip": "2"})
    addr = h.address("CLIENT")
    a, b = connect(addr, "127.0.0.2"), connect(addr, "127.0.0.2")
    ping(a), ping(b)
    third = raw(addr, "127.0.0.2")
    assert read_outcome(third, 15) in ("eof", "reset")
    third.close()
    a.close()  # its processor process reports the release
    wait_until(lambda: h.call(lambda: h.acceptor.quotas.ip_count("127.0.0.2")) == 1, 15)
    again = connect(addr, "127.0.0.2")
    assert ping(again).error_code == 0
    again.close()
    b.close()


def test_quota_changes_through_a_processor_process_reach_the_engine(start: Start) -> None:
    """Admin requests arrive on a processor process and are answered by the accepting
    process, where the quotas are: the new IP rate is enforced, described and written as
    an `admin` row; a new max.connections reaches what the processors read."""
    h = start(quota__window__num="2")
    bootstrap = h.bootstrap("CLIENT")
    alter_ip_quota(bootstrap, "127.0.0.9", 5)
    assert describe_ip_quotas(bootstrap) == {"127.0.0.9": 5.0}
    answered, _, outcome = until_throttled(h.address("CLIENT"), "127.0.0.9")
    # Kafka's meter: 5/s over two 1 s samples, the first throttled within about 10
    assert 5 <= answered <= 11 and outcome in ("eof", "reset")
    assert round_trip(h.address("CLIENT"), "127.0.0.10") == "ok"  # another address is not
    alter_broker_config(bootstrap, {"max.connections": "7"})
    assert h.acceptor.quota_cfg.max_connections == 7
    assert h.acceptor.split.shared.read()[1] == 7  # type: ignore[union-attr]
    h.stop()
    admins = [r["reason"] for r in _rows(h) if r["event"] == "admin"]
    assert admins == ["applied", "applied"]  # the two changes, by the accepting process


def test_a_request_quota_throttles_and_mutes_through_the_accepting_process_meters(
    start: Start,
) -> None:
    """KIP-124 in `split`: the hog's connections may be on any processor process, its
    charges all go to the one set of meters, and the throttled response carries the
    throttle and mutes the channel for it (KIP-219), as in `single`."""
    h = start(quota__window__num="2", **{PROCESSES_KEY: "3"})
    boot = h.bootstrap("CLIENT")
    alter_client_quota(boot, {"client-id": "hog"}, {"request_percentage": 0.2})
    hogs = [KafkaWire(boot, client_id="hog") for _ in range(3)]  # one per processor
    throttle = 0
    for i in range(300):  # bounded: stops at the first throttled response
        asked = time.monotonic()
        resp = ping(hogs[i % 3])
        if resp.throttle_time_ms:
            throttle, muted = resp.throttle_time_ms, hogs[i % 3]
            break
    assert 0 < throttle <= 1000
    assert ping(muted).error_code == 0  # served once the mute ends
    # the mute runs from the throttled response's send, after its request was sent: the
    # next answer cannot come before that request's send + the throttle (an order, not a
    # speed: the client's own delays only make it later)
    assert time.monotonic() - asked >= throttle / 1000
    for w in hogs:
        w.close()
    h.stop()
    rows = _rows(h)
    thr = [r for r in rows if r["event"] == "request_throttle"]
    assert thr and {r["client_id"] for r in thr} == {"hog"}
    assert thr[0]["delay_ms"] == throttle
    assert {r["processor"] for r in rows if r["event"] == "register"} == {0, 1, 2}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (PROCESSES_KEY, "4"),  # more processes than num.network.threads (3)
    ],
)
def test_what_the_split_model_does_not_do_is_refused_at_start(
    kafka_broker: Any, key: str, value: str
) -> None:
    props = {
        "listeners": "CLIENT://127.0.0.1:0",
        "listener.name.client.upstream": kafka_broker.bootstrap,
        "metrics.port": "-1",
        MODEL_KEY: "split",
        key: value,
    }
    with pytest.raises(ConfigError) as err:
        start_in_thread(props)
    assert err.value.key == key and err.value.value == value and err.value.reason


def test_a_processor_process_that_dies_stops_the_acceptor_with_the_reason(start: Start) -> None:
    h = start(**{"num.network.threads": "2", PROCESSES_KEY: "2"})
    victim = h.acceptor.split.pids()[1]  # type: ignore[union-attr]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: h.acceptor.stopped, 15, what="the acceptor stopping")
    assert h.acceptor.failure is not None
    assert "processor process 1" in h.acceptor.failure
    assert f"pid {victim}" in h.acceptor.failure


def test_a_processor_process_that_cannot_start_fails_the_start(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")
    props = {
        "listeners": "CLIENT://127.0.0.1:0",
        "listener.name.client.upstream": kafka_broker.bootstrap,
        "metrics.port": "-1",
        MODEL_KEY: "split",
    }
    with pytest.raises(RuntimeError, match="exited with code 1 before it was ready"):
        start_in_thread(props)


def test_processor_processes_end_when_the_accepting_process_is_killed(tmp_path: Path) -> None:
    """No orphans: a processor process hears its link close and ends by itself."""
    upstream = socket.create_server(("127.0.0.1", 0))
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "acceptor",
         "--set", "listeners=CLIENT://127.0.0.1:0",
         "--set", f"listener.name.client.upstream=127.0.0.1:{upstream.getsockname()[1]}",
         "--set", "metrics.port=-1", "--set", f"{MODEL_KEY}=split",
         "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, 60, what="ready")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 3  # one processor process per processor (Kafka's three)
        proc.kill()
        proc.wait(10)
        alive = lambda: [c for c in children if Path(f"/proc/{c}").exists()]  # noqa: E731
        wait_until(lambda: not alive(), 15, what="the processor processes ending")
    finally:
        if proc.poll() is None:
            proc.kill()
        upstream.close()


def test_a_sigterm_to_the_whole_group_still_closes_and_records_every_connection(
    tmp_path: Path,
) -> None:
    """`harness run` stops the acceptor by signalling its process group: the processor
    processes get the SIGTERM too, and must leave the stop to the accepting process, so
    every admitted connection has its `close` row (a lost one reads as still open, which
    the concurrency checks count against the limits)."""
    upstream = socket.create_server(("127.0.0.1", 0))
    ready, history = tmp_path / "ready.json", tmp_path / "history"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "acceptor",
         "--set", "listeners=CLIENT://127.0.0.1:0",
         "--set", f"listener.name.client.upstream=127.0.0.1:{upstream.getsockname()[1]}",
         "--set", "metrics.port=-1", "--set", f"{MODEL_KEY}=split",
         "--history", str(history), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    socks = []
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, 60, what="ready")
        port = json.loads(ready.read_text())["listeners"]["CLIENT"]["port"]
        socks = [raw(("127.0.0.1", port), f"127.0.0.{20 + i}") for i in range(6)]
        time.sleep(0.5)  # registered
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for s in socks:
            s.close()
        upstream.close()
    rows = read_history(history, "acceptor").to_pylist()
    closed = {r["conn_id"]: r["reason"] for r in rows if r["event"] == "close"}
    admitted = {r["conn_id"] for r in rows if r["event"] == "admit"}
    assert len(admitted) == 6 and set(closed) == admitted
    assert set(closed.values()) == {"shutdown"}
