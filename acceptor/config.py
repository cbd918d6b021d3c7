"""Acceptor configuration: Kafka's keys (validated by the quota engine) plus the few
acceptor-only keys, all checked before anything starts.

Why one loader: an operator hands the acceptor the same properties a broker would get plus
`listener.name.<l>.upstream`; a typo must stop the start with the key, the value and the
reason, never leave a half-configured front that silently forwards without limits.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from base import javaprops
from base.quota.config import ConfigError, QuotaConfig, parse_config
from base.quota.connections import ConnectionQuotas
from base.quota.faults import FAULT_KEY, LEGACY_SKIP_KEY, Faults
from base.quota.requests import RequestQuotas
from base.quota.versions import (
    CURRENT,
    METADATA_KEY,
    VERSION_KEY,
    KafkaSemantics,
    semantics,
)
from base.security.clientprops import CLIENT_AUTH, TLS_PROTOCOLS
from base.security.clientprops import PROTOCOLS as SECURITY_PROTOCOLS

log = logging.getLogger("acceptor")

PROXY_MODES = ("off", "optional", "required")
#: one process, or an accepting process and processor processes (acceptor.split)
MODEL_KEY = "acceptor.process.model"
#: split model: how many processes run the `num.network.threads` processors between them
PROCESSES_KEY = "acceptor.processor.processes"

#: acceptor-only keys (not passed to the quota engine), with their defaults
DEFAULTS: dict[str, str] = {
    "socket.listen.backlog.size": "50",
    "metrics.host": "127.0.0.1",
    "metrics.port": "0",
    "admin.allowed.addresses": "127.0.0.0/8,::1/128",
    "admin.listeners": "",
    "state.dir": "",
    "connections.max.idle.ms": "600000",
    "proxy.header.timeout.ms": "3000",
    "history.flush.interval.ms": "1000",
    "history.request.sample": "1",
    "acceptor.io": "protocol",
    # the acceptor's scheduling weight (-20..19, 0: unchanged); see AcceptorConfig.nice
    "acceptor.nice": "0",
    MODEL_KEY: "single",
    PROCESSES_KEY: "",  # blank: one process per processor, Kafka's shape
    "node.id": "",
    # the Kafka release whose semantics the engine enforces (base.quota.versions)
    VERSION_KEY: CURRENT,
    # its metadata mode, kraft or zookeeper (blank: the release's own default)
    METADATA_KEY: "",
    "upstream.request.log": "",  # the broker's request log (acceptor.broker_charge)
    LEGACY_SKIP_KEY: "false",
    FAULT_KEY: "",
    "harness.test.processor.stall": "",  # parsed by acceptor.stall (issue 13)
}
#: the per-listener TLS keys of `terminate` (Kafka's own names, PEM files)
TLS_KEYS = (
    "ssl.keystore.location",
    "ssl.truststore.location",
    "ssl.client.auth",
    "upstream.ssl.keystore.location",
)
_LISTENER_KEY = re.compile(
    r"^listener\.name\.([^.]+)\.(upstream|proxy\.protocol|tls\.mode|"
    + "|".join(re.escape(k) for k in TLS_KEYS)
    + ")$"
)
#: Kafka's key: each listener's security protocol (as the broker behind it has it)
PROTOCOL_MAP_KEY = "listener.security.protocol.map"
#: what the acceptor does on a TLS listener (`listener.name.<l>.tls.mode`): relay the bytes
#: untouched (connection quotas only), or end TLS itself with its own certificate and speak
#: TLS to the broker (requests read, charged per principal)
TLS_MODES = ("pass-through", "terminate")


@dataclass(frozen=True)
class ListenerSettings:
    name: str
    host: str
    port: int
    upstream_host: str
    upstream_port: int
    proxy: str  # off | optional | required
    #: the broker listener's security protocol (`listener.security.protocol.map`)
    protocol: str = "PLAINTEXT"
    #: on SSL and SASL_SSL: `pass-through` (bytes relayed untouched) or `terminate`; else ""
    tls: str = ""
    #: `terminate`: the acceptor's own key and certificate chain (PEM), the CA it trusts
    #: (clients' certificates and the broker's), whether it asks clients for certificates,
    #: and the certificate it shows the broker when the broker asks for one
    keystore: str = ""
    truststore: str = ""
    client_auth: str = "none"
    upstream_keystore: str = ""

    @property
    def opaque(self) -> bool:
        """The bytes are relayed untouched: no frame is read, no request charged or
        answered here (TLS pass-through). Connection quotas apply as on any listener: Kafka
        applies them on its acceptor thread before any TLS byte is read."""
        return self.tls == "pass-through"

    @property
    def terminates(self) -> bool:
        """The acceptor ends the client's TLS and opens its own to the broker."""
        return self.tls == "terminate"

    @property
    def sasl(self) -> bool:
        """Clients log in before their requests reach Kafka's request handlers (SASL read
        in passing: on SASL_PLAINTEXT, and on SASL_SSL when TLS is terminated here)."""
        return self.protocol.startswith("SASL_") and not self.opaque


