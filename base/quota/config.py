"""Kafka's connection-limit configuration: parsing, validation and dynamic updates.

The keys and their rules are Kafka's (``SocketServerConfigs``, ``QuotaConfig``,
``KafkaConfig.validateValues``, ``DynamicBrokerConfig``), so an operator's
``server.properties`` means the same thing to the acceptor as to a broker. Anything wrong
is refused up front with the key, the value and the reason; nothing runs half-configured.

Host names in ``max.connections.per.ip.overrides`` are resolved once, when the config is
parsed, as Kafka does with ``InetAddress.getByName``. The resolver is injectable so that
the engine itself stays free of I/O in tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from base.quota.inet import java_get_by_name

__all__ = [
    "BROKER_RECONFIGURABLE",
    "INT_MAX",
    "LISTENER_RECONFIGURABLE",
    "STATIC_KEYS",
    "ConfigError",
    "ListenerSpec",
    "QuotaConfig",
    "Resolver",
    "apply_dynamic_update",
    "layered_update",
    "listener_key",
    "parse_config",
    "parse_listeners",
    "resolve_host",
]

INT_MAX = 2147483647
INT_MIN = -2147483648

MAX_CONNECTIONS = "max.connections"
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES = "max.connections.per.ip.overrides"
MAX_CONNECTION_CREATION_RATE = "max.connection.creation.rate"
LISTENERS = "listeners"
INTER_BROKER_LISTENER_NAME = "inter.broker.listener.name"
SECURITY_INTER_BROKER_PROTOCOL = "security.inter.broker.protocol"
QUOTA_WINDOW_NUM = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS = "quota.window.size.seconds"
NUM_NETWORK_THREADS = "num.network.threads"
SOCKET_REQUEST_MAX_BYTES = "socket.request.max.bytes"

#: ``SocketServer.ReconfigurableConfigs`` (broker level).
BROKER_RECONFIGURABLE = frozenset(
    {
        MAX_CONNECTIONS,
        MAX_CONNECTIONS_PER_IP,
        MAX_CONNECTIONS_PER_IP_OVERRIDES,
        MAX_CONNECTION_CREATION_RATE,
    }
)
#: ``SocketServer.ListenerReconfigurableConfigs`` (``listener.name.<l>.`` prefixed).
LISTENER_RECONFIGURABLE = frozenset({MAX_CONNECTIONS, MAX_CONNECTION_CREATION_RATE})
#: Keys this engine reads that only take effect at start.
STATIC_KEYS = frozenset(
    {
        LISTENERS,
        INTER_BROKER_LISTENER_NAME,
        SECURITY_INTER_BROKER_PROTOCOL,
        QUOTA_WINDOW_NUM,
        QUOTA_WINDOW_SIZE_SECONDS,
        NUM_NETWORK_THREADS,
        SOCKET_REQUEST_MAX_BYTES,
    }
)

_LISTENER_KEY = re.compile(
    r"^listener\.name\.([^.]+)\.(max\.connections|max\.connection\.creation\.rate)$"
)
_LISTENER_SPEC = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9A-Fa-f:.]+\]|[^:/\s]*):(-?\d+)$")

#: host -> one IP address (text); raises ``OSError`` when the host does not resolve.
Resolver = Callable[[str], str]


class ConfigError(ValueError):
    """A configuration value Kafka would refuse, naming the key, the value and the reason."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value if isinstance(value, str) else str(value)
        self.reason = reason
        super().__init__(f"{key}={self.value!r}: {reason}")

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}: {self.reason}"


@dataclass(frozen=True)
class ListenerSpec:
    """One entry of ``listeners``: the name is upper-cased as Kafka's ``ListenerName``."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def listener_key(listener: str, suffix: str) -> str:
    """Kafka's per-listener key uses the lower-cased name: ``listener.name.client.<suffix>``."""
    return f"listener.name.{listener.lower()}.{suffix}"


def resolve_host(host: str) -> str:
    """``InetAddress.getByName`` (``base.quota.inet``): Java's literal parsing, names
    through the resolver (IPv4 first, as Java without ``java.net.preferIPv6Addresses``)."""
    return java_get_by_name(host)


