"""Strictness rules sharpened by `harness selftest` (surviving faults and a false fail), each
both ways on a hand-built history: conforming passes, a small margin past the rule fails
with the witness named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.synth import write_rows
from tests.spark.test_rules import (
    BASE,
    MS,
    T0,
    S,
    _two_on_processor_0,
    cfg,
    conn,
    evicted,
    results,
)

SLACK_MS = 50  # expect.slack_ms default


# ---- a `blocked` slot wait while every count was below its maximum ---------------------


def _slot_block_rows(release_ms: float, limit: int = 2) -> list[dict[str, Any]]:
    """Two connections hold max.connections = `limit`; c-10 closes `release_ms` after the
    start of c-1's 6 ms slot wait (negative: before it)."""
    start = T0 + S
    end = start + 6 * MS
    rows = [cfg(T0 - MS, {**BASE, "max.connections": limit})]
    rows += conn(10, T0, close_after=int(S + release_ms * MS) - 100_000)  # admitted T0+0.1ms
    rows += conn(11, T0 + MS)
    rows += conn(1, start - 100_000, admit_after=6 * MS + 200_000)
    rows.append(
        {"source": "acceptor", "event": "blocked", "mono_ns": end, "listener": "client",
         "reason": "slot", "delay_ms": 6.0, "detail": {"start_mono_ns": start}}
    )  # fmt: skip
    return rows


@pytest.mark.parametrize(
    "release_ms, limit, verdict",
    [
        (5.0, 2, "pass"),  # at the limit when the wait began, freed during it
        (-(SLACK_MS - 1), 2, "pass"),  # freed just inside the slack before the start
        (-(SLACK_MS + 1), 2, "fail"),  # freed 1 ms before the slack: free throughout
        (5.0, 3, "fail"),  # never at the limit
    ],
    ids=["freed-during", "freed-within-slack", "freed-before-slack", "never-full"],
)
def test_a_slot_wait_needs_a_full_count(
    spark: Any, tmp_path: Path, release_ms: float, limit: int, verdict: str
) -> None:
    name = f"slot-{verdict}-{limit}-{int(release_ms)}"
    rows = _slot_block_rows(release_ms, limit)
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert "1 slot waits" in r.observed, r.observed
    if verdict == "fail":
        assert r.witnesses[0]["conn_id"] == "c-1", r.witnesses
        assert "while slots were free" in r.witnesses[0]["why"], r.witnesses


def test_a_slot_wait_with_no_count_limit_is_a_witness(spark: Any, tmp_path: Path) -> None:
    """The fault slot_wait_while_free on broker-rate: `rate+slot` with no count limit."""
    t = T0 + S
    rows = [cfg(T0 - MS, {**BASE, "max.connection.creation.rate": 20})]
    rows += conn(1, t, delay_ms=20.0, admit_after=(20 + 30) * MS)  # within delay + slack
    rows.append(
        {"source": "acceptor", "event": "blocked", "mono_ns": t + 50 * MS - 100_000,
         "listener": "client", "reason": "rate+slot", "delay_ms": 49.8,
         "detail": {"start_mono_ns": t + 100_000}}
    )  # fmt: skip
    run_dir = write_rows(tmp_path / "rs", rows, {"run_id": "rs", "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == "fail", (r.observed, r.witnesses)
    assert [w["conn_id"] for w in r.witnesses] == ["c-1"], r.witnesses
    assert "rate+slot" in r.witnesses[0]["why"]


# ---- LRU: a response sent refreshes a channel, as Kafka's Selector does ----------------


def _long_poll_rows(victim: str, poll_latency_ms: float) -> list[dict[str, Any]]:
    """c-0 reads a fetch at 1.8 s and answers it `poll_latency_ms` later; c-1 reads and
    answers a request at 2.0 s. A protected connection then takes the total past 2."""
    rows = _two_on_processor_0()

    def request(i: int, answered_ns: int, latency_ms: float) -> dict[str, Any]:
        c = {"conn_id": f"c-{i}", "listener": "client", "ip": "127.0.0.10", "port": 4000 + i}
        return {"source": "acceptor", "event": "request", "mono_ns": answered_ns,
                "latency_ms": latency_ms, "api_key": 1, "processor": 0, **c}  # fmt: skip

    rows.append(request(0, T0 + 1800 * MS + int(poll_latency_ms * MS), poll_latency_ms))
    rows.append(request(1, T0 + 2 * S, 1.0))
    rows += conn(5, T0 + 2200 * MS, listener="internal", ip="127.0.0.3")  # total 3 > 2
    rows += evicted(victim, 4000 + int(victim[-1]), T0 + 2200 * MS + 5 * MS)
    rows.append({"source": "harness", "event": "phase_end", "mono_ns": T0 + 4 * S})
    return rows


@pytest.mark.parametrize(
    "victim, poll_ms, verdict",
    [
        # c-0's answer at 2.1 s: c-1 (2.0 s) is the LRU, though c-0 read its fetch first
        ("c-1", 300.0, "pass"),
        ("c-0", 300.0, "fail"),
        # c-0's answer at 1.9 s: now c-0 is the LRU
        ("c-0", 100.0, "pass"),
        ("c-1", 100.0, "fail"),
    ],
)
def test_lru_counts_the_response_sent(
    spark: Any, tmp_path: Path, victim: str, poll_ms: float, verdict: str
) -> None:
    name = f"lru-{victim}-{int(poll_ms)}"
    run_dir = write_rows(
        tmp_path / name, _long_poll_rows(victim, poll_ms), {"run_id": name, "target": "acceptor"}
    )
    r = results(spark, run_dir, "eviction_rule")["eviction_rule"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert r.witnesses[0]["conn_id"] == victim, r.witnesses
        assert "not the LRU" in r.witnesses[0]["why"], r.witnesses
