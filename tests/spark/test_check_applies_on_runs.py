"""A check whose limit is configured at no time of the run is `n/a` before any Spark job
(`Check.applies`, `base.not_applicable`): the same verdict and words the check itself
gives when it runs; one the scenario expects is left to the check, which says `unknown`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.checks import ALL_CHECKS, NA, UNKNOWN, run_check
from analysis.checks.base import not_applicable
from analysis.load import load_run
from analysis.verdict import run_checks
from base.history import HistoryWriter
from tests.handbuilt import record
from tests.spark.histories import hand_built_run

S = 1_000_000_000
T0 = 5_000 * S
DECLARED = [c for c in ALL_CHECKS if c.applies is not None]


def _served(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
    """Two connections admitted, served and closed; no limit set."""
    for i in range(2):
        addr: dict[str, Any] = {"client_ip": "127.0.0.7", "client_port": 55580 + i}
        at = T0 + (1 + i) * S
        record(cw, "connect_invoke", mono_ns=at, detail={"profile": "steady"}, **addr)
        record(cw, "connect_ok", mono_ns=at + 1_000, latency_ms=0.001, **addr)
        record(cw, "ready", mono_ns=at + 2_000_000, **addr)
        record(
            cw, "closed", mono_ns=at + S // 2, reason="done", detail={"outcome": "served"}, **addr
        )
        conn: dict[str, Any] = {"conn_id": f"CLIENT-{i}", "listener": "CLIENT", **addr}
        record(aw, "accept", mono_ns=at + 500_000, **conn)
        record(aw, "admit", mono_ns=at + 600_000, **conn)
        record(aw, "close", mono_ns=at + S // 2, **conn)


def test_not_configured_is_na_as_the_check_itself_says(spark: Any, tmp_path: Path) -> None:
    run = load_run(spark, hand_built_run(tmp_path, "unset", _served, config_ns=T0))
    for check in DECLARED:
        if check.name in ("client_ip_concurrency",):  # a broker-target check: not run here
            continue
        early = not_applicable(check, run)
        assert early is not None, check.name
        itself = run_check(check, run)
        assert (early.verdict, early.expected, early.explanation) == (
            itself.verdict,
            itself.expected,
            itself.explanation,
        ), check.name
        # the check itself may add what it counted on its way (peak concurrent)
        assert itself.observed.startswith(early.observed), (check.name, itself.observed)
        assert (early.family, early.needs_load, early.judges_limit) == (
            itself.family,
            itself.needs_load,
            itself.judges_limit,
        )


def test_expected_by_the_scenario_is_unknown(spark: Any, tmp_path: Path) -> None:
    meta: dict[str, object] = {"expect": {"checks": ["max_connections"]}}
    run = load_run(spark, hand_built_run(tmp_path, "expected", _served, config_ns=T0, meta=meta))
    picked = [c for c in ALL_CHECKS if c.name in ("max_connections", "max_connections_per_ip")]
    results = {r.name: r for r in run_checks(run, picked)}
    assert results["max_connections"].verdict == UNKNOWN
    assert results["max_connections"].judged == 2  # the check ran: it counted the admissions
    assert results["max_connections_per_ip"].verdict == NA