def parse_protocol_map(raw: str, names: Sequence[str]) -> dict[str, str]:
    """`listener.security.protocol.map` (Kafka's `NAME:PROTOCOL,...`), for `names`. A
    listener it does not name is PLAINTEXT unless its name is a protocol (as Kafka's
    default map has it)."""
    out = {n: (n if n in SECURITY_PROTOCOLS else "PLAINTEXT") for n in names}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                PROTOCOL_MAP_KEY,
                raw,
                f"{item!r}: expected NAME:PROTOCOL with PROTOCOL one of "
                + ", ".join(SECURITY_PROTOCOLS),
            )
        if name not in names:
            raise ConfigError(
                PROTOCOL_MAP_KEY, raw, f"no listener {name} in listeners={list(names)}"
            )
        out[name] = protocol
    return out


@dataclass(frozen=True)
class AcceptorConfig:
    quota: QuotaConfig
    listeners: tuple[ListenerSettings, ...]
    backlog: int
    metrics_host: str
    metrics_port: int
    admin_allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    admin_listeners: frozenset[str] | None  # None = every listener
    state_dir: Path | None
    idle_ms: int
    proxy_timeout_ms: int
    history_flush_ms: int
    #: one `request` row per this many answered requests (1 = all, 0 = none)
    request_sample: int
    #: seeded enforcement faults (`harness.test.fault`; empty in production)
    faults: Faults
    #: `node.id` of the broker behind the acceptor: the only per-broker BROKER resource
    #: IncrementalAlterConfigs accepts (None = asked from the upstream when first needed)
    node_id: int | None = None
    #: `acceptor.nice`: the nice value of every thread of the acceptor, set at start (0:
    #: unchanged). Its one event-loop thread does the work of Kafka's acceptor thread and
    #: its `num.network.threads` processors; on CPUs shared with the load, the kernel gives
    #: each runnable thread an equal share, so -6 (weight 3906) asks for about the share of
    #: Kafka's four network threads (4 x 1024). Negative values need root (CAP_SYS_NICE).
    nice: int = 0
    #: `acceptor.process.model`: `single` (one process, one loop) or `split` (an accepting
    #: process and `processor_processes` processor processes: acceptor.split)
    process_model: str = "single"
    #: `acceptor.processor.processes` (split model): the processes that run the
    #: `num.network.threads` processors between them (processor i in process i mod this);
    #: by default one per processor
    processor_processes: int = 1
    #: `kafka.version`: the Kafka release whose semantics the engine enforces
    kafka: KafkaSemantics = field(default_factory=semantics)
    #: the raw properties as given (after overrides), for `config` rows and restarts
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def skip_ip_rate_check(self) -> bool:
        return "skip_ip_rate_check" in self.faults

    def listener(self, name: str) -> ListenerSettings:
        for spec in self.listeners:
            if spec.name == name:
                return spec
        raise KeyError(name)


def read_properties(path: str | Path) -> dict[str, str]:
    """The acceptor's Java .properties file (`base.javaprops`); a malformed line is a
    ConfigError naming it."""
    try:
        return javaprops.read(path)
    except ValueError as exc:
        raise ConfigError("config file", str(path), str(exc)) from exc


def apply_overrides(props: Mapping[str, str], sets: Sequence[str]) -> dict[str, str]:
    """`--set key=value` wins over the file; `--set key=` removes the key."""
    out = dict(props)
    for item in sets:
        if "=" not in item:
            raise ConfigError(item, "", "--set expects key=value")
        key, value = item.split("=", 1)
        key = key.strip()
        if value == "":
            out.pop(key, None)
        else:
            out[key] = value.strip()
    return out


def _int(props: Mapping[str, str], key: str, lo: int, hi: int = 2**31 - 1) -> int:
    value = props.get(key, DEFAULTS.get(key, ""))
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(key, value, "must be an integer") from None
    if not lo <= n <= hi:
        raise ConfigError(key, value, f"must be between {lo} and {hi}")
    return n


