"""bench.connect_vs_server: the Connect side gets a small run's driver options, read from
`build_session`'s builder without a JVM, and the summary pairs each warm round's B with
its A and says whether every analysis judged alike."""

from __future__ import annotations

from typing import Any

import pytest

from bench.connect_vs_server import small_run_options, summarise


def test_the_connect_side_gets_a_small_runs_driver_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):
        monkeypatch.setenv(key, "")  # build_session sets them; restored after the test
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    options = small_run_options()
    assert options["spark.master"] == "local[*]"
    assert "-XX:TieredStopAtLevel=1" in options["spark.driver.extraJavaOptions"]
    assert options["spark.sql.session.timeZone"] == "UTC"


def _row(side: str, label: str, wall: float, cpu: float, checks: Any = None) -> dict[str, Any]:
    return {
        "side": side,
        "label": label,
        "wall_s": wall,
        "client_cpu_s": 1.0,
        "server_cpu_s": cpu - 1.0,
        "cpu_s": cpu,
        "checks": checks if checks is not None else [["c", "pass", 3, "x"]],
    }


def test_each_warm_round_is_b_over_its_own_a() -> None:
    rows = [
        _row("A", "cold", 40.0, 20.0),
        _row("B", "cold", 50.0, 30.0),
        _row("A", "warm1", 10.0, 10.0),
        _row("B", "warm1", 20.0, 12.0),
        _row("A", "warm2", 20.0, 10.0),
        _row("B", "warm2", 30.0, 16.0),
        _row("A", "warm3", 10.0, 8.0),
        _row("B", "warm3", 12.0, 12.0),
    ]
    summary = summarise(rows)
    assert summary["verdicts_identical"] is True
    assert summary["wall_s"]["B_over_A"] == [2.0, 1.5, 1.2]
    assert summary["wall_s"]["B_over_A_median"] == 1.5
    assert summary["wall_s"]["cold_B_over_A"] == 1.25
    assert summary["cpu_s"]["B_over_A_median"] == 1.5
    assert (summary["cpu_s"]["A_median"], summary["cpu_s"]["B_median"]) == (10.0, 12.0)


def test_one_check_judged_otherwise_is_not_alike() -> None:
    rows = [
        _row("A", "cold", 1.0, 1.0),
        _row("B", "cold", 1.0, 1.0),
        _row("A", "warm1", 1.0, 1.0),
        _row("B", "warm1", 1.0, 1.0, checks=[["c", "pass", 2, "x"]]),
    ]
    assert summarise(rows)["verdicts_identical"] is False
    rows = [{**r, "checks": []} for r in rows]
    assert summarise(rows)["verdicts_identical"] is False  # nothing judged is nothing alike


def test_a_side_that_took_no_cpu_gives_no_ratio() -> None:
    rows = [_row("A", "cold", 1.0, 1.0), _row("B", "cold", 1.0, 1.0)]
    rows += [_row("A", "warm1", 1.0, 1.0), _row("B", "warm1", 1.0, 2.0)]
    summary = summarise(rows)
    assert summary["server_cpu_s"]["B_over_A"] == []  # A's server took 0.0 CPU-s
    assert summary["server_cpu_s"]["B_over_A_median"] is None
    assert summary["cpu_s"]["B_over_A_median"] == 2.0
