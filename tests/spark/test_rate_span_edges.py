"""The span checks count (t − S, t] exactly: an accept S ms before t is out, S − 1 ms is in.

max.connection.creation.rate r = 1/s, n = 11, w = 1 s: S = 11 000 ms, B = r·(n−1)·w = 10,
one listener (k = 1): allowed = r·S + B + k·S/w = 11 + 10 + 11 = 32 connections per span.
32 accepts at t and one more at t − S are within it; that one at t − S + 1 ms is one over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, run_check
from analysis.load import load_run
from analysis.synth import write_rows

LIMITS = {
    "listeners": "CLIENT://127.0.0.1:9092",
    "max.connection.creation.rate": 1,
    "quota.window.num": 11,
    "quota.window.size.seconds": 1,
}
RUN = {"run_id": "span-edge", "target": "acceptor", "limits": LIMITS, "expect": {"slack_ms": 50}}
T0 = 7_000_000_000_000
MS = 1_000_000
SPAN_MS = 11_000


def _rows(early_ms: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": LIMITS}
    ]
    instants = [T0 + early_ms * MS] + [T0 + SPAN_MS * MS + i for i in range(32)]
    for i, ns in enumerate(instants):
        common = {
            "conn_id": f"c-{i}",
            "listener": "client",
            "ip": f"127.0.0.{10 + i}",
            "port": 3000 + i,
        }
        rows.append({"source": "acceptor", "event": "accept", "mono_ns": ns, **common})
        rows.append({"source": "acceptor", "event": "admit", "mono_ns": ns + 10, **common})
    return rows


@pytest.mark.parametrize(
    "early_ms, verdict, in_span",
    [(0, "pass", 32), (1, "fail", 33)],
    ids=["accept-S-before-is-out", "accept-S-minus-1ms-before-is-in"],
)
def test_broker_span_edge(
    spark: Any, tmp_path: Path, early_ms: int, verdict: str, in_span: int
) -> None:
    run = load_run(spark, write_rows(tmp_path / "edge", _rows(early_ms), RUN))
    check = next(c for c in ALL_CHECKS if c.name == "broker_rate_span")
    res = run_check(check, run)
    assert res.verdict == verdict, res.observed
    assert res.judged == 33
    assert f"peak {in_span} per {SPAN_MS} ms span" in res.observed
    if verdict == "fail":
        assert res.witnesses[0]["conn_id"] == "c-1"  # the first accept of the crowded span
        assert "33 connections in the 11000 ms span" in res.witnesses[0]["why"]
        assert "allowed 32" in res.witnesses[0]["why"]
