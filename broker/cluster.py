"""A KRaft cluster of N nodes on this machine, on the local launcher (`start_local_cluster`).

Kafka's connection limits are per broker, so a cluster is N brokers each with its own
listeners (its own ports on 127.0.0.1) and its own limits, replicating over the inter-broker
listener (the first, PLAINTEXT), with topics of replication factor up to N.

Why combined nodes (each `process.roles=broker,controller`, all N of them voters): the
controllers are not what the harness tests (their listener is internal and unquoted), and
on a 2-core machine N JVMs leave more CPU to the brokers under load than N + 3; a quorum of
N voters also survives one node killed (N = 3), which the failover scenarios need. Kafka
advises dedicated controllers for production, where a broker's load must not delay the
quorum; here a storm that slows the quorum shows up as broker fencing in the node's log.

Every node is launched before any is awaited: none serves before a majority of the voters
is up. The cluster is ready once every node answers and the first one's Metadata lists all
N brokers. Nodes share the run's certificates and SASL users (one `RunSecurity`), each
writing its own private copy. A port taken meanwhile restarts the whole cluster on fresh
ports (the voters' ports are in every node's formatted storage).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, cast

from kafka.errors import KafkaError

from base.localnet import LOOPBACK, free_ports
from base.security.sasl import DEFAULT_USERS
from broker.artifacts import KAFKA_VERSION, Progress
from broker.config import MAX_BROKERS, ListenerPlan, parse_host_port
from broker.errors import BrokerError
from broker.local import LocalBroker, cluster_id, on_fresh_ports, prepare_local
from broker.probe import probe

if TYPE_CHECKING:
    from typing import TypeAlias

    from broker.container import ContainerBroker

    #: a node of a cluster on this machine: a local process or a container
    Node: TypeAlias = LocalBroker | ContainerBroker


class LocalCluster:
    """N KRaft nodes on this machine (broker and controller each), local processes or
    containers (`start_container_cluster`); ``brokers[i]`` has node id i + 1.
    Use as a context manager; `stop` stops every node and removes a temporary workdir."""

    def __init__(self, brokers: Sequence[Node], workdir: Path, temp_workdir: bool) -> None:
        self.brokers = list(brokers)
        self.workdir = workdir
        self._temp_workdir = temp_workdir

    @property
    def bootstrap(self) -> str:
        """Every node's first listener, comma-separated (a client's bootstrap.servers)."""
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def launcher(self) -> str:
        return str(self.brokers[0].launcher) if self.brokers else "local"

    @property
    def version(self) -> str:
        return str(self.brokers[0].version)

    @property
    def running(self) -> bool:
        return all(b.running for b in self.brokers)

    def broker(self, node_id: int) -> Node:
        for b in self.brokers:
            if b.plan.node_id == node_id:
                return b
        raise BrokerError(f"no broker with node id {node_id} (ids 1-{len(self.brokers)})")

    def stop(self) -> None:
        """Stop every node (safe to call twice): all asked at once, then each awaited."""
        for b in self.brokers:
            begin = getattr(b, "begin_stop", None)  # a local node; a container is removed
            if begin is not None:
                with contextlib.suppress(Exception):
                    begin()
        for b in reversed(self.brokers):
            with contextlib.suppress(Exception):  # one node's failure must not keep others
                b.stop()
        if self._temp_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def wait_members(self, timeout_s: float) -> None:
        """Until the first node's Metadata lists every broker (unfenced)."""
        first = self.brokers[0]
        deadline = time.monotonic() + timeout_s
        seen: int | None = 0
        while True:
            try:
                seen = probe(first.host, first.port, timeout_s=2.0).brokers
                if seen == len(self.brokers):
                    return
            except (OSError, TimeoutError, ConnectionError, KafkaError):
                pass
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"the cluster's Metadata listed {seen} of {len(self.brokers)} brokers "
                    f"after {timeout_s:.0f} s; see each node's broker.log under {self.workdir}"
                )
            time.sleep(0.25)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LocalCluster {len(self.brokers)} nodes {self.bootstrap} kafka {self.version}>"


