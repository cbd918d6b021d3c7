"""The Kafka part of every target: the broker (or cluster of KRaft nodes) the run starts,
or an existing cluster it reaches at one bootstrap address; its client configurations,
its brokers' addresses, the fault operations on its nodes, and how it is stopped.

Also the scenario's limits as Kafka broker properties (`broker_properties`, `is_dynamic`)
and the Kafka release a run is judged by (`semantics_version`, `metadata_mode`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from base.quota.config import ConfigError
from base.quota.versions import CURRENT, METADATA_KEY, VERSION_KEY, release
from harness.runner.plan import LOOPBACK_HOST, Progress, RunPlan, TargetError
from harness.runner.scenario import INT_MAX

#: the listener a fronted cluster's brokers replicate over (advertised at its own port: the
#: replica fetchers are no client of the acceptors')
REPLICATION_LISTENER = "REPLICATION"

#: the size of a broker's log directory when a scenario fills it (fault broker_disk_full):
#: room for the run's topics and metadata log, small enough to fill at once
DISK_FULL_LOG_DIR_MB = 256


def is_dynamic(key: str) -> bool:
    """Whether a broker key can be changed on a running cluster (the scenario's key table);
    listener-prefixed connection limits and the per-IP overrides are dynamic."""
    from harness.runner.scenario import BROKER_KEYS

    return BROKER_KEYS.get(key, (0, True))[1]


def broker_properties(limits: Mapping[str, Any]) -> dict[str, str]:
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


class KafkaSide:
    """The Kafka behind (or being) the target, once started or found: ``broker`` (a
    cluster's node 1: the bootstrap and admin address), ``cluster`` (scenario ``brokers``
    > 1), ``external_listener`` (an existing cluster: the scenario's one loaded listener)."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.scenario = plan.scenario
        self.progress = plan.progress
        self.broker: Any = None
        self.cluster: Any = None
        #: Kafka client configuration (``client.properties``) the load uses per secured
        #: listener: the started broker's own, or the operator's ``--command-config``
        self.client_configs: dict[str, Path] = {}
        #: Kafka's client keys for the admin connection when its listener is secured (an
        #: existing cluster reached with ``--command-config``); None: PLAINTEXT
        self.admin_config: dict[str, str] | None = None
        self.external_listener: str | None = None
        #: per listener, every broker of a cluster as (node id, host, port), the bootstrap
        #: broker first
        self.broker_addresses: dict[str, list[tuple[int, str, int]]] = {}
        #: an engine profile's arrivals spread over every broker (a cluster the harness
        #: started); False: on the bootstrap broker (an existing cluster)
        self.spread_all = True

    @property
    def semantics(self) -> str:
        """The release the started or found broker is judged as (`semantics_version`)."""
        return semantics_version(
            getattr(self.broker, "version", None),
            self.progress,
            self.plan.kafka_version if self.external_listener else None,
        )

    def start(
        self,
        properties: Mapping[str, str],
        *,
        advertised: Mapping[str, str] | None = None,
        request_log: bool = False,
        node_advertised: Mapping[int, Mapping[str, str]] | None = None,
        listen_host: str = LOOPBACK_HOST,
    ) -> Any:
        """Start the broker (or the scenario's cluster, ``node_advertised`` giving each
        node's listeners advertised elsewhere), or find the plan's existing cluster.
        ``listen_host``: where a started broker's client listeners listen (the load
        connects there)."""
        from broker import start_broker

        plan, sc = self.plan, self.scenario
        bootstrap_server, launcher = plan.bootstrap_server, plan.launcher
        if listen_host != LOOPBACK_HOST and (bootstrap_server or sc.brokers > 1):
            raise TargetError(
                f"the load comes from worker hosts on {listen_host}'s bridge, which reaches "
                + (
                    f"no existing cluster (--bootstrap-server {bootstrap_server}); run the "
                    "workers on other machines without --worker-netns"
                    if bootstrap_server
                    else f"one started broker, not a cluster of {sc.brokers}; "
                    "use --target acceptor, whose fronts listen there"
                )
            )
        if bootstrap_server:
            if sc.brokers > 1:
                raise TargetError(
                    f"--bootstrap-server {bootstrap_server}: the scenario asks for a cluster of "
                    f"{sc.brokers} brokers, which the harness starts itself; judging "
                    "an existing cluster per broker is not there yet (docs/clusters.md)"
                )
            # an existing cluster runs its own release: --kafka-version pins the one it is
            # judged as (`semantics_version`)
            return self._find_external(bootstrap_server, properties)
        if sc.brokers > 1:
            return self._start_cluster(properties, request_log, node_advertised)
        if any(a.params.get("kind") == "broker_disk_full" for a in sc.schedule):
            # a log directory the run can fill: its own small file system (local launcher)
            from broker.local import LOG_DIR_MB_KEY

            properties = {**properties, LOG_DIR_MB_KEY: str(DISK_FULL_LOG_DIR_MB)}
            if launcher == "auto":
                launcher = "local"
        self.progress(
            f"starting the Kafka broker (launcher {launcher}, listeners "
            f"{','.join(sc.listeners)}; log under {plan.broker_dir})"
        )
        t0 = time.monotonic()
        b: Any = start_broker(
            request_log=request_log,
            launcher=launcher,
            bootstrap_server=None,
            properties=dict(properties),
            listeners=sc.broker_listeners,
            advertised=dict(advertised) if advertised else None,
            inter_broker_listener=sc.inter_broker_listener,
            workdir=plan.broker_dir,
            ready_timeout_s=plan.broker_timeout,
            version=plan.kafka_version,
            zookeeper=plan.zookeeper,
            listen_host=listen_host,
        )
        self.broker = b
        how = f"{b.launcher} launcher" + (f", image {b.image}" if getattr(b, "image", None) else "")
        self.progress(
            f"broker ready in {time.monotonic() - t0:.1f}s ({how}): Kafka {b.version} at "
            f"{b.bootstrap} (ports {b.listener_ports})"
        )
        self._take_client_configs(b)
        return b

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

    def _find_external(self, bootstrap_server: str, properties: Mapping[str, str]) -> Any:
        """An existing cluster is reached through one bootstrap address: the listener the
        scenario's load uses is that address, and the admin requests go there too (with
        ``command_config``, Kafka's client properties, when it is secured). Its static
        settings are the operators'; the scenario's dynamic limits are applied by the target
        through the admin API."""
        from broker import start_broker

        sc, command_config = self.scenario, self.plan.command_config
        loaded = sorted({p.listener for p in sc.load})
        if len(loaded) != 1:
            raise TargetError(
                f"--bootstrap-server {bootstrap_server}: scenario {sc.name!r} loads "
                f"listeners {', '.join(loaded)}, but an existing cluster is reached through "
                "one bootstrap address; run it with --launcher local or container, or pick a "
                "scenario whose load uses one listener"
            )
        name = loaded[0]
        if name in sc.security and command_config is None:
            raise TargetError(
                f"--bootstrap-server {bootstrap_server}: the scenario's listener {name} is "
                f"{sc.security[name]}; give the cluster's client properties with "
                "--command-config (docs/security.md)"
            )
        per_user = sorted({p.sasl_user for p in sc.load if p.sasl_user})
        if per_user:
            raise TargetError(
                f"--bootstrap-server {bootstrap_server}: the scenario's phases log in as "
                f"{', '.join(per_user)}, but --command-config logs in as one user; run it "
                "with --launcher local, whose broker makes each user"
            )
        static = sorted(k for k in properties if not is_dynamic(k))
        if static:
            self.progress(
                f"note: {', '.join(static)} are static broker settings: the existing cluster "
                "keeps its own, and the checker judges by the scenario's"
            )
        if command_config is not None:
            from base.security import clientprops

            self.admin_config = clientprops.read(command_config)
            self.client_configs = {name: command_config}
        protocol = (self.admin_config or {}).get("security.protocol", "PLAINTEXT").upper()
        self.progress(
            f"using the existing cluster at {bootstrap_server} (launcher external, {protocol})"
        )
        self.broker = b = start_broker(
            launcher="external",
            bootstrap_server=bootstrap_server,
            ready_timeout_s=self.plan.broker_timeout,
            client_config=self.admin_config,
        )
        b.listener_ports = {name.upper(): b.port, **b.listener_ports}
        self.external_listener = name
        self.progress(f"cluster answers: Kafka {b.version} at {b.bootstrap}")
        self.learn_brokers(name, bootstrap_server)
        return b

    def learn_brokers(self, listener: str, bootstrap: str) -> None:
        """An existing cluster of several brokers: learn them from Metadata, so every
        connection is attributed to the broker it reached and judged per broker (the
        engine's arrivals stay on the bootstrap broker, whose node id they carry; the
        kafka-python clients follow metadata and are attributed by address)."""
        from broker.probe import cluster_brokers

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

    def _start_cluster(
        self,
        properties: Mapping[str, str],
        request_log: bool,
        advertised: Mapping[int, Mapping[str, str]] | None,
    ) -> Any:
        """The scenario's cluster of KRaft nodes (docs/clusters.md): local processes, or
        containers with ``--launcher container`` (``auto`` keeps a cluster local). Nodes
        whose listeners are advertised elsewhere (an acceptor in front of each) replicate
        over a listener of their own, `REPLICATION_LISTENER`, which no front stands in."""
        from broker import KAFKA_VERSION
        from broker.cluster import start_cluster

        sc, plan = self.scenario, self.plan
        n = sc.brokers
        version = plan.kafka_version or KAFKA_VERSION
        kind = "container" if plan.launcher == "container" else "local"
        self.progress(
            f"starting a Kafka cluster of {n} brokers ({kind} launcher, listeners "
            f"{','.join(sc.listeners)}; logs under {plan.broker_dir})"
        )
        listeners, inter = sc.broker_listeners, sc.inter_broker_listener
        if advertised:
            listeners, inter = (REPLICATION_LISTENER, *listeners), REPLICATION_LISTENER
        self.cluster = cluster = start_cluster(
            n,
            launcher=kind,
            properties=dict(properties),
            listeners=listeners,
            inter_broker_listener=inter,
            advertised=advertised,
            workdir=plan.broker_dir,
            ready_timeout_s=plan.broker_timeout,
            progress=self.progress,
            version=version,
            request_log=request_log,
        )
        self.broker = b = cluster.brokers[0]
        self.broker_addresses = {
            name: [(node.plan.node_id, node.host, int(node.listener_ports[name]))
                   for node in cluster.brokers]
            for name in sc.listeners
        }  # fmt: skip
        self._take_client_configs(b)
        return b

    def judged_limits(self, addresses: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
        """The run's limits as the checker judges them: the scenario's, on the listeners'
        addresses, as the release the broker is judged as, in its metadata mode."""
        from harness.runner.schedule import initial_limits

        limits = initial_limits(self.scenario, addresses)
        limits[VERSION_KEY] = self.semantics
        mode = metadata_mode(self.broker)
        if mode is not None:
            limits[METADATA_KEY] = mode
        return limits

    def node(self, node_id: int | None) -> Any:
        """The broker a fault hits: a cluster's node ``node_id`` (default node 1), else
        the one broker."""
        if self.cluster is None or node_id is None:
            return self.broker
        return self.cluster.broker(int(node_id))

    def supports_fault(self, kind: str) -> str | None:
        """None if a fault on a broker (pause, kill, a full disk) can be applied, else why
        not; any other fault is the target's to judge."""
        launcher = getattr(self.broker, "launcher", "external")
        if kind in ("broker_pause", "broker_kill") and launcher == "external":
            return "the broker is an external cluster (--bootstrap-server): cannot signal it"
        if kind == "broker_disk_full" and not getattr(self.broker, "log_dir_mb", None):
            return "the broker's log directory is not its own small file system (local launcher)"
        return None

    def pids(self) -> list[int]:
        """The local brokers' process ids (each leads its process group)."""
        brokers = self.cluster.brokers if self.cluster is not None else [self.broker]
        return [b.pid for b in brokers if b is not None and getattr(b, "pid", None)]

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