def _frozen(d: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class QuotaConfig:
    """Every connection limit in force, with Kafka's defaults.

    ``listener_max_connections`` and ``listener_max_connection_creation_rate`` hold only the
    listeners that set them (upper-case names). A listener without its own value takes the
    broker-wide ``max.connections`` / ``max.connection.creation.rate``, as in Kafka 4.3.1:
    ``ListenerConnectionQuota`` is configured from ``valuesWithPrefixOverride(listener
    prefix)`` (SocketServer.scala 1395, 1671-1677), so the unprefixed broker-wide value
    stands in for a missing listener key, also after a dynamic change
    (``DynamicBrokerConfig.processListenerReconfigurable``). ``listener_max`` and
    ``listener_rate`` give that effective value.
    ``max_connections_per_ip_overrides`` is keyed by resolved IP; the operator's text is in
    ``max_connections_per_ip_overrides_text``. ``static_properties`` keeps the parsed static
    values so that deleting a dynamic value falls back to them, as in Kafka.
    """

    listeners: tuple[ListenerSpec, ...]
    inter_broker_listener_name: str | None = None
    max_connections: int = INT_MAX
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = INT_MAX
    listener_max_connection_creation_rate: Mapping[str, int] = field(default_factory=dict)
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    num_network_threads: int = 3
    socket_request_max_bytes: int = 104857600
    max_connections_per_ip_overrides_text: str = ""
    static_properties: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def listener_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.listeners)

    @property
    def window_ms(self) -> int:
        return self.quota_window_size_seconds * 1000

    def listener(self, name: str) -> ListenerSpec:
        for spec in self.listeners:
            if spec.name == name:
                return spec
        raise KeyError(f"unknown listener {name!r}; listeners are {self.listener_names}")

    def protected(self, listener: str) -> bool:
        """Kafka's ``protectedListener``: the inter-broker listener, when there are >= 2."""
        return listener == self.inter_broker_listener_name and len(self.listeners) > 1

    def listener_max(self, listener: str) -> int:
        """The listener's own ``max.connections``, else the broker-wide one (Kafka's
        prefix override: even the protected listener is capped by it unless it sets its own)."""
        return self.listener_max_connections.get(listener, self.max_connections)

    def listener_rate(self, listener: str) -> int:
        """The listener's own ``max.connection.creation.rate``, else the broker-wide one."""
        return self.listener_max_connection_creation_rate.get(
            listener, self.max_connection_creation_rate
        )

    def max_connections_for_ip(self, ip: str) -> int:
        return self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)

    def to_properties(self) -> dict[str, object]:
        """Every effective limit under its Kafka key, for ``config`` history rows.

        Per-listener limits are listed for every listener with their effective value (the
        broker-wide one when the listener sets none), so a checker never needs Kafka's
        defaults. The resolved per-IP overrides are added under
        ``max.connections.per.ip.overrides.resolved`` (not a Kafka key).
        """
        props: dict[str, object] = {
            LISTENERS: ",".join(str(spec) for spec in self.listeners),
            INTER_BROKER_LISTENER_NAME: self.inter_broker_listener_name,
            MAX_CONNECTIONS: self.max_connections,
            MAX_CONNECTIONS_PER_IP: self.max_connections_per_ip,
            MAX_CONNECTIONS_PER_IP_OVERRIDES: self.max_connections_per_ip_overrides_text,
            "max.connections.per.ip.overrides.resolved": dict(
                sorted(self.max_connections_per_ip_overrides.items())
            ),
            MAX_CONNECTION_CREATION_RATE: self.max_connection_creation_rate,
            QUOTA_WINDOW_NUM: self.quota_window_num,
            QUOTA_WINDOW_SIZE_SECONDS: self.quota_window_size_seconds,
            NUM_NETWORK_THREADS: self.num_network_threads,
            SOCKET_REQUEST_MAX_BYTES: self.socket_request_max_bytes,
        }
        for name in self.listener_names:
            props[listener_key(name, MAX_CONNECTIONS)] = self.listener_max(name)
            props[listener_key(name, MAX_CONNECTION_CREATION_RATE)] = self.listener_rate(name)
        return props


