"""The project's acceptor as the target: in front of a broker that enforces nothing
itself, or of each broker of a cluster (docs/clusters.md, "An acceptor per broker"): each
front enforces its broker's limits, its broker advertises it, and the fronts share one
metadata log (`state.dir`), so a quota change sent to any front reaches every front."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from base.localnet import free_port
from base.quota.faults import FAULT_KEY, Faults
from base.quota.versions import METADATA_KEY, VERSION_KEY
from harness.runner.admin_changes import Changes, admin_listener
from harness.runner.fronts import Front, Fronts
from harness.runner.kafka_side import KafkaSide, broker_properties, metadata_mode
from harness.runner.latency_proxy import LatencyProxy
from harness.runner.plan import LOOPBACK_HOST, RunPlan, TargetError
from harness.runner.scenario import BROKER_ENFORCED_KEYS, FAILED_AUTH_DELAY_KEY, Action, Scenario
from harness.runner.schedule import initial_limits

if TYPE_CHECKING:
    from broker.config import ListenerSpec


def listener_spec(sc: Scenario, name: str) -> ListenerSpec:
    """A listener as the broker launcher reads it (protocol, TLS, client auth)."""
    from broker.config import parse_listener

    return parse_listener(f"{name}={sc.security[name]}" if name in sc.security else name)


def passed_through_request_quotas(sc: Scenario, acceptor_props: Mapping[str, str]) -> str | None:
    """Why the acceptor cannot run `sc`, if it cannot: request quotas while load goes to a
    TLS listener the acceptor passes through untouched (it reads no request there, so it
    could charge none: docs/security.md). `acceptor_props`: the scenario's and the
    operator's acceptor keys (`listener.name.<l>.tls.mode`)."""
    if not sc.request_quotas and not any(a.kind == "request_quota" for a in sc.schedule):
        return None
    tls = sorted(
        {
            p.listener
            for p in sc.load
            if listener_spec(sc, p.listener).tls
            and acceptor_props.get(f"listener.name.{p.listener.lower()}.tls.mode", "pass-through")
            != "terminate"
        }
    )
    if not tls:
        return None
    keys = ", ".join(f"listener.name.{n.lower()}.tls.mode=terminate" for n in tls)
    return (
        f"the scenario sets request quotas and its load uses TLS listener(s) {tls}, which the "
        "acceptor passes through untouched (no request read, none charged); end TLS at the "
        f"acceptor ({keys}, in the scenario's acceptor block or --set-acceptor) or run with "
        "--target broker"
    )


def broker_enforced(sc: Scenario) -> dict[str, str]:
    """The scenario's keys the broker behind the acceptor enforces itself (the failed-login
    delay: Kafka answers a refused login only when it ends, so no front can)."""
    return {
        k: v for k, v in broker_properties(initial_limits(sc)).items() if k in BROKER_ENFORCED_KEYS
    }


def tls_files(sc: Scenario, files: Any) -> dict[str, str]:
    """Per TLS listener, what the acceptor needs should it end TLS itself (`tls.mode=
    terminate`, the scenario's `acceptor` block or `--set-acceptor`): its own certificate
    from the run's CA (``files``: the broker's security files), that CA, the broker's
    client-auth mode, and the client certificate to show the broker when it asks for one."""
    if files is None:
        return {}
    out: dict[str, str] = {}
    for n in sc.listeners:
        spec = listener_spec(sc, n)
        if not spec.tls:
            continue
        auth = spec.client_auth
        prefix = f"listener.name.{n.lower()}."
        out[prefix + "ssl.keystore.location"] = str(files.acceptor_keystore)
        out[prefix + "ssl.truststore.location"] = str(files.ca)
        out[prefix + "ssl.client.auth"] = auth
        if auth != "none":
            out[prefix + "upstream.ssl.keystore.location"] = str(files.client_keystore)
    return out


