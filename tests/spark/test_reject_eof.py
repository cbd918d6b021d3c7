"""`ip_count_reject_closes_at_once` on the client side: an engine (storm) client watches its
socket, so its EOF must come within the slack of the reject; a steady kafka-python client
sees the close only at its next poll, so for it only "never served, EOF seen" is judged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks.processors import check_reject_closes_at_once
from analysis.load import load_run
from analysis.synth import write_rows

MS = 1_000_000
S = 1000 * MS
T0 = 7_000 * S
SLACK_MS = 50


def _run(
    tmp: Path,
    name: str,
    profile: str,
    eof_after_ms: float | None,
    stall: tuple[float, float] | None = None,
) -> Path:
    addr = {"ip": "127.0.0.1", "port": 58012}
    reject = T0 + S + 200 * MS
    conn = {"conn_id": "CLIENT-1", "listener": "CLIENT", **addr}
    client, acceptor = {"source": "client", **addr}, {"source": "acceptor", **conn}
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0,
         "detail": {"max.connections.per.ip": 1}},
        {**client, "event": "connect_invoke", "mono_ns": T0 + S, "detail": {"profile": profile}},
        {**client, "event": "connect_ok", "mono_ns": T0 + S + MS, "latency_ms": 1.0},
        {**acceptor, "event": "accept", "mono_ns": reject - 10_000},
        {**acceptor, "event": "reject", "mono_ns": reject, "reason": "ip_count"},
    ]  # fmt: skip
    if eof_after_ms is not None:
        rows.append(
            {**client, "event": "closed", "mono_ns": reject + int(eof_after_ms * MS),
             "reason": "reset", "detail": {"outcome": "eof_after_accept", "profile": profile}}
        )  # fmt: skip
    if stall is not None:  # another arrival of the same engine, due at a, started at b
        a, b = (reject + int(x * MS) for x in stall)
        rows.append(
            {"source": "client", "ip": "127.0.0.1", "port": 58013, "event": "connect_invoke",
             "mono_ns": b, "detail": {"profile": profile, "intended_mono_ns": a}}
        )  # fmt: skip
    return write_rows(tmp / name, rows, {"run_id": name, "target": "acceptor"})


@pytest.mark.parametrize(
    "profile, eof_after_ms, verdict",
    [
        ("storm", SLACK_MS - 1, "pass"),
        ("storm", SLACK_MS + 1, "fail"),  # the engine watches its socket: late is late
        ("steady", 104.0, "pass"),  # kafka-python saw it at its next poll (a real run's gap)
        ("steady", None, "fail"),  # but it must see it
    ],
    ids=["storm-prompt", "storm-late", "steady-next-poll", "steady-never"],
)
def test_reject_eof_on_the_client(
    spark: Any, tmp_path: Path, profile: str, eof_after_ms: float | None, verdict: str
) -> None:
    run = load_run(spark, _run(tmp_path, f"{profile}-{eof_after_ms}", profile, eof_after_ms))
    r = check_reject_closes_at_once(run)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert r.witnesses and r.witnesses[0]["client_port"] == 58012, r.witnesses


@pytest.mark.parametrize(
    "stall, verdict, timed",
    [
        ((20.0, 90.0), "pass", 0),  # seen at 80 ms while an arrival due at 20 had not started
        ((20.0, 79.0), "fail", 1),  # that stall was over before the EOF was seen
        ((81.0, 140.0), "fail", 1),  # one that began after it explains nothing
        (None, "fail", 1),
    ],
    ids=["seen-while-stalled", "stall-ended-before", "stall-after", "none"],
)
def test_an_eof_seen_while_the_engine_was_behind_is_not_timed(
    spark: Any, tmp_path: Path, stall: tuple[float, float] | None, verdict: str, timed: int
) -> None:
    """An engine client that saw the EOF 80 ms after the reject (slack 50 ms) while it was
    measurably behind its own schedule (one of its arrivals due earlier had not started)
    was not watching: that EOF's time is not judged (the close-timing part says so), and a
    run with nothing else to time is not a pass of that part. Otherwise it is late."""
    run = load_run(spark, _run(tmp_path, f"stall-{stall}", "storm", 80.0, stall))
    r = check_reject_closes_at_once(run)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    timing = next(p for p in r.parts if p.name == "close timing")
    assert timing.judged == timed, timing


def _heartbeat_run(tmp: Path, name: str, engine: str, span_ms: tuple[float, float] | None) -> Path:
    """An engine client (connection c42-0) saw the EOF 80 ms after the reject; its engine's
    heartbeat (or another engine's) measured a stall over `span_ms` after the reject."""
    addr = {"ip": "127.0.0.1", "port": 58012}
    reject = T0 + S + 200 * MS
    client = {"source": "client", "conn_id": "c42-0", "listener": "CLIENT", **addr}
    acceptor = {"source": "acceptor", "conn_id": "CLIENT-1", "listener": "CLIENT", **addr}
    beat = {"source": "client", "event": "loop_lag", "listener": "CLIENT"}
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0,
         "detail": {"max.connections.per.ip": 1}},
        {**beat, "mono_ns": T0, "reason": "start",
         "detail": {"engine": "c42-", "period_ms": 5.0, "threshold_ms": 10.0}},
        {**client, "event": "connect_invoke", "mono_ns": T0 + S, "detail": {"profile": "storm"}},
        {**client, "event": "connect_ok", "mono_ns": T0 + S + MS, "latency_ms": 1.0},
        {**acceptor, "event": "accept", "mono_ns": reject - 10_000},
        {**acceptor, "event": "reject", "mono_ns": reject, "reason": "ip_count"},
        {**client, "event": "closed", "mono_ns": reject + 80 * MS, "reason": "reset",
         "detail": {"outcome": "eof_after_accept", "profile": "storm"}},
    ]  # fmt: skip
    if span_ms is not None:
        lo, hi = (reject + int(x * MS) for x in span_ms)
        rows.append(
            {**beat, "mono_ns": hi - 15 * MS, "reason": "stall", "latency_ms": 20.0,
             "detail": {"engine": engine, "from_mono_ns": lo, "until_mono_ns": hi}}
        )  # fmt: skip
    return write_rows(tmp / name, rows, {"run_id": name, "target": "acceptor"})


