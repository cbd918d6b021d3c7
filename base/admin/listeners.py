"""An existing cluster's listeners, read with Kafka's admin API: which of them a run loads.

A cluster the harness did not start names its listeners its own way (``SASL_SSL``,
``INTERNAL``...), and Kafka's metrics carry those names in their ``listener`` label, not
the scenario's. `read_listeners` asks the bootstrap broker (Metadata for its node id, then
DescribeConfigs of that broker) for ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, ``inter.broker.listener.name`` and
``controller.listener.names``, and finds the listener whose advertised (else bound) port
is the bootstrap's: the one the run's load reaches. A principal that may not describe the
cluster's configs (CLUSTER_AUTHORIZATION_FAILED) gets the reason instead; the checker then
maps the names from the scraped metrics' labels alone (`analysis.checks.kafka_metrics`).
None of these keys is secret; a sensitive value is never kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the broker keys that say which listeners a broker has and what each speaks
KEYS = (
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "controller.listener.names",
)


def parse_listeners(text: str | None) -> dict[str, tuple[str, int]]:
    """``"NAME://host:port,..."`` -> ``{NAME: (host, port)}`` (names upper case; an IPv6
    host keeps no brackets; an entry without a port is skipped)."""
    out: dict[str, tuple[str, int]] = {}
    for item in (text or "").split(","):
        name, sep, rest = item.strip().partition("://")
        if not sep:
            continue
        host, colon, port = rest.rpartition(":")
        if colon and port.isdigit():
            out[name.strip().upper()] = (host.strip("[]"), int(port))
    return out


def parse_protocol_map(text: str | None) -> dict[str, str]:
    """``listener.security.protocol.map`` -> ``{NAME: PROTOCOL}`` (upper case)."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        name, sep, protocol = item.strip().partition(":")
        if sep and name.strip():
            out[name.strip().upper()] = protocol.strip().upper()
    return out


def listener_at(configs: Mapping[str, str | None], host: str, port: int) -> str | None:
    """The listener (upper case) a client reaches at ``host:port``: the one advertised
    there, else the one bound there; by port alone when no host matches (a listener bound
    to 0.0.0.0 or advertised by name). None when no listener has that port."""
    for key in ("advertised.listeners", "listeners"):
        found = parse_listeners(configs.get(key))
        exact = [n for n, (h, p) in found.items() if p == port and h == host]
        by_port = [n for n, (_h, p) in found.items() if p == port]
        if exact or len(by_port) == 1:
            return (exact or by_port)[0]
    return None


def _bootstrap_node(wire: Any, host: str, port: int) -> int:
    """The node id of the broker at ``host:port``, from its own Metadata (the only one
    listed when a single broker answers)."""
    from kafka.protocol.metadata import MetadataRequest

    v = min(wire.version_for(MetadataRequest), 9)
    fields: dict[str, Any] = {"topics": []}
    if v >= 4:
        fields["allow_auto_topic_creation"] = False
    if 8 <= v <= 10:
        fields["include_cluster_authorized_operations"] = False
    if v >= 8:
        fields["include_topic_authorized_operations"] = False
    resp = wire.request(MetadataRequest[v](**fields))
    nodes = [(int(b.node_id), str(b.host), int(b.port)) for b in resp.brokers]
    mine = [n for n, h, p in nodes if p == port and h == host] or [
        n for n, _h, p in nodes if p == port
    ]
    if len(mine) == 1:
        return mine[0]
    if len(nodes) == 1:
        return nodes[0][0]
    raise LookupError(f"Metadata lists {len(nodes)} brokers, none advertised at {host}:{port}")


def read_listeners(
    bootstrap: str,
    *,
    client_config: Mapping[str, str] | None = None,
    source_ip: str | None = None,
    timeout: float = 10.0,
    also: tuple[str, ...] = (),
) -> dict[str, Any]:
    """What the bootstrap broker says of its listeners: ``{"node": id, <KEYS>...,
    "load_listener": NAME or None, "also": {key: value}}`` (``also``: other keys read in
    the same request, e.g. the scenario's static settings); raises (AdminError, OSError,
    LookupError) when it cannot be read."""
    from base.admin.client import KafkaWire, describe_broker_configs, split_bootstrap

    host, port = split_bootstrap(bootstrap)
    with KafkaWire(
        bootstrap,
        source_ip=source_ip,
        timeout=timeout,
        client_id="harness-admin",
        client_config=client_config,
    ) as wire:
        node = _bootstrap_node(wire, host, port)
        keys = [*KEYS, *(k for k in also if k not in KEYS)]
        configs = describe_broker_configs(bootstrap, str(node), keys, wire=wire)
    out: dict[str, Any] = {"node": node}
    out.update({k: configs[k] for k in KEYS if configs.get(k) is not None})
    out["load_listener"] = listener_at(configs, host, port)
    out["also"] = {k: configs.get(k) for k in also}
    return out