def _choice(props: Mapping[str, str], key: str, choices: tuple[str, ...]) -> str:
    value = props.get(key, DEFAULTS[key]).strip().lower()
    if value not in choices:
        raise ConfigError(key, value, f"must be one of {', '.join(choices)}")
    return value


def _hostport(key: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(key, value, "must be host:port with a port in 1..65535")
    return host.strip("[]"), int(port)


def _tls_mode(name: str, protocol: str, given: str | None) -> str:
    """A listener's `tls.mode`: pass-through by default on SSL and SASL_SSL; refused on a
    listener without TLS."""
    key = f"listener.name.{name.lower()}.tls.mode"
    has_tls = protocol in TLS_PROTOCOLS
    if given is None:
        return "pass-through" if has_tls else ""
    value = given.strip().lower()
    if not has_tls:
        raise ConfigError(key, given, f"listener {name} is {protocol}: it has no TLS to relay")
    if value not in TLS_MODES:
        raise ConfigError(key, given, f"must be one of {', '.join(TLS_MODES)}")
    return value


def _tls_files(name: str, protocol: str, tls: str, given: Mapping[str, str]) -> dict[str, str]:
    """The `terminate` keys of a listener, checked: files that exist, a known client-auth
    mode; refused on a listener without TLS, and the keystore and truststore required when
    the acceptor terminates (each file's content is checked when its TLS context is made,
    `acceptor.tls`)."""
    prefix = f"listener.name.{name.lower()}."
    if given and not tls:
        key = prefix + next(iter(given))
        raise ConfigError(key, next(iter(given.values())), f"listener {name} is {protocol}: no TLS")
    if tls == "terminate":
        for k in ("ssl.keystore.location", "ssl.truststore.location"):
            if not given.get(k):
                raise ConfigError(prefix + k, "", "required when tls.mode=terminate (a PEM file)")
    for k in ("ssl.keystore.location", "ssl.truststore.location", "upstream.ssl.keystore.location"):
        if given.get(k) and not Path(given[k]).is_file():
            raise ConfigError(prefix + k, given[k], "no such file")
    auth = given.get("ssl.client.auth", "none").strip().lower()
    if auth not in CLIENT_AUTH:
        raise ConfigError(
            prefix + "ssl.client.auth", auth, f"must be one of {', '.join(CLIENT_AUTH)}"
        )
    return {
        "keystore": given.get("ssl.keystore.location", ""),
        "truststore": given.get("ssl.truststore.location", ""),
        "client_auth": auth,
        "upstream_keystore": given.get("upstream.ssl.keystore.location", ""),
    }


def parse_acceptor_config(props: Mapping[str, str]) -> AcceptorConfig:
    """Validate everything; raises `ConfigError(key, value, reason)` on the first problem."""
    props = {k.strip(): v.strip() for k, v in props.items()}
    engine_props: dict[str, str] = {}
    per_listener: dict[str, dict[str, str]] = {
        k: {} for k in ("upstream", "proxy.protocol", "tls.mode", *TLS_KEYS)
    }
    for key, value in props.items():
        m = _LISTENER_KEY.match(key)
        if m:
            per_listener[m.group(2)][m.group(1).upper()] = value
            continue
        if key in DEFAULTS or key == PROTOCOL_MAP_KEY:
            continue
        engine_props[key] = value
    quota = parse_config(engine_props)

    names = [spec.name for spec in quota.listeners]
    for suffix, given in per_listener.items():
        for known, value in given.items():
            if known not in names:
                key = f"listener.name.{known.lower()}.{suffix}"
                raise ConfigError(key, value, f"no listener {known} in listeners={names}")
    upstreams, proxies = per_listener["upstream"], per_listener["proxy.protocol"]
    protocols = parse_protocol_map(props.get(PROTOCOL_MAP_KEY, ""), names)
    listeners: list[ListenerSettings] = []
    for spec in quota.listeners:
        key = f"listener.name.{spec.name.lower()}.upstream"
        if spec.name not in upstreams:
            raise ConfigError(key, "", f"required: where listener {spec.name} forwards (host:port)")
        up_host, up_port = _hostport(key, upstreams[spec.name])
        mode = proxies.get(spec.name, "off").lower()
        if mode not in PROXY_MODES:
            raise ConfigError(
                f"listener.name.{spec.name.lower()}.proxy.protocol",
                mode,
                f"must be one of {', '.join(PROXY_MODES)}",
            )
        protocol = protocols[spec.name]
        tls = _tls_mode(spec.name, protocol, per_listener["tls.mode"].get(spec.name))
        if tls and mode != "off":
            raise ConfigError(
                f"listener.name.{spec.name.lower()}.proxy.protocol",
                mode,
                f"a PROXY header before TLS on {protocol} listener {spec.name} is not supported",
            )
        given = {k: per_listener[k][spec.name] for k in TLS_KEYS if spec.name in per_listener[k]}
        listeners.append(
            ListenerSettings(
                spec.name,
                spec.host,
                spec.port,
                up_host,
                up_port,
                mode,
                protocol=protocol,
                tls=tls,
                **_tls_files(spec.name, protocol, tls, given),
            )
        )

    allowed: list[Any] = []
    raw_allowed = props.get("admin.allowed.addresses", DEFAULTS["admin.allowed.addresses"])
    for item in filter(None, (s.strip() for s in raw_allowed.split(","))):
        try:
            allowed.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError("admin.allowed.addresses", item, "not a CIDR or IP address") from None
    raw_admin_l = props.get("admin.listeners", "").strip()
    admin_listeners: frozenset[str] | None = None
    if raw_admin_l:
        admin_listeners = frozenset(s.strip().upper() for s in raw_admin_l.split(",") if s.strip())
        for name in admin_listeners:
            if name not in names:
                raise ConfigError(
                    "admin.listeners", raw_admin_l, f"no listener {name} in listeners={names}"
                )
    skip = props.get(LEGACY_SKIP_KEY, "false").lower()
    if skip not in ("true", "false"):
        raise ConfigError(LEGACY_SKIP_KEY, skip, "must be true or false")
    faults = Faults.parse(props.get(FAULT_KEY, ""))
    if skip == "true":  # the older key is the fault skip_ip_rate_check
        faults = Faults(faults.enabled | {"skip_ip_rate_check"})
    state_dir = props.get("state.dir", "")
    node_id = _int(props, "node.id", 0) if props.get("node.id", "") else None
    # the streams flavour is gone (issue 14): the key stays, for configs that name it
    _choice(props, "acceptor.io", ("protocol",))
    return AcceptorConfig(
        quota=quota,
        listeners=tuple(listeners),
        backlog=_int(props, "socket.listen.backlog.size", 1, 65535),
        metrics_host=props.get("metrics.host", DEFAULTS["metrics.host"]),
        metrics_port=_int(props, "metrics.port", -1, 65535),
        admin_allowed=tuple(allowed),
        admin_listeners=admin_listeners,
        state_dir=Path(state_dir) if state_dir else None,
        idle_ms=_int(props, "connections.max.idle.ms", -1),
        proxy_timeout_ms=_int(props, "proxy.header.timeout.ms", 1),
        history_flush_ms=_int(props, "history.flush.interval.ms", 10),
        request_sample=_int(props, "history.request.sample", 0),
        faults=faults,
        node_id=node_id,
        nice=_int(props, "acceptor.nice", -20, 19),
        process_model=_choice(props, MODEL_KEY, ("single", "split")),
        processor_processes=(
            _int(props, PROCESSES_KEY, 1, 64)
            if props.get(PROCESSES_KEY, "")
            else quota.num_network_threads
        ),
        kafka=semantics(props.get(VERSION_KEY, CURRENT), props.get(METADATA_KEY) or None),
        properties=dict(props),
    )


def quota_engines(cfg: AcceptorConfig) -> tuple[ConnectionQuotas, RequestQuotas]:
    """The connection and request quota engines for `cfg`: its limits, its seeded faults
    and the Kafka release it enforces as (`kafka.version`)."""
    legacy = not cfg.kafka.sampled_stat_overlap
    return (
        ConnectionQuotas(cfg.quota, legacy_meter=legacy, faults=cfg.faults),
        RequestQuotas(
            cfg.quota.quota_window_num,
            cfg.quota.quota_window_size_seconds,
            legacy_meter=legacy,
            faults=cfg.faults,
            exempt_api_keys=cfg.kafka.exempt_api_keys,
        ),
    )


def load_config(path: str | Path | None, sets: Sequence[str] = ()) -> AcceptorConfig:
    props = read_properties(path) if path else {}
    return parse_acceptor_config(apply_overrides(props, sets))
