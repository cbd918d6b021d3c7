"""Kafka's rate meter: the numbers of reference §0.2/§3 and equivalence with a literal port."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from base.quota.meter import RateMeter, SampledAvg, java_round, throttle_time_ms

from .kafka_port import KafkaRate

N, W = 11, 1000  # Kafka's defaults: quota.window.num, quota.window.size.seconds


def burst(bound: float) -> float:
    """Units a fresh meter takes at one instant before the first violation: bound*(n-1)*w."""
    return bound * (N - 1) * (W / 1000)


class TestBurstAndFirstThrottle:
    def test_fresh_meter_admits_bound_times_n_minus_one_windows_at_one_instant(self) -> None:
        meter = RateMeter(N, W, 20)
        results = [meter.record(1, 5_000) for _ in range(201)]
        assert all(r is None for r in results[:200]), "200 at 20/s from empty must pass"
        assert results[200] is not None, "the 201st must violate"
        assert burst(20) == 200

    def test_equality_passes_strictly_greater_violates(self) -> None:
        meter = RateMeter(N, W, 20)
        for _ in range(199):
            meter.record(1, 0)
        assert meter.record(1, 0) is None  # rate == 20.0 exactly
        assert meter.measure(0) == 20.0
        violation = meter.record(1, 0)
        assert violation is not None and violation.rate == pytest.approx(20.1)

    @pytest.mark.parametrize("bound", [5, 20, 30, 100])
    def test_first_throttle_formula_at_frozen_time(self, bound: int) -> None:
        # X = (rate - B)/B * W with rate = (k+1)/((n-1)w) and W = (n-1)w, i.e.
        # X = (k+1 - B)/B * (n-1)*w ms, B = bound*(n-1)*w. (The reference's "x 1000" is the
        # w = 1 s factor only; the padded window is (n-1)*w = 10 s.)
        meter = RateMeter(N, W, bound)
        b = int(burst(bound))
        for _ in range(b):
            assert meter.record_bounded(1, 0, 1_000_000) == 0
        for k_plus_1 in range(b + 1, b + 40):
            got = meter.record_bounded(1, 0, 1_000_000)
            expected = java_round((k_plus_1 - b) / b * (N - 1) * W)
            assert got == expected, (bound, k_plus_1)
        assert expected > 0

    def test_twenty_per_second_first_throttles(self) -> None:
        meter = RateMeter(N, W, 20)
        for _ in range(200):
            meter.record(1, 0)
        assert [meter.record_bounded(1, 0, W) for _ in range(3)] == [50, 100, 150]

    def test_bounded_throttle_is_capped_at_the_window(self) -> None:
        meter = RateMeter(N, W, 20)
        delays = [meter.record_bounded(1, 0, W) for _ in range(400)]
        assert max(delays) == W
        assert delays[-1] == W  # (400-200)/200 * 10000 = 10000 -> capped
        unbounded = meter.throttle_ms(0, bounded=False, max_ms=W)
        assert unbounded == java_round((400 - 200) / 200 * 10_000)

    def test_bound_zero_throttles_exactly_the_window(self) -> None:
        meter = RateMeter(N, W, 0)
        assert meter.record_bounded(1, 0, W) == W
        violation = RateMeter(N, W, 0).record(1, 0)
        assert violation is not None and violation.throttle_ms(W) == W
        assert violation.throttle_ms(None) == 2**63 - 1  # Math.round(+inf) = Long.MAX_VALUE

    def test_value_stays_recorded_after_violation(self) -> None:
        # MetricsTest.testQuotas: 5 then a failed 1 -> the sum holds 6.
        meter = RateMeter(N, W, 5 / ((N - 1) * W / 1000))  # bound so that 5 is exactly at it
        assert meter.record(5, 0) is None
        assert meter.record(1, 0) is not None
        assert meter.measure(0) * (meter.window_size(0) / 1000) == pytest.approx(6)

    def test_unrecord_restores_the_rate(self) -> None:
        meter = RateMeter(N, W, 1)
        meter.record(1, 100)
        assert meter.record(-1, 100, check=False) is None
        assert meter.measure(100) == 0.0


class TestKafkaNumbers:
    def test_client_quota_manager_violation_is_2100_ms(self) -> None:
        # ClientQuotaManagerTest.testQuotaViolation: 400 B every second for 10 s at a 500 B/s
        # quota, then 2300 B half a second later -> 6300 B / 10.5 s = 600 B/s -> 2100 ms.
        meter = RateMeter(N, W, 500)
        t = 0
        for _ in range(10):
            assert meter.record(400, t) is None
            t += 1000
        t += 500
        violation = meter.record(2300, t)
        assert violation is not None
        assert violation.rate == pytest.approx(600.0)
        assert violation.window_ms == 10_500
        assert violation.throttle_ms(None) == 2100

    def test_window_is_padded_to_n_minus_one_windows(self) -> None:
        meter = RateMeter(N, W, 1e9)
        meter.record(1, 1_000)
        assert meter.window_size(1_000) == 10_000
        assert meter.window_size(1_250) == 10_250
        meter.record(1, 1_999)  # same sample: its last event keeps it alive until 12 999
        assert meter.window_size(11_999) == 10_999  # 10 full windows: no padding
        assert meter.window_size(12_000) == 11_000
        assert meter.window_size(12_999) == 10_000  # purged; only the fresh sample is left

    def test_single_sample_window_is_floored_at_one_ms(self) -> None:
        meter = RateMeter(1, W, 1e9)
        meter.record(1, 7)
        assert meter.window_size(7) == 1
        assert meter.measure(7) == 1000.0  # 1 over 1 ms

    def test_samples_expire_after_n_windows(self) -> None:
        meter = RateMeter(N, W, 1e9)
        meter.record(10, 0)
        assert meter.measure(10_999) > 0
        assert meter.measure(11_000) == 0.0  # now - lastEvent >= n*w

    @pytest.mark.parametrize(
        ("x", "expected"),
        [
            (0.5, 1),
            (1.5, 2),
            (2.5, 3),
            (-0.5, 0),
            (-1.5, -1),
            (0.49999999999999994, 0),
            (49.99999, 50),
            (math.inf, 2**63 - 1),
            (math.nan, 0),
        ],
    )
    def test_java_math_round(self, x: float, expected: int) -> None:
        assert java_round(x) == expected

    def test_throttle_time_formula(self) -> None:
        assert throttle_time_ms(600.0, 500.0, 10_500, None) == 2100
        assert throttle_time_ms(600.0, 500.0, 10_500, 1000) == 1000
        assert throttle_time_ms(20.1, 20.0, 10_000, 1000) == 50


class TestLegacyRing:
    def test_sparse_traffic_at_a_window_boundary_differs(self) -> None:
        # A sample started at 0 with its last event at 999: at 11 000 the trunk meter keeps it
        # (now - lastEvent < n*w) while the pre-3.8 meter purges it (now - start >= n*w).
        trunk, legacy = RateMeter(N, W, 1e9), RateMeter(N, W, 1e9, legacy=True)
        for meter in (trunk, legacy):
            meter.record(1, 0)
            meter.record(1, 999)
        assert trunk.measure(11_000) == pytest.approx(2 / 11.0)
        assert legacy.measure(11_000) == 0.0

    def test_dense_uniform_traffic_agrees(self) -> None:
        trunk, legacy = RateMeter(N, W, 1e9), RateMeter(N, W, 1e9, legacy=True)
        for t in range(0, 30_000, 5):
            trunk.record(1, t)
            legacy.record(1, t)
            if t > 12_000 and t % 97 == 0:
                assert trunk.measure(t) == pytest.approx(legacy.measure(t), rel=0.01)
                assert trunk.measure(t) == pytest.approx(200, rel=0.01)

    def test_ring_sizes(self) -> None:
        trunk, legacy = KafkaRate(N, W, 1e9), KafkaRate(N, W, 1e9, legacy=True)
        for t in range(0, 40_000, 1000):
            trunk.record(1, t)
            legacy.record(1, t)
        assert (len(trunk.samples), len(legacy.samples)) == (N + 1, N)


def test_peek_has_no_side_effects() -> None:
    # A read between records must not move the window: Kafka's measure() would create a
    # sample at 0 here and the later window would start there instead of at 500.
    read, unread = RateMeter(N, W, 1e9), RateMeter(N, W, 1e9)
    assert read.peek(0) == 0.0
    read.record(1, 500)
    unread.record(1, 500)
    assert read.window_size(900) == unread.window_size(900) == 10_400
    touched = RateMeter(N, W, 1e9)
    touched.measure(0)
    touched.record(1, 500)
    assert touched.window_size(900) == 10_900  # Kafka's own behaviour, kept by measure()


class TestAvg:
    def test_avg_is_nan_without_samples_and_mean_otherwise(self) -> None:
        avg = SampledAvg()
        assert math.isnan(avg.measure(0))
        avg.record(100, 0)
        avg.record(300, 10)
        assert avg.measure(10) == 200.0
        assert math.isnan(avg.measure(10 + 60_000))  # 2 samples of 30 s expired


# Arbitrary sequences: the optimised meter must agree with the literal port exactly.
_op = st.tuples(
    st.integers(min_value=0, max_value=3_000),  # time step
    st.sampled_from([1.0, 1.0, 1.0, -1.0, 2.0, 0.5, 123.25, 1e-7 * 12345]),
    st.sampled_from(["check", "nocheck", "bounded", "measure"]),
)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(_op, max_size=120),
    samples=st.sampled_from([1, 2, 3, 11]),
    window=st.sampled_from([1, 7, 1000]),
    bound=st.sampled_from([0.0, 1.0, 5.0, 20.0, 333.3]),
    legacy=st.booleans(),
)
def test_meter_matches_literal_kafka_port(
    ops: list[tuple[int, float, str]], samples: int, window: int, bound: float, legacy: bool
) -> None:
    fast = RateMeter(samples, window, bound, legacy=legacy)
    port = KafkaRate(samples, window, bound, legacy=legacy)
    t = 0
    for step, value, kind in ops:
        t += step
        if kind == "measure":
            assert fast.peek(t) == port.measure(t)  # peek sees what measure sees...
            assert fast.measure(t) == port.measure(t)
            assert fast.window_size(t) == port.window_size(t)
            continue
        if kind == "bounded":
            got = fast.record_bounded(value, t, window)
            v = port.record(value, t)
            assert got == (0 if v is None else port.throttle_time(v, t, window))
            continue
        got_v = fast.record(value, t, check=kind == "check")
        want_v = port.record(value, t, check=kind == "check")
        if want_v is None:
            assert got_v is None
        else:
            assert got_v is not None
            assert (got_v.rate, got_v.bound) == want_v
            assert got_v.throttle_ms(None) == port.throttle_time(want_v, t, None)
            assert got_v.throttle_ms(window) == port.throttle_time(want_v, t, window)
