"""`rate_delay_within_window` beside a busy neighbour: a wait (accept → admit) over w + slack
by no more than the acceptor loop's own stalls its heartbeat measured during it is not
timed (the sleep cannot end while the loop does not run); 1 ms more and it fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks.delays import check_rate_delay_within_window
from analysis.load import load_run
from analysis.synth import write_rows

MS = 1_000_000
S = 1000 * MS
T0 = 9_100 * S


def _rows(late_ms: float | None) -> list[dict[str, Any]]:
    conn = {"source": "acceptor", "conn_id": "CLIENT-1", "listener": "CLIENT",
            "ip": "127.0.0.9", "port": 50000}  # fmt: skip
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0 - S,
         "detail": {"max.connection.creation.rate": 1}},
        {**conn, "event": "accept", "mono_ns": T0},
        {**conn, "event": "delay", "mono_ns": T0, "delay_ms": 1000.0, "reason": "broker"},
        # waited 1080 ms: 30 ms over w + slack = 1050 ms
        {**conn, "event": "admit", "mono_ns": T0 + 1080 * MS, "delay_ms": 1000.0},
        {"source": "acceptor", "event": "loop_lag", "mono_ns": T0 - MS, "reason": "start",
         "delay_ms": 0.0, "detail": {"period_ms": 10, "threshold_ms": 5}},
    ]  # fmt: skip
    if late_ms is not None:  # credited: [fired - late - period - 1 ms, fired]
        fired = T0 + 500 * MS
        rows.append(
            {"source": "acceptor", "event": "loop_lag", "mono_ns": fired, "reason": "stall",
             "delay_ms": late_ms,
             "detail": {"due_mono_ns": fired - int(late_ms * MS), "period_ms": 10}}
        )  # fmt: skip
    return rows


@pytest.mark.parametrize(
    "late_ms, verdict",
    [(19.0, "pass"), (18.0, "fail"), (None, "fail")],
    ids=["stall-covers-the-excess", "1-ms-short", "no-stall"],
)
def test_a_wait_over_the_cap_by_a_measured_stall_is_not_timed(
    spark: Any, tmp_path: Path, late_ms: float | None, verdict: str
) -> None:
    run_dir = write_rows(tmp_path / f"r-{late_ms}", _rows(late_ms), {"run_id": "r"})
    r = check_rate_delay_within_window(load_run(spark, run_dir))
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "pass":
        assert "1 not timed" in r.observed, r.observed
    else:
        assert r.witnesses and "waited 1080 ms" in r.witnesses[0]["why"], r.witnesses
