"""A check is exercised only in the parts it judged: a passing check with a part judged on
nothing is `unknown`, and an expected check's unjudged part keeps the gate from PASS,
naming the part and the load that would judge it."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.checks.base import FAIL, PASS, UNKNOWN, Check, CheckResult, Part, run_check
from analysis.verdict import overall

pytestmark = pytest.mark.unit


def _check(parts: list[Part], verdict: str = PASS) -> Check:
    def fn(_run: Any) -> CheckResult:
        return CheckResult(
            "reject_at_once", verdict, "o", "e", judged=5, exercised=True, parts=parts
        )

    return Check("reject_at_once", "processors", fn, True, judges_limit=True)


def test_every_part_judged_passes() -> None:
    result = run_check(_check([Part("closed", 5), Part("timing", 3)]), None)  # type: ignore[arg-type]
    assert result.verdict == PASS
    assert overall([result], ["reject_at_once"]) == (PASS, ["exercised and passed: reject_at_once"])


def test_a_part_judged_on_nothing_makes_the_check_and_the_gate_unknown() -> None:
    timing = Part("close timing", 0, "steady clients only", "engine clients at the limit")
    result = run_check(_check([Part("closed", 5), timing]), None)  # type: ignore[arg-type]
    assert result.verdict == UNKNOWN
    assert "close timing (steady clients only)" in result.explanation
    assert result.raise_hint == "engine clients at the limit"
    verdict, reasons = overall([result], ["reject_at_once"])
    assert verdict == UNKNOWN
    assert any("part 'close timing' judged nothing" in r for r in reasons)
    assert any("engine clients at the limit" in r for r in reasons)


def test_a_failing_check_stays_failed_whatever_its_parts() -> None:
    result = run_check(_check([Part("closed", 5), Part("timing", 0)], FAIL), None)  # type: ignore[arg-type]
    assert result.verdict == FAIL
    assert overall([result], ["reject_at_once"])[0] == FAIL


def test_parts_are_in_the_verdict_json() -> None:
    result = run_check(_check([Part("closed", 5, "engine clients")]), None)  # type: ignore[arg-type]
    assert result.to_dict()["parts"] == [
        {"name": "closed", "judged": 5, "note": "engine clients", "hint": ""}
    ]


def test_a_fronts_outage_keeps_a_cluster_run_from_passing() -> None:
    # one front of three killed: its `front_outage`, merged per broker, still names the
    # window judged by no check, so the run cannot pass on the other checks alone
    from analysis.checks.broker_side import merge_brokers
    from analysis.verdict import OUTAGE

    window = "10.0–14.7 s (acceptor pid 2772 killed; ...)"
    outage = CheckResult(OUTAGE, UNKNOWN, "no front in " + window, "a front", family="faults",
                         data={"outage": [window]})  # fmt: skip
    merged = merge_brokers([(2, outage)], 0, 0)
    assert merged.verdict == UNKNOWN and merged.data["outage"] == [f"broker 2: {window}"]
    rate = CheckResult("ip_rate_span", PASS, "o", "e", judged=5, exercised=True)
    rate.judges_limit = True
    verdict, reasons = overall([rate, merged], ["ip_rate_span"])
    assert verdict == UNKNOWN and f"judged by no check: broker 2: {window}" in reasons
