"""The broker's server.properties, computed from what the caller asked for (no I/O).

A single-node KRaft broker that is also its own controller. The launcher owns the keys that wire
the node together (roles, node id, the listeners and their ports, the controller quorum, the data
dir); callers own everything else, which is how tests set Kafka's own connection limits
(``max.connections.per.ip``, ``max.connection.creation.rate``, ...). Defaults lean towards fast
tests on one small machine: replication factor 1 for internal topics, no rebalance delay, topic
auto-creation on.

Listeners can be secured (`ListenerSpec`, `parse_listener`): SSL (server-only or mutual TLS),
SASL_PLAINTEXT and SASL_SSL with PLAIN and SCRAM-SHA-256/512. `security_properties` renders
their keys, every one listener-prefixed (an unprefixed broker ``sasl.jaas.config`` is ignored,
and on SASL_SSL only ``listener.name.<l>.ssl.client.auth`` is honoured); docs/security.md.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from base.localnet import LOOPBACK
from base.security.clientprops import CLIENT_AUTH, PROTOCOLS, TLS_PROTOCOLS
from base.security.sasl import MECHANISMS, PLAIN, SCRAM_MECHANISMS, SaslUser, server_jaas
from broker.errors import BrokerError

CONTROLLER_LISTENER = "CONTROLLER"
NODE_ID = 1
#: the most nodes a cluster may have on one machine of this kind (more only measures the
#: machine); `broker.cluster`
MAX_BROKERS = 5

#: Keys the launcher sets itself; a caller overriding them would break the node's own wiring.
MANAGED_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "broker.id",
        "listeners",
        "controller.listener.names",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "listener.security.protocol.map",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
        "zookeeper.connect",
    }
)

#: Broker defaults for a test node; any of them can be overridden through ``properties``.
DEFAULTS: Mapping[str, str] = {
    "auto.create.topics.enable": "true",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    # One partition instead of 50: the first consumer group on a fresh broker is ready at once.
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.flush.interval.messages": "9223372036854775807",
    "num.recovery.threads.per.data.dir": "1",
    "log.retention.check.interval.ms": "300000",
}

_LISTENER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class ListenerPlan:
    """Which listeners the node has, where they really listen and what they advertise."""

    names: tuple[str, ...]
    ports: Mapping[str, int]
    controller_port: int
    advertised: Mapping[str, str] = field(default_factory=dict)
    inter_broker_listener: str = ""
    #: security per listener name; a listener not in here is PLAINTEXT
    specs: Mapping[str, ListenerSpec] = field(default_factory=dict)
    #: this node's id, and the whole quorum's ``controller.quorum.voters`` ("" for a single
    #: node: its own controller listener; a cluster: `broker.cluster`)
    node_id: int = NODE_ID
    voters: str = ""
    #: ZooKeeper mode: the broker's ``zookeeper.connect`` (no KRaft controller; the
    #: controller port is then ZooKeeper's client port); "" for KRaft
    zookeeper: str = ""
    #: where the client-facing listeners listen and, unless advertised elsewhere, what
    #: they advertise (`check_listen_host`); the controller listener stays on loopback
    host: str = LOOPBACK

    @property
    def first(self) -> str:
        return self.names[0]

    def protocol(self, name: str) -> str:
        spec = self.specs.get(name)
        return spec.protocol if spec is not None else "PLAINTEXT"

    @property
    def secured(self) -> tuple[ListenerSpec, ...]:
        """The listeners that are not PLAINTEXT, in listener order."""
        return tuple(self.specs[n] for n in self.names if n in self.specs and self.specs[n].secured)


#: Which certificate an SSL/SASL_SSL listener serves: the good one, or a bad one for tests.
SERVER_CERTS = ("good", "expired", "wrong-host")
#: `--secure`: PLAINTEXT (inter-broker, the harness's probe), SASL_SSL with SCRAM-SHA-512, and
#: SSL that asks for a client certificate (clients with one get its principal, others
#: ``ANONYMOUS``).
SECURE_LISTENERS = ("PLAINTEXT", "SASL_SSL=SASL_SSL:SCRAM-SHA-512", "SSL=SSL:mtls=requested")


@dataclass(frozen=True)
class ListenerSpec:
    """One client-facing listener: its name, protocol and what the protocol needs."""

    name: str
    protocol: str = "PLAINTEXT"
    #: SASL mechanisms, first = the one its client.properties uses (SASL_* only)
    mechanisms: tuple[str, ...] = ()
    #: ``ssl.client.auth`` (SSL and SASL_SSL): none, requested, required (mutual TLS)
    client_auth: str = "none"
    #: the certificate served (SSL and SASL_SSL): good, expired, wrong-host
    cert: str = "good"

    @property
    def secured(self) -> bool:
        return self.protocol != "PLAINTEXT"

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        opts = list(self.mechanisms)
        if self.client_auth != "none":
            opts.append("mtls" if self.client_auth == "required" else f"mtls={self.client_auth}")
        if self.cert != "good":
            opts.append(f"cert={self.cert}")
        return f"{self.name}={self.protocol}" + (f":{','.join(opts)}" if opts else "")


def parse_listener(text: str) -> ListenerSpec:
    """``NAME[=PROTOCOL[:OPTION,...]]`` -> `ListenerSpec` (a bare NAME is PLAINTEXT).

    Options: SASL mechanisms (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``; SASL_* needs at
    least one), ``mtls`` or ``mtls=required|requested|none`` (client certificates on SSL and
    SASL_SSL), ``cert=good|expired|wrong-host`` (the certificate served). Examples:
    ``SSL=SSL``, ``MTLS=SSL:mtls``, ``SASL=SASL_SSL:SCRAM-SHA-512,PLAIN``.
    """
    where = f"config listener {text!r}"
    name, _, rest = text.strip().partition("=")
    name = name.strip().upper()
    if not _LISTENER_NAME.match(name):
        raise BrokerError(f"{where}: {name!r} is not a valid listener name")
    protocol, _, options = rest.partition(":")
    protocol = protocol.strip().upper() or "PLAINTEXT"
    if protocol not in PROTOCOLS:
        raise BrokerError(f"{where}: protocol {protocol!r}, expected one of {', '.join(PROTOCOLS)}")
    mechanisms: list[str] = []
    client_auth, cert = "none", "good"
    for option in filter(None, (o.strip() for o in options.split(","))):
        key, has_value, value = option.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if key.upper() in MECHANISMS and not has_value:
            if not protocol.startswith("SASL_"):
                raise BrokerError(
                    f"{where}: SASL mechanism {key.upper()} on a {protocol} "
                    "listener; use SASL_PLAINTEXT or SASL_SSL"
                )
            if key.upper() not in mechanisms:
                mechanisms.append(key.upper())
        elif key == "mtls":
            client_auth = value if has_value else "required"
            if client_auth not in CLIENT_AUTH:
                raise BrokerError(
                    f"{where}: mtls={value!r}, expected one of {', '.join(CLIENT_AUTH)}"
                )
        elif key == "cert" and has_value:
            cert = value
            if cert not in SERVER_CERTS:
                raise BrokerError(
                    f"{where}: cert={value!r}, expected one of {', '.join(SERVER_CERTS)}"
                )
        else:
            raise BrokerError(
                f"{where}: unknown option {option!r}; options are SASL mechanisms "
                f"({', '.join(MECHANISMS)}), mtls[=required|requested|none], "
                "cert=good|expired|wrong-host"
            )
    if protocol.startswith("SASL_") and not mechanisms:
        raise BrokerError(
            f"{where}: a {protocol} listener needs a mechanism, e.g. "
            f"{name}={protocol}:SCRAM-SHA-512 (one of {', '.join(MECHANISMS)})"
        )
    if (client_auth != "none" or cert != "good") and protocol not in TLS_PROTOCOLS:
        raise BrokerError(f"{where}: mtls and cert options need SSL or SASL_SSL, not {protocol}")
    return ListenerSpec(name, protocol, tuple(mechanisms), client_auth, cert)


def check_secured_plan(specs: Sequence[ListenerSpec], inter_broker_listener: str) -> None:
    """A broker with secured listeners keeps PLAINTEXT first (the bootstrap and readiness probe)
    and as the inter-broker listener (the broker needs no credentials of its own)."""
    if not any(s.secured for s in specs):
        return
    if specs[0].secured:
        raise BrokerError(
            f"config listeners: the first listener ({specs[0]}) is the harness's bootstrap and "
            "readiness probe and must be PLAINTEXT; put one first, e.g. --listener PLAINTEXT "
            f"--listener {specs[0]}"
        )
    inter = next((s for s in specs if s.name == inter_broker_listener), None)
    if inter is not None and inter.secured:
        raise BrokerError(
            f"config inter.broker.listener.name={inter.name}: a {inter.protocol} listener; the "
            "inter-broker listener must be PLAINTEXT (it stays protected from client limits)"
        )


def security_properties(
    specs: Sequence[ListenerSpec],
    *,
    users: Sequence[SaslUser],
    truststore: str,
    keystores: Mapping[str, str],
) -> dict[str, str]:
    """The broker keys of the secured listeners, every one prefixed with its listener.

    ``keystores`` maps `SERVER_CERTS` names to PEM keystore paths (PKCS#8 key, then chain);
    ``truststore`` is the CA's PEM. Secret: the PLAIN JAAS values carry the passwords.
    """
    props: dict[str, str] = {}
    for spec in specs:
        prefix = f"listener.name.{spec.name.lower()}."
        if spec.tls:
            props[prefix + "ssl.keystore.type"] = "PEM"
            props[prefix + "ssl.keystore.location"] = keystores[spec.cert]
            props[prefix + "ssl.truststore.type"] = "PEM"
            props[prefix + "ssl.truststore.location"] = truststore
            props[prefix + "ssl.client.auth"] = spec.client_auth
        if spec.sasl:
            props[prefix + "sasl.enabled.mechanisms"] = ",".join(spec.mechanisms)
            for mech in spec.mechanisms:
                props[f"{prefix}{mech.lower()}.sasl.jaas.config"] = server_jaas(mech, users)
    return props


def scram_mechanisms(specs: Sequence[ListenerSpec]) -> tuple[str, ...]:
    """The SCRAM mechanisms any listener enables (their users are created at format time)."""
    wanted = {m for s in specs for m in s.mechanisms}
    return tuple(m for m in SCRAM_MECHANISMS if m in wanted)


def uses_plain(specs: Sequence[ListenerSpec]) -> bool:
    return any(PLAIN in s.mechanisms for s in specs)


def parse_host_port(value: str, *, key: str) -> tuple[str, int]:
    """``"host:port"`` -> (host, port), with a config-style error naming ``key``."""
    host, sep, port_s = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise BrokerError(f"config {key}={value!r}: expected host:port with a port in 1..65535")
    return host, int(port_s)


def check_listen_host(host: str, specs: Sequence[ListenerSpec]) -> str:
    """Where a started broker's client listeners listen: an IPv4 address of this machine,
    127.0.0.1 unless the load comes from elsewhere (the host side of the bridge to the
    run's worker hosts). Secured listeners stay on loopback: the run's certificates name
    the loopback addresses only."""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise BrokerError(
            f"config listen_host={host!r}: expected an IPv4 address of this machine"
        ) from None
    secured = [str(s) for s in specs if s.secured]
    if host != LOOPBACK and secured:
        raise BrokerError(
            f"config listen_host={host!r} with listeners {', '.join(secured)}: the run's "
            f"certificates name {LOOPBACK} only; secured listeners listen there"
        )
    return host


def parse_advertised_listeners(value: str) -> dict[str, str]:
    """Kafka's ``advertised.listeners`` syntax (``NAME://host:port,...``) -> name -> host:port."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in value.split(","))):
        name, sep, rest = item.partition("://")
        if not sep or not _LISTENER_NAME.match(name):
            raise BrokerError(
                f"config advertised.listeners={value!r}: {item!r} is not NAME://host:port"
            )
        parse_host_port(rest, key="advertised.listeners")
        out[name.upper()] = rest
    return out


def normalise_listeners(
    listeners: Sequence[str],
    advertised: Mapping[str, str] | None,
    inter_broker_listener: str | None,
    properties: Mapping[str, str],
) -> tuple[tuple[str, ...], dict[str, str], str]:
    """Validate the caller's listener request; returns (names, advertised, inter-broker name).

    ``advertised.listeners`` and ``inter.broker.listener.name`` given as plain properties are
    folded in, so ``--set advertised.listeners=...`` works like the keyword arguments.
    """
    if isinstance(listeners, str):
        listeners = (listeners,)
    names = tuple(name.strip().upper() for name in listeners)
    if not names:
        raise BrokerError("config listeners=(): at least one client-facing listener is needed")
    for name in names:
        if not _LISTENER_NAME.match(name):
            raise BrokerError(f"config listeners: {name!r} is not a valid listener name")
        if name == CONTROLLER_LISTENER:
            raise BrokerError(
                f"config listeners: {CONTROLLER_LISTENER} is the launcher's internal KRaft "
                "controller listener; pick another name"
            )
    if len(set(names)) != len(names):
        raise BrokerError(f"config listeners={list(names)}: names must be unique")

    merged: dict[str, str] = {}
    if "advertised.listeners" in properties:
        merged.update(parse_advertised_listeners(properties["advertised.listeners"]))
    for name, addr in (advertised or {}).items():
        parse_host_port(addr, key=f"advertised[{name}]")
        merged[name.upper()] = addr
    for name in merged:
        if name == CONTROLLER_LISTENER:
            raise BrokerError(
                "config advertised.listeners: KRaft forbids advertising the controller listener"
            )
        if name not in names:
            raise BrokerError(
                f"config advertised.listeners: {name!r} is not one of the listeners {list(names)}"
            )

    inter = inter_broker_listener or properties.get("inter.broker.listener.name") or names[0]
    inter = inter.upper()
    if inter not in names:
        raise BrokerError(
            f"config inter.broker.listener.name={inter!r}: not one of the listeners {list(names)}"
        )
    for key in properties:
        if key in MANAGED_KEYS:
            raise BrokerError(
                f"config {key}={properties[key]!r}: set by the launcher (single-node KRaft "
                "wiring); name listeners with --listener (API: listeners=) and point them "
                "elsewhere with advertised.listeners (API: advertised=)"
            )
    return names, merged, inter


def server_properties(
    plan: ListenerPlan, data_dir: str, properties: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The complete broker configuration for ``plan``; ``properties`` win over DEFAULTS."""
    props = dict(DEFAULTS)
    for key, value in (properties or {}).items():
        if key in MANAGED_KEYS:
            raise BrokerError(f"config {key}={value!r}: set by the launcher")
        if "\n" in value or "\r" in value:
            raise BrokerError(f"config {key}={value!r}: values cannot contain line breaks")
        props[key] = str(value)
    advertised = {
        name: plan.advertised.get(name, f"{plan.host}:{plan.ports[name]}") for name in plan.names
    }
    if plan.zookeeper:  # ZooKeeper mode: a broker id and its ZooKeeper, no controller role
        from broker.zookeeper import SESSION_TIMEOUT_MS

        props.setdefault("zookeeper.session.timeout.ms", str(SESSION_TIMEOUT_MS))
        props.update(
            {
                "broker.id": str(plan.node_id),
                "zookeeper.connect": plan.zookeeper,
                "listeners": ",".join(f"{n}://{plan.host}:{plan.ports[n]}" for n in plan.names),
                "advertised.listeners": ",".join(f"{n}://{advertised[n]}" for n in plan.names),
                "inter.broker.listener.name": plan.inter_broker_listener or plan.first,
                "listener.security.protocol.map": ",".join(
                    f"{n}:{plan.protocol(n)}" for n in plan.names
                ),
                "log.dirs": data_dir,
            }
        )
        return props
    all_names = (*plan.names, CONTROLLER_LISTENER)
    ports = {**plan.ports, CONTROLLER_LISTENER: plan.controller_port}
    props.update(
        {
            "process.roles": "broker,controller",
            "node.id": str(plan.node_id),
            "controller.quorum.voters": plan.voters
            or f"{plan.node_id}@{LOOPBACK}:{plan.controller_port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "listeners": ",".join(
                f"{n}://{plan.host if n in plan.names else LOOPBACK}:{ports[n]}" for n in all_names
            ),
            "advertised.listeners": ",".join(f"{n}://{advertised[n]}" for n in plan.names),
            "inter.broker.listener.name": plan.inter_broker_listener or plan.first,
            "listener.security.protocol.map": ",".join(
                f"{n}:{plan.protocol(n)}" for n in all_names
            ),
            "log.dirs": data_dir,
        }
    )
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """Java .properties text (sorted, so two runs with one config diff clean)."""
    lines = ["# Generated by broker; edits are overwritten on restart."]
    for key in sorted(props):
        value = props[key].replace("\\", "\\\\")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


#: Kafka's log4j2 configuration for every launcher: everything to stdout (the local launcher
#: sends it to broker.log, a container to `docker logs`); state-change and request loggers quiet.
LOG4J2_PROPERTIES = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

#: The same for Kafka before 4.0, which logs through log4j 1 (reload4j): read from
#: ``-Dlog4j.configuration`` (4.x ignores it). No request log there (`log4j2_properties`).
LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""

#: File name (in the broker's workdir) of the request log `log4j2_properties(request_log=True)`
#: turns on: one `Completed request:{json}` line per completed request, with the handler time
#: the acceptor charges (`localTimeMs`; acceptor.broker_charge).
REQUEST_LOG_NAME = "request.log"
#: The request log rolls over at this size, keeping one previous file (the acceptor reads it as
#: it grows; a long run must not fill the disk: ~700 bytes per request).
REQUEST_LOG_MAX_SIZE = "64 MB"


def log4j2_properties(*, request_log: bool = False) -> str:
    """Kafka's log4j2 configuration; with ``request_log`` `kafka.request.logger` goes at DEBUG,
    message only, to `REQUEST_LOG_NAME` in `${kafka.logs.dir}` (the workdir) instead of stdout."""
    if not request_log:
        return LOG4J2_PROPERTIES
    return LOG4J2_PROPERTIES.replace(
        "logger.request.level = WARN\n",
        "logger.request.level = DEBUG\n"
        "logger.request.additivity = false\n"
        "logger.request.appenderRef.requests.ref = REQUESTS\n"
        "appender.requests.type = RollingFile\n"
        "appender.requests.name = REQUESTS\n"
        f"appender.requests.fileName = ${{sys:kafka.logs.dir}}/{REQUEST_LOG_NAME}\n"
        f"appender.requests.filePattern = ${{sys:kafka.logs.dir}}/{REQUEST_LOG_NAME}.%i\n"
        "appender.requests.layout.type = PatternLayout\n"
        "appender.requests.layout.pattern = %m%n\n"
        "appender.requests.policies.type = Policies\n"
        "appender.requests.policies.size.type = SizeBasedTriggeringPolicy\n"
        f"appender.requests.policies.size.size = {REQUEST_LOG_MAX_SIZE}\n"
        "appender.requests.strategy.type = DefaultRolloverStrategy\n"
        "appender.requests.strategy.max = 1\n",
    )