def acceptor_properties(
    plan: RunPlan,
    ports: Mapping[str, int],
    upstreams: Mapping[str, str],
    security_files: Any = None,
) -> dict[str, str]:
    """One front's configuration: the scenario's listeners on ``ports`` (on the plan's
    listen host), each forwarding to its ``upstreams`` address, the scenario's limits as
    Kafka's keys, the TLS files of the run's CA, then the scenario's own acceptor keys."""
    sc, listen_host = plan.scenario, plan.listen_host
    props: dict[str, str] = {
        "listeners": ",".join(f"{n}://{listen_host}:{ports[n]}" for n in sc.listeners),
        "metrics.port": "0",  # `start` fixes it, unless the scenario does
        "state.dir": str(plan.run_dir / "acceptor-state"),
    }
    if sc.inter_broker_listener:
        props["inter.broker.listener.name"] = sc.inter_broker_listener
    if sc.security:  # the acceptor relays TLS untouched and reads SASL_PLAINTEXT logins
        props["listener.security.protocol.map"] = ",".join(
            f"{n}:{listener_spec(sc, n).protocol}" for n in sc.listeners
        )
        props.update(tls_files(sc, security_files))
    props.update(broker_properties(initial_limits(sc)))
    for n in sc.listeners:
        props[f"listener.name.{n.lower()}.upstream"] = upstreams[n]
        mode = sc.proxy_protocol.get(n)
        if mode:
            props[f"listener.name.{n.lower()}.proxy.protocol"] = mode
    if listen_host != LOOPBACK_HOST:  # the runner's admin calls come from it
        from acceptor.config import DEFAULTS as ACCEPTOR_DEFAULTS

        allowed = f"{ACCEPTOR_DEFAULTS['admin.allowed.addresses']},{listen_host}/32"
        props["admin.allowed.addresses"] = allowed
    props.update(sc.acceptor)
    return props


def refusal(plan: RunPlan) -> str | None:
    """Why the acceptor target cannot run the plan, if it cannot (before anything starts)."""
    sc = plan.scenario
    refused = passed_through_request_quotas(sc, plan.acceptor_overrides)
    if refused:
        return refused
    if (
        sc.brokers > 1
        and plan.acceptor_overrides.get("acceptor.process.model", "single") != "single"
    ):
        return (
            f"a cluster of {sc.brokers} brokers is fronted by one acceptor per broker in the "
            "single process model only (the split model's processor processes write rows no "
            "check could attribute to their broker)"
        )
    if sc.brokers > 1 and plan.latency_proxy:
        return "--latency-proxy fronts one broker, not a cluster"
    return None


def wants_request_log(plan: RunPlan) -> bool:
    """Request quotas are charged Kafka's own handler time, read from the broker's request
    log (acceptor.broker_charge): only when the scenario has request quotas (a log
    line per request costs both sides), and not through the latency proxy (the broker
    would see the proxy's sockets, not the acceptor's)."""
    sc = plan.scenario
    quotas = bool(sc.request_quotas) or any(a.kind == "request_quota" for a in sc.schedule)
    return quotas and not plan.latency_proxy


def broker_behind(plan: RunPlan) -> dict[str, str]:
    """The properties of the broker behind the fronts: only what it must enforce itself
    (`broker_enforced`), unless a seeded fault keeps that at the front too."""
    props = broker_enforced(plan.scenario)
    faults = Faults.parse(plan.acceptor_overrides.get(FAULT_KEY, ""))
    if not faults.policy().broker_gets_failed_auth_delay():  # the key stays at the front
        props.pop(FAILED_AUTH_DELAY_KEY, None)
        plan.progress(f"seeded fault: the broker is not given {FAILED_AUTH_DELAY_KEY}")
    return props


