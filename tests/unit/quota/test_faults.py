"""Seeded faults (``harness.test.fault``): off, they cannot change a decision; on, each does.

Two halves:

* with the hooks present and ``Faults()`` empty, the engine still matches the literal
  transcription of Kafka (``kafka_port``) decision for decision on arbitrary traces, and
  every attribute a hook sets is Kafka's value;
* each engine fault changes at least one decision on a small, hand-made, injected-time
  trace, and the fault-free run of that same trace is Kafka's (checked against the port).

The acceptor-level faults (admission waits, processor queue and eviction order) are shown
on real sockets in ``tests/integration/test_acceptor_faults.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acceptor.config import parse_acceptor_config
from base.quota import ConfigError, ConnectionQuotas, Outcome, parse_config
from base.quota.faults import FAULT_KEY, FAULTS, KAFKA, NO_FAULTS, AtBoundRateMeter, Faults
from base.quota.meter import RateMeter
from base.quota.requests import RequestQuotas

from .kafka_port import KafkaConnectionQuotas

TWO_LISTENERS = {
    "listeners": "EXTERNAL://127.0.0.1:1,REPLICATION://127.0.0.1:2",
    "inter.broker.listener.name": "REPLICATION",
}

# -- configuration -------------------------------------------------------------------------


def test_parse_names_and_refuse_unknown_ones_with_key_value_and_reason() -> None:
    assert Faults.parse("") == NO_FAULTS
    assert Faults.parse(" delay_doubled , evict_most_recent ").names() == [
        "evict_most_recent",
        "delay_doubled",
    ]
    with pytest.raises(ConfigError) as exc:
        Faults.parse("delay_doubled,delay_tripled")
    assert exc.value.key == FAULT_KEY
    assert exc.value.value == "delay_doubled,delay_tripled"
    assert "unknown fault 'delay_tripled'" in exc.value.reason


def test_a_hook_asking_for_a_misspelt_fault_is_a_bug_not_a_silent_false() -> None:
    with pytest.raises(KeyError):
        _ = "delay_doubeld" in NO_FAULTS


def test_acceptor_config_reads_the_fault_key_and_keeps_the_older_skip_key() -> None:
    base = {"listeners": "CLIENT://127.0.0.1:0", "listener.name.client.upstream": "h:1"}
    assert parse_acceptor_config(base).faults == NO_FAULTS
    cfg = parse_acceptor_config({**base, FAULT_KEY: "ip_count_off_by_one"})
    assert cfg.faults.names() == ["ip_count_off_by_one"]
    assert not cfg.skip_ip_rate_check
    old = parse_acceptor_config({**base, "harness.test.skip.ip.rate.check": "true"})
    assert old.skip_ip_rate_check and old.faults.names() == ["skip_ip_rate_check"]
    with pytest.raises(ConfigError) as exc:
        parse_acceptor_config({**base, FAULT_KEY: "nope"})
    assert (exc.value.key, exc.value.value) == (FAULT_KEY, "nope")


def test_at_least_eighteen_faults_with_distinct_names() -> None:
    names = [f.name for f in FAULTS]
    assert len(names) == len(set(names)) >= 18


# -- off: the hooks cannot change a decision ------------------------------------------------


def test_empty_faults_leave_every_hooked_attribute_at_kafkas_value() -> None:
    cfg = parse_config(
        {
            **TWO_LISTENERS,
            "max.connections": "7",
            "max.connections.per.ip": "3",
            "max.connections.per.ip.overrides": "127.0.0.9:5",
            "listener.name.external.max.connections": "4",
        }
    )
    q = ConnectionQuotas(cfg, faults=NO_FAULTS)
    assert q._meter is RateMeter and type(q._broker) is RateMeter
    assert q._cap == cfg.window_ms
    assert q._broker_max == 7 and q._per_ip_default == 3
    assert q._per_ip_overrides == {"127.0.0.9": 5}
    # REPLICATION sets no maximum of its own: the broker-wide one (Kafka's prefix override)
    assert q._listener_max == {"EXTERNAL": 4, "REPLICATION": 7}
    assert q._broker_rate_exempt == q._evict_exempt == {"EXTERNAL": False, "REPLICATION": True}
    assert not q._legacy and q._unrecord_throttled and q._policy is KAFKA
    r = RequestQuotas(faults=NO_FAULTS)
    assert r._request.bounded and r._request.meter_cls is RateMeter
    assert r._entity is None


# With the hooks present and no fault set the engine is Kafka, decision for decision: the
# property test `test_engine_matches_a_literal_transcription_of_kafka` in
# test_connection_properties.py builds its engine with `faults=NO_FAULTS` and compares it
# with the literal port of Kafka's code (delays, slot waits, IP outcomes, throttles,
# eviction); it is not repeated here.


@settings(max_examples=60, deadline=None)
@given(
    charges=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=300),  # gap, ms
            st.sampled_from(("hog", "light", "other")),
            st.integers(min_value=0, max_value=400_000_000),  # handler ns
        ),
        min_size=1,
        max_size=120,
    )
)
def test_request_quotas_with_empty_faults_decide_as_without_hooks(
    charges: list[tuple[int, str, int]],
) -> None:
    plain, hooked = RequestQuotas(), RequestQuotas(faults=Faults())
    for rq in (plain, hooked):
        rq.set_quota(None, "hog", "request_percentage", 1.0)
        rq.set_quota(None, "light", "request_percentage", 50.0)
    t = 0
    for gap, client, ns in charges:
        t += gap
        a = plain.record_request("ANONYMOUS", client, 0, ns, t)
        b = hooked.record_request("ANONYMOUS", client, 0, ns, t)
        assert a == b


# -- on: each fault changes a decision on a small trace -------------------------------------


@dataclass
class Trace:
    """Arrivals (t, listener, ip) fed to ``decide``; admitted ones are kept open."""

    props: dict[str, str]
    arrivals: list[tuple[int, str, str]]
    ip_quotas: list[tuple[int, str | None, int]] = field(default_factory=list)  # (t, ip, rate)
    release: bool = False  # release each admitted connection right away

    def run(self, faults: Faults) -> list[tuple[object, ...]]:
        q = ConnectionQuotas(parse_config(self.props), faults=faults)
        quotas = sorted(self.ip_quotas, key=lambda x: x[0])
        out: list[tuple[object, ...]] = []
        for t, listener, ip in self.arrivals:
            while quotas and quotas[0][0] <= t:
                at, addr, rate = quotas.pop(0)
                q.set_ip_quota(addr, rate, at)
            d = q.decide(listener, ip, t)
            adm = d.admission
            out.append(
                (
                    t,
                    listener,
                    ip,
                    d.rate.delay_ms,
                    d.waits_for_slot,
                    None if adm is None else adm.outcome.value,
                    None if adm is None else adm.throttle_ms,
                    q.max_connections_exceeded(listener),
                )
            )
            if self.release and adm is not None and adm.outcome is Outcome.ADMITTED:
                q.release(listener, ip)
        return out


ONE = {"listeners": "CLIENT://127.0.0.1:1"}
A, B = "127.0.0.2", "127.0.0.3"


def _burst(n: int, t: int = 0, listener: str = "CLIENT", ip: str = A) -> list[tuple[int, str, str]]:
    return [(t, listener, ip)] * n


#: fault -> (trace, the first decision it must change: a predicate on (kafka row, faulty row))
TRACES: dict[str, Trace] = {
    # 200 connections at 20/s fill the burst allowance exactly: Kafka admits the 200th.
    "violation_at_bound": Trace(ONE, _burst(201), [(0, None, 20)], release=True),
    # broker rate 1/s: the 12th connection at t=0 measures 1.2/s -> X = 2000 ms, capped 1000
    "throttle_uncapped": Trace({**ONE, "max.connection.creation.rate": "1"}, _burst(13)),
    # a sample with its last event at 999 is purged at 11 000 only by the pre-3.8 ring
    "window_n_samples": Trace(
        ONE, _burst(10) + _burst(10, 999) + _burst(3, 11_000), [(0, None, 2)], release=True
    ),
    # throttled attempts of A stay in the listener meter and delay B
    "no_unrecord_ip_throttle": Trace(
        {**ONE, "listener.name.client.max.connection.creation.rate": "5"},
        _burst(10) + _burst(40) + _burst(40, ip=B),
        [(0, A, 1)],
        release=True,
    ),
    "ip_rate_override_ignored": Trace(ONE, _burst(12), [(0, None, 10), (0, A, 1)], release=True),
    # A's meter exists (bound 10) when the default drops to 1
    "ip_default_not_reapplied": Trace(
        ONE, _burst(1) + _burst(20, 1), [(0, None, 10), (1, None, 1)], release=True
    ),
    "ip_count_off_by_one": Trace({**ONE, "max.connections.per.ip": "2"}, _burst(3)),
    "max_connections_off_by_one": Trace({**ONE, "max.connections": "2"}, _burst(3)),
    "listener_max_ignored": Trace(
        {**TWO_LISTENERS, "listener.name.external.max.connections": "2"},
        _burst(3, listener="EXTERNAL"),
    ),
    # 20 replication connections must not use up the broker rate of 1/s
    "protected_counts_broker_rate": Trace(
        {**TWO_LISTENERS, "max.connection.creation.rate": "1"},
        _burst(20, listener="REPLICATION") + _burst(1, listener="EXTERNAL"),
        release=True,
    ),
    # 2 replication connections over max.connections=1 (REPLICATION's own maximum is 5):
    # only EXTERNAL may evict
    "protected_evicted": Trace(
        {**TWO_LISTENERS, "max.connections": "1", "listener.name.replication.max.connections": "5"},
        _burst(1, listener="EXTERNAL") + _burst(2, listener="REPLICATION"),
    ),
    # two client listeners with their own maxima (2 each) under max.connections=2: the
    # third connection waits for a slot on Kafka; the faulty total admits it
    "max_connections_total_off_by_one": Trace(
        {
            "listeners": "CLIENT://127.0.0.1:1,EXTERNAL://127.0.0.1:2",
            "max.connections": "2",
            "listener.name.client.max.connections": "2",
            "listener.name.external.max.connections": "2",
        },
        _burst(2) + _burst(1, listener="EXTERNAL"),
    ),
    # REPLICATION sets neither limit: it takes max.connections=1 and the broker rate 1/s
    "listener_defaults_not_inherited": Trace(
        {**TWO_LISTENERS, "max.connections": "1", "max.connection.creation.rate": "1"},
        _burst(3, listener="REPLICATION"),
    ),
}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_each_engine_fault_changes_a_decision_that_kafka_makes_otherwise(name: str) -> None:
    trace = TRACES[name]
    kafka = trace.run(NO_FAULTS)
    faulty = trace.run(Faults.of([name]))
    assert kafka != faulty, f"fault {name} changed nothing on its trace"
    # the fault-free side of the trace is Kafka's (the port decides the same)
    assert kafka == _port_run(trace)


def _port_run(trace: Trace) -> list[tuple[object, ...]]:
    cfg = parse_config(trace.props)
    names = list(cfg.listener_names)
    k = KafkaConnectionQuotas(
        names,
        cfg.inter_broker_listener_name,
        cfg.max_connection_creation_rate,
        {n: cfg.listener_rate(n) for n in names},
        cfg.max_connections,
        {n: cfg.listener_max(n) for n in names},
        cfg.max_connections_per_ip,
        n=cfg.quota_window_num,
        w=cfg.window_ms,
    )
    quotas = sorted(trace.ip_quotas, key=lambda x: x[0])
    out: list[tuple[object, ...]] = []
    for t, listener, ip in trace.arrivals:
        while quotas and quotas[0][0] <= t:
            _, addr, rate = quotas.pop(0)
            if addr is None:
                k.ip_rate_default = rate
                for a, sensor in k.ip_sensors.items():
                    sensor.bound = k.ip_rates.get(a, rate)
            else:
                k.ip_rates[addr] = rate
        delay = k.rate_step(listener, t)
        waits = not k.slot_available(listener)
        outcome: str | None = None
        throttle: int | None = None
        if not waits:
            outcome, throttle = k.ip_step_and_count(listener, ip, t + delay)
            if trace.release and outcome == "admit":
                k.dec(listener, ip)
        exceeded = k.total > cfg.max_connections and not k.protected(listener)
        out.append((t, listener, ip, delay, waits, outcome, throttle, exceeded))
    return out


def test_the_ring_fault_is_the_other_releases_ring() -> None:
    """`window_n_samples` seeds the ring of the other side of 3.8.0: the n-sample ring in an
    engine enforcing as 4.x, and the n+1 ring in one enforcing as 2.8 (whose own ring is the
    n-sample one), so the fault changes a decision whichever release is enforced."""
    trace = TRACES["window_n_samples"]

    def run(legacy: bool, faults: Faults) -> list[object]:
        q = ConnectionQuotas(parse_config(trace.props), legacy_meter=legacy, faults=faults)
        q.set_ip_quota(None, 2, 0)
        out = []
        for t, listener, ip in trace.arrivals:
            adm = q.decide(listener, ip, t).admission
            out.append(None if adm is None else adm.outcome.value)
            if adm is not None and adm.outcome is Outcome.ADMITTED:
                q.release(listener, ip)
        return out

    fault = Faults.of(["window_n_samples"])
    assert run(True, fault) == run(False, NO_FAULTS) != run(True, NO_FAULTS)
    assert run(False, fault) == run(True, NO_FAULTS)


def test_at_bound_meter_throttles_exactly_at_the_bound_and_kafka_does_not() -> None:
    kafka, faulty = RateMeter(11, 1000, 20), AtBoundRateMeter(11, 1000, 20)
    for _ in range(199):
        assert kafka.record_bounded(1.0, 0, 1000) == faulty.record_bounded(1.0, 0, 1000) == 0
    assert kafka.record_bounded(1.0, 0, 1000) == 0  # 200/10 s = 20/s: not > 20
    assert faulty.record_bounded(1.0, 0, 1000) == 1


def _hog_charges(rq: RequestQuotas) -> list[int]:
    rq.set_quota(None, "hog", "request_percentage", 1.0)
    rq.set_quota(None, "light", "request_percentage", 50.0)
    # 5 s of handler time in one request: 50 % over the padded 10 s window, 50x the quota
    return [rq.record_request("ANONYMOUS", "hog", 0, 5_000_000_000, 0).throttle_ms]


def test_request_throttle_uncapped_exceeds_the_window() -> None:
    assert _hog_charges(RequestQuotas()) == [1000]
    uncapped = _hog_charges(RequestQuotas(faults=Faults.of(["request_throttle_uncapped"])))
    assert uncapped[0] > 1000


def test_request_wrong_entity_charges_another_bucket() -> None:
    assert _hog_charges(RequestQuotas()) == [1000]
    rq = RequestQuotas(faults=Faults.of(["request_wrong_entity"]))
    assert _hog_charges(rq) == [0]  # charged to client id 'ANONYMOUS', which has no quota
    assert rq.bucket_for("ANONYMOUS", "hog") == ("", "hog")  # reporting is unchanged


def test_user_quota_ignored_charges_anonymous() -> None:
    def alice(rq: RequestQuotas) -> int:
        rq.set_quota("alice", None, "request_percentage", 1.0)
        return rq.record_request("alice", "app", 0, 5_000_000_000, 0).throttle_ms

    assert alice(RequestQuotas()) == 1000
    assert alice(RequestQuotas(faults=Faults.of(["user_quota_ignored"]))) == 0


def test_principal_not_reversed_keeps_the_written_order() -> None:
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives.serialization import Encoding

    from acceptor.tls import kafka_principal
    from base.security.certs import TlsBundle

    der = TlsBundle.generate().client.cert.public_bytes(Encoding.DER)
    assert kafka_principal(der) == "OU=harness,CN=client1"
    assert kafka_principal(der, written_order=True) == "CN=client1,OU=harness"


ENGINE_FAULTS = set(TRACES) | {
    "request_throttle_uncapped",
    "request_wrong_entity",
    "user_quota_ignored",
    "principal_not_reversed",
}
ACCEPTOR_FAULTS = {
    "evict_most_recent",
    "rate_delay_not_waited",
    "delay_doubled",
    "slot_wait_while_free",
    "queue_larger_than_20",
    "skip_ip_rate_check",
    # shown against a real socket in tests/integration/test_acceptor_blind_spot_faults.py
    "ip_count_reject_close_late",
    "proxy_source_ignored",
    "request_mute_skipped",
    "accept_unrecorded",
    # a held response's claim, over real meters: tests/unit/test_connection_charge.py
    "late_charge_n_windows",
    # shown by tests/integration/test_acceptor_faults.py (a restart with and without it)
    "state_not_restored",
    # shown against a real broker in tests/integration/test_acceptor_secured.py
    "tls_before_quota",
    # the runner's hand-off to the broker behind the front: tests/unit/test_scenarios_targets.py
    "failed_login_delay_dropped",
    # fronts of a cluster sharing the metadata log: tests/unit/test_metadata_log.py
    "cluster_change_ignored",
    "other_broker_config_applied",
}


def test_every_fault_has_a_test_that_shows_it_changing_behaviour() -> None:
    assert ENGINE_FAULTS | ACCEPTOR_FAULTS == {f.name for f in FAULTS}


def test_every_hook_answers_as_kafka_without_faults_and_names_only_known_faults() -> None:
    """Each hook of the policy: production's (`KAFKA`) returns its argument or Kafka's
    answer; the seeded policy with every fault on asks only names that exist (a misspelt
    one would raise KeyError here, not silently test nothing)."""
    from base.quota.faults import NoFaults, Seeded

    quotas = RequestQuotas()
    args: dict[str, tuple[object, ...]] = {
        "meter_class": (RateMeter,),
        "legacy_ring": (False,),
        "throttle_cap": (1000,),
        "broker_rate_exempt": (True,),
        "evict_exempt": (True,),
        "max_connections": (7,),
        "max_connections_total": (7,),
        "inherited": (7,),
        "listener_max": (7,),
        "ip_count_limit": (7,),
        "ip_meters_rebound": ({"127.0.0.1": 1},),
        "request_throttle_bounded": (True,),
        "proxy_source": (("10.0.0.1", 1), ("127.0.0.1", 2)),
        "rate_delay": (50,),
        "slot_free": (True, True),
        "reject_close_s": (0.0,),
        "queue_size": (20,),
        "eviction_order": ([1, 2],),
        "claim_windows": (quotas.claim_windows,),
        "parked_tls": (lambda: None,),
    }
    identity = set(args) - {"slot_free", "proxy_source", "parked_tls"}
    hooks = [n for n in vars(NoFaults) if not n.startswith("_")]
    every = Seeded(Faults.of(f.name for f in FAULTS))
    for name in hooks:
        kafka = getattr(KAFKA, name)(*args.get(name, ()))
        getattr(every, name)(*args.get(name, ()))  # a misspelt fault name raises here
        if name in identity:
            assert kafka == args[name][0] or kafka is args[name][0], name
    assert KAFKA.slot_free(True, True) and KAFKA.proxy_source(("a", 1), ("b", 2)) == ("a", 1)
    assert KAFKA.accept_drop() is None and KAFKA.request_entity() is None
    assert KAFKA.parked_tls(lambda: 1) is None
    assert KAFKA.applies_ip_quotas() and KAFKA.restores_state() and KAFKA.mutes_throttled()
    assert not KAFKA.applies_other_brokers_configs() and not KAFKA.principal_written_order()
    assert not Faults.of(["skip_ip_rate_check"]).policy().applies_ip_quotas()
