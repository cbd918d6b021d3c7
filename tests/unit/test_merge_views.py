"""Merging one check's results over views (acceptor processes, brokers): a view that is
unknown only because one of its parts saw no event there adds nothing; the merged parts
count what the other views judged, with the note of one that judged."""

from __future__ import annotations

from types import SimpleNamespace

from analysis.checks.base import PASS, UNKNOWN, Check, CheckResult, Part, adds_nothing, run_check
from analysis.verdict import _merge_views

PART = "every connected attempt accepted or dropped by the kernel"


def _judged(connected: int, attempts: int) -> CheckResult:
    check = Check(
        "accounting",
        "clients",
        lambda _run: CheckResult(
            "accounting",
            PASS,
            observed=f"{attempts} attempts",
            expected="-",
            judged=attempts,
            parts=[Part(PART, connected, "" if connected else "no attempt completed")],
        ),
        False,
        doc="-",
    )
    return run_check(check, None)  # type: ignore[arg-type]


def test_a_view_unknown_only_for_an_empty_part_adds_nothing() -> None:
    lived, refused = _judged(139, 139), _judged(0, 42)
    assert lived.verdict == PASS
    assert refused.verdict == UNKNOWN and adds_nothing(refused)
    lives = [SimpleNamespace(index=i, pid=100 + i, crashed=False) for i in range(2)]
    merged = _merge_views(lives, [lived, refused])
    assert merged.verdict == PASS, merged.observed
    assert merged.parts == [Part(PART, 139, "")]
    assert merged.judged == 181


def test_no_view_judging_the_part_stays_unknown() -> None:
    lives = [SimpleNamespace(index=i, pid=100 + i, crashed=False) for i in range(2)]
    merged = _merge_views(lives, [_judged(0, 5), _judged(0, 7)])
    assert merged.verdict == UNKNOWN
    assert merged.unjudged_parts() == [Part(PART, 0, "no attempt completed")]