# ---------------------------------------------------------------------------------------
# value parsing (ConfigDef semantics)


def _parse_int(key: str, raw: str, *, at_least: int | None = None, above: int | None = None) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ConfigError(key, raw, "expected a 32-bit integer")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise ConfigError(key, raw, f"out of range for a 32-bit integer (max {INT_MAX})")
    if at_least is not None and value < at_least:
        raise ConfigError(key, raw, f"value must be at least {at_least}")
    if above is not None and value <= above:
        raise ConfigError(key, raw, f"value must be greater than {above}")
    return value


def parse_listeners(raw: str) -> tuple[ListenerSpec, ...]:
    """``listeners=NAME://host:port,...``; names upper-cased, unique; ports 0-65535."""
    specs: list[ListenerSpec] = []
    text = raw.strip()
    if not text:
        raise ConfigError(LISTENERS, raw, "at least one listener is required (NAME://host:port)")
    for part in (p.strip() for p in text.split(",")):
        m = _LISTENER_SPEC.match(part)
        if not m:
            raise ConfigError(LISTENERS, raw, f"{part!r} is not of the form NAME://host:port")
        name, host, port_text = m.group(1).upper(), m.group(2), m.group(3)
        if host.startswith("["):
            host = host[1:-1]
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ConfigError(LISTENERS, raw, f"port {port} of {name} is not in 0..65535")
        if any(s.name == name for s in specs):
            raise ConfigError(LISTENERS, raw, f"each listener must have a different name ({name})")
        if port != 0 and any(s.port == port and s.host == host for s in specs):
            raise ConfigError(LISTENERS, raw, f"{host}:{port} is used by two listeners")
        specs.append(ListenerSpec(name, host, port))
    return tuple(specs)


def _parse_overrides(raw: str, resolve: Resolver) -> dict[str, int]:
    """``host:n,ip:m`` as Kafka's ``parseCsvMap`` (split on the last ``:``), then resolved."""
    result: dict[str, int] = {}
    text = raw.strip()
    if not text:
        return result
    for entry in re.split(r"\s*,\s*", text):
        if ":" not in entry:
            raise ConfigError(
                MAX_CONNECTIONS_PER_IP_OVERRIDES, raw, f"{entry!r} is not of the form host:count"
            )
        host, _, count_text = entry.rpartition(":")
        host = host.strip()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host:
            raise ConfigError(MAX_CONNECTIONS_PER_IP_OVERRIDES, raw, f"{entry!r} has no host")
        count_text = count_text.strip()
        if not re.fullmatch(r"[+-]?\d+", count_text) or not (0 <= int(count_text) <= INT_MAX):
            raise ConfigError(
                MAX_CONNECTIONS_PER_IP_OVERRIDES,
                raw,
                f"count {count_text!r} for {host} is not an integer in 0..{INT_MAX}",
            )
        try:
            ip = resolve(host)
        except (OSError, UnicodeError, ValueError) as exc:
            raise ConfigError(
                MAX_CONNECTIONS_PER_IP_OVERRIDES,
                raw,
                f"{host} is not a valid IP or resolvable host ({exc})",
            ) from None
        result[ip] = int(count_text)
    return result


