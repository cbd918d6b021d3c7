"""The connection limits read by the enforcer and by the checker, held to Kafka's answer.

The checker keeps its own model of the limits (`analysis.model.Limits.from_config`), apart
from the enforcer's (`base.quota.config.parse_config`, through the acceptor's
`parse_acceptor_config`, its engine `ConnectionQuotas` and the `config` rows it writes,
`DynamicConfig.limits`): a bug in one must not certify itself (Jepsen). So nothing keeps
the two reading one set of properties alike but this test, as `test_kafka_versions.py`
does for the release switches. Each case is one set of broker properties (and ip quotas)
with the limits Kafka puts in force for it, read from Kafka's source
(`SocketServer.ConnectionQuotas`, `ListenerConnectionQuota.configure` with
`valuesWithPrefixOverride`, `KafkaConfig`'s inter-broker listener):

- a listener without its own `max.connections` / `max.connection.creation.rate` takes the
  broker-wide value (the prefix override); with its own, even `Int.MaxValue`, it keeps it;
- `Int.MaxValue` is Kafka's "unset" for the broker-wide keys and for an ip quota
  (`quotaEnabled = quota != IP_CONNECTION_RATE_DEFAULT`);
- a per-IP override is looked up by the address `InetAddress.getByName(host)` gives;
- the protected listener is the inter-broker one, when there are two or more listeners;
  without `inter.broker.listener.name` it is the listener named after
  `security.inter.broker.protocol` (PLAINTEXT by default).

Every case is read four ways and each compared with Kafka's answer: the enforcer's parsed
config, the engine it builds, the checker reading the properties themselves, and the
checker reading the acceptor's own `config` row. Then the engine and the checker's model,
each built from its own reading, are driven alike (admissions and rate steps at one
instant) and must decide alike. A case one side reads differently from Kafka is marked
xfail (strict) with the reason, so that fixing it shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from acceptor.config import AcceptorConfig, parse_acceptor_config, quota_engines
from acceptor.dynamic import DynamicConfig
from analysis.model import AdmissionModel, Limits
from base.quota.connections import Outcome

pytestmark = pytest.mark.unit

UNSET = 2_147_483_647  # Kafka's Int.MaxValue, written out here on purpose: Kafka's value
#: addresses every view is asked about
IPS = ("127.0.0.1", "127.0.0.8", "127.0.0.9", "17.0.0.1", "15.0.0.1", "::1")


@dataclass(frozen=True)
class Case:
    """Broker properties, the ip quotas set at run time, and what Kafka enforces."""

    props: dict[str, str]
    #: {"default" | address: connection_creation_rate}, as the admin path sets them
    ip_quotas: dict[str, int] = field(default_factory=dict)
    #: Kafka's answer, by view key (see `_kafka`); keys not given are Kafka's defaults
    kafka: dict[str, Any] = field(default_factory=dict)


def _kafka(case: Case) -> dict[str, Any]:
    """Kafka's effective limits for `case`: its defaults, then the case's answer."""
    names = _listener_names(case.props)
    view: dict[str, Any] = {"broker.max": UNSET, "broker.rate": UNSET, "window": (11, 1000)}
    for name in names:
        view |= {f"{name}.max": UNSET, f"{name}.rate": UNSET, f"{name}.protected": False}
    for ip in IPS:
        view |= {f"{ip}.max": UNSET, f"{ip}.rate": UNSET}
    view.update(case.kafka)
    return view


def _listener_names(props: dict[str, str]) -> list[str]:
    return [item.split("://")[0].strip().lower() for item in props["listeners"].split(",")]


DERIVED = "the protected listener from security.inter.broker.protocol"
OCTAL = "a per-IP override's leading zeros are decimal, as Java reads them"

CASES = {
    "kafka's defaults": Case({"listeners": "CLIENT://127.0.0.1:0"}),
    "Int.MaxValue is unset for the broker-wide keys": Case(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "max.connections": str(UNSET),
            "max.connections.per.ip": str(UNSET),
            "max.connection.creation.rate": str(UNSET),
        }
    ),
    "a listener without its own value takes the broker-wide one": Case(
        {
            "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "inter.broker.listener.name": "INTERNAL",
            "max.connections": "20",
            "max.connection.creation.rate": "7",
            "listener.name.client.max.connection.creation.rate": "3",
            "listener.name.internal.max.connections": "4",
        },
        kafka={
            "broker.max": 20,
            "broker.rate": 7,
            "client.max": 20,
            "client.rate": 3,
            "internal.max": 4,
            "internal.rate": 7,
            "internal.protected": True,
        },
    ),
    "a listener's own Int.MaxValue is its limit, not unset": Case(
        {
            "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "inter.broker.listener.name": "INTERNAL",
            "max.connections": "10",
            "max.connection.creation.rate": "5",
            "listener.name.client.max.connections": str(UNSET),
            "listener.name.client.max.connection.creation.rate": str(UNSET),
        },
        kafka={
            "broker.max": 10,
            "broker.rate": 5,
            "client.max": UNSET,
            "client.rate": UNSET,
            "internal.max": 10,
            "internal.rate": 5,
            "internal.protected": True,
        },
    ),
    "one listener is never protected": Case(
        {
            "listeners": "INTERNAL://127.0.0.1:0",
            "inter.broker.listener.name": "INTERNAL",
            "max.connections": "3",
        },
        kafka={"broker.max": 3, "internal.max": 3},
    ),
    DERIVED: Case(
        {
            "listeners": "CLIENT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "max.connections": "6",
            "max.connection.creation.rate": "4",
        },
        kafka={
            "broker.max": 6,
            "broker.rate": 4,
            "client.max": 6,
            "client.rate": 4,
            "plaintext.max": 6,
            "plaintext.rate": 4,
            "plaintext.protected": True,
        },
    ),
    "per-IP overrides by address, IPv6 and mapped literals": Case(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "max.connections.per.ip": "5",
            "max.connections.per.ip.overrides": "127.0.0.9:2,[::1]:1,::ffff:127.0.0.8:3",
        },
        kafka={
            **{f"{ip}.max": 5 for ip in IPS},
            "127.0.0.9.max": 2,
            "::1.max": 1,
            "127.0.0.8.max": 3,
        },
    ),
    "per-IP limit of zero beside overrides": Case(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "max.connections.per.ip": "0",
            "max.connections.per.ip.overrides": "127.0.0.9:4",
        },
        kafka={**{f"{ip}.max": 0 for ip in IPS}, "127.0.0.9.max": 4},
    ),
    "a per-IP override's host name resolves, IPv4 first": Case(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "max.connections.per.ip.overrides": "localhost:2",
        },
        kafka={"127.0.0.1.max": 2},
    ),
    OCTAL: Case(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "max.connections.per.ip.overrides": "017.0.0.1:2",
        },
        kafka={"17.0.0.1.max": 2},
    ),
    "ip quotas: the default, an address, Int.MaxValue as none": Case(
        {"listeners": "CLIENT://127.0.0.1:0"},
        ip_quotas={"default": 10, "127.0.0.9": 5, "127.0.0.8": UNSET},
        kafka={
            **{f"{ip}.rate": 10 for ip in IPS},
            "127.0.0.9.rate": 5,
            "127.0.0.8.rate": UNSET,
        },
    ),
    "the quota window": Case(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "quota.window.num": "5",
            "quota.window.size.seconds": "2",
            "max.connection.creation.rate": "3",
        },
        kafka={"window": (5, 2000), "broker.rate": 3, "client.rate": 3},
    ),
}

#: cases a reading differs from Kafka's answer on, with the reason (strict xfail)
DIFFERS: dict[tuple[str, str], str] = {}


# ---------------------------------------------------------------------------------------
# the enforcer's readings


def _acceptor(case: Case) -> tuple[AcceptorConfig, DynamicConfig]:
    """The acceptor's own parse of the properties, and its run-time state with the ip
    quotas set through the admin path's entry (`DynamicConfig.set_ip_quota`)."""
    props = dict(case.props)
    for name in _listener_names(case.props):
        props[f"listener.name.{name}.upstream"] = "127.0.0.1:9"  # parsed, never reached
    cfg = parse_acceptor_config(props)
    connections, requests = quota_engines(cfg)
    dynamic = DynamicConfig(cfg, connections, requests, slot_freed=lambda: None)
    for ip, rate in case.ip_quotas.items():
        dynamic.set_ip_quota(None if ip == "default" else ip, rate)
    return cfg, dynamic


