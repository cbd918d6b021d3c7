"""A cluster fronted by one acceptor per broker, on hand-built histories: each front is
its broker's enforcer with its own meters, so every acceptor check is judged on each
front's own rows (`Run.front`, `verdict.across_fronts`), never on the cluster's sum.

max.connection.creation.rate 10/s (n = 11 samples of w = 1 s): one front may admit at most
r·n·w + r·(n−1)·w + n = 110 + 100 + 11 = 221 connections in an 11 s span
(analysis.checks.rate_spans). Each of three fronts admitting 199 (90 %) passes, though the
cluster admitted 597; front 2 admitting 265 (120 %) fails, naming broker 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.checks import ALL_CHECKS, CheckResult
from analysis.load import load_run
from analysis.synth import write_rows
from analysis.verdict import run_checks

T0 = 9_000_000_000_000
MS = 1_000_000
SPAN_MS = 10_900.0  # every admit of a front inside one 11 s span
CFG = {"listeners": "CLIENT://127.0.0.1:9092", "max.connection.creation.rate": 10}


def _front(node: int, count: int) -> list[dict[str, Any]]:
    pid = 100 + node
    acc = {"source": "acceptor", "writer": f"acceptor-{pid}", "listener": "CLIENT"}
    rows: list[dict[str, Any]] = [
        {"source": "harness", "writer": f"acceptor-config-{pid}", "event": "config",
         "mono_ns": T0 - 2 * MS, "detail": {**CFG, "node.id": node, "cause": "start"}},
    ]  # fmt: skip
    for i in range(count):
        t = T0 + int(i * SPAN_MS / count * MS) + node * 1000
        ip, port = f"127.0.0.{2 + i % 20}", 20_000 + node * 1000 + i
        cid = f"CLIENT-{pid}-{i}"
        one = {**acc, "conn_id": cid, "ip": ip, "port": port}
        rows += [
            {**one, "event": "accept", "mono_ns": t},
            {**one, "event": "admit", "mono_ns": t + 10_000, "delay_ms": 0.0},
            {**one, "event": "register", "mono_ns": t + 60_000, "processor": i % 3,
             "detail": {"queue_depth": 0}},
            {**one, "event": "close", "mono_ns": t + 5 * MS, "reason": "client_eof"},
        ]  # fmt: skip
    return rows


def _judge(spark: Any, tmp: Path, name: str, counts: dict[int, int], check: str) -> CheckResult:
    runner = {**CFG, "origin": "runner", "applied_from_mono_ns": T0 - 3 * MS}
    rows = [{"source": "harness", "writer": "runner", "event": "config", "mono_ns": T0 - MS,
             "detail": runner}]  # fmt: skip
    for node, count in counts.items():
        rows += _front(node, count)
    brokers = {str(n): {"CLIENT": f"127.0.0.1:{9091 + n}"} for n in counts}
    meta = {"run_id": name, "target": "acceptor", "limits": CFG, "brokers": brokers,
            "expect": {"slack_ms": 50}}  # fmt: skip
    run = load_run(spark, write_rows(tmp / name, rows, meta))
    assert sorted(run.fronts()) == sorted(counts)
    (result,) = run_checks(run, [c for c in ALL_CHECKS if c.name == check])
    return result


def test_each_front_under_its_own_bound_passes_though_the_sum_is_over(
    spark: Any, tmp_path: Path
) -> None:
    r = _judge(spark, tmp_path, "each-90", {1: 199, 2: 199, 3: 199}, "broker_rate_span")
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert r.exercised is True
    assert set(r.data["per_broker"]) == {"1", "2", "3"}
    assert all(v["peak"] == 199 for v in r.data["per_broker"].values()), r.data


def test_one_front_over_its_bound_fails_naming_its_broker(spark: Any, tmp_path: Path) -> None:
    r = _judge(spark, tmp_path, "two-120", {1: 199, 2: 265, 3: 199}, "broker_rate_span")
    assert r.verdict == "fail", r.observed
    assert r.witnesses and {w["broker"] for w in r.witnesses} == {2}, r.witnesses
    assert r.data["per_broker"]["2"]["verdict"] == "fail"
    assert r.data["per_broker"]["1"]["verdict"] == "pass"


def test_the_same_history_as_one_acceptor_would_fail(spark: Any, tmp_path: Path) -> None:
    """What the per-front judgement prevents: the three fronts' admits in one meter."""
    rows = [{**row, "writer": None} if row["source"] == "acceptor" else row
            for node in (1, 2, 3) for row in _front(node, 199)
            if row.get("event") != "config"]  # fmt: skip
    runner = {**CFG, "origin": "runner", "applied_from_mono_ns": T0 - 3 * MS}
    rows.append({"source": "harness", "event": "config", "mono_ns": T0 - MS, "detail": runner})
    rows.append({"source": "harness", "event": "config", "mono_ns": T0 - 2 * MS, "detail": CFG})
    meta = {"run_id": "merged", "target": "acceptor", "limits": CFG, "expect": {"slack_ms": 50}}
    run = load_run(spark, write_rows(tmp_path / "merged", rows, meta))
    (r,) = run_checks(run, [c for c in ALL_CHECKS if c.name == "broker_rate_span"])
    assert r.verdict == "fail", r.observed