def parse_config(props: Mapping[str, str], *, resolve: Resolver = resolve_host) -> QuotaConfig:
    """Read and validate Kafka's connection-limit keys; other keys are left to the caller.

    Raises ``ConfigError`` naming the key, the value and the reason.
    """
    for key, value in props.items():
        if not isinstance(value, str):
            raise ConfigError(key, repr(value), "property values must be strings")
    listeners = parse_listeners(props.get(LISTENERS, "PLAINTEXT://127.0.0.1:9092"))
    names = tuple(s.name for s in listeners)

    inter: str | None
    if INTER_BROKER_LISTENER_NAME in props:
        if SECURITY_INTER_BROKER_PROTOCOL in props:
            raise ConfigError(
                INTER_BROKER_LISTENER_NAME,
                props[INTER_BROKER_LISTENER_NAME],
                f"only one of {INTER_BROKER_LISTENER_NAME} and {SECURITY_INTER_BROKER_PROTOCOL}"
                " may be set",
            )
        inter = props[INTER_BROKER_LISTENER_NAME].strip().upper()
        if inter not in names:
            raise ConfigError(
                INTER_BROKER_LISTENER_NAME,
                props[INTER_BROKER_LISTENER_NAME],
                f"must be one of the listeners {', '.join(names)}",
            )
    else:
        # Kafka derives it from security.inter.broker.protocol (default PLAINTEXT); a listener
        # of that name, if any, is then the inter-broker (protected) listener.
        derived = props.get(SECURITY_INTER_BROKER_PROTOCOL, "PLAINTEXT").strip().upper()
        inter = derived if derived in names else None

    quota_window_num = _parse_int(QUOTA_WINDOW_NUM, props.get(QUOTA_WINDOW_NUM, "11"), at_least=1)
    window_size = _parse_int(
        QUOTA_WINDOW_SIZE_SECONDS, props.get(QUOTA_WINDOW_SIZE_SECONDS, "1"), at_least=1
    )
    num_network_threads = _parse_int(
        NUM_NETWORK_THREADS, props.get(NUM_NETWORK_THREADS, "3"), at_least=1
    )
    socket_request_max_bytes = _parse_int(
        SOCKET_REQUEST_MAX_BYTES, props.get(SOCKET_REQUEST_MAX_BYTES, "104857600"), at_least=1
    )
    base = QuotaConfig(
        listeners=listeners,
        inter_broker_listener_name=inter,
        quota_window_num=quota_window_num,
        quota_window_size_seconds=window_size,
        num_network_threads=num_network_threads,
        socket_request_max_bytes=socket_request_max_bytes,
        static_properties=MappingProxyType(
            {k: v for k, v in props.items() if _is_reconfigurable(k)}
        ),
    )
    return _apply_reconfigurable(base, props, resolve, dynamic=False)


def _is_reconfigurable(key: str) -> bool:
    return key in BROKER_RECONFIGURABLE or _LISTENER_KEY.match(key) is not None


def _listener_of(key: str, raw: str, names: tuple[str, ...]) -> tuple[str, str]:
    m = _LISTENER_KEY.match(key)
    assert m is not None
    given, suffix = m.group(1), m.group(2)
    if given != given.lower():
        raise ConfigError(
            key, raw, f"Kafka uses the lower-case listener name: {listener_key(given, suffix)}"
        )
    name = given.upper()
    if name not in names:
        raise ConfigError(key, raw, f"no listener {name} in listeners ({', '.join(names)})")
    return name, suffix


def _apply_reconfigurable(
    base: QuotaConfig, props: Mapping[str, str], resolve: Resolver, *, dynamic: bool
) -> QuotaConfig:
    names = base.listener_names
    max_connections = base.max_connections
    per_ip = base.max_connections_per_ip
    overrides = dict(base.max_connections_per_ip_overrides)
    overrides_text = base.max_connections_per_ip_overrides_text
    rate = base.max_connection_creation_rate
    listener_max = dict(base.listener_max_connections)
    listener_rate = dict(base.listener_max_connection_creation_rate)

    for key, raw in props.items():
        if key == MAX_CONNECTIONS:
            max_connections = _parse_int(key, raw, at_least=0)
        elif key == MAX_CONNECTIONS_PER_IP:
            per_ip = _parse_int(key, raw, at_least=0)
        elif key == MAX_CONNECTION_CREATION_RATE:
            rate = _parse_int(key, raw, at_least=0)
        elif key == MAX_CONNECTIONS_PER_IP_OVERRIDES:
            overrides = _parse_overrides(raw, resolve)
            overrides_text = raw.strip()
        elif _LISTENER_KEY.match(key):
            name, suffix = _listener_of(key, raw, names)
            # ListenerConnectionQuota.validateReconfiguration: both must be > 0.
            value = _parse_int(key, raw, above=0)
            if suffix == MAX_CONNECTIONS:
                listener_max[name] = value
            else:
                listener_rate[name] = value
        elif dynamic:
            if key in STATIC_KEYS:
                raise ConfigError(
                    key, raw, "not dynamically reconfigurable (restart with the new value)"
                )
            raise ConfigError(key, raw, "not a dynamically reconfigurable connection-limit key")

    if per_ip == 0 and not overrides:
        raise ConfigError(
            MAX_CONNECTIONS_PER_IP,
            "0",
            f"0 is allowed only when {MAX_CONNECTIONS_PER_IP_OVERRIDES} is set",
        )
    return replace(
        base,
        max_connections=max_connections,
        max_connections_per_ip=per_ip,
        max_connections_per_ip_overrides=_frozen(overrides),
        max_connections_per_ip_overrides_text=overrides_text,
        max_connection_creation_rate=rate,
        listener_max_connections=_frozen(listener_max),
        listener_max_connection_creation_rate=_frozen(listener_rate),
    )