def start_cluster(
    brokers: int,
    *,
    launcher: str = "local",
    properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
    inter_broker_listener: str | None = None,
    workdir: Path,
    ready_timeout_s: float = 180,
    progress: Progress = print,
    version: str = KAFKA_VERSION,
    request_log: bool = False,
    sasl_users: Sequence[str] = DEFAULT_USERS,
    advertised: Mapping[int, Mapping[str, str]] | None = None,
) -> LocalCluster:
    """A cluster of ``brokers`` nodes on this machine: local processes
    (`start_local_cluster`), or with ``launcher="container"`` one container each
    (`start_container_cluster`: KRaft releases without the request log; anything
    else is refused with the reason). ``advertised``: per node id, listeners advertised
    elsewhere (each broker's acceptor in front of it)."""
    check_advertised(brokers, advertised)
    if launcher != "container":
        return start_local_cluster(
            brokers,
            properties=properties,
            listeners=listeners,
            inter_broker_listener=inter_broker_listener,
            advertised=advertised,
            workdir=workdir,
            ready_timeout_s=ready_timeout_s,
            progress=progress,
            version=version,
            request_log=request_log,
            sasl_users=sasl_users,
        )

    from broker.container import ensure_image
    from broker.local import zookeeper_mode

    if zookeeper_mode(version, None) or request_log:
        raise BrokerError(
            f"config brokers={brokers} with launcher='container': containers run KRaft "
            "releases (3.3 or newer) without the request log; use the local launcher"
        )
    return start_container_cluster(
        brokers,
        properties=properties,
        listeners=listeners,
        inter_broker_listener=inter_broker_listener,
        workdir=workdir,
        ready_timeout_s=ready_timeout_s,
        progress=progress,
        image=ensure_image(progress, version) if version != KAFKA_VERSION else None,
        sasl_users=sasl_users,
        advertised=advertised,
    )


def check_cluster_size(brokers: int) -> None:
    if not 1 <= brokers <= MAX_BROKERS:
        raise BrokerError(f"config brokers={brokers}: between 1 and {MAX_BROKERS} on one machine")


def check_advertised(brokers: int, advertised: Mapping[int, Mapping[str, str]] | None) -> None:
    """Per-node advertised addresses: node ids of the cluster, ``host:port`` values."""
    for node, addrs in (advertised or {}).items():
        if not 1 <= int(node) <= brokers:
            raise BrokerError(f"config advertised[{node}]: the cluster's node ids are 1-{brokers}")
        for name, addr in addrs.items():
            parse_host_port(addr, key=f"advertised[{node}][{name}]")


def start_local_cluster(
    brokers: int,
    *,
    properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
    inter_broker_listener: str | None = None,
    workdir: Path | None = None,
    ready_timeout_s: float = 180,
    progress: Progress = print,
    version: str = KAFKA_VERSION,
    port_picker: Callable[[int], list[int]] = free_ports,
    metrics: bool | None = None,
    request_log: bool = False,
    sasl_users: Sequence[str] = DEFAULT_USERS,
    advertised: Mapping[int, Mapping[str, str]] | None = None,
) -> LocalCluster:
    """Start ``brokers`` combined KRaft nodes and return once all serve as one cluster.

    Node i (1-based) runs in ``<workdir>/broker-<i>`` with its own ports for every listener
    in ``listeners`` (`start_local`'s syntax) and its own JMX exporter port; ``advertised``
    gives node i's listeners advertised elsewhere (default: its own ports).
    """
    check_cluster_size(brokers)
    prep = prepare_local(
        properties=properties,
        listeners=listeners,
        advertised=None,
        inter_broker_listener=inter_broker_listener,
        workdir=workdir,
        progress=progress,
        version=version,
        metrics=metrics,
        request_log=request_log,
        sasl_users=sasl_users,
    )
    if prep.zookeeper:
        raise BrokerError(
            f"config brokers={brokers} with Kafka {version}: clusters run in KRaft mode only "
            "(3.3 or newer)"
        )
    per_node = len(prep.names) + 2  # the listeners, the controller, the metrics agent

    def build() -> LocalCluster:
        ports = port_picker(per_node * brokers)
        controller = [ports[i * per_node + len(prep.names)] for i in range(brokers)]
        voters = ",".join(f"{i + 1}@{LOOPBACK}:{port}" for i, port in enumerate(controller))
        uuid = cluster_id()
        nodes = []
        for i in range(brokers):
            mine = ports[i * per_node : (i + 1) * per_node]
            plan = ListenerPlan(
                names=prep.names,
                ports=dict(zip(prep.names, mine[: len(prep.names)], strict=True)),
                controller_port=controller[i],
                inter_broker_listener=prep.inter_broker_listener,
                specs=prep.specs,
                node_id=i + 1,
                voters=voters,
                advertised=dict((advertised or {}).get(i + 1, {})),
            )
            node_dir = prep.workdir / f"broker-{i + 1}"
            shutil.rmtree(node_dir / "data", ignore_errors=True)  # the quorum is formatted in
            node_dir.mkdir(parents=True, exist_ok=True)
            nodes.append(
                prep.broker(
                    plan, node_dir, mine[-1], ready_timeout_s=ready_timeout_s, cluster_uuid=uuid
                )
            )
        return LocalCluster(nodes, prep.workdir, prep.temp_workdir)

    def start(cluster: LocalCluster) -> None:
        started = time.monotonic()
        local = [node for node in cluster.brokers if isinstance(node, LocalBroker)]
        offsets = [node.launch() for node in local]
        for node, offset in zip(local, offsets, strict=True):
            node.await_ready(offset)
        cluster.wait_members(max(10.0, ready_timeout_s - (time.monotonic() - started)))
        progress(
            f"cluster of {brokers} ready in {time.monotonic() - started:.1f} s: {cluster.bootstrap}"
        )

    return on_fresh_ports(
        build,
        start,
        workdir=prep.workdir,
        temp_workdir=prep.temp_workdir,
        progress=progress,
        what="the cluster ",
    )


