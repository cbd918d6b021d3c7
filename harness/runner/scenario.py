"""Scenario files: parsed once, validated completely, then immutable.

A scenario is the contract of one experiment (which limits, which load, which
changes and faults at which second, what verdict to expect). It is validated up
front so a typo never surfaces half-way through a run with a broker already up:
every problem is a :class:`ScenarioError` naming the key, the value and the reason.
Pure: no sockets, no processes; the only I/O is reading the YAML text.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from base.quota.config import INT_MAX as INT_MAX  # Kafka's "unset", the enforcer's one
from base.security.sasl import DEFAULT_USERS
from broker.config import MAX_BROKERS

TARGETS = ("acceptor", "broker")
PROFILES = ("storm", "per_request", "single_ip_flood", "steady", "greedy")
#: closed-model profiles: `users` long-lived clients, no arrival schedule
CLOSED_PROFILES = ("steady", "greedy")
FAULT_KINDS = (
    "broker_pause",
    "broker_kill",
    "upstream_latency",
    "acceptor_kill",
    "load_kill",
    "broker_disk_full",
)
VERDICTS = ("pass", "fail", "unknown")
#: a phase's `source_ips` on several worker hosts: each worker's own address is one client
PER_WORKER = "per-worker"
#: an ip quota entity naming worker host J (1-based) of `--worker-netns`: `worker:J`
WORKER_ENTITY_RE = re.compile(r"^worker:[1-9][0-9]*$")
#: the most worker hosts a scenario may ask for
MAX_WORKERS = 200
PROXY_MODES = ("off", "v1", "v2")
LISTENER_PROXY_MODES = ("off", "optional", "required")
#: profiles that run on the storm engine (they can spread arrivals over a cluster's brokers)
ENGINE_PROFILES = ("storm", "per_request", "single_ip_flood")
#: profiles whose load speaks TLS and SASL (the storm engine's; the steady kafka-python
#: clients; greedy, through the harness's own blocking client)
SECURED_PROFILES = (*ENGINE_PROFILES, "steady", "greedy")

#: Kafka's broker-level keys a scenario may set (listener-prefixed forms below).
BROKER_KEYS: dict[str, tuple[int, bool]] = {
    # key: (minimum, dynamic)
    "max.connections": (0, True),
    "max.connections.per.ip": (0, True),
    "max.connection.creation.rate": (0, True),
    "quota.window.num": (1, False),
    "quota.window.size.seconds": (1, False),
    "num.network.threads": (1, False),
    "socket.listen.backlog.size": (1, False),
    "connections.max.idle.ms": (1, False),
    "connection.failed.authentication.delay.ms": (0, False),
}
#: keys the broker keeps enforcing behind the acceptor, which relays the login it delays
#: (the acceptor target passes them to the broker as well)
#: Kafka's KIP-306 delay: a failed SASL login is answered and closed this long after it
FAILED_AUTH_DELAY_KEY = "connection.failed.authentication.delay.ms"
BROKER_ENFORCED_KEYS = (FAILED_AUTH_DELAY_KEY,)
STRING_KEYS = ("max.connections.per.ip.overrides",)
LISTENER_KEYS = ("max.connections", "max.connection.creation.rate")
_LISTENER_KEY_RE = re.compile(
    r"^listener\.name\.([a-z0-9_\-]+)\.(max\.connections|max\.connection\.creation\.rate)$"
)
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9\-]*$")
_LISTENER_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
ARRIVAL_PARAMS: dict[str, tuple[str, ...]] = {
    "constant": ("rate",),
    "poisson": ("rate",),
    "step": ("rates", "every"),
    "spike": ("base", "peak", "at", "for"),
    "ramp": ("from", "to", "over"),
    "sawtooth": ("low", "high", "period"),
}


class ScenarioError(ValueError):
    """A scenario that cannot run: ``str(e)`` is ``"<where>: <key>=<value!r>: <reason>"``."""

    def __init__(self, key: str, value: object, reason: str, where: str = "") -> None:
        self.key = key
        self.value = value
        self.reason = reason
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{key}={value!r}: {reason}")


# -- the parsed form ------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    """One Locust process: a profile with its arrival schedule, between two offsets."""

    name: str
    profile: str
    arrival: str
    start: float
    stop: float
    source_ips: str
    listener: str
    proxy_protocol: str = "off"
    proxy_client_ips: str | None = None
    via: str = "direct"  # "direct" | "haproxy"
    users: int = 1
    spawn_rate: float = 1.0
    max_arrivals: int | None = None
    extra_args: tuple[str, ...] = ()
    #: the SASL user its clients log in as on a SASL listener (None: the run's first user)
    sasl_user: str | None = None
    #: in a cluster: "all" (an engine profile's arrivals over every broker) or "bootstrap"
    #: (all on broker 1; kafka-python clients follow metadata from there themselves)
    spread: str = "all"
    #: in a cluster: (node id, share) of the arrivals pinned to one broker
    hot_broker: tuple[int, float] | None = None

    @property
    def duration(self) -> float:
        return self.stop - self.start

    @property
    def intended_rate(self) -> float:
        """Mean intended new connections/s; 0 for steady (long-lived) clients."""
        return intended_rate(self.arrival) if self.arrival else 0.0

    @property
    def shape(self) -> str:
        return self.arrival or f"{self.users} long-lived user(s)"


@dataclass(frozen=True)
class Action:
    """One scheduled change: ``kind`` is ip_quota, broker_config, request_quota or fault."""

    at: float
    kind: str
    params: Mapping[str, Any]
    #: a broker_config change of one broker's own layer (Kafka's BROKER resource "<id>"),
    #: sent to that broker (or its acceptor); None: the cluster default (resource "")
    node: int | None = None

    @property
    def end(self) -> float | None:
        """When a fault ends (``at + for``); None for instantaneous changes."""
        if self.kind != "fault":
            return None
        return self.at + float(self.params["for"])


#: the longest load a scenario may run: a soak of hours, bounded like every load loop
MAX_DURATION_S = 4 * 3600.0
#: checks every scenario expects, listed or not: every attempt accounted for (issue 34)
ALWAYS_EXPECTED = ("accounting",)


@dataclass(frozen=True)
class Expect:
    verdict: str = "pass"
    checks: tuple[str, ...] = ()
    fairness_p99_ratio: float | None = None
    slack_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": self.verdict, "checks": list(self.checks)}
        if self.fairness_p99_ratio is not None:
            out["fairness_p99_ratio"] = self.fairness_p99_ratio
        if self.slack_ms is not None:
            out["slack_ms"] = self.slack_ms
        return out


@dataclass(frozen=True)
class Timeouts:
    broker_start: float = 180.0
    acceptor_start: float = 60.0
    locust_start: float = 60.0
    drain: float = 30.0
    analysis: float = 600.0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    covers: tuple[str, ...]
    targets: tuple[str, ...]
    target: str
    duration: float
    listeners: tuple[str, ...]
    inter_broker_listener: str | None
    proxy_protocol: Mapping[str, str]
    limits: Mapping[str, int | str]
    ip_quotas: Mapping[str, int]
    request_quotas: tuple[Mapping[str, Any], ...]
    load: tuple[Phase, ...]
    schedule: tuple[Action, ...]
    expect: Expect
    expect_by_target: Mapping[str, Expect]
    timeouts: Timeouts
    seed: int = 1
    acceptor: Mapping[str, str] = field(default_factory=dict)
    #: secured listeners: name -> `broker.config.parse_listener`'s protocol part
    #: ("SSL", "SSL:mtls", "SASL_SSL:SCRAM-SHA-512"); a listener not in here is PLAINTEXT
    security: Mapping[str, str] = field(default_factory=dict)
    #: brokers in the cluster the scenario runs against (KRaft nodes on the local launcher;
    #: docs/clusters.md); every per-broker limit is each broker's own
    brokers: int = 1
    #: Locust workers each engine phase waits for, one per machine (0: the load runs on
    #: the runner's machine); `harness run --workers N` overrides it
    workers: int = 0
    source: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    def expect_for(self, target: str) -> Expect:
        return self.expect_by_target.get(target, self.expect)

    @property
    def faults(self) -> tuple[Action, ...]:
        return tuple(a for a in self.schedule if a.kind == "fault")

    @property
    def broker_listeners(self) -> tuple[str, ...]:
        """The listeners as the broker launcher takes them: ``"CLIENT=SSL"`` when secured."""
        return tuple(f"{n}={self.security[n]}" if n in self.security else n for n in self.listeners)


# -- helpers used by the parser and by others -----------------------------------------------
def parse_arrival(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``kind:k=v,k=v`` into its kind and parameters (validated, values as text)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ScenarioError("arrival", spec, "expected 'kind:k=v,...', e.g. 'constant:rate=50'")
    kind, _, rest = spec.strip().partition(":")
    if kind not in ARRIVAL_PARAMS:
        raise ScenarioError(
            "arrival", spec, f"unknown arrival kind {kind!r}; one of {sorted(ARRIVAL_PARAMS)}"
        )
    params: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not v:
            raise ScenarioError("arrival", spec, f"parameter {part!r} is not k=v")
        params[k] = v
    missing = [p for p in ARRIVAL_PARAMS[kind] if p not in params]
    if missing:
        raise ScenarioError("arrival", spec, f"{kind} needs {', '.join(missing)}")
    for k, v in params.items():
        for number in v.split("/") if k == "rates" else [v]:
            try:
                if float(number) < 0:
                    raise ValueError
            except ValueError:
                raise ScenarioError("arrival", spec, f"{k}={v!r} is not a number >= 0") from None
    return kind, params


def intended_rate(spec: str) -> float:
    """The mean intended arrival rate (connections/s) of an arrival spec, for run.json."""
    kind, p = parse_arrival(spec)
    f = {k: float(v) for k, v in p.items() if k != "rates"}
    if kind in ("constant", "poisson"):
        return f["rate"]
    if kind == "step":
        rates = [float(r) for r in p["rates"].split("/")]
        return sum(rates) / len(rates)
    if kind == "spike":
        return f["base"]
    if kind == "ramp":
        return (f["from"] + f["to"]) / 2
    return (f["low"] + f["high"]) / 2  # sawtooth


def expand_ips(spec: str) -> list[str]:
    """``127.0.0.2-127.0.0.40``, ``127.0.0.9`` or a comma list of those: loopback only."""
    out: list[str] = []
    for part in filter(None, (p.strip() for p in str(spec).split(","))):
        lo_s, dash, hi_s = part.partition("-")
        try:
            lo = ipaddress.IPv4Address(lo_s)
            hi = ipaddress.IPv4Address(hi_s) if dash else lo
        except ValueError:
            raise ScenarioError(
                "source_ips", spec, f"{part!r} is not an IPv4 address or range"
            ) from None
        if int(hi) < int(lo):
            raise ScenarioError("source_ips", spec, f"range {part!r} runs backwards")
        if not (lo.is_loopback and hi.is_loopback):
            raise ScenarioError(
                "source_ips", spec, "load may only come from 127.0.0.0/8 (loopback)"
            )
        if int(hi) - int(lo) > 4096:
            raise ScenarioError("source_ips", spec, "range too large (> 4096 addresses)")
        out.extend(str(ipaddress.IPv4Address(i)) for i in range(int(lo), int(hi) + 1))
    if not out:
        raise ScenarioError("source_ips", spec, "no address given")
    return out


def _located(key: str, fn: Any, value: str) -> Any:
    """Run a validator and name the full key (load[2].arrival) in its error."""
    try:
        return fn(value)
    except ScenarioError as exc:
        raise ScenarioError(key, exc.value, exc.reason) from None


def _check_ip_entity(key: str, ip: str) -> str:
    if ip == "default" or WORKER_ENTITY_RE.match(ip):
        return ip
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ScenarioError(
            key, ip, "expected 'default', an IP address or worker:J (worker host J)"
        ) from None
    return str(addr)


def _int(key: str, value: object, minimum: int, *, allow_null: bool = False) -> int | None:
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ScenarioError(key, value, "expected an integer")
    if value < minimum or value > INT_MAX:
        raise ScenarioError(key, value, f"must be between {minimum} and {INT_MAX}")
    return value


def _num(key: str, value: object, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(key, value, "expected a number")
    if value < minimum:
        raise ScenarioError(key, value, f"must be >= {minimum}")
    return float(value)


def _mapping(key: str, value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(key, value, "expected a mapping")
    return value


def _only(key: str, m: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(map(str, m)) - set(allowed))
    if unknown:
        raise ScenarioError(key, unknown[0], f"unknown key; allowed: {', '.join(allowed)}")


def validate_limit(key: str, value: object, listeners: Sequence[str]) -> int | str | None:
    """Check one Kafka key the way Kafka would; None (delete) is allowed for dynamic keys."""
    m = _LISTENER_KEY_RE.match(key)
    if m:
        lname = m.group(1)
        if lname.upper() not in listeners:
            raise ScenarioError(
                key,
                value,
                f"listener {lname!r} is not one of the scenario's listeners {list(listeners)}",
            )
        if value is None:
            return None
        return _int(key, value, 1)  # Kafka: listener values must be > 0
    if key in STRING_KEYS:
        if value is None:
            return None
        text = str(value)
        for item in filter(None, (p.strip() for p in text.split(","))):
            host, colon, n = item.rpartition(":")
            if not colon or not host or not n.isdigit():
                raise ScenarioError(key, value, f"entry {item!r} is not host:count")
        return text
    if key in BROKER_KEYS:
        minimum, _dynamic = BROKER_KEYS[key]
        if value is None:
            return None
        return _int(key, value, minimum)
    raise ScenarioError(
        key,
        value,
        "not a Kafka connection-limit key this harness knows "
        f"({', '.join([*BROKER_KEYS, *STRING_KEYS])}, listener.name.<l>.max.connections, "
        "listener.name.<l>.max.connection.creation.rate)",
    )


def is_dynamic(key: str) -> bool:
    return (
        bool(_LISTENER_KEY_RE.match(key))
        or key in STRING_KEYS
        or BROKER_KEYS.get(key, (0, False))[1]
    )


# -- the parser -----------------------------------------------------------------------------
_TOP_KEYS = (
    "name",
    "description",
    "covers",
    "targets",
    "target",
    "brokers",
    "workers",
    "duration",
    "seed",
    "listeners",
    "limits",
    "ip_quotas",
    "request_quotas",
    "acceptor",
    "load",
    "schedule",
    "expect",
    "timeouts",
)
_PHASE_KEYS = (
    "name",
    "profile",
    "arrival",
    "start",
    "stop",
    "source_ips",
    "listener",
    "proxy_protocol",
    "proxy_client_ips",
    "via",
    "users",
    "spawn_rate",
    "max_arrivals",
    "extra_args",
    "sasl_user",
    "spread",
    "hot_broker",
)


def _parse_listeners(
    spec: object,
) -> tuple[tuple[str, ...], str | None, dict[str, str], dict[str, str]]:
    if spec is None:
        return ("CLIENT",), None, {}, {}
    m = _mapping("listeners", spec)
    _only("listeners", m, ("names", "inter_broker", "proxy_protocol", "security"))
    names_raw = m.get("names", ["CLIENT"])
    if not isinstance(names_raw, list) or not names_raw:
        raise ScenarioError("listeners.names", names_raw, "expected a non-empty list of names")
    names: list[str] = []
    for n in names_raw:
        if not isinstance(n, str) or not _LISTENER_NAME_RE.match(n) or n == "CONTROLLER":
            raise ScenarioError(
                "listeners.names", n, "upper-case name like CLIENT; CONTROLLER is reserved"
            )
        if n in names:
            raise ScenarioError("listeners.names", n, "listed twice")
        names.append(n)
    inter = m.get("inter_broker")
    if inter is not None and inter not in names:
        raise ScenarioError("listeners.inter_broker", inter, f"not one of {names}")
    proxy: dict[str, str] = {}
    for lname, mode in _mapping("listeners.proxy_protocol", m.get("proxy_protocol")).items():
        if lname not in names:
            raise ScenarioError("listeners.proxy_protocol", lname, f"not one of {names}")
        if mode not in LISTENER_PROXY_MODES:
            raise ScenarioError(
                f"listeners.proxy_protocol.{lname}", mode, f"one of {LISTENER_PROXY_MODES}"
            )
        proxy[lname] = mode
    security = _parse_security(m.get("security"), names, inter, proxy)
    return tuple(names), inter, proxy, security


def _parse_security(
    spec: object, names: Sequence[str], inter: str | None, proxy: Mapping[str, str]
) -> dict[str, str]:
    """``listeners.security``: name -> protocol and options, in `harness broker --listener`'s
    syntax after the ``=`` (docs/security.md), checked by the broker's own parser."""
    from broker.config import check_secured_plan, parse_listener
    from broker.errors import BrokerError

    out: dict[str, str] = {}
    for lname, text in _mapping("listeners.security", spec).items():
        key = f"listeners.security.{lname}"
        if lname not in names:
            raise ScenarioError("listeners.security", lname, f"not one of {list(names)}")
        if not isinstance(text, str) or not text.strip():
            raise ScenarioError(key, text, "a protocol and options, e.g. SSL or SASL_SSL:PLAIN")
        try:
            listener = parse_listener(f"{lname}={text.strip()}")
        except BrokerError as exc:
            raise ScenarioError(key, text, str(exc)) from None
        if not listener.secured:
            continue
        if proxy.get(str(lname), "off") != "off":
            raise ScenarioError(
                key, text, "a secured listener takes no PROXY header (Kafka has none)"
            )
        out[str(lname)] = text.strip()
    if out:
        try:
            check_secured_plan(
                [parse_listener(f"{n}={out[n]}" if n in out else n) for n in names], inter or ""
            )
        except BrokerError as exc:
            raise ScenarioError("listeners.security", dict(out), str(exc)) from None
    return out