_DEFAULTS: dict[str, str] = {
    MAX_CONNECTIONS: str(INT_MAX),
    MAX_CONNECTIONS_PER_IP: str(INT_MAX),
    MAX_CONNECTIONS_PER_IP_OVERRIDES: "",
    MAX_CONNECTION_CREATION_RATE: str(INT_MAX),
}


def apply_dynamic_update(
    current: QuotaConfig,
    changes: Mapping[str, str | None],
    *,
    resolve: Resolver = resolve_host,
) -> QuotaConfig:
    """Kafka's dynamic broker/listener reconfiguration of the connection limits.

    ``None`` deletes the dynamic value: the key falls back to its static value, else to
    Kafka's default. Only ``SocketServer``'s reconfigurable keys are accepted; anything else
    raises ``ConfigError`` and nothing is applied.
    """
    resolved: dict[str, str] = {}
    listener_deletes: list[tuple[str, str]] = []
    for key, raw in changes.items():
        if raw is not None and not isinstance(raw, str):
            raise ConfigError(key, repr(raw), "values must be strings (or None to delete)")
        if raw is None:
            static = current.static_properties.get(key)
            if key in BROKER_RECONFIGURABLE:
                resolved[key] = static if static is not None else _DEFAULTS[key]
            elif _LISTENER_KEY.match(key):
                name, suffix = _listener_of(key, "", current.listener_names)
                if static is not None:
                    resolved[key] = static
                else:
                    listener_deletes.append((name, suffix))
            elif key in STATIC_KEYS:
                raise ConfigError(
                    key, "", "not dynamically reconfigurable (restart with the new value)"
                )
            else:
                raise ConfigError(key, "", "not a dynamically reconfigurable connection-limit key")
        else:
            resolved[key] = raw
    base = current
    if listener_deletes:
        listener_max = dict(current.listener_max_connections)
        listener_rate = dict(current.listener_max_connection_creation_rate)
        for name, suffix in listener_deletes:
            (listener_max if suffix == MAX_CONNECTIONS else listener_rate).pop(name, None)
        base = replace(
            current,
            listener_max_connections=_frozen(listener_max),
            listener_max_connection_creation_rate=_frozen(listener_rate),
        )
    return _apply_reconfigurable(base, resolved, resolve, dynamic=True)


def layered_update(
    cluster: Mapping[str, str],
    node: Mapping[str, str],
    changes: Mapping[str, str | None],
    *,
    per_broker: bool,
) -> tuple[dict[str, str | None], dict[str, str], dict[str, str]]:
    """Kafka's two dynamic layers: the cluster default (BROKER resource ``""``) and this
    broker's own (resource ``"<node.id>"``), per-broker winning key by key
    (``DynamicBrokerConfig``: static < cluster default < per-broker).

    ``changes`` go to one layer (``None`` deletes the key from that layer only). Returns
    ``(effective, cluster', node')``: ``effective`` is, for every changed key, the value now
    in force (``None`` = neither layer sets it: the static value or Kafka's default), ready
    for :func:`apply_dynamic_update`. Deleting a per-broker value reveals the cluster default.
    """
    new_cluster, new_node = dict(cluster), dict(node)
    layer = new_node if per_broker else new_cluster
    for key, value in changes.items():
        if value is None:
            layer.pop(key, None)
        else:
            layer[key] = value
    effective = {key: new_node.get(key, new_cluster.get(key)) for key in changes}
    return effective, new_cluster, new_node
