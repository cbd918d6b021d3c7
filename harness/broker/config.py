"""The broker's server.properties, computed from what the caller asked for (no I/O).

A single-node KRaft broker that is also its own controller. The launcher owns the keys that wire
the node together (roles, node id, the listeners and their ports, the controller quorum, the data
dir); callers own everything else, which is how tests set Kafka's own connection limits
(``max.connections.per.ip``, ``max.connection.creation.rate``, ...). Defaults lean towards fast
tests on one small machine: replication factor 1 for internal topics, no rebalance delay, topic
auto-creation on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.broker.errors import BrokerError
from harness.localnet import LOOPBACK

CONTROLLER_LISTENER = "CONTROLLER"
NODE_ID = 1

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

    @property
    def first(self) -> str:
        return self.names[0]


def parse_host_port(value: str, *, key: str) -> tuple[str, int]:
    """``"host:port"`` -> (host, port), with a config-style error naming ``key``."""
    host, sep, port_s = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise BrokerError(f"config {key}={value!r}: expected host:port with a port in 1..65535")
    return host, int(port_s)


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
    all_names = (*plan.names, CONTROLLER_LISTENER)
    ports = {**plan.ports, CONTROLLER_LISTENER: plan.controller_port}
    advertised = {
        name: plan.advertised.get(name, f"{LOOPBACK}:{plan.ports[name]}") for name in plan.names
    }
    props.update(
        {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{LOOPBACK}:{plan.controller_port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "listeners": ",".join(f"{n}://{LOOPBACK}:{ports[n]}" for n in all_names),
            "advertised.listeners": ",".join(f"{n}://{advertised[n]}" for n in plan.names),
            "inter.broker.listener.name": plan.inter_broker_listener or plan.first,
            "listener.security.protocol.map": ",".join(f"{n}:PLAINTEXT" for n in all_names),
            "log.dirs": data_dir,
        }
    )
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """Java .properties text (sorted, so two runs with one config diff clean)."""
    lines = ["# Generated by harness.broker; edits are overwritten on restart."]
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

#: File name (in the broker's workdir) of the request log `log4j2_properties(request_log=True)`
#: turns on: one `Completed request:{json}` line per completed request, with the handler time
#: the acceptor charges (`localTimeMs`; harness.acceptor.broker_charge).
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
