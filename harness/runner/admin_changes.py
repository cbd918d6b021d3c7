"""How a run's quota and config changes reach Kafka (or the acceptor): Kafka's admin
protocol (base.admin), the way an operator would make them, on a connection of their own
or on one held for the run (`HeldAdmin`); `Changes` is one target's set of them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from harness.runner.plan import TargetError
from harness.runner.scenario import Action, Scenario


def _admin() -> Any:
    try:
        import base.admin as admin
    except ImportError as exc:  # pragma: no cover - only while the admin part is missing
        raise TargetError(f"base.admin is not available ({exc}); cannot apply quotas") from exc
    if not hasattr(admin, "alter_ip_quota"):
        import base.admin.client as admin_client

        return admin_client
    return admin


def _call(what: str, fn: Callable[..., Any], *args: Any) -> None:
    """Admin failures become TargetError naming the operation and Kafka's error."""
    try:
        fn(*args)
    except TargetError:
        raise
    except Exception as exc:
        raise TargetError(f"{what} failed: {exc}") from exc


def _sender(
    bootstrap: str,
    held: HeldAdmin | None,
    name: str,
    client_config: Mapping[str, str] | None = None,
) -> tuple[str, Callable[..., Any]]:
    """Where a change goes and the admin call sending it: on the held connection when there
    is one, else on a connection of its own to `bootstrap` (secured by `client_config`,
    Kafka's client keys, when the listener is)."""
    if held is not None:
        return f"at {bootstrap} (held connection)", getattr(held, name)
    call = functools.partial(getattr(_admin(), name), bootstrap)
    if client_config:
        call = functools.partial(call, client_config=dict(client_config))
    return f"at {bootstrap}", call


def apply_ip_quota(
    bootstrap: str,
    ip: str,
    rate: int | None,
    held: HeldAdmin | None = None,
    client_config: Mapping[str, str] | None = None,
) -> None:
    from base.admin.client import IP_RATE_KEY

    where, alter = _sender(bootstrap, held, "alter_client_quota", client_config)
    entity = None if ip == "default" else ip
    _call(f"ip quota {ip}={rate} {where}", alter, {"ip": entity}, {IP_RATE_KEY: rate})


def apply_broker_config(
    bootstrap: str,
    changes: Mapping[str, Any],
    held: HeldAdmin | None = None,
    client_config: Mapping[str, str] | None = None,
    node: int | None = None,
) -> None:
    """A dynamic broker config change: the cluster default, or broker ``node``'s own layer
    (BROKER resource "<node>", which Kafka takes only from that broker)."""
    where, alter = _sender(bootstrap, held, "alter_broker_config", client_config)
    text = {k: (None if v is None else str(v)) for k, v in changes.items()}
    what = "broker config" if node is None else f"broker {node}'s own config"
    if node is None:
        _call(f"{what} {text} {where}", alter, text)
    else:
        _call(f"{what} {text} {where}", functools.partial(alter, broker=str(node)), text)


def apply_request_quota(
    bootstrap: str,
    quota: Mapping[str, Any],
    held: HeldAdmin | None = None,
    client_config: Mapping[str, str] | None = None,
) -> None:
    where, alter = _sender(bootstrap, held, "alter_client_quota", client_config)
    entity = {k: quota[k] for k in ("user", "client-id") if k in quota}
    pct = quota.get("request_percentage")
    ops = {"request_percentage": None if pct is None else float(pct)}
    _call(f"request quota {entity} {ops} {where}", alter, entity, ops)


#: Source addresses tried for the broker target's held admin connection (one no load uses,
#: so it shares no per-IP meter or count with the load).
ADMIN_SOURCE_IPS = ("127.0.0.254", "127.0.0.253", "127.0.0.252")