def _enforcer_config(case: Case) -> dict[str, Any]:
    """What `base.quota.config.QuotaConfig` says is in force."""
    cfg, dynamic = _acceptor(case)
    q = cfg.quota
    view: dict[str, Any] = {
        "broker.max": q.max_connections,
        "broker.rate": q.max_connection_creation_rate,
        "window": (q.quota_window_num, q.window_ms),
    }
    for name in q.listener_names:
        low = name.lower()
        view[f"{low}.max"] = q.listener_max(name)
        view[f"{low}.rate"] = q.listener_rate(name)
        view[f"{low}.protected"] = q.protected(name)
    for ip in IPS:
        view[f"{ip}.max"] = q.max_connections_for_ip(ip)
        view[f"{ip}.rate"] = dynamic.quotas.ip_quota_for(ip)
    return view


def _enforcer_engine(case: Case) -> dict[str, Any]:
    """What the engine the acceptor builds (`ConnectionQuotas`) answers through its public
    readers. It keeps its own copy of the listener fallback, which has no reader: that is
    judged by what it enforces (`test_the_engine_and_the_model_decide_alike`)."""
    cfg, dynamic = _acceptor(case)
    engine = dynamic.quotas
    view = _enforcer_config(case)
    for name in cfg.quota.listener_names:
        view[f"{name.lower()}.protected"] = engine.is_protected(name)
    for ip in IPS:
        view[f"{ip}.max"] = engine.ip_limit_for(ip)
        view[f"{ip}.rate"] = engine.ip_quota_for(ip)
    return view