def _parse_ip_quotas(key: str, spec: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for ip, rate in _mapping(key, spec).items():
        entity = _check_ip_entity(f"{key}.{ip}", str(ip))
        value = _int(f"{key}.{ip}", rate, 0)
        assert value is not None
        out[entity] = value
    return out


def _parse_request_quota(key: str, spec: object) -> dict[str, Any]:
    m = _mapping(key, spec)
    _only(key, m, ("user", "client-id", "request_percentage"))
    if "user" not in m and "client-id" not in m:
        raise ScenarioError(key, dict(m), "needs user and/or client-id (null = the default entity)")
    for k in ("user", "client-id"):
        if k in m and m[k] is not None and (not isinstance(m[k], str) or not m[k]):
            raise ScenarioError(f"{key}.{k}", m[k], "a non-empty name, or null for the default")
    pct = m.get("request_percentage")
    if pct is not None:
        _num(f"{key}.request_percentage", pct, 0.0)
        if pct <= 0:
            raise ScenarioError(f"{key}.request_percentage", pct, "must be greater than 0 (Kafka)")
    return dict(m)


def _parse_phase(i: int, spec: object, sc: dict[str, Any]) -> Phase:
    where = f"load[{i}]"
    m = _mapping(where, spec)
    _only(where, m, _PHASE_KEYS)
    profile = m.get("profile")
    if profile not in PROFILES:
        raise ScenarioError(f"{where}.profile", profile, f"one of {PROFILES}")
    arrival = m.get("arrival")
    if profile not in CLOSED_PROFILES or arrival is not None:
        _located(f"{where}.arrival", parse_arrival, str(arrival) if arrival is not None else "")
    start = _num(f"{where}.start", m.get("start", 0))
    stop = _num(f"{where}.stop", m.get("stop", sc["duration"]))
    if stop <= start:
        raise ScenarioError(f"{where}.stop", stop, f"must be after start ({start})")
    if stop > sc["duration"]:
        raise ScenarioError(
            f"{where}.stop", stop, f"beyond the scenario duration ({sc['duration']} s)"
        )
    source_ips = str(m.get("source_ips", "127.0.0.2-127.0.0.40"))
    if source_ips == PER_WORKER:
        if profile not in ENGINE_PROFILES:
            raise ScenarioError(
                f"{where}.source_ips", source_ips, f"only engine profiles {ENGINE_PROFILES} "
                "run on worker hosts",
            )  # fmt: skip
    else:
        _located(f"{where}.source_ips", expand_ips, source_ips)
    listener = m.get("listener", sc["listeners"][0])
    if listener not in sc["listeners"]:
        raise ScenarioError(f"{where}.listener", listener, f"not one of {list(sc['listeners'])}")
    if listener in sc["security"] and profile not in SECURED_PROFILES:
        raise ScenarioError(
            f"{where}.profile",
            profile,
            f"listener {listener} is {sc['security'][listener]}: only {SECURED_PROFILES} "
            "speaks TLS and SASL",
        )
    proxy = m.get("proxy_protocol", "off")
    if proxy not in PROXY_MODES:
        raise ScenarioError(f"{where}.proxy_protocol", proxy, f"one of {PROXY_MODES}")
    pcips = m.get("proxy_client_ips")
    if pcips is not None:
        _located(f"{where}.proxy_client_ips", expand_ips, str(pcips))
    via = m.get("via", "direct")
    if via not in ("direct", "haproxy"):
        raise ScenarioError(f"{where}.via", via, "one of ('direct', 'haproxy')")
    if via == "haproxy" and proxy == "off":
        proxy = "v2"
    users = _int(f"{where}.users", m.get("users", 1), 1)
    spawn = _num(f"{where}.spawn_rate", m.get("spawn_rate", users), 0.001)
    max_arrivals = _int(f"{where}.max_arrivals", m.get("max_arrivals"), 1, allow_null=True)
    extra = m.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise ScenarioError(f"{where}.extra_args", extra, "expected a list of strings")
    name = str(m.get("name", f"{profile}-{i}"))
    sasl_user = m.get("sasl_user")
    if sasl_user is not None:
        security = str(sc["security"].get(listener, "PLAINTEXT"))
        if not security.upper().startswith("SASL_"):
            raise ScenarioError(
                f"{where}.sasl_user", sasl_user, f"listener {listener} is {security}: no SASL login"
            )
        if sasl_user not in DEFAULT_USERS:
            raise ScenarioError(
                f"{where}.sasl_user", sasl_user, f"one of the run's SASL users {DEFAULT_USERS}"
            )
    spread = str(m.get("spread", "all"))
    if spread not in ("all", "bootstrap"):
        raise ScenarioError(f"{where}.spread", spread, "one of ('all', 'bootstrap')")
    hot = _parse_hot_broker(f"{where}.hot_broker", m.get("hot_broker"), sc["brokers"])
    if hot is not None and (spread != "all" or profile not in ENGINE_PROFILES):
        raise ScenarioError(
            f"{where}.hot_broker", dict(m["hot_broker"]),
            f"pins an engine profile's arrivals ({ENGINE_PROFILES}) spread over all brokers",
        )  # fmt: skip
    return Phase(
        name=name,
        profile=str(profile),
        arrival=str(arrival) if arrival is not None else "",
        start=start,
        stop=stop,
        source_ips=source_ips,
        listener=str(listener),
        proxy_protocol=str(proxy),
        proxy_client_ips=str(pcips) if pcips is not None else None,
        via=str(via),
        users=int(users or 1),
        spawn_rate=spawn,
        max_arrivals=max_arrivals,
        extra_args=tuple(extra),
        sasl_user=None if sasl_user is None else str(sasl_user),
        spread=spread,
        hot_broker=hot,
    )


def _parse_hot_broker(key: str, spec: object, brokers: int) -> tuple[int, float] | None:
    if spec is None:
        return None
    m = _mapping(key, spec)
    _only(key, m, ("id", "share"))
    node = _int(f"{key}.id", m.get("id"), 1)
    assert node is not None
    if node > brokers:
        raise ScenarioError(f"{key}.id", node, f"the cluster's node ids are 1-{brokers}")
    share = _num(f"{key}.share", m.get("share"), 0.0)
    if not 0.0 < share <= 1.0:
        raise ScenarioError(f"{key}.share", share, "a share of the arrivals in (0, 1]")
    return node, share


def _parse_action(i: int, spec: object, sc: dict[str, Any]) -> Action:
    where = f"schedule[{i}]"
    m = _mapping(where, spec)
    kinds = [k for k in ("ip_quota", "broker_config", "request_quota", "fault") if k in m]
    if len(kinds) != 1:
        raise ScenarioError(
            where,
            dict(m),
            "each entry needs 'at' and exactly one of "
            "ip_quota, broker_config, request_quota, fault",
        )
    kind = kinds[0]
    allowed = ["at", kind] + (["for", "latency_ms", "broker", "phase"] if kind == "fault" else [])
    allowed += ["broker"] if kind == "broker_config" else []
    _only(where, m, allowed)
    if "at" not in m:
        raise ScenarioError(f"{where}.at", None, "missing: seconds after the load starts")
    at = _num(f"{where}.at", m["at"])
    if at >= sc["duration"]:
        raise ScenarioError(
            f"{where}.at", at, f"not before the end of the run ({sc['duration']} s)"
        )
    params: dict[str, Any]
    if kind == "ip_quota":
        q = _mapping(f"{where}.ip_quota", m[kind])
        _only(f"{where}.ip_quota", q, ("ip", "rate"))
        params = {
            "ip": _check_ip_entity(f"{where}.ip_quota.ip", str(q.get("ip", "default"))),
            "rate": _int(f"{where}.ip_quota.rate", q.get("rate"), 0, allow_null=True),
        }
    elif kind == "broker_config":
        changes = _mapping(f"{where}.broker_config", m[kind])
        if not changes:
            raise ScenarioError(f"{where}.broker_config", dict(changes), "no key to change")
        params = {}
        for k, v in changes.items():
            if not is_dynamic(str(k)):
                raise ScenarioError(
                    f"{where}.broker_config.{k}",
                    v,
                    "not dynamically reconfigurable in Kafka (or unknown)",
                )
            params[str(k)] = validate_limit(str(k), v, sc["listeners"])
        if "broker" in m:  # one broker's own layer (a cluster)
            node = _int(f"{where}.broker", m["broker"], 1)
            if node is None or node > sc["brokers"] or sc["brokers"] < 2:
                raise ScenarioError(
                    f"{where}.broker",
                    m["broker"],
                    f"a node id of the scenario's cluster (1-{sc['brokers']}; brokers > 1)",
                )
            return Action(at=at, kind=kind, params=params, node=node)
    elif kind == "request_quota":
        params = _parse_request_quota(f"{where}.request_quota", m[kind])
    else:
        fkind = m["fault"]
        if fkind not in FAULT_KINDS:
            raise ScenarioError(f"{where}.fault", fkind, f"one of {FAULT_KINDS}")
        if "for" not in m:
            raise ScenarioError(f"{where}.for", None, "missing: how long the fault lasts (s)")
        dur = _num(f"{where}.for", m["for"], 0.1)
        if at + dur >= sc["duration"]:
            raise ScenarioError(
                f"{where}.for", dur, f"the fault must end before the run ends ({sc['duration']} s)"
            )
        params = {"kind": fkind, "for": dur}
        if "broker" in m:  # a cluster: the node (or its acceptor) the fault hits (default 1)
            if fkind in ("upstream_latency", "load_kill"):
                raise ScenarioError(
                    f"{where}.broker", m["broker"], "only for broker faults and acceptor_kill"
                )
            node = _int(f"{where}.broker", m["broker"], 1)
            if node is None or node > sc["brokers"]:
                raise ScenarioError(
                    f"{where}.broker", m["broker"], f"the cluster's node ids are 1-{sc['brokers']}"
                )
            params["broker"] = node
        if fkind == "upstream_latency":
            params["latency_ms"] = _num(f"{where}.latency_ms", m.get("latency_ms", 200), 0.0)
        elif "latency_ms" in m:
            raise ScenarioError(f"{where}.latency_ms", m["latency_ms"], "only for upstream_latency")
        if fkind == "load_kill":  # the load phase whose processes die (and stay dead)
            phase = m.get("phase")
            names = list(sc.get("phases") or [])
            if phase not in names:
                raise ScenarioError(f"{where}.phase", phase, f"one of the load phases {names}")
            params["phase"] = str(phase)
        elif "phase" in m:
            raise ScenarioError(f"{where}.phase", m["phase"], "only for load_kill")
    return Action(at=at, kind=kind, params=params)


def _parse_expect(key: str, spec: object, base: Expect | None = None) -> Expect:
    m = _mapping(key, spec)
    _only(key, m, ("verdict", "checks", "fairness_p99_ratio", "slack_ms", "by_target"))
    b = base or Expect()
    verdict = m.get("verdict", b.verdict)
    if verdict not in VERDICTS:
        raise ScenarioError(f"{key}.verdict", verdict, f"one of {VERDICTS}")
    checks = m.get("checks", list(b.checks))
    if not isinstance(checks, list) or not all(isinstance(c, str) and c for c in checks):
        raise ScenarioError(f"{key}.checks", checks, "expected a list of check names")
    ratio = m.get("fairness_p99_ratio", b.fairness_p99_ratio)
    if ratio is not None:
        ratio = _num(f"{key}.fairness_p99_ratio", ratio, 1.0)
    slack = m.get("slack_ms", b.slack_ms)
    if slack is not None:
        slack = _num(f"{key}.slack_ms", slack)
    checks = [*checks, *(c for c in ALWAYS_EXPECTED if c not in checks)]
    return Expect(
        verdict=str(verdict), checks=tuple(checks), fairness_p99_ratio=ratio, slack_ms=slack
    )


def parse_scenario(data: object, *, source: str = "") -> Scenario:
    """Validate a scenario mapping (the YAML document) and return it parsed."""
    try:
        return _parse_scenario(data, source)
    except ScenarioError as exc:
        if source and not exc.where:
            raise ScenarioError(exc.key, exc.value, exc.reason, where=source) from None
        raise


def _parse_scenario(data: object, source: str) -> Scenario:
    if not isinstance(data, Mapping):
        raise ScenarioError("<document>", type(data).__name__, "a scenario is a YAML mapping")
    _only("<document>", data, _TOP_KEYS)
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ScenarioError("name", name, "lower-case letters, digits and dashes, e.g. demo-storm")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ScenarioError("description", description, "say what the scenario proves")
    covers = data.get("covers", [])
    if not isinstance(covers, list) or not all(isinstance(c, str) for c in covers):
        raise ScenarioError("covers", covers, "expected a list of the limits it exercises")
    targets = data.get("targets", list(TARGETS))
    if not isinstance(targets, list) or not targets or any(t not in TARGETS for t in targets):
        raise ScenarioError("targets", targets, f"a non-empty list from {TARGETS}")
    target = data.get("target", targets[0])
    if target not in targets:
        raise ScenarioError("target", target, f"not one of the scenario's targets {targets}")
    duration = _num("duration", data.get("duration"), 1.0)
    if duration > MAX_DURATION_S:
        raise ScenarioError(
            "duration", duration, f"at most {MAX_DURATION_S:.0f} s of load (a 4-hour soak)"
        )
    seed = _int("seed", data.get("seed", 1), 0)
    listeners, inter, proxy, security = _parse_listeners(data.get("listeners"))
    brokers = _int("brokers", data.get("brokers", 1), 1)
    assert brokers is not None
    workers = _int("workers", data.get("workers", 0), 0)
    assert workers is not None
    if workers > MAX_WORKERS:
        raise ScenarioError("workers", workers, f"at most {MAX_WORKERS} worker hosts")
    if brokers > MAX_BROKERS:
        raise ScenarioError("brokers", brokers, f"at most {MAX_BROKERS} on one machine")
    sc: dict[str, Any] = {
        "duration": duration, "listeners": listeners, "security": security, "brokers": brokers
    }  # fmt: skip

    limits: dict[str, int | str] = {}
    for k, v in _mapping("limits", data.get("limits")).items():
        val = validate_limit(str(k), v, listeners)
        if val is None:
            raise ScenarioError(f"limits.{k}", v, "leave a key out instead of setting it to null")
        limits[str(k)] = val
    if limits.get("max.connections.per.ip") == 0 and not limits.get(
        "max.connections.per.ip.overrides"
    ):
        raise ScenarioError(
            "limits.max.connections.per.ip",
            0,
            "0 is allowed only with max.connections.per.ip.overrides (Kafka)",
        )
    ip_quotas = _parse_ip_quotas("ip_quotas", data.get("ip_quotas"))
    rq_raw = data.get("request_quotas", [])
    if not isinstance(rq_raw, list):
        raise ScenarioError("request_quotas", rq_raw, "expected a list")
    request_quotas = tuple(
        _parse_request_quota(f"request_quotas[{i}]", q) for i, q in enumerate(rq_raw)
    )
    acceptor = {str(k): str(v) for k, v in _mapping("acceptor", data.get("acceptor")).items()}

    load_raw = data.get("load")
    if not isinstance(load_raw, list) or not load_raw:
        raise ScenarioError("load", load_raw, "a non-empty list of load phases")
    load = tuple(_parse_phase(i, p, sc) for i, p in enumerate(load_raw))
    names = [p.name for p in load]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ScenarioError("load.name", dup, "phase names must be unique")

    sched_raw = data.get("schedule", [])
    if not isinstance(sched_raw, list):
        raise ScenarioError("schedule", sched_raw, "expected a list")
    sc["phases"] = names
    schedule = tuple(
        sorted((_parse_action(i, a, sc) for i, a in enumerate(sched_raw)), key=lambda a: a.at)
    )
    _check_faults_disjoint(schedule)

    expect_raw = _mapping("expect", data.get("expect"))
    expect = _parse_expect("expect", expect_raw)
    by_target: dict[str, Expect] = {}
    for t, spec in _mapping("expect.by_target", expect_raw.get("by_target")).items():
        if t not in TARGETS:
            raise ScenarioError("expect.by_target", t, f"one of {TARGETS}")
        by_target[str(t)] = _parse_expect(f"expect.by_target.{t}", spec, expect)

    needs_admin = ip_quotas or request_quotas or any(a.kind != "fault" for a in schedule)
    if needs_admin and all(proxy.get(n) == "required" for n in listeners):
        raise ScenarioError(
            "listeners.proxy_protocol",
            dict(proxy),
            "quotas are set through the admin API, which needs one listener without "
            "proxy.protocol=required (add e.g. REPLICATION)",
        )
    t_raw = _mapping("timeouts", data.get("timeouts"))
    _only("timeouts", t_raw, tuple(Timeouts.__dataclass_fields__))
    timeouts = Timeouts(**{k: _num(f"timeouts.{k}", v, 1.0) for k, v in t_raw.items()})
    return Scenario(
        name=name,
        description=description.strip(),
        covers=tuple(covers),
        targets=tuple(targets),
        target=str(target),
        duration=duration,
        listeners=listeners,
        inter_broker_listener=inter,
        proxy_protocol=proxy,
        limits=limits,
        ip_quotas=ip_quotas,
        request_quotas=request_quotas,
        load=load,
        schedule=schedule,
        expect=expect,
        expect_by_target=by_target,
        timeouts=timeouts,
        seed=int(seed or 0),
        acceptor=acceptor,
        security=security,
        brokers=int(brokers),
        workers=int(workers),
        source=source,
        raw=dict(data),
    )


def _check_faults_disjoint(schedule: Sequence[Action]) -> None:
    """Process faults cannot overlap (a paused broker cannot also be killed, nor the
    acceptor in front of it)."""
    broker = [
        a
        for a in schedule
        if a.kind == "fault" and a.params["kind"] not in ("upstream_latency", "load_kill")
    ]
    for a, b in itertools.pairwise(broker):
        end = a.end
        assert end is not None
        if b.at < end:
            raise ScenarioError(
                "schedule", f"{b.params['kind']}@{b.at}", f"overlaps {a.params['kind']}@{a.at}"
            )


def load_scenario_file(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScenarioError("file", str(p), f"cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError("file", str(p), f"not valid YAML: {exc}") from None
    return parse_scenario(data, source=str(p))