def start_container_cluster(
    brokers: int,
    *,
    properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
    inter_broker_listener: str | None = None,
    workdir: Path,
    ready_timeout_s: float = 180,
    progress: Progress = print,
    image: str | None = None,
    sasl_users: Sequence[str] = DEFAULT_USERS,
    advertised: Mapping[int, Mapping[str, str]] | None = None,
    port_picker: Callable[[int], list[int]] = free_ports,
) -> LocalCluster:
    """``brokers`` combined KRaft nodes, each in its own container of the local image on the
    host network (node i: node id i, its own ports, its log in ``<workdir>/broker-<i>``), as
    `start_local_cluster` plans them; returns once every node serves and the first node's
    Metadata lists them all (a `LocalCluster` of container nodes)."""
    from broker.container import (
        agent_jar,
        ensure_image,
        launch_node,
        require_engine,
        wait_serving,
    )
    from broker.secured import check_listeners

    check_cluster_size(brokers)
    require_engine()
    props = dict(properties or {})
    checked = check_listeners(listeners, None, inter_broker_listener, props, sasl_users=sasl_users)
    names = checked.names
    tag = image or ensure_image(progress)
    exporter = agent_jar(progress)
    per_node = len(names) + 2  # the listeners, the controller, the metrics agent
    started = time.monotonic()

    def build() -> LocalCluster:
        ports = port_picker(per_node * brokers)
        controller = [ports[i * per_node + len(names)] for i in range(brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(controller))
        uuid = cluster_id()
        nodes: list[ContainerBroker] = []
        try:
            for i in range(brokers):
                mine = ports[i * per_node : (i + 1) * per_node]
                plan = checked.plan(
                    mine[: len(names)],
                    controller[i],
                    node_id=i + 1,
                    voters=voters,
                    advertised=dict((advertised or {}).get(i + 1, checked.advertised)),
                )
                node_dir = Path(workdir) / f"broker-{i + 1}"
                node_dir.mkdir(parents=True, exist_ok=True)
                nodes.append(
                    launch_node(
                        plan,
                        props,
                        tag=tag,
                        exporter=exporter,
                        metrics_port=mine[-1],
                        uuid=uuid,
                        workdir=node_dir,
                        ready_timeout_s=ready_timeout_s,
                        progress=progress,
                        checked=checked,
                    )
                )
        except BaseException:
            for node in reversed(nodes):
                with contextlib.suppress(Exception):
                    node.stop()
            raise
        for node in nodes:
            node.fellows = [other for other in nodes if other is not node]
        return LocalCluster(nodes, Path(workdir), False)

    def start(cluster: LocalCluster) -> None:
        for node in cluster.brokers:
            wait_serving(cast("ContainerBroker", node), started, progress)
        cluster.wait_members(max(10.0, ready_timeout_s - (time.monotonic() - started)))
        for node in cluster.brokers:
            cast("ContainerBroker", node).fellows = ()

    cluster = on_fresh_ports(build, start, progress=progress, what="the cluster ")
    progress(
        f"cluster of {brokers} containers ready in {time.monotonic() - started:.1f} s: "
        f"{cluster.bootstrap}"
    )
    return cluster
