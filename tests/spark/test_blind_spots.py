"""The gate's blind spots, on small hand-built histories at the edges of each rule.

- disagreement is not absence: an enforcer that keyed every client under one other
  address fails `client_acceptor_agreement` (and `harness analyze --gate` exits 1),
  naming the address; an unmatched connection that carried admin requests, or came
  before the load, is explained;
- `request_throttle_mutes`: a throttled connection's next response no earlier than the
  throttled request's send + throttle (exact), the next forward on the acceptor no
  earlier than the throttle's end − 1 ms;
- `ip_count_reject_closes_at_once` is exercised only in the parts it judged: rejects of
  steady clients alone leave "close timing" unjudged (unknown), an engine client's EOF
  within slack passes and one just past it fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis.checks.base import PASS, UNKNOWN, run_check
from analysis.checks.clients import check_agreement
from analysis.checks.processors import check_reject_closes_at_once
from analysis.checks.requests import check_throttle_mutes
from analysis.load import load_run
from base.history import HistoryWriter
from harness.cli import main
from tests.handbuilt import record

S = 1_000_000_000
MS = 1_000_000
T0 = 5_000 * S


def _run(tmp: Path, name: str, build: Any, config: dict[str, Any] | None = None) -> Path:
    run = tmp / name
    (run / "history").mkdir(parents=True)
    (run / "run.json").write_text(
        json.dumps({"run_id": name, "target": "acceptor", "scenario": name})
    )
    cw = HistoryWriter(run / "history", "client", name, background=False)
    aw = HistoryWriter(run / "history", "acceptor", name, background=False)
    hw = HistoryWriter(run / "history", "harness", name, background=False)
    record(hw, "config", mono_ns=T0, detail=config or {"max.connections": 2147483647})
    build(cw, aw, hw)
    for w in (cw, aw, hw):
        w.close()
    return run


def _served(cw: HistoryWriter, aw: HistoryWriter, i: int, seen_as: str | None) -> None:
    """Client i (127.0.0.100 + i % 3) connects and is served; the acceptor records it under
    its own address, or under ``seen_as`` (another address and port) when given."""
    ip, port = f"127.0.0.{100 + i % 3}", 40_000 + i
    t = T0 + 1 * S + i * 10 * MS
    c = {"client_ip": ip, "client_port": port}
    record(cw, "connect_invoke", mono_ns=t, detail={"profile": "single_ip_flood"}, **c)
    record(cw, "connect_ok", mono_ns=t + MS // 10, latency_ms=0.1, **c)
    record(cw, "ready", mono_ns=t + 2 * MS, latency_ms=2.0, api_key=18, **c)
    a = {"client_ip": seen_as, "client_port": 50_000 + i} if seen_as else c
    conn = {"conn_id": f"CLIENT-{i}", "listener": "CLIENT", **a}
    record(aw, "accept", mono_ns=t + MS // 2, **conn)
    record(aw, "admit", mono_ns=t + MS // 2 + 1_000, delay_ms=0.0, **conn)
    record(aw, "close", mono_ns=t + 5 * MS, reason="client_eof", **conn)
    record(
        cw,
        "closed",
        mono_ns=t + 5 * MS,
        reason="done",
        detail={"outcome": "served", "profile": "single_ip_flood"},
        **c,
    )


def test_an_enforcer_that_keys_every_client_on_one_other_address_fails(
    spark: Any, tmp_path: Path
) -> None:
    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        for i in range(30):
            _served(cw, aw, i, seen_as="127.0.0.250")

    run = _run(tmp_path, "proxy-ignored", build)
    result = check_agreement(load_run(spark, run))
    assert result.verdict == "fail", result.observed
    assert result.witnesses[0]["client_ip"] == "127.0.0.250"
    assert result.witnesses[0]["connections"] == 30
    assert "no client used it" in result.witnesses[0]["why"]
    assert main(["analyze", str(run), "--gate", "--quiet", "--no-html"]) == 1
    verdict = json.loads((run / "report" / "verdict.json").read_text())
    agreement = next(c for c in verdict["checks"] if c["name"] == "client_acceptor_agreement")
    assert "127.0.0.250" in json.dumps(agreement["witnesses"])


def test_one_unexplained_connection_during_the_load_fails_and_admin_ones_are_explained(
    spark: Any, tmp_path: Path
) -> None:
    def build(extra_admin: bool) -> Any:
        def inner(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
            for i in range(20):
                _served(cw, aw, i, seen_as=None)
            # before the load: the runner's start-up admin request (explained)
            early = {"conn_id": "REPL-0", "listener": "REPLICATION"}
            early |= {"client_ip": "127.0.0.1", "client_port": 30_000}
            record(aw, "accept", mono_ns=T0 + S // 2, **early)
            record(aw, "admit", mono_ns=T0 + S // 2 + 1_000, delay_ms=0.0, **early)
            record(aw, "close", mono_ns=T0 + S // 2 + MS, reason="client_eof", **early)
            # during the load, no client attempt: explained only by its admin request
            mid = {"conn_id": "REPL-1", "listener": "REPLICATION"}
            mid |= {"client_ip": "127.0.0.1", "client_port": 30_001}
            record(aw, "accept", mono_ns=T0 + 1 * S + 50 * MS, **mid)
            record(aw, "admit", mono_ns=T0 + 1 * S + 50 * MS + 1_000, delay_ms=0.0, **mid)
            if extra_admin:
                record(aw, "admin", mono_ns=T0 + 1 * S + 51 * MS, reason="applied", **mid)
            record(aw, "close", mono_ns=T0 + 1 * S + 52 * MS, reason="client_eof", **mid)

        return inner

    ok = check_agreement(load_run(spark, _run(tmp_path, "admin", build(True))))
    assert ok.verdict == PASS, ok.observed
    assert "2 unmatched (2 explained" in ok.observed
    bad = check_agreement(load_run(spark, _run(tmp_path, "stranger", build(False))))
    assert bad.verdict == "fail", bad.observed
    assert bad.witnesses[0]["client_ip"] == "127.0.0.1"
    assert bad.witnesses[0]["connections"] == 1


REQUEST_QUOTA = {"max.connections": 2147483647, "request_quotas": {"client-id=g": 1.0}}


def _mute_run(
    tmp: Path, name: str, client_gap_ms: float, acceptor_gap_ms: float, kafka_python: bool = False
) -> Path:
    """One greedy connection: a request sent at s, answered at s + 10 ms with a throttle
    of 100 ms; the next response at s + 100 ms + client_gap_ms (send + throttle + gap).
    The acceptor wrote the throttle at the answer, and forwarded the next request at the
    throttle's end + acceptor_gap_ms. ``kafka_python``: the rows a kafka-python socket
    writes instead (no latency of their own; the time in flight in ``detail``)."""

    def timing(ms: float) -> dict[str, Any]:
        return {"detail": {"profile": "steady", "in_flight_ms": ms}} if kafka_python else {
            "latency_ms": ms, "detail": {"profile": "greedy"}}  # fmt: skip

    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        c = {"client_ip": "127.0.0.1", "client_port": 41_000, "conn_id": "greedy-1"}
        s = T0 + 1 * S
        record(cw, "connect_invoke", mono_ns=s - 5 * MS, detail={"profile": "greedy"}, **c)
        answered = s + 10 * MS
        first = timing(10.0)
        first["detail"]["throttle_time_ms"] = 100
        record(cw, "request_ok", mono_ns=answered, api_key=3, **first, **c)
        nxt = s + 100 * MS + int(client_gap_ms * MS)
        record(cw, "request_ok", mono_ns=nxt, api_key=3, **timing(95.0), **c)
        a = {**c, "conn_id": "CLIENT-1", "listener": "CLIENT"}
        req = {"api_key": 3, "client_id": "g", "principal": "User:ANONYMOUS"}
        record(aw, "request", mono_ns=answered - MS, latency_ms=8.0, **req, **a)
        record(aw, "request_throttle", mono_ns=answered - MS, delay_ms=100.0, **req, **a)
        forwarded = answered - MS + 100 * MS + int(acceptor_gap_ms * MS)
        record(aw, "request", mono_ns=forwarded + 2 * MS, latency_ms=2.0, **req, **a)

    return _run(tmp, name, build, REQUEST_QUOTA)


def test_mute_exactly_at_the_throttle_end_passes(spark: Any, tmp_path: Path) -> None:
    result = check_throttle_mutes(load_run(spark, _mute_run(tmp_path, "edge", 0.0, -1.0)))
    assert result.verdict == PASS, result.observed
    assert [p.judged for p in result.parts] == [1, 1]


def test_a_response_a_tenth_of_a_ms_early_fails_on_the_client_side(
    spark: Any, tmp_path: Path
) -> None:
    result = check_throttle_mutes(load_run(spark, _mute_run(tmp_path, "client", -0.1, 0.0)))
    assert result.verdict == "fail", result.observed
    assert "before the throttle" in result.witnesses[0]["why"]


@pytest.mark.parametrize(("gap_ms", "verdict"), [(0.0, PASS), (-0.1, "fail")])
def test_kafka_pythons_sockets_are_judged_by_their_time_in_flight(
    spark: Any, tmp_path: Path, gap_ms: float, verdict: str
) -> None:
    run = load_run(spark, _mute_run(tmp_path, f"kp{gap_ms}", gap_ms, -1.0, kafka_python=True))
    result = check_throttle_mutes(run)
    assert result.verdict == verdict, result.observed
    assert result.parts[0].judged == 1


def test_a_forward_past_the_timer_tolerance_fails_on_the_acceptor_side(
    spark: Any, tmp_path: Path
) -> None:
    result = check_throttle_mutes(load_run(spark, _mute_run(tmp_path, "acceptor", 0.0, -1.2)))
    assert result.verdict == "fail", result.observed
    assert "forwarded" in result.witnesses[0]["why"]


PER_IP = {"max.connections": 2147483647, "max.connections.per.ip": 1}


def _reject_run(tmp: Path, name: str, profile: str, eof_after_ms: float) -> Path:
    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        c = {"client_ip": "127.0.0.7", "client_port": 42_000}
        t = T0 + 1 * S
        record(cw, "connect_invoke", mono_ns=t, detail={"profile": profile}, **c)
        record(cw, "connect_ok", mono_ns=t + MS // 10, latency_ms=0.1, **c)
        a = {**c, "conn_id": "CLIENT-1", "listener": "CLIENT"}
        record(aw, "accept", mono_ns=t + MS // 2, **a)
        record(aw, "reject", mono_ns=t + MS, reason="ip_count", **a)
        record(
            cw,
            "request_fail",
            mono_ns=t + MS + int(eof_after_ms * MS),
            api_key=18,
            latency_ms=1.0,
            reason="eof",
            **c,
        )
        record(
            cw,
            "closed",
            mono_ns=t + MS + int(eof_after_ms * MS) + 1_000,
            reason="eof",
            detail={"outcome": "eof_after_accept", "profile": profile},
            **c,
        )

    return _run(tmp, name, build, PER_IP)


def test_rejects_of_steady_clients_alone_leave_the_close_timing_unjudged(
    spark: Any, tmp_path: Path
) -> None:
    from analysis.checks.processors import CHECKS

    check = next(c for c in CHECKS if c.name == "ip_count_reject_closes_at_once")
    run = load_run(spark, _reject_run(tmp_path, "steady", "steady", 400.0))
    result = run_check(check, run)
    assert result.verdict == UNKNOWN, result.observed
    assert [p.name for p in result.unjudged_parts()] == ["close timing"]
    assert "--hold-ms" in result.raise_hint


def test_an_engine_client_eof_within_slack_passes_and_just_past_it_fails(
    spark: Any, tmp_path: Path
) -> None:
    ok = check_reject_closes_at_once(load_run(spark, _reject_run(tmp_path, "in", "storm", 49.0)))
    assert ok.verdict == PASS, ok.observed
    late = check_reject_closes_at_once(
        load_run(spark, _reject_run(tmp_path, "late", "storm", 51.0))
    )
    assert late.verdict == "fail", late.observed
    assert "after the reject" in late.witnesses[-1]["why"]


def test_an_attempt_cut_off_when_its_load_stopped_is_explained_not_before(
    spark: Any, tmp_path: Path
) -> None:
    """A stopping Locust process can be killed inside connect(), before the attempt's row
    is written (its port is known only once connect() returns); the acceptor may accept it
    from the backlog afterwards. Explained once the phase using its address has ended,
    not while that phase still runs."""

    def build(at_ms: int) -> Any:
        def inner(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
            flood = {"name": "flood", "profile": "single_ip_flood", "source_ips": "127.0.0.100"}
            record(hw, "phase_start", mono_ns=T0 + 1 * S, detail=flood)
            record(hw, "phase_end", mono_ns=T0 + 1 * S + 300 * MS, detail=flood)
            for i in range(30):  # 0..290 ms, all from 127.0.0.100
                _served(cw, aw, i * 3, seen_as=None)
            steady = {"client_ip": "127.0.0.1", "client_port": 41_000}
            record(cw, "connect_invoke", mono_ns=T0 + 2 * S, detail={"profile": "steady"}, **steady)
            cut = {"conn_id": "CLIENT-cut", "listener": "CLIENT", "client_ip": "127.0.0.100"}
            cut["client_port"] = 39_999
            record(aw, "accept", mono_ns=T0 + 1 * S + at_ms * MS, **cut)
            record(aw, "admit", mono_ns=T0 + 1 * S + at_ms * MS + 1_000, delay_ms=0.0, **cut)
            record(aw, "close", mono_ns=T0 + 1 * S + at_ms * MS + 2_000, reason="client_eof", **cut)

        return inner

    after = check_agreement(load_run(spark, _run(tmp_path, "cut-after", build(450))))
    assert after.verdict == PASS, after.observed
    during = check_agreement(load_run(spark, _run(tmp_path, "cut-during", build(250))))
    assert during.verdict == "fail", during.observed