# ---------------------------------------------------------------------------------------
# the checker's readings


def _checker(limits: Limits, names: list[str]) -> dict[str, Any]:
    view: dict[str, Any] = {
        "broker.max": limits.max_connections,
        "broker.rate": limits.broker_rate,
        "window": (limits.window_num, limits.window_ms),
    }
    for name in names:
        view[f"{name}.max"] = limits.listener_max_for(name)
        view[f"{name}.rate"] = limits.listener_rate_for(name)
        view[f"{name}.protected"] = limits.is_protected(name)
    for ip in IPS:
        view[f"{ip}.max"] = limits.max_for_ip(ip)
        view[f"{ip}.rate"] = limits.ip_quota(ip)
    return view


def _checker_of_properties(case: Case) -> dict[str, Any]:
    """The checker given the broker's properties themselves (and the ip quotas)."""
    detail: dict[str, Any] = {**case.props, "ip_quotas": dict(case.ip_quotas)}
    return _checker(Limits.from_config(detail), _listener_names(case.props))


def _checker_of_row(case: Case) -> dict[str, Any]:
    """The checker given the `config` row the acceptor writes for those properties."""
    _cfg, dynamic = _acceptor(case)
    return _checker(Limits.from_config(_row(dynamic)), _listener_names(case.props))


def _row(dynamic: DynamicConfig) -> dict[str, Any]:
    return dict(json.loads(json.dumps(dynamic.limits())))  # as written: JSON


READINGS = {
    "enforcer's config": _enforcer_config,
    "enforcer's engine": _enforcer_engine,
    "checker reads the properties": _checker_of_properties,
    "checker reads the config row": _checker_of_row,
}


def _params() -> list[Any]:
    out = []
    for reading in READINGS:
        for name in CASES:
            reason = DIFFERS.get((reading, name))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            out.append(pytest.param(reading, name, marks=marks, id=f"{reading}: {name}"))
    return out


def _numbers(view: dict[str, Any]) -> dict[str, Any]:
    """Counts and rates as numbers (the checker holds floats, the enforcer ints)."""
    return {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) else v)
            for k, v in view.items()}  # fmt: skip


@pytest.mark.parametrize(("reading", "name"), _params())
def test_each_reading_is_kafkas(reading: str, name: str) -> None:
    case = CASES[name]
    got, want = _numbers(READINGS[reading](case)), _numbers(_kafka(case))
    assert {k: got.get(k) for k in want if got.get(k) != want[k]} == {}, (
        f"{reading} differs from Kafka: want "
        f"{ {k: want[k] for k in want if got.get(k) != want[k]} }"
    )


