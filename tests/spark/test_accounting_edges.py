"""`accounting` on hand-built histories, at the edges of its rule: an attempt that
connected and is in no enforcer's history is explained only by a kernel drop counted
during its life (1 ns either side of a reading decides it), or by the acceptor's closing
listener having queued it (one more open attempt than it held fails); a reused source port pairs
each acceptor connection with the latest attempt started before it; on Kafka, the
creation counter must cover the attempts served between two scrapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.checks.accounting import CREATED, check_accounting
from analysis.load import load_run
from base.history import HistoryWriter
from tests.handbuilt import record
from tests.spark.histories import hand_built_run

S = 1_000_000_000
MS = 1_000_000
T0 = 5_000 * S
READ_NS = 10_000  # each kernel reading takes 10 µs


def _run(tmp: Path, name: str, build: Any, target: str = "acceptor") -> Path:
    return hand_built_run(tmp, name, build, config_ns=T0, target=target)


def _attempt(
    cw: HistoryWriter,
    port: int,
    start: int,
    end: int,
    *,
    ok: bool = True,
    fail: str | None = None,
    ready: int | None = None,
) -> None:
    addr = {"client_ip": "127.0.0.7", "client_port": port, "listener": "CLIENT"}
    record(cw, "connect_invoke", mono_ns=start, detail={"profile": "storm"}, **addr)
    if fail is not None:
        record(cw, "connect_fail", mono_ns=end, reason=fail, latency_ms=1.0, **addr)
        return
    if ok:
        record(cw, "connect_ok", mono_ns=start + MS, latency_ms=1.0, **addr)
    if ready is not None:
        record(cw, "ready", mono_ns=ready, latency_ms=1.0, api_key=18, **addr)
    if end:
        outcome = "served" if ready is not None else "eof_after_accept"
        record(cw, "closed", mono_ns=end, reason="eof", latency_ms=1.0,
                  detail={"outcome": outcome, "profile": "storm"}, **addr)  # fmt: skip


def _accepted(aw: HistoryWriter, n: int, port: int, at: int) -> None:
    conn = {"conn_id": f"CLIENT-{n}", "listener": "CLIENT", "client_ip": "127.0.0.7",
            "client_port": port}  # fmt: skip
    record(aw, "accept", mono_ns=at, **conn)
    record(aw, "admit", mono_ns=at, delay_ms=0.0, **conn)
    record(aw, "close", mono_ns=at + 100 * MS, reason="client_eof", **conn)


def _readings(hw: HistoryWriter, *points: tuple[int, int]) -> None:
    for t, drops in points:
        record(hw, "kernel_net", mono_ns=t, latency_ms=READ_NS / MS,
                  detail={"listen_drops": drops, "listen_overflows": drops, "reqq_full_drop": 0,
                          "syn_cookies": 0, "netns": "net:[1]"})  # fmt: skip


def _case(lost_ends_at: int, with_readings: bool = True) -> Any:
    """Port 40001 used twice (both accepted, in order), a refused attempt, one cut off at
    the stop, and port 40009: connected, never accepted. The kernel counted one drop,
    between its readings at T0+1 s and T0+2 s."""

    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        _attempt(cw, 40001, T0 + 100 * MS, T0 + 200 * MS)
        _accepted(aw, 1, 40001, T0 + 150 * MS)
        _attempt(cw, 40001, T0 + 300 * MS, T0 + 400 * MS)
        _accepted(aw, 2, 40001, T0 + 350 * MS)
        _attempt(cw, 40002, T0 + 300 * MS, T0 + 301 * MS, fail="refused")
        _attempt(cw, 40003, T0 + 2_500 * MS, 0, ok=False)  # no row after its start
        _attempt(cw, 40009, T0 + 500 * MS, lost_ends_at)
        if with_readings:
            _readings(hw, (T0, 0), (T0 + S, 0), (T0 + 2 * S, 1), (T0 + 3 * S, 1))

    return build


def test_a_lost_attempt_that_ended_before_the_drops_interval_fails(
    spark: Any, tmp_path: Path
) -> None:
    # the drop happened after the reading that began at T0+1 s; the attempt ended exactly
    # then: it cannot be the one the kernel dropped
    r = check_accounting(load_run(spark, _run(tmp_path, "lost", _case(T0 + S))))
    assert r.verdict == "fail", r.observed
    assert [w["client_port"] for w in r.witnesses] == [40009]
    assert "5 attempts = 2 accepted + 0 dropped by the kernel + 1 connect errors" in r.observed
    assert "1 cut off at the stop; 1 unexplained" in r.observed


def test_a_lost_attempt_alive_1ns_into_the_drops_interval_is_the_drop(
    spark: Any, tmp_path: Path
) -> None:
    r = check_accounting(load_run(spark, _run(tmp_path, "dropped", _case(T0 + S + 1))))
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert "1 dropped by the kernel" in r.observed and r.judged == 5


def test_without_the_kernels_counters_a_lost_attempt_is_not_judged(
    spark: Any, tmp_path: Path
) -> None:
    run = _run(tmp_path, "no-readings", _case(T0 + S + 1, with_readings=False))
    r = check_accounting(load_run(spark, run))
    assert r.verdict == "unknown", r.observed
    assert "could not be judged" in r.observed


def _reused_after_a_drop(drops_after: int) -> Any:
    """The soak's shape: port 40001 accepted, then reused by an attempt that connected
    and was never accepted (the kernel dropped it), then reused again and accepted. A drop
    is counted between the readings at T0+1 s and T0+2 s when `drops_after` is 1."""

    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        _attempt(cw, 40001, T0 + 100 * MS, T0 + 200 * MS)
        _accepted(aw, 1, 40001, T0 + 150 * MS)
        _attempt(cw, 40001, T0 + 300 * MS, T0 + 1_500 * MS)  # connected, timed out
        _attempt(cw, 40001, T0 + 2_500 * MS, T0 + 2_600 * MS)
        _accepted(aw, 2, 40001, T0 + 2_550 * MS)
        _readings(hw, (T0, 0), (T0 + S, 0), (T0 + 2 * S, drops_after), (T0 + 3 * S, drops_after))

    return build


def test_a_reused_port_pairs_its_connection_with_the_attempt_it_came_from(
    spark: Any, tmp_path: Path
) -> None:
    # in start order the second attempt would take the second connection and leave the
    # third attempt (alive after the drop's interval) unexplained
    r = check_accounting(load_run(spark, _run(tmp_path, "reused", _reused_after_a_drop(1))))
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert "3 attempts = 2 accepted + 1 dropped by the kernel" in r.observed


def test_the_dropped_attempt_on_a_reused_port_is_the_witness_without_a_drop(
    spark: Any, tmp_path: Path
) -> None:
    r = check_accounting(load_run(spark, _run(tmp_path, "reused-lost", _reused_after_a_drop(0))))
    assert r.verdict == "fail", r.observed
    assert [w["mono_ns"] for w in r.witnesses] == [T0 + 300 * MS]


def test_every_attempt_accepted_passes_without_any_drop(spark: Any, tmp_path: Path) -> None:
    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        for i in range(3):
            _attempt(cw, 41000 + i, T0 + i * S, T0 + i * S + 5 * MS)
            _accepted(aw, i, 41000 + i, T0 + i * S + 2 * MS)

    r = check_accounting(load_run(spark, _run(tmp_path, "all", build)))
    assert r.verdict == "pass" and r.judged == 3


def _scrape(hw: HistoryWriter, at: int, created: float) -> None:
    samples = [[CREATED, {"listener": "CLIENT", "networkProcessor": str(p)}, created / 2]
               for p in (0, 1)]  # fmt: skip
    detail = {"url": "u", "target": "broker", "scrape_ms": 2.0, "samples": samples}
    record(hw, "kafka_metrics", mono_ns=at, latency_ms=2.0, detail=detail)


def _kafka_case(grew: float) -> Any:
    """Three attempts start after the scrape at T0 ended (T0 + 1 ms) and are served
    before the one at T0 + 1 s began (T0 + 1 s − 1 ms)."""

    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        _scrape(hw, T0, 10.0)
        for i in range(3):
            start = T0 + MS + 1 + i * 100 * MS
            _attempt(cw, 42000 + i, start, start + 50 * MS, ready=start + 10 * MS)
        _attempt(cw, 42009, T0 + 990 * MS, T0 + 1_500 * MS, ready=T0 + S - MS + 1)  # after
        _scrape(hw, T0 + S, 10.0 + grew)

    return build


def test_kafka_counting_fewer_connections_than_were_served_fails(
    spark: Any, tmp_path: Path
) -> None:
    run = _run(tmp_path, "kafka-short", _kafka_case(2.0), target="broker")
    r = check_accounting(load_run(spark, run))
    assert r.verdict == "fail", r.observed
    assert "3 attempts were served" in r.witnesses[0]["why"]


def test_kafka_counting_every_served_connection_passes(spark: Any, tmp_path: Path) -> None:
    run = _run(tmp_path, "kafka-ok", _kafka_case(3.0), target="broker")
    r = check_accounting(load_run(spark, run))
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert r.judged == 1


def test_no_scrape_pair_spans_a_broker_restart(spark: Any, tmp_path: Path) -> None:
    # the restarted broker counts from zero: 3 served against a counter that went 10 -> 1
    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        _kafka_case(-9.0)(cw, aw, hw)
        record(hw, "fault_start", mono_ns=T0 + 400 * MS, reason="broker_kill", detail={})
        record(hw, "fault_end", mono_ns=T0 + 600 * MS, reason="broker_kill", detail={})

    r = check_accounting(load_run(spark, _run(tmp_path, "kafka-restart", build, target="broker")))
    assert r.verdict == "unknown" and r.judged == 0, r.observed


def _queued_at_the_stop(queued: int) -> Any:
    """One attempt accepted; three that connected late (40010-40012, in that order) and
    were open when the acceptor closed its listening socket with `queued` connections in
    its accept queue. The kernel counted no drop."""

    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        _attempt(cw, 40001, T0 + 100 * MS, T0 + 200 * MS)
        _accepted(aw, 1, 40001, T0 + 150 * MS)
        for i, port in enumerate((40010, 40011, 40012)):
            _attempt(cw, port, T0 + 2_500 * MS + i * MS, 0)  # no row after connect_ok
        record(aw, "listener_close", mono_ns=T0 + 3 * S, listener="CLIENT",
                  detail={"queued": queued})  # fmt: skip
        _readings(hw, (T0, 0), (T0 + S, 0), (T0 + 2 * S, 0), (T0 + 4 * S, 0))

    return build


def test_attempts_in_the_accept_queue_at_the_stop_are_the_ones_it_reset(
    spark: Any, tmp_path: Path
) -> None:
    r = check_accounting(load_run(spark, _run(tmp_path, "queued", _queued_at_the_stop(3))))
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert "4 attempts = 1 accepted + 0 dropped by the kernel" in r.observed
    assert "+ 3 in the accept queue when the acceptor closed it; 0 unexplained" in r.observed


def test_one_more_open_attempt_than_the_queue_held_fails_naming_the_earliest(
    spark: Any, tmp_path: Path
) -> None:
    r = check_accounting(load_run(spark, _run(tmp_path, "short", _queued_at_the_stop(2))))
    assert r.verdict == "fail", r.observed
    assert [w["client_port"] for w in r.witnesses] == [40010]
    assert "+ 2 in the accept queue when the acceptor closed it; 1 unexplained" in r.observed