class HeldAdmin:
    """One admin connection opened before the load and kept for the run (target broker).

    On Kafka, a new connection to a listener whose broker-wide or listener rate is at its
    limit waits behind the storm: the listener's single acceptor thread sleeps through one
    rate delay per connection and the listen backlog overflows (docs/kafka-reference.md
    10.1: the admin call removing the broker rate in ``quota-change`` timed out after
    15 s). A connection accepted before the load is past every accept-time limit, so the
    run's changes do not queue. If Kafka closes it (a broker kill, an LRU eviction), the
    next change opens a new one (and may then queue like any client).

    The requests are base.admin.client's, sent on the kept connection (`wire=`).
    """

    def __init__(
        self,
        bootstrap: str,
        source_ip: str | None,
        client_config: Mapping[str, str] | None = None,
        timeout: float = 15.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.source_ip = source_ip
        self.client_config = client_config
        self.timeout = timeout
        self.wire: Any = None
        self.reconnects = 0

    def open(self) -> None:
        from base.admin.client import KafkaWire

        self.wire = KafkaWire(
            self.bootstrap,
            source_ip=self.source_ip,
            timeout=self.timeout,
            client_config=self.client_config,
        )
        self.wire.versions()  # ApiVersions now: the connection is accepted and served

    def close(self) -> None:
        if self.wire is not None:
            self.wire.close()
            self.wire = None

    def _send(self, call: Callable[[Any], None]) -> None:
        """`call(wire)` on the held connection; reopen once if Kafka closed it."""
        for attempt in (0, 1):
            if self.wire is None:
                self.open()
                self.reconnects += attempt
            try:
                return call(self.wire)
            except (OSError, ConnectionError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def alter_client_quota(
        self, entity: Mapping[str, str | None], ops: Mapping[str, float | None]
    ) -> None:
        from base.admin.client import alter_client_quota

        self._send(lambda wire: alter_client_quota(self.bootstrap, entity, ops, wire=wire))

    def alter_broker_config(self, changes: Mapping[str, str | None], broker: str = "") -> None:
        from base.admin.client import alter_broker_config

        self._send(
            lambda wire: alter_broker_config(self.bootstrap, changes, broker=broker, wire=wire)
        )


def _source_ips_in_use(scenario: Scenario) -> set[str]:
    from loadprofiles.addresses import parse_ip_pool

    used: set[str] = set()
    for phase in scenario.load:
        raw = getattr(phase, "source_ips", "") or ""
        try:
            used.update(str(ip) for ip in parse_ip_pool(str(raw)))
        except Exception:  # a pool the runner accepted but we cannot expand: avoid none
            continue
    return used


def admin_source_ip(scenario: Scenario, host: str) -> str | None:
    """A loopback source address no load phase uses (None: not a loopback target)."""
    if not host.startswith("127."):
        return None
    used = _source_ips_in_use(scenario)
    return next((ip for ip in ADMIN_SOURCE_IPS if ip not in used), None)


def broker_admin_listener(scenario: Scenario) -> str:
    """Target broker: the protected inter-broker listener when the scenario has one beside
    the client listeners (exempt from the broker-wide rate and count), else the first."""
    inter = scenario.inter_broker_listener
    if inter and len(scenario.listeners) > 1 and inter in scenario.listeners:
        return inter
    return scenario.listeners[0]


def admin_listener(scenario: Scenario) -> str:
    """The listener admin requests go to: one that does not require a PROXY header
    (the admin client speaks plain Kafka)."""
    for name in scenario.listeners:
        if scenario.proxy_protocol.get(name, "off") != "required":
            return name
    raise TargetError("every listener requires a PROXY header: no listener for admin requests")


class Changes:
    """One target's admin side: the scenario's quotas at the start, each scheduled change
    (ip and request quotas, the cluster's broker config, one broker's own layer) sent where
    Kafka takes it, and the connections held for the run's changes (`hold`)."""

    def __init__(
        self,
        scenario: Scenario,
        bootstrap: str,
        progress: Callable[[str], None],
        client_config: Mapping[str, str] | None = None,
        brokers: Mapping[str, list[tuple[int, str, int]]] | None = None,
    ) -> None:
        self.scenario = scenario
        self.bootstrap = bootstrap
        self.progress = progress
        self.client_config = client_config
        #: per listener, every broker of a cluster as (node id, host, port)
        self.brokers = dict(brokers or {})
        #: the admin connection kept for run-time changes (None: one per change)
        self.held: HeldAdmin | None = None
        #: per broker of a cluster, the connection held for its own config changes
        self.node_admins: dict[int, HeldAdmin] = {}

    def apply(self, action: Action) -> None:
        p, held, config = action.params, self.held, self.client_config
        if action.kind == "ip_quota":
            apply_ip_quota(self.bootstrap, p["ip"], p["rate"], held, config)
        elif action.kind == "broker_config" and action.node is not None:
            bootstrap, node_held = self.node_admin(action.node)
            apply_broker_config(bootstrap, p, node_held, config, action.node)
        elif action.kind == "broker_config":
            apply_broker_config(self.bootstrap, p, held, config)
        elif action.kind == "request_quota":
            apply_request_quota(self.bootstrap, p, held, config)
        else:
            raise TargetError(f"not a change: {action.kind}")

    def node_admin(self, node: int) -> tuple[str, HeldAdmin | None]:
        """Where broker ``node``'s own config changes go (Kafka takes a per-broker change
        only from that broker): its address on the admin listener, and the connection held
        to it for the run (`hold`), if any."""
        listener = admin_listener(self.scenario)
        for n, host, port in self.brokers.get(listener, []):
            if n == node:
                return f"{host}:{port}", self.node_admins.get(node)
        raise TargetError(f"no broker {node} in this run's cluster")

    def apply_initial_quotas(self) -> None:
        sc = self.scenario
        for ip, rate in sc.ip_quotas.items():
            apply_ip_quota(self.bootstrap, ip, rate, None, self.client_config)
        for q in sc.request_quotas:
            apply_request_quota(self.bootstrap, q, None, self.client_config)
        if sc.ip_quotas or sc.request_quotas:
            self.progress(
                f"quotas set through the admin API at {self.bootstrap}: "
                f"ip {dict(sc.ip_quotas)} request {list(sc.request_quotas)}"
            )

    def hold(self) -> None:
        """The run changes limits while the load runs: keep one admin connection from now
        (and one to each broker whose own layer the schedule changes)."""
        host = self.bootstrap.rpartition(":")[0]
        held = HeldAdmin(self.bootstrap, admin_source_ip(self.scenario, host), self.client_config)
        try:
            held.open()
        except Exception as exc:
            raise TargetError(f"admin connection to {self.bootstrap} failed: {exc}") from exc
        self.held = held
        self.progress(
            f"admin connection held for the run's changes: {self.bootstrap}"
            + (f" from {held.source_ip}" if held.source_ip else "")
        )
        for node in sorted({a.node for a in self.scenario.schedule if a.node is not None}):
            bootstrap, _ = self.node_admin(node)
            mine = HeldAdmin(bootstrap, held.source_ip, self.client_config)
            try:
                mine.open()
            except Exception as exc:
                raise TargetError(f"admin connection to broker {node} failed: {exc}") from exc
            self.node_admins[node] = mine

    def close(self) -> None:
        if self.held is not None:
            self.held.close()
            self.held = None
        for mine in self.node_admins.values():
            mine.close()
        self.node_admins.clear()


def schedules_changes(scenario: Scenario) -> bool:
    """Whether the scenario changes limits while the load runs (not only faults)."""
    return any(a.kind != "fault" for a in scenario.schedule)
