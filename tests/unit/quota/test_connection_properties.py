"""Properties of ConnectionQuotas over arbitrary arrival sequences (hypothesis).

The IP-rate bound, derived from the meter (reference §0.2) and stated here so that the
checker and the report can quote it:

    For an IP with quota r (per second), n samples of w ms, and any admitted (not
    IP-throttled) connection at time t, the admitted connections of that IP with time in
    (t - (n-1)*w, t] number at most r * n * w / 1000 with the pre-3.8 meter and at most
    r * (n+1) * w / 1000 with the trunk meter; any span of n*w ms holds at most
    r * (n+1) * w / 1000 with the trunk meter.

Why: every such connection sits in a sample that is neither purged nor overwritten at t
(its sample started after t - n*w, there are at most n such samples, and the ring has n
or n+1 slots), so the count is at most the meter's sum at t; the check passed, so that
sum is at most r * W(t); and W(t) < n*w (pre-3.8: retained samples start after t - n*w)
or < (n+1)*w (trunk: retained samples have their last event after t - n*w). Throttled
attempts add +1 and -1 to the same sample, so they do not count. The steady-state share
is r*n*w; the extra r*w is the "burst-ish" slack of the padded window.
"""

from __future__ import annotations

import copy
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from base.quota import ConnectionQuotas, Outcome, parse_config
from base.quota.faults import NO_FAULTS

from .kafka_port import KafkaConnectionQuotas

LISTENERS = ("EXTERNAL", "REPLICATION")
IPS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")

arrivals = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=400),  # gap to the previous arrival, ms
        st.sampled_from(IPS),
        st.sampled_from(LISTENERS),
        st.booleans(),  # release one admitted connection afterwards
    ),
    min_size=1,
    max_size=250,
)


def make(n: int, w_s: int, legacy: bool, extra: dict[str, str] | None = None) -> ConnectionQuotas:
    props = {
        "listeners": "EXTERNAL://127.0.0.1:1,REPLICATION://127.0.0.1:2",
        "inter.broker.listener.name": "REPLICATION",
        "quota.window.num": str(n),
        "quota.window.size.seconds": str(w_s),
    }
    props.update(extra or {})
    # the seeded-fault hooks are present and off: the engine must still be Kafka's
    return ConnectionQuotas(parse_config(props), legacy_meter=legacy, faults=NO_FAULTS)


@settings(max_examples=120, deadline=None)
@given(
    seq=arrivals,
    n=st.sampled_from([2, 3, 11]),
    rate=st.sampled_from([1, 2, 5, 20]),
    legacy=st.booleans(),
)
def test_admitted_per_ip_within_the_derived_bound(
    seq: list[tuple[int, str, str, bool]], n: int, rate: int, legacy: bool
) -> None:
    w = 1000
    q = make(n, 1, legacy)
    q.set_ip_quota(None, rate, 0)
    admitted: dict[str, list[int]] = defaultdict(list)
    t = 0
    for gap, ip, listener, _ in seq:
        t += gap
        adm = q.admit(listener, ip, t)
        assert 0 <= adm.throttle_ms <= w
        if adm.outcome is Outcome.ADMITTED:
            admitted[ip].append(t)
            q.release(listener, ip)
    short_cap = rate * (n if legacy else n + 1) * w / 1000
    for times in admitted.values():
        for i, end in enumerate(times):
            in_short = sum(1 for x in times[: i + 1] if x > end - (n - 1) * w)
            assert in_short <= short_cap, (end, in_short, short_cap)
            if not legacy:
                in_span = sum(1 for x in times[: i + 1] if x > end - n * w)
                assert in_span <= rate * (n + 1) * w / 1000


