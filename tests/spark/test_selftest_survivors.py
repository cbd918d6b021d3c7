"""The two rules that let seeded faults survive `harness selftest`, judged on hand-built
histories both ways, a small margin apart.

- `admission_wait_explained` with the acceptor's heartbeat: a wait longer than delay +
  slack is excused only by loop stalls the heartbeat measured (`loop_lag` rows), each
  credited from its tick's due time − period − 1 ms timer resolution to when it fired
  (the fault `delay_doubled` sleeps with the loop free: no stall row, a witness).
- `processor_queue_depth`: never more than 20 queued per processor or registered per
  iteration, judged only where a queue reached the bound (the fault
  `queue_larger_than_20` under a processor stall); a run whose queues never got there is
  unknown, not pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.synth import write_rows
from tests.spark.test_rules import BASE, MS, T0, S, cfg, conn, results

SLACK_MS = 50  # expect.slack_ms default
PERIOD_MS = 10  # acceptor.heartbeat.PERIOD_MS
DELAY_MS = 100.0


def _heartbeat(ns: int) -> dict[str, Any]:
    return {"source": "acceptor", "event": "loop_lag", "mono_ns": ns, "reason": "start",
            "delay_ms": 0.0, "detail": {"period_ms": PERIOD_MS, "threshold_ms": 5}}  # fmt: skip


def _stall(fired: int, late_ms: float) -> dict[str, Any]:
    detail = {"due_mono_ns": fired - int(late_ms * MS), "period_ms": PERIOD_MS}
    return {"source": "acceptor", "event": "loop_lag", "mono_ns": fired, "reason": "stall",
            "delay_ms": late_ms, "detail": detail}  # fmt: skip


def _wait_rows(extra_ms: float, stall_ms: float | None, heartbeat: bool = True) -> list[Any]:
    """One connection delayed DELAY_MS by the broker rate, admitted `extra_ms` after its
    delay ended; a measured stall of `stall_ms` ending at the admission (None: none)."""
    t = T0 + S
    rows = [cfg(T0 - MS, {**BASE, "max.connection.creation.rate": 10})]
    if heartbeat:
        rows.append(_heartbeat(T0 - MS // 2))
    admit_after = int((DELAY_MS + extra_ms) * MS)
    rows += conn(1, t, delay_ms=DELAY_MS, admit_after=admit_after)
    if stall_ms is not None:
        rows.append(_stall(t + admit_after, stall_ms))
    return rows


@pytest.mark.parametrize(
    "extra_ms, stall_ms, verdict",
    [
        (SLACK_MS - 1, None, "pass"),  # within the slack: nothing to explain
        (SLACK_MS + 20, None, "fail"),  # an over-sleep with the loop ticking on time
        # 100 ms over: a stall late by 40 ms is credited 40 + period + 1 = 51 ms; 49 remain
        (100.0, 40.0, "pass"),
        # the same stall 2 ms shorter: credited 49 ms, 51 ms remain, 1 ms past the slack
        (100.0, 38.0, "fail"),
    ],
    ids=["within-slack", "oversleep-no-stall", "stall-covers", "stall-2ms-short"],
)
def test_a_long_wait_is_excused_only_by_a_measured_stall(
    spark: Any, tmp_path: Path, extra_ms: float, stall_ms: float | None, verdict: str
) -> None:
    name = f"hb-{verdict}-{int(extra_ms)}-{stall_ms}"
    rows = _wait_rows(extra_ms, stall_ms)
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert "heartbeat measured" in r.tolerance, r.tolerance
    if verdict == "fail":
        assert r.witnesses[0]["conn_id"] == "c-1", r.witnesses
        assert "nothing explains the rest" in r.witnesses[0]["why"], r.witnesses


def test_a_stall_elsewhere_does_not_excuse_the_wait(spark: Any, tmp_path: Path) -> None:
    """A long stall measured a second before the wait credits nothing to it."""
    rows = _wait_rows(SLACK_MS + 20, None)
    rows.append(_stall(T0 + S - S // 2, 300.0))
    run_dir = write_rows(tmp_path / "elsewhere", rows, {"run_id": "e", "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == "fail", (r.observed, r.witnesses)


def test_without_a_heartbeat_the_inferred_stalls_apply(spark: Any, tmp_path: Path) -> None:
    """Recordings of an acceptor without heartbeat keep the older judgement (row gaps)."""
    rows = _wait_rows(SLACK_MS + 20, None, heartbeat=False)
    run_dir = write_rows(tmp_path / "nohb", rows, {"run_id": "n", "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert "inferred from the history" in r.tolerance, r.tolerance
    assert r.verdict == "fail", (r.observed, r.witnesses)  # no catch-up burst: no stall


# ---- the processor queue bound -----------------------------------------------------


def _queue_rows(depths: list[int], in_iteration: list[int] | None = None) -> list[Any]:
    rows = [cfg(T0 - MS, BASE)]
    for i, d in enumerate(depths):
        c = conn(i, T0 + i * MS)
        for r in c:
            r["processor"] = 0
            if r["event"] == "register":
                k = in_iteration[i] if in_iteration else 1
                r["detail"] = {"queue_depth": d, "in_iteration": k, "iteration": 1}
        rows += c
    return rows


@pytest.mark.parametrize(
    "depths, in_iter, verdict",
    [
        (list(range(20, 0, -1)), list(range(1, 21)), "pass"),  # a full queue of 20 drained
        (list(range(21, 0, -1)), list(range(1, 22)), "fail"),  # 21 queued, 21 in one iteration
        ([20] * 21, [1] * 20 + [21], "fail"),  # depth at 20, but 21 registered in one iteration
        ([5, 4, 3, 2, 1], [1, 2, 3, 4, 5], "unknown"),  # the bound was never reached
    ],
    ids=["full-20", "queue-21", "iteration-21", "never-near"],
)
def test_processor_queue_bound(
    spark: Any, tmp_path: Path, depths: list[int], in_iter: list[int], verdict: str
) -> None:
    name = f"q-{verdict}-{max(depths)}-{max(in_iter)}"
    run_dir = write_rows(tmp_path / name, _queue_rows(depths, in_iter), {"run_id": name})
    r = results(spark, run_dir, "processor_queue_depth")["processor_queue_depth"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "pass":
        assert r.judged >= 1, r.observed
    if verdict == "fail":
        assert "(> 20)" in r.witnesses[0]["why"], r.witnesses
    if verdict == "unknown":
        assert r.judged == 0 and "never tested" in r.explanation


@pytest.mark.parametrize(
    "stall_ms, verdict",
    # 100 ms after the slot freed: a stall late by 60 ms is credited 60 + period + 1 =
    # 71 ms (29 remain, within the slack); with none, the 100 ms are a witness
    [(60.0, "pass"), (None, "fail")],
    ids=["stall-covers-the-slot-wait", "no-stall"],
)
def test_a_slot_wait_is_excused_by_a_measured_stall_too(
    spark: Any, tmp_path: Path, stall_ms: float | None, verdict: str
) -> None:
    """max.connections 1: c-1 holds the slot for 500 ms; c-2, accepted 10 ms after it,
    waits for that slot and is admitted 100 ms after it freed."""
    t = T0 + S
    rows = [cfg(T0 - MS, {**BASE, "max.connections": 1}), _heartbeat(T0 - MS // 2)]
    rows += conn(1, t, close_after=500 * MS, admit_after=MS // 10)
    free = t + MS // 10 + 500 * MS
    c2_accept = t + 10 * MS
    rows += conn(2, c2_accept, admit_after=free + 100 * MS - c2_accept, close_after=MS)
    if stall_ms is not None:
        rows.append(_stall(free + 100 * MS, stall_ms))
    name = f"slot-stall-{verdict}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "slot freed" in r.witnesses[0]["why"], r.witnesses
