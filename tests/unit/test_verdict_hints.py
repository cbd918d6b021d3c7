"""Every "why UNKNOWN" hint is chosen by its cause: no metrics endpoint (pass
--broker-metrics-url), no scrape pair around what a check judges (scrapes before and
after), a saturated observer (the generator fell short; the front was saturated), and only
otherwise not enough load (raise it). One test per cause, on the results as the checks
leave them (no Spark)."""

from __future__ import annotations

import pytest

from analysis.checks.base import FAIL, PASS, UNKNOWN, CheckResult, Part, not_exercised
from analysis.checks.front import NAME as FRONT
from analysis.checks.kafka_metrics import CAUSE_NO_METRICS, CAUSE_NO_SCRAPE_PAIR, METRICS_HINT
from analysis.verdict import _unpushed as unpushed
from analysis.verdict import overall, saturated

pytestmark = pytest.mark.unit

RAISE_LOAD = "raise the load"


def _reasons(results: list[CheckResult], expected: list[str]) -> list[str]:
    verdict, reasons = overall(results, expected)
    assert verdict == UNKNOWN, reasons
    return reasons


def _about(reasons: list[str], name: str) -> str:
    return next(r for r in reasons if f"check {name}" in r)


def test_no_metrics_endpoint_names_the_metrics_url_never_the_load() -> None:
    throttle = CheckResult(
        "kafka_metric_throttle_bounded",
        UNKNOWN,
        observed="no kafka_metrics rows: the target exposed no metrics endpoint",
        expected="scrapes",
        raise_hint=METRICS_HINT,
        data={"cause": CAUSE_NO_METRICS},
    )
    # a cluster's per-broker merge keeps each broker's words but not their data
    merged = CheckResult(
        "kafka_metric_ip_throttle_seen",
        UNKNOWN,
        observed="broker 1: no kafka_metrics rows: the target exposed no metrics endpoint; "
        "broker 2: no successful scrape of Kafka's metrics (3 failed)",
        expected="scrapes",
    )
    ok = CheckResult("client_ip_rate_span", PASS, "o", "e", judged=5, exercised=True)
    ok.judges_limit = True
    reasons = _reasons(
        [throttle, merged, ok], ["kafka_metric_throttle_bounded", "kafka_metric_ip_throttle_seen"]
    )
    for name in ("kafka_metric_throttle_bounded", "kafka_metric_ip_throttle_seen"):
        why = _about(reasons, name)
        assert why.endswith("pass --broker-metrics-url N=URL (the broker's JMX exporter)"), why
        assert RAISE_LOAD not in why and "; raise" not in why


def test_no_scrape_pair_around_a_served_attempt_asks_for_scrapes() -> None:
    accounting = CheckResult(
        "accounting",
        UNKNOWN,
        observed="Kafka: 1 scrapes, 490 served attempts; 0 scrape intervals judged",
        expected="e",
        parts=[
            Part(
                "Kafka counted every connection its clients were served on",
                0,
                "no served attempt lay between two scrapes",
                "scrapes of Kafka's metrics before and after served connections",
            )
        ],
        data={"cause": CAUSE_NO_SCRAPE_PAIR},
    )
    why = _about(_reasons([accounting], ["accounting"]), "accounting")
    assert "judged nothing (no served attempt lay between two scrapes)" in why
    assert "scrapes of Kafka's metrics before and after" in why
    assert "; raise" not in why


def test_a_generator_that_fell_short_is_named_not_the_load() -> None:
    offered = CheckResult(
        "offered_load",
        UNKNOWN,
        observed="offered 600/1200 intended arrivals (50.0%); the generator's busiest loop 100%",
        expected="e",
        data={"short": True},
    )
    rate = CheckResult("ip_rate_span", PASS, "o", "e", judged=40, exercised=True, needs_load=True)
    rate.judges_limit = True
    results = unpushed([offered, rate])
    assert rate.verdict == UNKNOWN
    reasons = _reasons(results, ["ip_rate_span", "offered_load"])
    for name in ("ip_rate_span", "offered_load"):
        why = _about(reasons, name)
        assert "give the load generator room" in why and "600/1200" in why, why
        assert "; raise" not in why


def test_a_saturated_front_is_named_not_the_load() -> None:
    front = CheckResult(
        FRONT,
        UNKNOWN,
        observed="front saturated 3.0–5.0 s (busy 100%)",
        expected="e",
        data={"windows_ns": [(3_000, 5_000)]},
    )
    late = CheckResult(
        "admission_wait_explained",
        FAIL,
        "o",
        "e",
        witnesses=[{"mono_ns": 4_000, "why": "late"}],
        judged=3,
    )
    results = saturated([front, late])
    assert late.verdict == UNKNOWN
    why = _about(_reasons(results, ["admission_wait_explained"]), "admission_wait_explained")
    assert "give the acceptor room" in why and "front saturated 3.0–5.0 s" in why, why
    assert "; raise" not in why


def test_not_enough_load_still_asks_for_more_load() -> None:
    rate = not_exercised(
        "ip_rate_span", "connection_creation_rate", 2, 3, hint="the arrival rate of 127.0.0.9"
    )
    rate.judges_limit = True
    why = _about(_reasons([rate], ["ip_rate_span"]), "ip_rate_span")
    assert why.endswith("; raise the arrival rate of 127.0.0.9"), why
