"""A real Apache Kafka broker on demand, for the harness and its tests.

The harness proves limits against the real thing, so there is no fake broker: ``start_broker``
gives a single-node KRaft broker (combined broker+controller) from one of three launchers:

``local``
    Apache Kafka's published jars from Maven Central (resolved once with ``mvn`` and cached in
    ``<project>/.cache/kafka/<version>/``, or ``$HARNESS_CACHE_DIR``), run with the machine's
    Java 17 in its own process group. Data dir, ``server.properties``, ``log4j2.properties`` and
    ``broker.log`` live in ``workdir`` (a temporary dir, removed on stop, when none is given).
``container``
    the harness's locally built Kafka image (``broker.images``: Debian's JRE + the same
    jars; built on first use, no registry) through testcontainers, on the host network.
``external``
    an existing cluster at ``bootstrap_server``: checked to answer ApiVersions, never started,
    paused or stopped.

``auto`` picks ``external`` when ``bootstrap_server`` is given, else ``container`` when Docker
answers (falling back to ``local``, with a one-line reason, when the image cannot be had), else
``local``. Every listener gets a free port on ``listen_host`` (127.0.0.1 unless the load
comes from elsewhere, such as the bridge to a run's worker hosts); ``advertised`` lets a
listener advertise another address (the acceptor in front). Kafka's own limits go in
``properties`` under Kafka's keys. Example::

    with start_broker(properties={"max.connections.per.ip": "50"}) as broker:
        print(broker.bootstrap, broker.version)
        broker.pause(); broker.resume(); broker.restart()

``run_tool("kafka-configs", "--bootstrap-server", ...)`` runs Kafka's own command-line tools
from the same cached jars. Every failure is a :class:`BrokerError` saying what to do next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from base.localnet import LOOPBACK
from base.security.sasl import DEFAULT_USERS
from broker.artifacts import KAFKA_VERSION, Progress, fetch_artifacts, resolve_artifacts
from broker.base import Broker, ExternalBroker
from broker.errors import BrokerError, UnsupportedOperation
from broker.tools import run_tool

LAUNCHERS = ("auto", "local", "container", "external")

__all__ = [
    "KAFKA_VERSION",
    "LAUNCHERS",
    "Broker",
    "BrokerError",
    "UnsupportedOperation",
    "fetch_artifacts",
    "resolve_artifacts",
    "run_tool",
    "start_broker",
]


def choose_launcher(launcher: str, bootstrap_server: str | None) -> str:
    """Resolve ``auto`` and check the combination makes sense."""
    if launcher not in LAUNCHERS:
        raise BrokerError(f"config launcher={launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    if bootstrap_server and launcher not in ("auto", "external"):
        raise BrokerError(
            f"config launcher={launcher!r} with bootstrap_server={bootstrap_server!r}: "
            "an existing cluster is only used by the external launcher; drop one of them"
        )
    if launcher == "external" and not bootstrap_server:
        raise BrokerError("config launcher='external': needs bootstrap_server=HOST:PORT")
    if launcher != "auto":
        return launcher
    if bootstrap_server:
        return "external"
    from broker.container import docker_available

    return "container" if docker_available(timeout_s=2.0)[0] else "local"


def start_broker(
    *,
    launcher: str = "auto",
    bootstrap_server: str | None = None,
    properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
    advertised: Mapping[str, str] | None = None,
    inter_broker_listener: str | None = None,
    workdir: Path | None = None,
    ready_timeout_s: float = 120,
    progress: Progress = print,
    request_log: bool = False,
    client_config: Mapping[str, str] | None = None,
    version: str | None = None,
    zookeeper: bool | None = None,
    sasl_users: Sequence[str] = DEFAULT_USERS,
    listen_host: str = LOOPBACK,
) -> Broker:
    """Start (or find) a Kafka broker and return once it answers ApiVersions and Metadata.

    ``request_log``: the local launcher turns on Kafka's request logger into
    ``broker.request_log_path`` (see `start_local`); other launchers leave it None.
    ``client_config``: an existing cluster's client keys (``--command-config``) when its
    bootstrap listener is secured; the probe then speaks TLS and SASL.
    ``version``: the Kafka release to run (its jars resolved from Maven Central once);
    a release other than `KAFKA_VERSION` runs on the local launcher when ``auto`` (said
    aloud), or in its own image (``kafka-connection-harness/kafka:<version>``, built on
    first use) with ``launcher="container"`` for KRaft releases.
    ``listen_host``: where a started broker's client listeners listen and what they
    advertise; its bootstrap, ``address()`` and readiness probe use it (`start_local`).
    """
    other_version = version is not None and version != KAFKA_VERSION
    if other_version and (bootstrap_server or launcher == "external"):
        raise BrokerError(
            f"config kafka_version={version!r} with launcher={launcher!r}"
            + (f" and bootstrap_server={bootstrap_server!r}" if bootstrap_server else "")
            + ": an existing cluster runs its own release; drop --kafka-version"
        )
    if zookeeper and (bootstrap_server or launcher in ("container", "external")):
        raise BrokerError(
            f"config zookeeper with launcher={launcher!r}: ZooKeeper mode runs on the local "
            "launcher (it starts its own ZooKeeper)"
        )
    if (other_version or zookeeper) and launcher == "auto":
        progress(
            f"Kafka {version or KAFKA_VERSION}"
            + (" in ZooKeeper mode" if zookeeper else "")
            + f": the local launcher runs it (images hold {KAFKA_VERSION} in KRaft mode)"
        )
        launcher = "local"
    chosen = choose_launcher(launcher, bootstrap_server)
    if chosen == "external":
        assert bootstrap_server is not None
        if listen_host != LOOPBACK:
            raise BrokerError(
                f"config listen_host={listen_host!r} with bootstrap_server="
                f"{bootstrap_server!r}: an existing cluster listens where its operators put "
                "it; drop one of them"
            )
        if properties or advertised or tuple(listeners) != ("PLAINTEXT",):
            raise BrokerError(
                "config properties/listeners/advertised: an external cluster is configured by "
                "its operators, not by the harness; drop them or use --launcher local"
            )
        from broker.probe import check_reachable

        result = check_reachable(
            bootstrap_server, timeout_s=min(ready_timeout_s, 30), client_config=client_config
        )
        port = int(bootstrap_server.rpartition(":")[2])
        return ExternalBroker(
            bootstrap=bootstrap_server,
            listener_ports={"PLAINTEXT": port},
            version=result.inferred_version(),
        )
    if chosen == "container":
        from broker.container import ContainerUnavailable, ensure_image, start_container
        from broker.local import zookeeper_mode

        if version is not None and zookeeper_mode(version, zookeeper):
            raise BrokerError(
                f"config kafka_version={version!r} with launcher='container': Kafka {version} "
                "runs in ZooKeeper mode, which the harness starts on the local launcher only "
                "(a container runs a KRaft release, 3.3 or newer)"
            )
        try:
            return start_container(
                image=ensure_image(progress, version) if other_version and version else None,
                properties=properties,
                listeners=listeners,
                advertised=advertised,
                inter_broker_listener=inter_broker_listener,
                workdir=Path(workdir) if workdir is not None else None,
                ready_timeout_s=ready_timeout_s,
                progress=progress,
                sasl_users=sasl_users,
                listen_host=listen_host,
            )
        except ContainerUnavailable as exc:
            if launcher != "auto":
                raise
            progress(f"using the local launcher instead of a container: {exc}")
    from broker.local import start_local

    return start_local(
        version=version or KAFKA_VERSION,
        properties=properties,
        listeners=listeners,
        advertised=advertised,
        inter_broker_listener=inter_broker_listener,
        workdir=Path(workdir) if workdir is not None else None,
        ready_timeout_s=ready_timeout_s,
        progress=progress,
        request_log=request_log,
        zookeeper=zookeeper,
        sasl_users=sasl_users,
        listen_host=listen_host,
    )
