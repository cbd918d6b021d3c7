"""Arrival schedules: counts, shapes, seeds and spec errors (pure, no clock)."""

from __future__ import annotations

import itertools
import statistics

import pytest

from loadprofiles.arrivals import ArrivalSpecError, arrival_times, parse_arrival, split


def times(spec: str, **kw: object) -> list[float]:
    return list(arrival_times(parse_arrival(spec), **kw))  # type: ignore[arg-type]


def count_between(ts: list[float], lo: float, hi: float) -> int:
    return sum(1 for t in ts if lo <= t < hi)


@pytest.mark.parametrize(
    ("spec", "duration", "expected"),
    [
        ("constant:rate=50", 10, 500),
        ("step:rates=10/50/100,every=5", 15, 50 + 250 + 500),
        ("spike:base=5,peak=200,at=10,for=2", 20, 5 * 18 + 200 * 2),
        ("ramp:from=0,to=200,over=30", 30, 3000),
        ("sawtooth:low=0,high=100,period=10", 20, 1000),
        ("constant:rate=0.5", 10, 5),
    ],
)
def test_deterministic_shapes_offer_the_integral_of_their_rate(
    spec: str, duration: float, expected: int
) -> None:
    ts = times(spec, duration_s=duration)
    assert abs(len(ts) - expected) <= 1
    assert abs(parse_arrival(spec).expected_count(duration) - expected) < 0.5
    assert ts == sorted(ts) and all(0 <= t < duration for t in ts)


def test_constant_has_even_sub_second_spacing() -> None:
    ts = times("constant:rate=1000", duration_s=1)
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    assert len(ts) == 1000 and ts[0] == 0.0
    assert max(gaps) - min(gaps) < 1e-6 and abs(gaps[0] - 0.001) < 1e-6


def test_step_changes_rate_every_period() -> None:
    ts = times("step:rates=10/50/100,every=5", duration_s=20)
    assert [count_between(ts, a, a + 5) for a in (0, 5, 10, 15)] == [50, 250, 500, 500]


def test_spike_is_dense_only_inside_its_window() -> None:
    ts = times("spike:base=5,peak=200,at=10,for=2", duration_s=20)
    assert count_between(ts, 10, 12) == 400
    assert count_between(ts, 0, 10) == 50 and count_between(ts, 12, 20) in (39, 40, 41)
    assert max(b - a for a, b in itertools.pairwise(t for t in ts if 10 <= t < 12)) < 0.0051


def test_ramp_accelerates_and_holds_its_final_rate() -> None:
    ts = times("ramp:from=0,to=200,over=30", duration_s=40)
    first, last = count_between(ts, 0, 5), count_between(ts, 25, 30)
    assert first < last
    assert abs(count_between(ts, 0, 15) - 750) <= 1  # integral of the linear part
    assert abs(count_between(ts, 30, 40) - 2000) <= 1


def test_sawtooth_repeats_every_period() -> None:
    ts = times("sawtooth:low=0,high=100,period=10", duration_s=30)
    per_half = [count_between(ts, a, a + 5) for a in range(0, 30, 5)]
    assert per_half[0::2] == [per_half[0]] * 3 and per_half[1::2] == [per_half[1]] * 3
    assert per_half[1] > 2 * per_half[0]


def test_poisson_is_reproducible_by_seed_and_has_the_right_rate() -> None:
    a = times("poisson:rate=50", duration_s=60, seed=7)
    b = times("poisson:rate=50", duration_s=60, seed=7)
    c = times("poisson:rate=50", duration_s=60, seed=8)
    assert a == b and a != c
    assert abs(len(a) - 3000) < 4 * 3000**0.5  # 4 sigma
    gaps = [y - x for x, y in itertools.pairwise(a)]
    assert abs(statistics.mean(gaps) - 0.02) < 0.002
    assert statistics.stdev(gaps) > 0.015  # exponential: stdev ~ mean, not regular


def test_max_arrivals_and_duration_bound_the_schedule() -> None:
    assert len(times("constant:rate=100", max_arrivals=7)) == 7
    assert len(times("poisson:rate=100", max_arrivals=7, seed=1)) == 7
    assert times("constant:rate=100", max_arrivals=0) == []
    assert len(times("constant:rate=100", duration_s=0.5)) == 50
    assert times("constant:rate=0") == []  # never rises: ends instead of spinning
    assert times("step:rates=5/0,every=1") == times("step:rates=5/0,every=1", duration_s=9)


def test_split_interleaves_drivers_without_loss_or_overlap() -> None:
    spec = parse_arrival("poisson:rate=80")
    whole = list(arrival_times(spec, seed=3, duration_s=5))
    parts = [list(split(arrival_times(spec, seed=3, duration_s=5), i, 3)) for i in range(3)]
    merged = sorted((k, t) for part in parts for k, t in part)
    assert merged == list(enumerate(whole))
    assert {len(p) for p in parts} <= {len(whole) // 3, len(whole) // 3 + 1}
    with pytest.raises(ValueError):
        list(split(iter([]), 3, 3))


@pytest.mark.parametrize(
    ("spec", "key", "fragment"),
    [
        ("burst:rate=5", "shape", "unknown shape"),
        ("constant:rate=fast", "rate", "not a number"),
        ("constant:rate=-1", "rate", ">= 0"),
        ("constant:", "rate", "missing"),
        ("constant:rate=5,every=2", "every", "unknown key"),
        ("step:rates=,every=5", "rates", "separated"),
        ("step:rates=1/2,every=0", "every", "> 0"),
        ("poisson:rate=0", "rate", "> 0"),
        ("sawtooth:low=9,high=1,period=5", "high", ">= low"),
        ("ramp:from=0,to", "to", "key=value"),
    ],
)
def test_bad_specs_name_key_value_and_reason(spec: str, key: str, fragment: str) -> None:
    with pytest.raises(ArrivalSpecError) as err:
        parse_arrival(spec)
    assert err.value.key == key
    assert fragment in str(err.value) and str(err.value).startswith("--arrival: ")
