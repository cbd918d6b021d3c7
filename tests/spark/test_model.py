"""The checker's own model reproduces the reference numbers at the exact edges.

Pure Python (no JVM), kept beside the Spark tests because the model is the analysis's.
Reference: kafka-quota-model.md §0.2, §2, §3, §7 (n = 11, w = 1 s unless stated).
"""

from __future__ import annotations

import pytest

from analysis.model import INT_MAX, AdmissionModel, Limits, RateMeter, burst_allowance, java_round


def test_burst_of_200_at_20_per_second_then_first_throttle() -> None:
    meter = RateMeter(20)
    assert burst_allowance(20) == 200
    delays = [meter.record_bounded(0) for _ in range(200)]
    assert delays == [0] * 200  # rate 200/10 s = 20: equality passes
    # 201st: rate 20.1 > 20; X = (20.1-20)/20 * 10000 ms = 50 ms = (k+1-B)/B * (n-1)*w
    assert meter.record_bounded(0) == 50
    # record-then-check: the violating connection stayed recorded
    assert sum(meter.values) == 201


@pytest.mark.parametrize(
    "k1, expected", [(201, 50), (210, 500), (220, 1000), (221, 1000), (400, 1000)]
)
def test_first_throttle_formula_and_cap_at_window(k1: int, expected: int) -> None:
    meter = RateMeter(20)
    for _ in range(k1 - 1):
        meter.record_bounded(0)
    assert meter.record_bounded(0) == expected


def test_window_edge_999_vs_1000_ms_sample_roll() -> None:
    meter = RateMeter(20)
    meter.record(1, 0)
    meter.record(1, 999)
    assert len(meter.starts) == 1  # 999 ms is still the same sample
    meter.record(1, 1000)
    assert len(meter.starts) == 2  # t - start >= w rolls to the next slot
    # padded to n-1 full windows plus the fraction of the current one
    assert meter.window_ms(1000) == 10_000
    assert meter.window_ms(1500) == 10_500


def test_the_201st_at_the_window_edge() -> None:
    at_once = RateMeter(20)
    for _ in range(200):
        at_once.record_bounded(0)
    assert at_once.record_bounded(0) == 50
    later = RateMeter(20)
    for _ in range(200):
        later.record_bounded(0)
    # 999 ms later the window is 10.999 s: 201/10.999 = 18.3/s, within quota
    assert later.record_bounded(999) == 0


def test_purge_by_last_event_after_n_windows() -> None:
    meter = RateMeter(20)
    for _ in range(200):
        meter.record_bounded(0)
    meter.record_bounded(10_999)
    assert sum(meter.values) == 201  # the first sample's last event is 10 999 ms old: kept
    meter.measure(10_999 + 11_000)
    assert sum(meter.values) == 0  # n*w after the last event everything is purged


def test_bound_zero_always_waits_one_window() -> None:
    assert RateMeter(0).record_bounded(5) == 1000
    assert RateMeter(0, n=11, w_ms=2000).record_bounded(5) == 2000


def test_java_round_is_half_up() -> None:
    assert java_round(2.5) == 3
    assert java_round(-2.5) == -2
    assert java_round(float("inf")) == 2**63 - 1


def _limits(**extra: object) -> Limits:
    return Limits.from_config(
        {
            "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
            "inter.broker.listener.name": "INTERNAL",
            **extra,
        }
    )


def test_ip_throttle_unrecords_ip_listener_and_broker() -> None:
    model = AdmissionModel(_limits(**{"ip_quotas": {"127.0.0.9": 1}}))
    for _ in range(10):  # burst of 1/s * 10 s
        model.rate_step("client", 0)
        assert model.ip_step("client", "127.0.0.9", 0).outcome == "admit"
    model.rate_step("client", 0)
    step = model.ip_step("client", "127.0.0.9", 0)
    assert step.outcome == "throttle_close"
    assert step.throttle_ms == 1000  # (1.1 - 1)/1 * 10000 ms = 1000 = the cap
    assert sum(model.broker.values) == 10
    assert sum(model.listeners["client"].values) == 10
    assert sum(model.ips["127.0.0.9"].values) == 10
    assert model.ip_counts["127.0.0.9"] == 10  # never counted


def test_ip_count_reject_stays_in_rate_meters() -> None:
    model = AdmissionModel(_limits(**{"max.connections.per.ip": 1}))
    model.rate_step("client", 0)
    assert model.ip_step("client", "127.0.0.5", 0).outcome == "admit"
    model.rate_step("client", 1)
    step = model.ip_step("client", "127.0.0.5", 1)
    assert (step.outcome, step.count, step.max) == ("reject", 1, 1)
    assert sum(model.broker.values) == 2 and sum(model.listeners["client"].values) == 2
    model.release("client", "127.0.0.5")
    assert model.ip_step("client", "127.0.0.5", 2).outcome == "admit"


def test_protected_listener_skips_broker_rate_and_count() -> None:
    lim = _limits(**{"max.connection.creation.rate": 10, "max.connections": 1})
    model = AdmissionModel(lim)
    assert lim.is_protected("internal") and not lim.is_protected("client")
    for _ in range(50):
        assert model.rate_step("internal", 0).delay_ms == 0
    assert sum(model.broker.values) == 0
    for _ in range(100):
        model.rate_step("client", 0)
    assert model.rate_step("client", 0).broker_ms == 100  # (10.1 - 10)/10 * 10000
    model.ip_step("client", "127.0.0.1", 0)
    assert not model.slot_available("client") and model.slot_available("internal")


def test_single_listener_is_not_protected() -> None:
    lim = Limits.from_config(
        {"listeners": "INTERNAL://:9093", "inter.broker.listener.name": "INTERNAL"}
    )
    assert not lim.is_protected("internal")


def test_reconfigure_keeps_samples_and_swaps_bound() -> None:
    model = AdmissionModel(_limits(**{"listener.name.client.max.connection.creation.rate": 100}))
    for _ in range(200):
        assert model.rate_step("client", 0).delay_ms == 0
    model.reconfigure(_limits(**{"listener.name.client.max.connection.creation.rate": 10}))
    step = model.rate_step("client", 0)
    assert step.listener_ms == 1000  # 201 in 10 s = 20.1/s vs 10/s, capped at w


def test_config_parsing_and_clear_errors() -> None:
    lim = Limits.from_config(
        '{"max.connections.per.ip.overrides": "127.0.0.9:5, 10.0.0.1:7", "quota.window.num": 5,'
        ' "quota.window.size.seconds": 2, "listener.name.CLIENT.max.connections": 9}'
    )
    assert lim.max_for_ip("127.0.0.9") == 5 and lim.max_for_ip("127.0.0.1") == INT_MAX
    assert (lim.window_num, lim.window_ms, lim.listener_max_for("client")) == (5, 2000, 9)
    with pytest.raises(ValueError, match=r"max\.connection\.creation\.rate='fast': not a number"):
        Limits.from_config({"max.connection.creation.rate": "fast"})
    with pytest.raises(ValueError, match=r"overrides.*not host:n"):
        Limits.from_config({"max.connections.per.ip.overrides": "127.0.0.9"})
