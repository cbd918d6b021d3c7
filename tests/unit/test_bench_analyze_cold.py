"""bench.analyze_cold's summary: medians per tree, the rounds' paired ratios."""

from __future__ import annotations

from bench.analyze_cold import SECONDS, summary


def _m(wall: float, cpu: float | None) -> dict[str, float | None]:
    return {"wall_s": wall, "cpu_s": cpu, "analysis_s": wall - 1}


def test_summary_pairs_each_round_before_it_takes_the_median() -> None:
    rounds = [
        {"before": _m(10.0, 20.0), "after": _m(9.0, 18.0)},  # 0.9
        {"before": _m(20.0, 30.0), "after": _m(10.0, 24.0)},  # 0.5: a noisy round
        {"before": _m(12.0, None), "after": _m(12.0, None)},  # 1.0; no CPU counted
    ]
    s = summary(rounds)
    assert s["wall_s"] == {"before": 12.0, "after": 10.0, "paired_ratio": 0.9}
    assert s["cpu_s"] == {"before": 25.0, "after": 21.0, "paired_ratio": 0.85}  # two rounds


def test_the_verdict_lines_seconds_are_read() -> None:
    line = "verdict: PASS  (16 pass, 0 fail, 6 unknown, 11 n/a; 4369 events in 10.94 s)"
    match = SECONDS.search(line)
    assert match is not None and match.group(1) == "10.94"
