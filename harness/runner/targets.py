"""The system under test for one run: the acceptor in front of a broker, or the broker alone.

Both targets expose the same operations to the orchestrator (where load should
connect, apply a scheduled change, pause/kill the broker, add upstream latency,
stop), so a scenario runs unchanged against either and the two verdicts compare.
Runtime changes go through Kafka's admin protocol in both cases (harness.admin),
the way an operator would make them.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.localnet import free_port
from harness.quota.config import ConfigError
from harness.quota.faults import FAULT_KEY, Faults
from harness.quota.versions import CURRENT, METADATA_KEY, VERSION_KEY, release
from harness.runner.latency_proxy import LatencyProxy
from harness.runner.scenario import (
    BROKER_ENFORCED_KEYS,
    FAILED_AUTH_DELAY_KEY,
    INT_MAX,
    Action,
    Scenario,
)
from harness.runner.schedule import initial_limits
from harness.supervisor import ManagedProcess

if TYPE_CHECKING:
    from harness.broker.config import ListenerSpec

Progress = Callable[[str], None]


#: the listener a fronted cluster's brokers replicate over (advertised at its own port: the
#: replica fetchers are no client of the acceptors')
REPLICATION_LISTENER = "REPLICATION"

#: the size of a broker's log directory when a scenario fills it (fault broker_disk_full):
#: room for the run's topics and metadata log, small enough to fill at once
DISK_FULL_LOG_DIR_MB = 256


LOOPBACK_HOST = "127.0.0.1"


class TargetError(RuntimeError):
    """The system under test could not be started or changed; the message says what to do."""


def _admin() -> Any:
    try:
        import harness.admin as admin
    except ImportError as exc:  # pragma: no cover - only while the admin part is missing
        raise TargetError(f"harness.admin is not available ({exc}); cannot apply quotas") from exc
    if not hasattr(admin, "alter_ip_quota"):
        import harness.admin.client as admin_client

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
    from harness.admin.client import IP_RATE_KEY

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


def _dynamic(key: str) -> bool:
    """Whether a broker key can be changed on a running cluster (the scenario's key table);
    listener-prefixed connection limits and the per-IP overrides are dynamic."""
    from harness.runner.scenario import BROKER_KEYS

    return BROKER_KEYS.get(key, (0, True))[1]


def _props(limits: Mapping[str, Any]) -> dict[str, str]:
    """Kafka broker properties for the scenario's static limits (skip broker-wide INT_MAX
    defaults; a listener key is always sent: its Int.MaxValue differs from unset, which
    takes the broker-wide value)."""
    out: dict[str, str] = {}
    for key, value in limits.items():
        if key in (
            "listeners",
            "inter.broker.listener.name",
            "ip_quotas",
            "request_quotas",
            VERSION_KEY,
            METADATA_KEY,
        ):
            continue
        if value == "" or (value == INT_MAX and not key.startswith("listener.name.")):
            continue
        out[key] = str(value)
    return out


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

    The requests are harness.admin.client's, sent on the kept connection (`wire=`).
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
        from harness.admin.client import KafkaWire

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
        from harness.admin.client import alter_client_quota

        self._send(lambda wire: alter_client_quota(self.bootstrap, entity, ops, wire=wire))

    def alter_broker_config(self, changes: Mapping[str, str | None], broker: str = "") -> None:
        from harness.admin.client import alter_broker_config

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


def metadata_mode(broker: Any) -> str | None:
    """Where a started broker keeps its metadata ("zookeeper" or "kraft"); None for an
    existing cluster, whose mode the harness does not know (judged by its release's)."""
    if broker is None or not hasattr(broker, "zookeeper"):
        return None
    return "zookeeper" if broker.zookeeper else "kraft"


def semantics_version(version: object, progress: Progress, pinned: str | None = None) -> str:
    """The Kafka release whose semantics a run is judged by: ``pinned`` (an existing
    cluster's `--kafka-version`), else the broker's own when it is one the model knows
    (2.7.0 or newer), else the harness's current one, said aloud with how to pin it."""
    if pinned:
        progress(f"Kafka {version} detected; judged as Kafka {pinned} (--kafka-version)")
        return pinned
    try:
        return release(str(version))
    except ConfigError as exc:
        detected = str(version).endswith("+") or version is None
        why = (
            "from the API versions it answers: an existing cluster does not report its exact "
            "release"
            if detected
            else exc.reason
        )
        progress(
            f"Kafka {version} detected ({why}); judged as Kafka {CURRENT}; pin the release "
            "it runs with --kafka-version X.Y.Z"
        )
        return CURRENT


class Target:
    """Common lifecycle; subclasses fill in start/apply/stop."""

    name = "abstract"

    def __init__(self, scenario: Scenario, run_dir: Path, progress: Progress) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.progress = progress
        self.broker: Any = None
        #: where the load connects, per listener
        self.client_addresses: dict[str, tuple[str, int]] = {}
        self.metrics_url: str | None = None
        #: the admin bootstrap (the acceptor for target acceptor, the broker otherwise)
        self.admin_bootstrap = ""
        #: the admin connection kept for run-time changes (None: one per change)
        self.held_admin: HeldAdmin | None = None
        self.limits: dict[str, Any] = {}
        #: an existing cluster: the scenario's one loaded listener, reached at its bootstrap
        self.external_listener: str | None = None
        #: the Kafka release the started broker runs (`--kafka-version`; None: the default)
        self.kafka_version: str | None = None
        #: the started broker keeps its metadata in ZooKeeper (None: its release's default)
        self.zookeeper: bool | None = None
        #: Kafka client configuration (``client.properties``) the load uses per secured
        #: listener: the started broker's own, or the operator's ``--command-config``
        self.client_configs: dict[str, Path] = {}
        #: Kafka's client keys for the admin connection when its listener is secured (an
        #: existing cluster reached with ``--command-config``); None: PLAINTEXT
        self.admin_config: dict[str, str] | None = None
        #: a cluster's nodes (scenario ``brokers`` > 1); ``broker`` is then its node 1, the
        #: bootstrap and admin address
        self.cluster: Any = None
        #: per listener, every broker of a cluster as (node id, host, port), the bootstrap
        #: broker first
        self.broker_addresses: dict[str, list[tuple[int, str, int]]] = {}
        #: an engine profile's arrivals spread over every broker (a cluster the harness
        #: started); False: on the bootstrap broker (an existing cluster)
        self.spread_all = True
        #: per broker of a cluster, the connection held for its own config changes
        self.node_admins: dict[int, HeldAdmin] = {}
        #: where the client listeners listen: loopback, or the host side of the bridge to
        #: the run's worker hosts (`--worker-netns`, harness.runner.netns)
        self.listen_host = LOOPBACK_HOST

    @property
    def writes_config_rows(self) -> bool:
        """Whether the runner must write `config` rows (no acceptor to do it)."""
        return True

    def start_broker(
        self,
        *,
        launcher: str,
        bootstrap_server: str | None,
        properties: Mapping[str, str],
        advertised: Mapping[str, str] | None,
        timeout: float,
        request_log: bool = False,
        command_config: Path | None = None,
        node_advertised: Mapping[int, Mapping[str, str]] | None = None,
        listen_host: str = LOOPBACK_HOST,
    ) -> Any:
        """Start the broker (or the scenario's cluster, ``node_advertised`` giving each
        node's listeners advertised elsewhere) or find an existing one. ``listen_host``:
        where a started broker's client listeners listen (the load connects there)."""
        from harness.broker import start_broker

        if listen_host != LOOPBACK_HOST and (bootstrap_server or self.scenario.brokers > 1):
            raise TargetError(
                f"the load comes from worker hosts on {listen_host}'s bridge, which reaches "
                + (
                    f"no existing cluster (--bootstrap-server {bootstrap_server}); run the "
                    "workers on other machines without --worker-netns"
                    if bootstrap_server
                    else f"one started broker, not a cluster of {self.scenario.brokers}; "
                    "use --target acceptor, whose fronts listen there"
                )
            )
        if bootstrap_server:
            if self.scenario.brokers > 1:
                raise TargetError(
                    f"--bootstrap-server {bootstrap_server}: the scenario asks for a cluster of "
                    f"{self.scenario.brokers} brokers, which the harness starts itself; judging "
                    "an existing cluster per broker is not there yet (docs/clusters.md)"
                )
            # an existing cluster runs its own release: --kafka-version pins the one it is
            # judged as (`semantics_version`)
            return self._find_external(bootstrap_server, properties, timeout, command_config)
        if self.scenario.brokers > 1:
            return self._start_cluster(launcher, properties, timeout, request_log, node_advertised)
        if any(a.params.get("kind") == "broker_disk_full" for a in self.scenario.schedule):
            # a log directory the run can fill: its own small file system (local launcher)
            from harness.broker.local import LOG_DIR_MB_KEY

            properties = {**properties, LOG_DIR_MB_KEY: str(DISK_FULL_LOG_DIR_MB)}
            if launcher == "auto":
                launcher = "local"
        kwargs: dict[str, Any] = {
            "request_log": request_log,
            "launcher": launcher,
            "bootstrap_server": bootstrap_server,
            "properties": dict(properties),
            "listeners": self.scenario.broker_listeners,
            "advertised": dict(advertised) if advertised else None,
            "inter_broker_listener": self.scenario.inter_broker_listener,
            "workdir": self.run_dir / "broker",
            "ready_timeout_s": timeout,
            "version": self.kafka_version,
            "zookeeper": self.zookeeper,
            "listen_host": listen_host,
        }
        self.progress(
            f"starting the Kafka broker (launcher {kwargs['launcher']}, listeners "
            f"{','.join(self.scenario.listeners)}; log under {self.run_dir / 'broker'})"
        )
        t0 = time.monotonic()
        self.broker = start_broker(**kwargs)
        b = self.broker
        how = f"{b.launcher} launcher" + (f", image {b.image}" if getattr(b, "image", None) else "")
        self.progress(
            f"broker ready in {time.monotonic() - t0:.1f}s ({how}): Kafka {b.version} at "
            f"{b.bootstrap} (ports {b.listener_ports})"
        )
        self._take_client_configs(b)
        return self.broker

    def _take_client_configs(self, b: Any) -> None:
        """The started broker's client configurations the load uses: one per secured
        listener ("NAME"), and one per SASL user ("NAME@user")."""
        self.client_configs = {
            key: Path(path)
            for key, path in b.client_configs.items()
            if key.partition("@")[0] in self.scenario.security and ":" not in key
        }
        missing = sorted(set(self.scenario.security) - set(self.client_configs))
        if missing:
            raise TargetError(
                f"the broker made no client configuration for secured listener(s) {missing}"
            )

    def _find_external(
        self,
        bootstrap_server: str,
        properties: Mapping[str, str],
        timeout: float,
        command_config: Path | None = None,
    ) -> Any:
        """An existing cluster is reached through one bootstrap address: the listener the
        scenario's load uses is that address, and the admin requests go there too (with
        ``command_config``, Kafka's client properties, when it is secured). Its static
        settings are the operators'; the scenario's dynamic limits are applied by the target
        through the admin API."""
        from harness.broker import start_broker

        loaded = sorted({p.listener for p in self.scenario.load})
        if len(loaded) != 1:
            raise TargetError(
                f"--bootstrap-server {bootstrap_server}: scenario {self.scenario.name!r} loads "
                f"listeners {', '.join(loaded)}, but an existing cluster is reached through "
                "one bootstrap address; run it with --launcher local or container, or pick a "
                "scenario whose load uses one listener"
            )
        name = loaded[0]
        if name in self.scenario.security and command_config is None:
            raise TargetError(
                f"--bootstrap-server {bootstrap_server}: the scenario's listener {name} is "
                f"{self.scenario.security[name]}; give the cluster's client properties with "
                "--command-config (docs/security.md)"
            )
        per_user = sorted({p.sasl_user for p in self.scenario.load if p.sasl_user})
        if per_user:
            raise TargetError(
                f"--bootstrap-server {bootstrap_server}: the scenario's phases log in as "
                f"{', '.join(per_user)}, but --command-config logs in as one user; run it "
                "with --launcher local, whose broker makes each user"
            )
        static = sorted(k for k in properties if not _dynamic(k))
        if static:
            self.progress(
                f"note: {', '.join(static)} are static broker settings: the existing cluster "
                "keeps its own, and the checker judges by the scenario's"
            )
        if command_config is not None:
            from harness.security import clientprops

            self.admin_config = clientprops.read(command_config)
            self.client_configs = {name: command_config}
        protocol = (self.admin_config or {}).get("security.protocol", "PLAINTEXT").upper()
        self.progress(
            f"using the existing cluster at {bootstrap_server} (launcher external, {protocol})"
        )
        self.broker = start_broker(
            launcher="external",
            bootstrap_server=bootstrap_server,
            ready_timeout_s=timeout,
            client_config=self.admin_config,
        )
        b = self.broker
        b.listener_ports = {name.upper(): b.port, **b.listener_ports}
        self.external_listener = name
        self.progress(f"cluster answers: Kafka {b.version} at {b.bootstrap}")
        self._learn_brokers(name, bootstrap_server)
        return b

    def _learn_brokers(self, listener: str, bootstrap: str) -> None:
        """An existing cluster of several brokers: learn them from Metadata, so every
        connection is attributed to the broker it reached and judged per broker (the
        engine's arrivals stay on the bootstrap broker, whose node id they carry; the
        kafka-python clients follow metadata and are attributed by address)."""
        from harness.broker.probe import cluster_brokers

        try:
            nodes = cluster_brokers(bootstrap, client_config=self.admin_config)
        except Exception as exc:  # judged as one broker, and said so
            self.progress(f"note: the cluster's brokers could not be listed ({exc})")
            return
        if len(nodes) < 2:
            return
        host, _, port = bootstrap.rpartition(":")
        first = [n for n in nodes if (n[1], n[2]) == (host, int(port))]
        if not first:
            self.progress(
                f"note: Metadata lists {len(nodes)} brokers but none at {bootstrap} (it "
                "advertises other addresses): connections are judged as one broker's"
            )
            return
        self.broker_addresses = {listener: first + [n for n in nodes if n not in first]}
        self.spread_all = False
        listed = ", ".join(f"{n}={h}:{p}" for n, h, p in nodes)
        self.progress(
            f"the cluster has {len(nodes)} brokers ({listed}): the load's connections are "
            f"judged per broker, the engine's on broker {first[0][0]} (the bootstrap)"
        )

    def start(
        self,
        *,
        launcher: str = "auto",
        bootstrap_server: str | None = None,
        timeout: float = 180,
        set_acceptor: Mapping[str, str] | None = None,
        acceptor_timeout: float = 60,
        run_id: str = "",
        latency_proxy: bool = False,
        command_config: Path | None = None,
    ) -> None:
        """Start the target; returns once load may connect to ``client_addresses``."""
        raise NotImplementedError

    def apply(self, action: Action) -> None:
        p, held = action.params, self.held_admin
        if action.kind == "ip_quota":
            apply_ip_quota(self.admin_bootstrap, p["ip"], p["rate"], held, self.admin_config)
        elif action.kind == "broker_config" and action.node is not None:
            bootstrap, held = self.node_admin(action.node)
            apply_broker_config(bootstrap, p, held, self.admin_config, action.node)
        elif action.kind == "broker_config":
            apply_broker_config(self.admin_bootstrap, p, held, self.admin_config)
        elif action.kind == "request_quota":
            apply_request_quota(self.admin_bootstrap, p, held, self.admin_config)
        else:
            raise TargetError(f"not a change: {action.kind}")

    def node_admin(self, node: int) -> tuple[str, HeldAdmin | None]:
        """Where broker ``node``'s own config changes go (Kafka takes a per-broker change
        only from that broker): its address on the admin listener, and the connection held
        to it for the run (`open_held_admin`), if any."""
        listener = admin_listener(self.scenario)
        for n, host, port in self.broker_addresses.get(listener, []):
            if n == node:
                return f"{host}:{port}", self.node_admins.get(node)
        raise TargetError(f"no broker {node} in this run's cluster")

    def apply_initial_quotas(self) -> None:
        for ip, rate in self.scenario.ip_quotas.items():
            apply_ip_quota(self.admin_bootstrap, ip, rate, None, self.admin_config)
        for q in self.scenario.request_quotas:
            apply_request_quota(self.admin_bootstrap, q, None, self.admin_config)
        if self.scenario.ip_quotas or self.scenario.request_quotas:
            self.progress(
                f"quotas set through the admin API at {self.admin_bootstrap}: "
                f"ip {dict(self.scenario.ip_quotas)} request {list(self.scenario.request_quotas)}"
            )

    # faults -------------------------------------------------------------------------------
    def supports_fault(self, kind: str) -> str | None:
        """None if the fault can be applied, else why not."""
        if kind == "acceptor_kill":
            return "target broker has no acceptor to kill"
        if kind == "load_kill":
            return None
        launcher = getattr(self.broker, "launcher", "external")
        if kind == "upstream_latency" and not isinstance(self, AcceptorTarget):
            return "target broker has no upstream (clients connect to the broker itself)"
        if kind in ("broker_pause", "broker_kill") and launcher == "external":
            return "the broker is an external cluster (--bootstrap-server): cannot signal it"
        if kind == "broker_disk_full" and not getattr(self.broker, "log_dir_mb", None):
            return "the broker's log directory is not its own small file system (local launcher)"
        return None

    def set_upstream_latency(self, ms: float) -> None:
        raise TargetError("no upstream to delay on this target")

    def _start_cluster(
        self,
        launcher: str,
        properties: Mapping[str, str],
        timeout: float,
        request_log: bool,
        advertised: Mapping[int, Mapping[str, str]] | None,
    ) -> Any:
        """The scenario's cluster of KRaft nodes (docs/clusters.md): local processes, or
        containers with ``--launcher container`` (``auto`` keeps a cluster local). Nodes
        whose listeners are advertised elsewhere (an acceptor in front of each) replicate
        over a listener of their own, `REPLICATION_LISTENER`, which no front stands in."""
        from harness.broker import KAFKA_VERSION
        from harness.broker.cluster import start_cluster

        n = self.scenario.brokers
        version = self.kafka_version or KAFKA_VERSION
        kind = "container" if launcher == "container" else "local"
        self.progress(
            f"starting a Kafka cluster of {n} brokers ({kind} launcher, listeners "
            f"{','.join(self.scenario.listeners)}; logs under {self.run_dir / 'broker'})"
        )
        listeners, inter = self.scenario.broker_listeners, self.scenario.inter_broker_listener
        if advertised:
            listeners, inter = (REPLICATION_LISTENER, *listeners), REPLICATION_LISTENER
        self.cluster = cluster = start_cluster(
            n,
            launcher=kind,
            properties=dict(properties),
            listeners=listeners,
            inter_broker_listener=inter,
            advertised=advertised,
            workdir=self.run_dir / "broker",
            ready_timeout_s=timeout,
            progress=self.progress,
            version=version,
            request_log=request_log,
        )
        self.broker = b = cluster.brokers[0]
        self.broker_addresses = {
            name: [(node.plan.node_id, node.host, int(node.listener_ports[name]))
                   for node in cluster.brokers]
            for name in self.scenario.listeners
        }  # fmt: skip
        self._take_client_configs(b)
        return b

    def node(self, node_id: int | None) -> Any:
        """The broker a fault hits: a cluster's node ``node_id`` (default node 1), else
        the one broker."""
        if self.cluster is None or node_id is None:
            return self.broker
        return self.cluster.broker(int(node_id))

    def alive(self) -> str | None:
        """None if every process of the target still runs, else what died."""
        return None

    def stop(self) -> None:
        if self.cluster is not None:
            self.progress(f"stopping the cluster of {len(self.cluster.brokers)} brokers")
            try:
                self.cluster.stop()
            finally:
                self.cluster = self.broker = None
        if self.broker is not None:
            external = getattr(self.broker, "launcher", "") == "external"
            self.progress(
                "leaving the existing cluster running" if external else "stopping the broker"
            )
            try:
                self.broker.stop()
            finally:
                self.broker = None


class BrokerTarget(Target):
    """Kafka's own enforcement: the limits become broker properties and dynamic quotas."""

    name = "broker"

    def start(
        self,
        *,
        launcher: str = "auto",
        bootstrap_server: str | None = None,
        timeout: float = 180,
        set_acceptor: Mapping[str, str] | None = None,
        acceptor_timeout: float = 60,
        run_id: str = "",
        latency_proxy: bool = False,
        command_config: Path | None = None,
    ) -> None:
        limits = initial_limits(self.scenario)
        self.start_broker(
            launcher=launcher,
            bootstrap_server=bootstrap_server,
            properties=_props(limits),
            advertised=None,
            timeout=timeout,
            command_config=command_config,
            listen_host=self.listen_host,
        )
        b = self.broker
        if self.external_listener is not None:
            # an existing cluster: its one address carries the load and the admin requests
            self.client_addresses = {self.external_listener: (b.host, b.port)}
            self.admin_bootstrap = b.bootstrap
        else:
            self.client_addresses = {
                n: (self.listen_host, int(b.listener_ports[n])) for n in self.scenario.listeners
            }
            self.admin_bootstrap = b.address(broker_admin_listener(self.scenario))
        if bootstrap_server:
            dynamic = {k: v for k, v in _props(limits).items() if _dynamic(k)}
            if dynamic:
                apply_broker_config(self.admin_bootstrap, dynamic, None, self.admin_config)
        self.limits = initial_limits(self.scenario, self.client_addresses)
        # the broker is judged by its own release's semantics (docs/kafka-versions.md)
        self.limits[VERSION_KEY] = semantics_version(
            getattr(b, "version", None),
            self.progress,
            self.kafka_version if self.external_listener else None,
        )
        mode = metadata_mode(b)
        if mode is not None:
            self.limits[METADATA_KEY] = mode
        self.apply_initial_quotas()
        if any(a.kind != "fault" for a in self.scenario.schedule):
            self.open_held_admin()

    def open_held_admin(self) -> None:
        """The run changes limits while the load runs: keep one admin connection from now."""
        host = self.admin_bootstrap.rpartition(":")[0]
        held = HeldAdmin(
            self.admin_bootstrap, admin_source_ip(self.scenario, host), self.admin_config
        )
        try:
            held.open()
        except Exception as exc:
            raise TargetError(f"admin connection to {self.admin_bootstrap} failed: {exc}") from exc
        self.held_admin = held
        self.progress(
            f"admin connection held for the run's changes: {self.admin_bootstrap}"
            + (f" from {held.source_ip}" if held.source_ip else "")
        )
        for node in sorted({a.node for a in self.scenario.schedule if a.node is not None}):
            bootstrap, _ = self.node_admin(node)
            mine = HeldAdmin(bootstrap, held.source_ip, self.admin_config)
            try:
                mine.open()
            except Exception as exc:
                raise TargetError(f"admin connection to broker {node} failed: {exc}") from exc
            self.node_admins[node] = mine

    def stop(self) -> None:
        held = self.held_admin
        if held is not None:
            held.close()
            self.held_admin = None
        for mine in self.node_admins.values():
            mine.close()
        self.node_admins.clear()
        if self.external_listener is not None and self.broker is not None:
            # its operators' cluster: the run does not guess what was there before
            sc = self.scenario
            set_ = [f"ip quotas {sorted(sc.ip_quotas)}"] if sc.ip_quotas else []
            set_ += ["request quotas"] if sc.request_quotas else []
            set_ += [
                f"broker configs {sorted(k for k in _props(initial_limits(sc)) if _dynamic(k))}"
            ]
            set_ += (
                ["the schedule's changes"] if any(a.kind != "fault" for a in sc.schedule) else []
            )
            self.progress(
                f"note: the cluster at {self.broker.bootstrap} keeps what the run set: "
                + "; ".join(set_)
                + " (remove them with `harness quotas` or Kafka's kafka-configs.sh)"
            )
        super().stop()


def listener_spec(sc: Scenario, name: str) -> ListenerSpec:
    """A listener as the broker launcher reads it (protocol, TLS, client auth)."""
    from harness.broker.config import parse_listener

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
    return {k: v for k, v in _props(initial_limits(sc)).items() if k in BROKER_ENFORCED_KEYS}


@dataclass
class Front:
    """One acceptor process of the target: in front of the one broker (``node`` None), or
    of node ``node`` of a cluster, with its own configuration, ready file and log."""

    node: int | None
    config_path: Path
    ready_path: Path
    log: Path
    argv: list[str] = field(default_factory=list)
    #: its configuration as written
    props: dict[str, str] = field(default_factory=dict)
    process: ManagedProcess | None = None
    #: where it listens, per listener, once ready
    addresses: dict[str, tuple[str, int]] = field(default_factory=dict)
    metrics_url: str | None = None

    @property
    def name(self) -> str:
        return "acceptor" if self.node is None else f"acceptor of broker {self.node}"


class AcceptorTarget(Target):
    """The project's acceptor in front of a broker that enforces nothing itself; in front of
    a cluster, one acceptor per broker (docs/clusters.md, "An acceptor per broker"): each
    enforces its broker's limits, its broker advertises it, and the fronts share one
    metadata log (`state.dir`), so a quota change sent to any front reaches every front."""

    name = "acceptor"

    def __init__(self, scenario: Scenario, run_dir: Path, progress: Progress) -> None:
        super().__init__(scenario, run_dir, progress)
        self.fronts: list[Front] = []
        self.proxies: dict[str, LatencyProxy] = {}
        self.config_path = run_dir / "acceptor.properties"
        self.run_id = ""
        self.overrides: dict[str, str] = {}
        self._timeout = 60.0

    @property
    def acceptor(self) -> ManagedProcess | None:
        """The (first) front's process."""
        return self.fronts[0].process if self.fronts else None

    @property
    def writes_config_rows(self) -> bool:
        return False

    def _tls_files(self) -> dict[str, str]:
        """Per TLS listener, what the acceptor needs should it end TLS itself (`tls.mode=
        terminate`, the scenario's `acceptor` block or `--set-acceptor`): its own
        certificate from the run's CA, that CA, the broker's client-auth mode, and the
        client certificate to show the broker when the broker asks for one."""
        sc, files = self.scenario, getattr(self.broker, "security_files", None)
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
        self, ports: Mapping[str, int], upstreams: Mapping[str, str]
    ) -> dict[str, str]:
        sc = self.scenario
        limits = initial_limits(sc)
        props: dict[str, str] = {
            "listeners": ",".join(f"{n}://{self.listen_host}:{ports[n]}" for n in sc.listeners),
            "metrics.port": "0",  # `start` fixes it, unless the scenario does
            "state.dir": str(self.run_dir / "acceptor-state"),
        }
        if sc.inter_broker_listener:
            props["inter.broker.listener.name"] = sc.inter_broker_listener
        if sc.security:  # the acceptor relays TLS untouched and reads SASL_PLAINTEXT logins
            props["listener.security.protocol.map"] = ",".join(
                f"{n}:{listener_spec(sc, n).protocol}" for n in sc.listeners
            )
            props.update(self._tls_files())
        props.update(_props(limits))
        for n in sc.listeners:
            props[f"listener.name.{n.lower()}.upstream"] = upstreams[n]
            mode = sc.proxy_protocol.get(n)
            if mode:
                props[f"listener.name.{n.lower()}.proxy.protocol"] = mode
        if self.listen_host != LOOPBACK_HOST:  # the runner's admin calls come from it
            from harness.acceptor.config import DEFAULTS as ACCEPTOR_DEFAULTS

            allowed = f"{ACCEPTOR_DEFAULTS['admin.allowed.addresses']},{self.listen_host}/32"
            props["admin.allowed.addresses"] = allowed
        props.update(sc.acceptor)
        return props

    def _refuse(self, set_acceptor: Mapping[str, str], latency_proxy: bool) -> None:
        sc = self.scenario
        given = {**sc.acceptor, **set_acceptor}
        refused = passed_through_request_quotas(sc, given)
        if refused:
            raise TargetError(f"target acceptor: {refused}")
        if sc.brokers > 1 and given.get("acceptor.process.model", "single") != "single":
            raise TargetError(
                f"target acceptor: a cluster of {sc.brokers} brokers is fronted by one "
                "acceptor per broker in the single process model only (the split model's "
                "processor processes write rows no check could attribute to their broker)"
            )
        if sc.brokers > 1 and latency_proxy:
            raise TargetError("target acceptor: --latency-proxy fronts one broker, not a cluster")

    def start(
        self,
        *,
        launcher: str = "auto",
        bootstrap_server: str | None = None,
        timeout: float = 180,
        set_acceptor: Mapping[str, str] | None = None,
        acceptor_timeout: float = 60,
        run_id: str = "",
        latency_proxy: bool = False,
        command_config: Path | None = None,
    ) -> None:
        sc = self.scenario
        self._refuse(set_acceptor or {}, latency_proxy)
        self.run_id = run_id
        nodes: list[int | None] = list(range(1, sc.brokers + 1)) if sc.brokers > 1 else [None]
        ports = {node: {n: free_port() for n in sc.listeners} for node in nodes}
        advertised = {
            node: {n: f"{self.listen_host}:{p}" for n, p in ports[node].items()} for node in nodes
        }
        # request quotas are charged Kafka's own handler time, read from the broker's
        # request log (harness.acceptor.broker_charge): only when the scenario has request
        # quotas (a log line per request costs both sides), and not through the latency
        # proxy (the broker would see the proxy's sockets, not the acceptor's)
        wants_log = not latency_proxy and (
            bool(sc.request_quotas) or any(a.kind == "request_quota" for a in sc.schedule)
        )
        broker_props = broker_enforced(sc)
        faults = Faults.parse({**sc.acceptor, **(set_acceptor or {})}.get(FAULT_KEY, ""))
        if not faults.policy().broker_gets_failed_auth_delay():  # the key stays at the front
            broker_props.pop(FAILED_AUTH_DELAY_KEY, None)
            self.progress(f"seeded fault: the broker is not given {FAILED_AUTH_DELAY_KEY}")
        self.start_broker(
            launcher=launcher,
            bootstrap_server=bootstrap_server,
            properties=broker_props,
            advertised=advertised[None] if None in advertised else None,
            timeout=timeout,
            request_log=wants_log,
            node_advertised=None if None in advertised else advertised,  # type: ignore[arg-type]
        )
        self.overrides = dict(set_acceptor or {})
        self._timeout = acceptor_timeout
        for node in nodes:
            self.fronts.append(self._front(node, ports[node], latency_proxy, wants_log))
        for f in self.fronts:  # every front launched before any is awaited
            self._spawn(f)
        for f in self.fronts:
            self._await_ready(f)
        first = self.fronts[0]
        self.client_addresses = dict(first.addresses)
        self.metrics_url = first.metrics_url
        if self.cluster is not None:  # the load follows the fronts, never the brokers
            self.broker_addresses = {
                n: [(int(f.node or 0), *f.addresses[n]) for f in self.fronts] for n in sc.listeners
            }
        self.admin_bootstrap = "{}:{}".format(*self.client_addresses[admin_listener(sc)])
        self.limits = initial_limits(sc, self.client_addresses)
        props = first.props
        self.limits[VERSION_KEY] = self.overrides.get(VERSION_KEY, props[VERSION_KEY])
        mode = self.overrides.get(METADATA_KEY, props[METADATA_KEY])
        if mode:
            self.limits[METADATA_KEY] = mode
        for f in self.fronts:
            self.progress(
                f"{f.name} ready: "
                + ", ".join(
                    f"{n} {h}:{p} -> {f.props[f'listener.name.{n.lower()}.upstream']}"
                    for n, (h, p) in f.addresses.items()
                )
                + (f"; metrics {f.metrics_url}" if f.metrics_url else "")
            )
        self.apply_initial_quotas()

    @property
    def front_metrics(self) -> dict[int, str]:
        """A fronted cluster: each front's metrics endpoint by its broker's node id."""
        return {f.node: f.metrics_url for f in self.fronts if f.node and f.metrics_url}

    def _front(
        self, node: int | None, ports: Mapping[str, int], latency_proxy: bool, wants_log: bool
    ) -> Front:
        """Write one front's configuration (its broker's ports upstream) and its command."""
        sc = self.scenario
        b = self.broker if node is None else self.cluster.broker(node)
        suffix = "" if node is None else f"-{node}"
        front = Front(
            node,
            self.config_path.with_name(f"acceptor{suffix}.properties"),
            self.run_dir / f"acceptor{suffix}.ready.json",
            self.run_dir / "logs" / f"acceptor{suffix}.log",
        )
        upstreams: dict[str, str] = {}
        for n in sc.listeners:
            host, port = "127.0.0.1", int(b.listener_ports[n])
            if latency_proxy:
                proxy = LatencyProxy((host, port))
                phost, pport = proxy.start()
                self.proxies[n] = proxy
                upstreams[n] = f"{phost}:{pport}"
                self.progress(f"latency proxy for {n}: {phost}:{pport} -> {host}:{port}")
            else:
                upstreams[n] = f"{host}:{port}"
        props = self.acceptor_properties(ports, upstreams)
        if node is not None:
            props["node.id"] = str(node)  # per-broker configs: this broker's own
        if props["metrics.port"] == "0":  # fixed: a restarted acceptor is scraped where it was
            props["metrics.port"] = str(free_port())
        # the acceptor enforces as the release it fronts, unless the scenario says otherwise
        props.setdefault(
            VERSION_KEY,
            semantics_version(
                getattr(b, "version", None),
                self.progress,
                self.kafka_version if self.external_listener else None,
            ),
        )
        props.setdefault(METADATA_KEY, metadata_mode(b) or "")
        request_log = b.request_log_path
        if wants_log and request_log is not None:
            props["upstream.request.log"] = str(request_log)
        elif wants_log and node in (None, 1):
            self.progress(
                f"no request log from the {b.launcher} launcher: request quotas are charged "
                "the broker time the acceptor sees (docs/acceptor.md, What is charged)"
            )
        front.props = props
        front.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        front.argv = [
            sys.executable,
            "-m",
            "harness",
            "acceptor",
            "--config",
            str(front.config_path),
            "--history",
            str(self.run_dir / "history"),
            "--run-id",
            self.run_id,
            "--ready-file",
            str(front.ready_path),
        ]
        for k, v in self.overrides.items():
            front.argv += ["--set", f"{k}={v}"]
        return front

    def _spawn(self, front: Front) -> None:
        front.ready_path.unlink(missing_ok=True)
        self.progress(f"starting the {front.name} (config {front.config_path}, log {front.log})")
        front.process = ManagedProcess(front.name.replace(" ", "-"), front.argv, log_path=front.log)

    def _await_ready(self, front: Front) -> None:
        """Until the front's ready file appears (its addresses and metrics endpoint)."""
        proc = front.process
        assert proc is not None
        deadline = time.monotonic() + self._timeout
        while not front.ready_path.exists():
            code = proc.poll()
            if code is not None:
                raise TargetError(
                    f"the {front.name} exited with code {code} before it was ready; its log "
                    f"({front.log}) ends with:\n{proc.tail(25)}"
                )
            if time.monotonic() > deadline:
                raise TargetError(
                    f"the {front.name} was not ready within {self._timeout:.0f}s; see {front.log}"
                )
            time.sleep(0.1)
        ready = json.loads(front.ready_path.read_text())
        addresses = {
            n: (str(e["host"]), int(e["port"]))
            for n, e in ready["listeners"].items()
            if n in self.scenario.listeners
        }
        moved = {
            n: a for n, a in addresses.items() if front.addresses and front.addresses.get(n) != a
        }
        if moved:
            raise TargetError(f"the restarted {front.name} listens elsewhere: {moved}")
        front.addresses = addresses
        front.metrics_url = ready.get("metrics_url")

    def _front_of(self, node: int | None) -> Front:
        """The front a fault hits: broker ``node``'s in a fronted cluster (default: node
        1's), else the one acceptor."""
        if node is None:
            return self.fronts[0]
        for f in self.fronts:
            if f.node == int(node):
                return f
        raise TargetError(f"no acceptor of broker {node} in this run")

    def kill(self, node: int | None = None) -> int | None:
        """Fault `acceptor_kill`: SIGKILL every process of the acceptor (in a fronted
        cluster: broker ``node``'s) (no flush, no goodbye: what it had not written is lost,
        and its listening sockets close, so the kernel refuses new connections). Returns
        the killed process id."""
        proc = self._front_of(node).process
        if proc is None:
            return None
        proc.signal_group(signal.SIGKILL)
        proc.wait(10)
        proc.stop(timeout=1)
        return proc.pid

    def node_fronted(self, node: int | None) -> bool:
        """True if broker ``node`` has a front of its own (a fronted cluster): that front is
        the broker's listener, so the node's failure takes both down (`stop_front`)."""
        return node is not None and any(f.node == int(node) for f in self.fronts)

    def stop_front(self, node: int) -> int | None:
        """Broker ``node``'s front stops with its broker (fault `broker_kill` on a fronted
        cluster): SIGTERM, so it flushes its history and closes its listeners, and the
        kernel refuses its broker's clients as Kafka's own dead listener would (each passes
        over the broker to the others: the failover). Returns the stopped process id."""
        return self._stop(self._front_of(node))

    def _stop(self, front: Front) -> int | None:
        """SIGTERM to a front (it flushes its history), waited for; its process id."""
        proc = front.process
        if proc is None:
            return None
        self.progress(f"stopping the {front.name} (SIGTERM: it flushes its history)")
        code = proc.stop(timeout=30)
        if code not in (0, None):
            self.progress(f"{front.name} exit code {code}; log {front.log}")
        front.process = None
        return proc.pid

    def restart(self, node: int | None = None) -> None:
        """The same acceptor again (same configuration, ports and state.dir: the dynamic
        quotas set before the crash are enforced after it, as Kafka keeps them in its
        metadata log, and in a cluster those any front took meanwhile); returns once it is
        ready."""
        front = self._front_of(node)
        self._spawn(front)
        self._await_ready(front)

    def supports_fault(self, kind: str) -> str | None:
        if kind == "upstream_latency" and not self.proxies:
            return "no latency proxy was started"
        if kind == "acceptor_kill":
            return None
        return super().supports_fault(kind)

    def set_upstream_latency(self, ms: float) -> None:
        for proxy in self.proxies.values():
            proxy.set_latency(ms)

    def alive(self) -> str | None:
        for f in self.fronts:
            code = f.process.poll() if f.process is not None else None
            if code is not None:
                return f"the {f.name} exited with code {code} (log {f.log})"
        return None

    def stop(self) -> None:
        try:
            for f in self.fronts:
                self._stop(f)
            for proxy in self.proxies.values():
                proxy.stop()
            self.proxies.clear()
        finally:
            super().stop()


def make_target(name: str, scenario: Scenario, run_dir: Path, progress: Progress) -> Target:
    if name == "acceptor":
        return AcceptorTarget(scenario, run_dir, progress)
    if name == "broker":
        return BrokerTarget(scenario, run_dir, progress)
    raise TargetError(f"--target={name!r}: one of acceptor, broker")