class AcceptorTarget:
    """The acceptor(s) in front of the Kafka the run starts (or reaches)."""

    name = "acceptor"

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.kafka = KafkaSide(plan)
        self.fronts = Fronts(plan.scenario.listeners, plan.acceptor_timeout, plan.progress)
        self.proxies: dict[str, LatencyProxy] = {}
        self.client_addresses: dict[str, tuple[str, int]] = {}
        self.broker_addresses: dict[str, list[tuple[int, str, int]]] = {}
        self.metrics_url: str | None = None
        self.limits: dict[str, Any] = {}
        self.changes: Changes | None = None

    def start(self) -> None:
        plan, sc = self.plan, self.plan.scenario
        refused = refusal(plan)
        if refused:
            raise TargetError(f"target acceptor: {refused}")
        nodes: list[int | None] = list(range(1, sc.brokers + 1)) if sc.brokers > 1 else [None]
        ports = {node: {n: free_port() for n in sc.listeners} for node in nodes}
        advertised = {
            node: {n: f"{plan.listen_host}:{p}" for n, p in ports[node].items()} for node in nodes
        }
        wants_log = wants_request_log(plan)
        one = None in advertised
        self.kafka.start(
            broker_behind(plan),
            advertised=advertised[None] if one else None,
            request_log=wants_log,
            node_advertised=None if one else advertised,  # type: ignore[arg-type]
        )
        for node in nodes:
            self.fronts.all.append(self._front(node, ports[node], wants_log))
        self.fronts.start()
        first = self.fronts.first
        self.client_addresses = dict(first.addresses)
        self.metrics_url = first.metrics_url
        if self.kafka.cluster is not None:  # the load follows the fronts, never the brokers
            self.broker_addresses = {
                n: [(int(f.node or 0), *f.addresses[n]) for f in self.fronts] for n in sc.listeners
            }
        else:
            self.broker_addresses = self.kafka.broker_addresses
        self.limits = initial_limits(sc, self.client_addresses)
        overrides = dict(plan.set_acceptor)
        self.limits[VERSION_KEY] = overrides.get(VERSION_KEY, first.props[VERSION_KEY])
        mode = overrides.get(METADATA_KEY, first.props[METADATA_KEY])
        if mode:
            self.limits[METADATA_KEY] = mode
        for f in self.fronts:
            self.plan.progress(
                f"{f.name} ready: "
                + ", ".join(
                    f"{n} {h}:{p} -> {f.props[f'listener.name.{n.lower()}.upstream']}"
                    for n, (h, p) in f.addresses.items()
                )
                + (f"; metrics {f.metrics_url}" if f.metrics_url else "")
            )
        admin = "{}:{}".format(*self.client_addresses[admin_listener(sc)])
        self.changes = Changes(
            sc, admin, plan.progress, self.kafka.admin_config, self.broker_addresses
        )
        self.changes.apply_initial_quotas()

    def _front(self, node: int | None, ports: Mapping[str, int], wants_log: bool) -> Front:
        """Write one front's configuration (its broker's ports upstream) and its command."""
        plan, sc = self.plan, self.plan.scenario
        b = self.kafka.node(node)
        suffix = "" if node is None else f"-{node}"
        front = Front(
            node,
            plan.run_dir / f"acceptor{suffix}.properties",
            plan.run_dir / f"acceptor{suffix}.ready.json",
            plan.run_dir / "logs" / f"acceptor{suffix}.log",
        )
        upstreams: dict[str, str] = {}
        for n in sc.listeners:
            host, port = "127.0.0.1", int(b.listener_ports[n])
            if plan.latency_proxy:
                proxy = LatencyProxy((host, port))
                phost, pport = proxy.start()
                self.proxies[n] = proxy
                upstreams[n] = f"{phost}:{pport}"
                plan.progress(f"latency proxy for {n}: {phost}:{pport} -> {host}:{port}")
            else:
                upstreams[n] = f"{host}:{port}"
        files = getattr(self.kafka.broker, "security_files", None)
        props = acceptor_properties(plan, ports, upstreams, files)
        if node is not None:
            props["node.id"] = str(node)  # per-broker configs: this broker's own
        if props["metrics.port"] == "0":  # fixed: a restarted acceptor is scraped where it was
            props["metrics.port"] = str(free_port())
        # the acceptor enforces as the release it fronts, unless the scenario says otherwise
        props.setdefault(VERSION_KEY, self.kafka.semantics)
        props.setdefault(METADATA_KEY, metadata_mode(b) or "")
        request_log = b.request_log_path
        if wants_log and request_log is not None:
            props["upstream.request.log"] = str(request_log)
        elif wants_log and node in (None, 1):
            plan.progress(
                f"no request log from the {b.launcher} launcher: request quotas are charged "
                "the broker time the acceptor sees (docs/acceptor.md, What is charged)"
            )
        front.write(props, plan.history_dir, plan.run_id, dict(plan.set_acceptor))
        return front

    def apply(self, action: Action) -> None:
        assert self.changes is not None
        self.changes.apply(action)

    def supports_fault(self, kind: str) -> str | None:
        if kind == "upstream_latency":
            return None if self.proxies else "no latency proxy was started"
        if kind in ("acceptor_kill", "load_kill"):
            return None
        return self.kafka.supports_fault(kind)

    def set_upstream_latency(self, ms: float) -> None:
        for proxy in self.proxies.values():
            proxy.set_latency(ms)

    def alive(self) -> str | None:
        return self.fronts.alive()

    def pids(self) -> dict[str, list[int]]:
        return {"acceptor": self.fronts.pids(), "broker": self.kafka.pids()}

    def stop(self) -> None:
        try:
            self.fronts.stop()
            for proxy in self.proxies.values():
                proxy.stop()
            self.proxies.clear()
        finally:
            if self.changes is not None:
                self.changes.close()
            self.kafka.stop()
