"""`late_charge_could_not_throttle` on tiny hand-built histories at the window's edges.

Client-id `hot` has 1 % of a thread; Kafka's 11 samples of 1 s. A bucket a few ms old has
its sum over 10 s and those ms (`Rate` pads its window with n − 1 windows), so a bucket
holding `x` ms of charges, then a response charged `c` ms 1 ms later, is over the quota
iff (x + c) / 10.001 s > 1 %: x + c > 100.01 ms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, CheckResult
from analysis.load import load_run
from analysis.synth import write_rows
from analysis.verdict import run_checks

pytestmark = pytest.mark.spark

NAME = "late_charge_could_not_throttle"
T0 = 9_000_000_000_000
MS = 1_000_000
S = 1000 * MS
QUOTAS = {"listeners": "CLIENT://127.0.0.1:9092",
          "request_quotas": [{"client-id": "hot", "request_percentage": 1}]}  # fmt: skip


def judged(spark: Any, tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> CheckResult:
    config = {"source": "harness", "event": "config", "mono_ns": T0 - S, "detail": QUOTAS}
    run_dir = write_rows(tmp_path / name, [config, *rows], {"run_id": name, "target": "acceptor"})
    run = load_run(spark, run_dir)
    (result,) = run_checks(run, [c for c in ALL_CHECKS if c.name == NAME])
    return result


def charged(ns: int, ms: float, conn: str = "r-0", port: int = 5000) -> dict[str, Any]:
    """A response charged `ms` with the check, at once (the broker's line had come)."""
    return {"source": "acceptor", "event": "request", "mono_ns": ns, "conn_id": conn,
            "listener": "client", "ip": "127.0.0.1", "port": port, "api_key": 3,
            "client_id": "hot", "principal": "ANONYMOUS", "latency_ms": ms + 1.0,
            "detail": {"charged_ms": ms, "charge_source": "broker_log"}}  # fmt: skip


def late(
    ns: int, ms: float, source: str = "broker_log_late", latency_ms: float | None = None
) -> dict[str, Any]:
    """A response sent at `ns` unthrottled, `latency_ms` after its request (the bound its
    claim was made with; `ms` unless said), its `ms` charged without a check 5 ms later."""
    row = charged(ns, ms, conn="r-1", port=5001)
    row["latency_ms"] = ms if latency_ms is None else latency_ms
    row["detail"] = {"charged_ms": ms, "charge_source": source, "late_ms": 5.0}
    return row


@pytest.mark.parametrize(
    "before_ms, late_ms, verdict",
    [(90.0, 9.9, "pass"), (90.0, 10.01, "pass"), (90.0, 10.2, "fail"), (0.0, 100.5, "fail")],
    ids=["under", "at-the-quota", "over", "alone-over"],
)
def test_a_late_charge_over_the_quota_is_a_throttle_let_through(
    spark: Any, tmp_path: Path, before_ms: float, late_ms: float, verdict: str
) -> None:
    """x + c against 100.01 ms: at the quota is not over it (Kafka throttles rate > q)."""
    rows = [charged(T0, before_ms), late(T0 + MS, late_ms)]
    r = judged(spark, tmp_path, f"late-{before_ms}-{late_ms}", rows)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.judged == 1
    if verdict == "fail":
        assert "the model throttles it" in r.witnesses[0]["why"], r.witnesses


@pytest.mark.parametrize(
    "latency_ms, verdict", [(9.9, "pass"), (10.2, "fail")], ids=["bound-under", "bound-over"]
)
def test_the_claim_is_judged_with_its_bound_not_the_charge_made_later(
    spark: Any, tmp_path: Path, latency_ms: float, verdict: str
) -> None:
    """The claim covers any charge up to the broker time the acceptor saw: a response
    whose line later said 0.5 ms was still let go on a wrong claim if 90 ms plus its
    10.2 ms of latency were over the quota."""
    rows = [charged(T0, 90.0), late(T0 + MS, 0.5, latency_ms=latency_ms)]
    r = judged(spark, tmp_path, f"bound-{latency_ms}", rows)
    assert r.verdict == verdict, (r.observed, r.witnesses)


@pytest.mark.parametrize(
    "after_ms, verdict", [(10_999, "fail"), (11_000, "pass")], ids=["in-window", "purged"]
)
def test_a_charge_leaves_the_bucket_n_windows_after_it(
    spark: Any, tmp_path: Path, after_ms: int, verdict: str
) -> None:
    """150 ms charged (and throttled) at T0 still counts 10.999 s later (15.9 % over
    10.999 s); at 11 s its sample is purged and the 9 ms late charge finds an empty bucket."""
    rows = [charged(T0, 150.0), late(T0 + after_ms * MS, 9.0)]
    r = judged(spark, tmp_path, f"purge-{after_ms}", rows)
    assert r.verdict == verdict, (r.observed, r.witnesses)


@pytest.mark.parametrize(
    "other_at_ms, verdict", [(0, "pass"), (-1, "fail")], ids=["same-ms", "ms-before"]
)
def test_a_charge_of_the_same_millisecond_comes_after_the_claim(
    spark: Any, tmp_path: Path, other_at_ms: int, verdict: str
) -> None:
    """Another connection's 50 ms charged in the claim's millisecond may have come after it
    (no order in a millisecond): the claim stands. One millisecond before, it was there."""
    at = T0 + 2 * MS
    rows = [charged(T0, 45.0), charged(at + other_at_ms * MS, 50.0, "r-2", 5002), late(at, 9.0)]
    r = judged(spark, tmp_path, f"order-{other_at_ms}", rows)
    assert r.verdict == verdict, (r.observed, r.witnesses)


def test_the_claim_judged_over_n_windows_is_caught(spark: Any, tmp_path: Path) -> None:
    """The seeded fault `late_charge_n_windows`: the enforcer asks whether 10 ms more could
    throttle a bucket holding 95 ms over n = 11 windows (105 / 11 s: under 1 %), not over
    n − 1 = 10 (105 / 10 s: over it), and lets the response go with its charge made late.
    The model, charging it then, throttles it: a witness. The enforcer without the fault
    holds that response and throttles it (a checked charge): nothing charged late."""
    faulty = [charged(T0, 95.0), late(T0 + MS, 10.0, "wall_late")]
    r = judged(spark, tmp_path, "fault", faulty)
    assert r.verdict == "fail", (r.observed, r.witnesses)
    right = [charged(T0, 95.0), charged(T0 + MS, 10.0, "r-1", 5001)]
    r = judged(spark, tmp_path, "no-fault", right)
    assert r.verdict == "unknown" and r.exercised is False, r.observed


def test_without_a_quota_nothing_is_judged(spark: Any, tmp_path: Path) -> None:
    rows = [charged(T0, 95.0), late(T0 + MS, 10.0)]
    config = {"source": "harness", "event": "config", "mono_ns": T0 - S,
              "detail": {"listeners": "CLIENT://127.0.0.1:9092"}}  # fmt: skip
    run_dir = write_rows(
        tmp_path / "none", [config, *rows], {"run_id": "none", "target": "acceptor"}
    )
    (r,) = run_checks(load_run(spark, run_dir), [c for c in ALL_CHECKS if c.name == NAME])
    assert r.verdict == "n/a", r.observed