@settings(max_examples=120, deadline=None)
@given(
    seq=arrivals,
    broker_max=st.integers(min_value=0, max_value=6),
    listener_max=st.integers(min_value=1, max_value=5),
    per_ip=st.integers(min_value=1, max_value=3),
    broker_rate=st.sampled_from([0, 1, 3, 1000]),
    ip_rate=st.sampled_from([None, 0, 1, 4]),
    legacy=st.booleans(),
)
def test_counts_delays_and_release(
    seq: list[tuple[int, str, str, bool]],
    broker_max: int,
    listener_max: int,
    per_ip: int,
    broker_rate: int,
    ip_rate: int | None,
    legacy: bool,
) -> None:
    q = make(
        3,
        1,
        legacy,
        {
            "max.connections": str(broker_max),
            "listener.name.external.max.connections": str(listener_max),
            "listener.name.replication.max.connections": str(listener_max),
            "max.connections.per.ip": str(per_ip),
            "max.connection.creation.rate": str(broker_rate),
        },
    )
    q.set_ip_quota(None, ip_rate, 0)
    live: list[tuple[str, str]] = []
    t = 0
    for gap, ip, listener, release in seq:
        t += gap
        d = q.decide(listener, ip, t)
        assert 0 <= d.rate.delay_ms <= 1000
        assert d.rate.delay_ms == max(d.rate.broker_delay_ms, d.rate.listener_delay_ms)
        if q.is_protected(listener):
            assert d.rate.broker_delay_ms == 0
        if d.waits_for_slot:
            assert d.admission is None
            assert not q.slot_available(listener)
        else:
            assert d.admission is not None
            assert 0 <= d.admission.throttle_ms <= 1000
            if d.outcome is Outcome.ADMITTED:
                live.append((listener, ip))
        # Invariants of Kafka's counts.
        ext, rep = q.listener_count("EXTERNAL"), q.listener_count("REPLICATION")
        assert 0 <= ext <= listener_max and 0 <= rep <= listener_max
        assert q.total == ext + rep == len(live)
        assert ext <= broker_max  # only the protected listener goes past the broker max
        for addr in IPS:
            assert 0 <= q.ip_count(addr) <= per_ip
            assert q.ip_count(addr) == sum(1 for _, a in live if a == addr)
        if release and live:
            lst, addr = live.pop(0)
            q.release(lst, addr)
    for lst, addr in live:
        q.release(lst, addr)
    assert q.total == 0
    assert all(q.ip_count(a) == 0 for a in IPS)
    assert q.listener_count("EXTERNAL") == q.listener_count("REPLICATION") == 0


@settings(max_examples=60, deadline=None)
@given(seq=arrivals, legacy=st.booleans())
def test_non_protected_admissions_never_exceed_broker_max(
    seq: list[tuple[int, str, str, bool]], legacy: bool
) -> None:
    # With a single listener nothing is protected: the broker total never exceeds the max.
    q = ConnectionQuotas(
        parse_config({"listeners": "EXTERNAL://127.0.0.1:1", "max.connections": "4"}),
        legacy_meter=legacy,
    )
    live: list[str] = []
    t = 0
    for gap, ip, _, release in seq:
        t += gap
        d = q.decide("EXTERNAL", ip, t)
        if d.outcome is Outcome.ADMITTED:
            live.append(ip)
        assert q.total == len(live) <= 4
        assert not q.max_connections_exceeded("EXTERNAL")
        if release and live:
            q.release("EXTERNAL", live.pop())


@settings(max_examples=150, deadline=None)
@given(
    seq=arrivals,
    broker_rate=st.sampled_from([0, 1, 5, 30]),
    listener_rate=st.sampled_from([1, 4, 2147483647]),
    ip_rate=st.sampled_from([0, 1, 3, 2147483647]),
    broker_max=st.integers(min_value=0, max_value=8),
    per_ip=st.integers(min_value=1, max_value=4),
    legacy=st.booleans(),
)
def test_engine_matches_a_literal_transcription_of_kafka(
    seq: list[tuple[int, str, str, bool]],
    broker_rate: int,
    listener_rate: int,
    ip_rate: int,
    broker_max: int,
    per_ip: int,
    legacy: bool,
) -> None:
    n, w = 3, 1000
    q = make(
        n,
        1,
        legacy,
        {
            "max.connection.creation.rate": str(broker_rate),
            "listener.name.external.max.connection.creation.rate": str(listener_rate),
            "max.connections": str(broker_max),
            "max.connections.per.ip": str(per_ip),
        },
    )
    q.set_ip_quota(None, ip_rate, 0)
    k = KafkaConnectionQuotas(
        list(LISTENERS),
        "REPLICATION",
        broker_rate,
        {"EXTERNAL": listener_rate},
        broker_max,
        {},
        per_ip,
        n=n,
        w=w,
        legacy=legacy,
    )
    k.ip_rate_default = ip_rate
    live: list[tuple[str, str]] = []
    t = 0
    for gap, ip, listener, release in seq:
        t += gap
        d = q.decide(listener, ip, t)
        delay = k.rate_step(listener, t)
        assert d.rate.delay_ms == delay
        assert d.waits_for_slot == (not k.slot_available(listener))
        if not d.waits_for_slot:
            outcome, throttle = k.ip_step_and_count(listener, ip, t + delay)
            assert d.admission is not None
            assert (d.admission.outcome.value, d.admission.throttle_ms) == (outcome, throttle)
            if outcome == "admit":
                live.append((listener, ip))
        assert q.max_connections_exceeded(listener) == (
            k.total > broker_max and not k.protected(listener)
        )
        if release and live:
            lst, addr = live.pop(0)
            q.release(lst, addr)
            k.dec(lst, addr)
        # Kafka's measure() mutates (purge, first sample): read a copy, as peek() does.
        assert q.broker_rate(t) == copy.deepcopy(k.broker_sensor).measure(t)
        assert q.listener_rate(listener, t) == copy.deepcopy(k.listener_sensors[listener]).measure(
            t
        )
        assert q.total == k.total