@pytest.mark.parametrize(
    "engine, span_ms, verdict, timed",
    [
        ("c42-", (30.0, 81.0), "pass", 0),  # the EOF seen 1 ms before the stretch ends
        ("c42-", (79.0, 140.0), "pass", 0),  # 1 ms after it begins
        ("c42-", (30.0, 80.0), "pass", 0),  # at its very end (ends included)
        ("c42-", (30.0, 79.0), "fail", 1),  # 1 ms after it ended: late is late
        ("c42-", (81.0, 140.0), "fail", 1),  # 1 ms before it began
        ("c43-", (30.0, 140.0), "fail", 1),  # another engine's stall excuses nothing
        ("c42-", None, "fail", 1),  # a heartbeat with no stall: the EOF was timed
    ],
    ids=["inside-end", "inside-start", "at-end", "after", "before", "other-engine", "none"],
)
def test_an_eof_seen_inside_a_stall_the_engine_measured_is_not_timed(
    spark: Any,
    tmp_path: Path,
    engine: str,
    span_ms: tuple[float, float] | None,
    verdict: str,
    timed: int,
) -> None:
    """The "not timed" rule at its edges: an observation 1 ms inside a stretch its own
    engine's heartbeat measured is counted "not timed" (never a FAIL, never a PASS of the
    close timing); 1 ms outside it, or inside another engine's, the 80 ms EOF still fails
    the 50 ms slack."""
    run = load_run(spark, _heartbeat_run(tmp_path, f"hb-{engine}-{span_ms}", engine, span_ms))
    r = check_reject_closes_at_once(run)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    timing = next(p for p in r.parts if p.name == "close timing")
    assert timing.judged == timed, timing
    if not timed:
        assert "not timed" in timing.describe(), timing.describe()