# ---------------------------------------------------------------------------------------
# the engine and the model, each from its own reading, decide alike

PROBE_CAP = 400  # attempts at one instant: past any finite limit of the cases
ATTEMPTS_PER_IP = 40


#: each side's admission outcomes, by one name
ENGINE_OUTCOMES = {Outcome.ADMITTED: "admit", Outcome.THROTTLED_IP: "throttle",
                   Outcome.REJECTED_IP_COUNT: "reject"}  # fmt: skip
MODEL_OUTCOMES = {"admit": "admit", "throttle_close": "throttle", "reject": "reject"}


class _Engine:
    """The enforcer's engine, asked at t=0 (listeners by Kafka's upper-case name)."""

    def __init__(self, case: Case) -> None:
        self.quotas = _acceptor(case)[1].quotas

    def rate(self, listener: str) -> tuple[int, int]:
        step = self.quotas.record_connection_rate(listener.upper(), 0)
        return step.broker_delay_ms, step.listener_delay_ms

    def slot(self, listener: str) -> bool:
        return self.quotas.slot_available(listener.upper())

    def admit(self, listener: str, ip: str) -> str:
        return ENGINE_OUTCOMES[self.quotas.admit(listener.upper(), ip, 0).outcome]


class _Model:
    """The checker's model built from the acceptor's `config` row, asked at t=0."""

    def __init__(self, case: Case) -> None:
        self.model = AdmissionModel(Limits.from_config(_row(_acceptor(case)[1])))

    def rate(self, listener: str) -> tuple[int, int]:
        step = self.model.rate_step(listener, 0)
        return step.broker_ms, step.listener_ms

    def slot(self, listener: str) -> bool:
        return self.model.slot_available(listener)

    def admit(self, listener: str, ip: str) -> str:
        return MODEL_OUTCOMES[self.model.ip_step(listener, ip, 0).outcome]


def _decisions(side: type[_Engine] | type[_Model], case: Case) -> dict[str, Any]:
    """Each listener's first rate step delayed by the broker meter and by its own, its
    slots (admissions from distinct addresses until none is free), and each address's
    outcomes on the first listener; every probe on a fresh side."""
    said: dict[str, Any] = {}
    names = _listener_names(case.props)
    for name in names:
        probe = side(case)
        rates = [probe.rate(name) for _ in range(PROBE_CAP)]
        said[f"{name}: broker delays from"] = _first(broker > 0 for broker, _ in rates)
        said[f"{name}: listener delays from"] = _first(own > 0 for _, own in rates)
        fresh, slots = side(case), 0
        while slots < PROBE_CAP and fresh.slot(name):
            fresh.admit(name, f"10.{slots // 250}.{slots % 250}.1")
            slots += 1
        said[f"{name}: slots"] = slots
    for ip in IPS:
        fresh = side(case)
        said[ip] = [fresh.admit(names[0], ip) for _ in range(ATTEMPTS_PER_IP)]
    return said


def _first(flags: Any) -> int | None:
    return next((i + 1 for i, f in enumerate(flags) if f), None)


@pytest.mark.parametrize("name", list(CASES))
def test_the_engine_and_the_model_decide_alike(name: str) -> None:
    """Each side's own fallback, as enforced: the engine the acceptor builds from its
    parse and the checker's model built from the acceptor's `config` row, driven alike."""
    if ("checker reads the config row", name) in DIFFERS:
        pytest.skip("the row is read differently from Kafka (the reading's xfail)")
    assert _decisions(_Engine, CASES[name]) == _decisions(_Model, CASES[name])


def test_the_probes_see_a_fallback() -> None:
    """The probe is not blind: a listener without its own rate is delayed by its own
    meter at the broker-wide rate, one with `Int.MaxValue` never."""
    said = _decisions(_Engine, CASES["a listener's own Int.MaxValue is its limit, not unset"])
    assert said["internal: listener delays from"] is not None
    assert said["client: listener delays from"] is None
    assert said["client: broker delays from"] is not None
