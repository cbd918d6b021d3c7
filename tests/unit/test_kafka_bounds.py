"""The broker-side bounds (analysis.checks.kafka_bounds) against a simulation of Kafka's meter.

The simulation drives the literal transcription of Kafka's SampledStat/Rate/ConnectionQuotas
(tests/unit/quota/kafka_port.py, a test oracle the analysis never imports) with one
acceptor thread per listener: each connection is accepted when it has arrived and the
thread is free, records the rate sensors at t0, waits its delay, runs the IP step at t1.
Arrivals and the thread's own timing get random jitter; the patterns include storms far
above the rate, rates just above it, bursts after idle gaps (the sample ring's purge
edges) and sparse traffic. Every bound must hold for the exact Kafka instants and for
the client intervals around them, and must not be loose beyond the margin it derives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from analysis.checks.kafka_bounds import (
    ip_span_bound,
    ip_throttle_possible,
    longest_span_ms,
    max_overlap,
    max_sure_in_span,
    memory_ms,
    rate_span_bound,
    slots,
)
from tests.unit.quota.kafka_port import INT_MAX, KafkaConnectionQuotas, KafkaRate

N, W = 11, 1000


@dataclass
class Conn:
    ip: str
    invoke: float
    t0: int
    t1: int
    delay: int
    outcome: str
    throttle: int
    end: float  # client ready (served) or EOF (throttle-closed)


def simulate(
    arrivals: list[tuple[float, str]],
    *,
    broker_rate: float = INT_MAX,
    ip_quota: float = INT_MAX,
    seed: int = 0,
    n: int = N,
    w: int = W,
    legacy: bool = False,
) -> list[Conn]:
    """``legacy``: Kafka before 3.8 (the ring of n samples purged by start)."""
    rng = random.Random(seed)
    q = KafkaConnectionQuotas(["L"], None, INT_MAX, {}, INT_MAX, {}, INT_MAX, n, w, legacy=legacy)
    q.broker_sensor.bound = broker_rate
    q.ip_rate_default = int(ip_quota) if ip_quota < INT_MAX else INT_MAX
    free = 0.0
    out: list[Conn] = []
    for arrival, ip in sorted(arrivals):
        t0 = int(max(arrival, free) + rng.uniform(0, 2))  # accept() and Kafka's ms clock
        delay = q.rate_step("L", t0)
        t1 = t0 + delay + rng.choice((0, 0, 1))  # counts.wait wakes a little late
        outcome, throttle = q.ip_step_and_count("L", ip, t1)
        if outcome == "admit":
            q.dec("L", ip)  # counts are not under test; keep them small
        free = t1 + rng.uniform(0, 1.5)
        invoke = arrival - rng.uniform(0, 3)  # the client invokes, the SYN arrives later
        if outcome == "admit":
            end = t1 + rng.uniform(0.5, 30)  # registered, answered, read by the client
        else:
            end = t1 + throttle + rng.uniform(0, 500)  # parked, closed by the select loop
        out.append(Conn(ip, invoke, t0, t1, delay, outcome, throttle, end))
    return out


def storm(rate: float, seconds: float, ips: int, rng: random.Random, t0: float = 0.0):
    """Poisson arrivals at ``rate``/s from ``ips`` addresses."""
    t, out = t0, []
    while t < t0 + seconds * 1000:
        t += rng.expovariate(rate / 1000.0)
        out.append((t, f"10.0.0.{rng.randrange(ips) + 1}"))
    return out


def patterns(seed: int, rate: float) -> dict[str, list[tuple[float, str]]]:
    rng = random.Random(seed)
    burst_after_idle = storm(rate * 5, 3, 4, rng) + storm(rate * 5, 3, 4, rng, t0=14_000)
    sparse_then_flood = storm(rate / 4, 20, 4, rng) + storm(rate * 8, 6, 4, rng, t0=20_000)
    return {
        "far_above": storm(rate * 4, 30, 8, rng),
        "just_above": storm(rate * 1.1, 40, 8, rng),
        "burst_after_idle": burst_after_idle,
        "sparse_then_flood": sparse_then_flood,
    }


SPANS = (W, 4 * W, N * W - 2)
#: the releases' rings: overlap (n+1 samples, Kafka >= 3.8.0) and not (n samples, before)
RINGS = [True, False]


def spans(overlap: bool) -> tuple[float, ...]:
    return (W, 4 * W, longest_span_ms(N, W, overlap))


def test_the_meters_memory_per_release() -> None:
    """n+1 ring: an event is kept while t - e < n·w; n ring: while its sample's start
    (up to w - 1 ms before it) is less than n·w old."""
    assert (slots(N, True), slots(N, False)) == (N + 1, N)
    assert memory_ms(N, W, True) == N * W - 1 and longest_span_ms(N, W, True) == N * W - 2
    assert memory_ms(N, W, False) == (N - 1) * W and longest_span_ms(N, W, False) == 9_999
    with pytest.raises(ValueError):
        rate_span_bound(2, N * W - 2, N, W, overlap=False)


@pytest.mark.parametrize("overlap", RINGS)
def test_every_event_of_the_memory_is_in_the_value(overlap: bool) -> None:
    """The literal meter, worst case: an event at the end of its sample (w - 1 ms after
    the sample's start) is still counted `memory_ms` later and gone 1 ms after that."""
    m = KafkaRate(N, W, INT_MAX, legacy=not overlap)
    start = 50_000
    m.record(1.0, start, check=False)
    m.record(1.0, start + W - 1, check=False)  # the same sample, at its last millisecond
    edge = start + W - 1 + int(memory_ms(N, W, overlap))
    m.purge(edge)
    assert sum(x.value for x in m.samples) == 2
    m.purge(edge + 1)
    assert sum(x.value for x in m.samples) == 0


@pytest.mark.parametrize("overlap", RINGS)
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rate", [5.0, 20.0, 0.5])
def test_rate_bound_holds_for_kafka_instants_and_client_intervals(
    seed: int, rate: float, overlap: bool
) -> None:
    for name, arrivals in patterns(seed, rate).items():
        conns = simulate(arrivals, broker_rate=rate, seed=seed, legacy=not overlap)
        t0s = [float(c.t0) for c in conns]
        served = [c for c in conns if c.outcome == "admit"]
        for span in spans(overlap):
            bound = rate_span_bound(rate, span, N, W, overlap=overlap)
            exact, _ = max_sure_in_span(t0s, t0s, span)
            assert exact <= bound, (name, span, exact, bound)
            seen, _ = max_sure_in_span([c.invoke for c in served], [c.end for c in served], span)
            assert seen <= exact


@pytest.mark.parametrize("overlap", RINGS)
def test_rate_bound_is_within_its_derived_margin_of_what_kafka_really_admits(
    overlap: bool,
) -> None:
    """A storm after a long idle gap fills the burst and then runs at the rate: Kafka's own
    peak over the meter's memory is within r·2w + T/w + 2 (the window up to m·w and the
    last uncapped delay up to w, the capped tail) of the bound, on either release's ring,
    so the bound is not a round number chosen to be safe."""
    rng = random.Random(7)
    rate = 20.0
    conns = simulate(storm(rate * 6, 30, 8, rng), broker_rate=rate, seed=7, legacy=not overlap)
    t0s = [float(c.t0) for c in conns]
    span = longest_span_ms(N, W, overlap)
    exact, _ = max_sure_in_span(t0s, t0s, span)
    bound = rate_span_bound(rate, span, N, W, overlap=overlap)
    assert exact <= bound
    assert bound - exact <= rate * 2 * W / 1000 + 2 + span / W, (exact, bound)
    assert exact / bound > 0.85


def test_two_acceptors_sharing_the_broker_sensor() -> None:
    """Two listeners, one broker-wide sensor: interleave two acceptor threads."""
    rng = random.Random(3)
    rate = 10.0
    q = KafkaConnectionQuotas(["A", "B"], None, int(rate), {}, INT_MAX, {}, INT_MAX)
    free = {"A": 0.0, "B": 0.0}
    arrivals = [(t, rng.choice("AB")) for t, _ in storm(rate * 5, 30, 1, rng)]
    pending = sorted(arrivals)
    t0s = []
    # each thread takes its next arrival when free; process in order of start time
    queues = {k: [t for t, lst in pending if lst == k] for k in "AB"}
    while any(queues.values()):
        k = min((x for x in "AB" if queues[x]), key=lambda x: max(queues[x][0], free[x]))
        arrival = queues[k].pop(0)
        t0 = int(max(arrival, free[k]) + rng.uniform(0, 1))
        delay = q.rate_step(k, t0)
        t0s.append(float(t0))
        free[k] = t0 + delay + rng.uniform(0, 1)
    for span in SPANS:
        exact, _ = max_sure_in_span(t0s, t0s, span)
        assert exact <= rate_span_bound(rate, span, N, W, acceptors=2)


@pytest.mark.parametrize("overlap", RINGS)
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("quota", [1.0, 3.0, 10.0])
def test_ip_bound_and_throttle_condition_hold(seed: int, quota: float, overlap: bool) -> None:
    m = slots(N, overlap)
    for name, arrivals in patterns(seed, quota * 4).items():
        conns = simulate(arrivals, ip_quota=quota, seed=seed, legacy=not overlap)
        bound = ip_span_bound(quota, N, W, overlap=overlap)
        for ip in {c.ip for c in conns}:
            mine = [c for c in conns if c.ip == ip]
            kept = [float(c.t1) for c in mine if c.outcome != "throttle_close"]
            exact, _ = max_sure_in_span(kept, kept, memory_ms(N, W, overlap))
            assert exact <= bound, (name, ip, exact, bound)
            # every throttle Kafka decided satisfies the necessary condition, counting
            # only the records the release's ring can still hold (t1 - m·w, t1]
            for c in mine:
                if c.outcome == "throttle_close":
                    others = sum(1 for t in kept if c.t1 - m * W < t <= c.t1)
                    assert ip_throttle_possible(others, quota, N, W), (name, c)


@pytest.mark.parametrize("overlap", RINGS)
def test_ip_bound_is_reached_closely_by_a_flood(overlap: bool) -> None:
    rng = random.Random(5)
    conns = simulate(storm(40, 30, 1, rng), ip_quota=3, seed=5, legacy=not overlap)
    kept = [float(c.t1) for c in conns if c.outcome != "throttle_close"]
    exact, _ = max_sure_in_span(kept, kept, memory_ms(N, W, overlap))
    assert ip_span_bound(3, N, W, overlap=overlap) - exact <= 3 * 2 + 1, exact


def test_a_history_one_over_the_bound_is_caught() -> None:
    """The counting side: bound + 1 intervals inside one span are found, bound are not over."""
    bound = rate_span_bound(20, N * W - 2, N, W)
    lo = [float(i) for i in range(bound + 1)]
    hi = [x + 5 for x in lo]
    got, at = max_sure_in_span(lo, hi, N * W - 2)
    assert got == bound + 1 > bound and at is not None
    got, _ = max_sure_in_span(lo[:-1], hi[:-1], N * W - 2)
    assert got == bound
    # an interval reaching outside the span is not surely inside it
    assert max_sure_in_span([0.0, 1.0], [20_000.0, 2.0], 100.0)[0] == 1


def test_throttle_impossible_below_the_padded_window() -> None:
    # quota 3/s, n=11: a throttle needs V > 30, i.e. at least 30 other kept records
    assert not ip_throttle_possible(29, 3, N, W)
    assert ip_throttle_possible(30, 3, N, W)
    assert not ip_throttle_possible(10**6, INT_MAX, N, W)


def test_max_overlap_counts_releases_first() -> None:
    assert max_overlap([0, 10, 10], [10, 20, 30]) == (2, 10)
    assert max_overlap([], []) == (0, None)
