"""Start a real single-node Kafka broker (KRaft) and keep it running until Ctrl-C / SIGTERM.

Apache Kafka's jars come from Maven Central once and are cached in .cache/kafka/<version>/
(--fetch-only does just that, for `make setup`). The broker's data, config and broker.log go to
--workdir (default runs/broker-<UTC timestamp>/). Kafka's own settings, including its connection
limits, are passed with --set key=value, e.g.
  harness broker --set max.connections.per.ip=20 --set max.connection.creation.rate=50
A listener advertised elsewhere (an acceptor in front) is
  harness broker --listener CLIENT --listener INTERNAL \\
      --set advertised.listeners=CLIENT://127.0.0.1:19092 --set inter.broker.listener.name=INTERNAL
Secured listeners (docs/security.md): --secure starts PLAINTEXT (inter-broker), SASL_SSL
(SCRAM-SHA-512) and SSL (client certificate requested); or name each one:
  harness broker --listener PLAINTEXT --listener MTLS=SSL:mtls \\
      --listener SASL=SASL_SSL:SCRAM-SHA-512,PLAIN --listener SASLP=SASL_PLAINTEXT:PLAIN
The CA, certificates and SASL passwords are made fresh at each start in <workdir>/private
(0700, removed on stop); a `client-config:` line names each listener's client.properties.
A `metrics:` line gives the URL of each node's Prometheus JMX exporter (Kafka's own
metrics), which `harness run --broker-metrics-url` takes when the broker is used as an
existing cluster; a `gate it:` line shows that whole command for the catalog's gate.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any


class _Stop(Exception):
    """Raised in the main thread by our SIGINT/SIGTERM handler."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--launcher",
        choices=("auto", "local", "container", "external"),
        default="auto",
        help="auto: container when a Docker engine answers, else local (default: auto)",
    )
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="use an existing cluster instead of starting one (checked with ApiVersions)",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker property under Kafka's key (repeatable)",
    )
    parser.add_argument(
        "--listener",
        dest="listeners",
        action="append",
        default=[],
        metavar="NAME[=PROTOCOL[:OPTIONS]]",
        help="a client-facing listener, each on a free 127.0.0.1 port (repeatable; default "
        "PLAINTEXT). PROTOCOL: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; OPTIONS, comma-"
        "separated: SASL mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), mtls[=requested], "
        "cert=expired|wrong-host. E.g. SSL=SSL, SASL=SASL_SSL:SCRAM-SHA-512",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="three listeners: PLAINTEXT (inter-broker), SASL_SSL=SASL_SSL:SCRAM-SHA-512 and "
        "SSL=SSL:mtls=requested (before any --listener)",
    )
    parser.add_argument(
        "--sasl-user",
        dest="sasl_users",
        action="append",
        default=[],
        metavar="NAME",
        help="a SASL user with a fresh random password (repeatable; default alice and bob; "
        "client.properties log in as the first)",
    )
    parser.add_argument(
        "--kafka-version",
        metavar="X.Y.Z",
        default=None,
        help="the Kafka release to run (default: the harness's own; another one runs on the "
        "local launcher, its jars resolved from Maven Central once)",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="a KRaft cluster of N nodes, each a broker and a controller with its own ports "
        "(default 1; docs/clusters.md)",
    )
    parser.add_argument(
        "--zookeeper",
        action="store_true",
        help="keep the metadata in a ZooKeeper the harness starts and stops (releases before "
        "4.0; the default before 3.3); local launcher",
    )
    parser.add_argument("--workdir", type=Path, help="data dir + broker.log (a run folder)")
    parser.add_argument(
        "--request-log",
        action="store_true",
        help="Kafka's request logger into <workdir>/request.log: one JSON line per completed "
        "request (listener, principal, handler time); local launcher",
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=120.0, metavar="SECONDS", help="default 120"
    )
    parser.add_argument(
        "--fetch-only",
        action="store_true",
        help="resolve and cache Kafka's jars, then exit (no broker is started)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="remove the harness's containers whose harness process is gone, then exit "
        "(every container start does this too)",
    )


def parse_settings(items: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` -> dict; a malformed item is a clear error."""
    from broker.errors import BrokerError

    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BrokerError(
                f"config --set {item!r}: expected key=value, e.g. max.connections=100"
            )
        out[key] = value.strip()
    return out


def _sweep() -> int:
    from broker.container import docker_available, sweep
    from broker.images import docker_client

    ok, why = docker_available()
    if not ok:
        print(f"sweep: nothing to do ({why})")
        return 0
    client = docker_client()
    try:
        removed = sweep(client)
    finally:
        client.close()
    print(f"sweep: removed {removed} container(s) left behind by harness processes that are gone")
    return 0


def _progress(message: str) -> None:
    from base.security.secrets import mask

    print(mask(message), flush=True)


def _error(message: str) -> None:
    from base.security.secrets import mask

    print(f"error: {mask(message)}", file=sys.stderr)


def listener_specs(args: argparse.Namespace) -> tuple[str, ...]:
    """The listeners asked for: --secure's three, then every --listener; PLAINTEXT if none."""
    from broker.config import SECURE_LISTENERS

    listeners = (*(SECURE_LISTENERS if args.secure else ()), *args.listeners)
    return listeners or ("PLAINTEXT",)


def _kafka_version(text: str | None) -> str | None:
    """``--kafka-version``: a release the quota model knows (2.7.0 or newer), as X.Y.Z."""
    from base.quota.config import ConfigError
    from base.quota.versions import release
    from broker.errors import BrokerError

    try:
        return None if text is None else release(text, key="--kafka-version")
    except ConfigError as exc:
        raise BrokerError(str(exc)) from None


def metrics_absent(broker: Any) -> str:
    """The `metrics:` line of a broker without a known JMX exporter URL: why, and what to do."""
    if getattr(broker, "launcher", "") == "external":
        return (
            "none known for an existing cluster: give `harness run` its JMX exporter's URL "
            "with --broker-metrics-url (N=URL per broker)"
        )
    return (
        "none (the JMX exporter is off: HARNESS_BROKER_METRICS=0, or its agent could not be "
        "resolved); the metric checks of a run against it are unknown"
    )


def gate_command(listener_ports: Any, broker: Any, metrics: str | None) -> str:
    """`harness run ci-gate` against this broker as an existing cluster: its first secured
    listener with that listener's client config (else its first listener), and its
    metrics URL (one, or ``N=URL,...`` for a cluster), as an operator would type it."""
    configs = dict(getattr(broker, "client_configs", None) or {})
    names = list(listener_ports)
    secured = [n for n in names if n in configs]
    name = (secured or names or ["PLAINTEXT"])[0]
    port = listener_ports.get(name, getattr(broker, "port", ""))
    return (
        f"harness run ci-gate --target broker --bootstrap-server {broker.host}:{port}"
        + (f" --command-config {configs[name]}" if name in configs else "")
        + (f" --broker-metrics-url {metrics}" if metrics else "")
        + " --gate"
    )


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    from broker import KAFKA_VERSION, Broker, BrokerError, fetch_artifacts, start_broker

    if args.sweep:
        return _sweep()
    try:
        version = _kafka_version(args.kafka_version)
        if args.fetch_only:
            fetch_artifacts(progress=_progress, version=version or KAFKA_VERSION)
            return 0
        properties = parse_settings(args.settings)
        from broker.config import parse_listener

        listeners = listener_specs(args)
        secured = any(parse_listener(text).secured for text in listeners)
        if secured and args.bootstrap_server:
            raise BrokerError(
                "config --secure/--listener with --bootstrap-server: an existing cluster's "
                "listeners are its own; drop one of them"
            )
        if args.sasl_users and not secured:
            raise BrokerError("config --sasl-user: needs a SASL listener (--secure or --listener)")
        if args.brokers != 1 and args.zookeeper:
            raise BrokerError(f"config --brokers {args.brokers} --zookeeper: clusters run in KRaft")
        if args.brokers != 1 and args.bootstrap_server:
            raise BrokerError(
                f"config --brokers {args.brokers} with --bootstrap-server: an existing cluster "
                "has its own brokers; drop one of them"
            )
    except BrokerError as exc:
        _error(str(exc))
        return 1 if args.fetch_only else 2

    # Ours before the launcher looks: it then leaves SIGTERM to us and we stop it cleanly.
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker: Broker | None = None
    try:
        workdir = args.workdir
        if workdir is None and not args.bootstrap_server:
            workdir = Path("runs") / time.strftime("broker-%Y%m%dT%H%M%SZ", time.gmtime())
        launcher = (
            "external" if args.bootstrap_server and args.launcher == "auto" else args.launcher
        )
        if args.brokers != 1:
            return _run_cluster(args, version or KAFKA_VERSION, properties, listeners, workdir)
        from base.security.sasl import DEFAULT_USERS

        broker = start_broker(
            version=version,
            zookeeper=True if args.zookeeper else None,
            launcher=launcher,
            bootstrap_server=args.bootstrap_server,
            properties=properties,
            listeners=listeners,
            workdir=workdir,
            ready_timeout_s=args.ready_timeout,
            progress=_progress,
            request_log=args.request_log,
            sasl_users=tuple(args.sasl_users) or DEFAULT_USERS,
        )
        pid = f", pid {broker.pid}" if broker.pid else ""
        print(f"kafka {broker.version} ready ({broker.launcher} launcher{pid})")
        zk = getattr(broker, "zookeeper", None)
        if zk is not None:
            print(f"zookeeper: {zk.connect} (pid {zk.pid}, log {zk.log_path})")
        print(f"bootstrap: {broker.bootstrap}")
        for name, port in broker.listener_ports.items():
            print(f"listener: {name}={broker.host}:{port}")
        printed: set[Path] = set()
        for key, path in broker.client_configs.items():
            if path not in printed:  # "SASL_SSL" and "SASL_SSL:<its first mechanism>": once
                printed.add(path)
                print(f"client-config: {key}={path}")
        if broker.private_dir is not None:
            print(f"private: {broker.private_dir} (certificates, passwords; 0700, removed on stop)")
        url = getattr(broker, "metrics_url", None)
        print(f"metrics: {url or metrics_absent(broker)}")
        if broker.launcher != "external":
            print(f"gate it: {gate_command(broker.listener_ports, broker, url)}")
        if broker.log_path:
            print(f"log: {broker.log_path}")
        if broker.request_log_path:
            print(f"request-log: {broker.request_log_path}")
        if broker.launcher == "external":
            return 0
        return _serve([("the broker", broker)])
    except _Stop as stop:
        print(f"{stop}: stopping the broker…", flush=True)
        return 0 if broker is not None else 130
    except BrokerError as exc:
        _error(str(exc))
        return 1
    finally:
        _shutdown(broker, "broker")
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_cluster(
    args: argparse.Namespace,
    version: str,
    properties: dict[str, str],
    listeners: tuple[str, ...],
    workdir: Path,
) -> int:
    """`--brokers N`: start the cluster, print each node, wait for Ctrl-C / SIGTERM (the
    caller's handlers raise `_Stop`), stop every node."""
    from base.security.sasl import DEFAULT_USERS
    from broker.cluster import LocalCluster, start_cluster
    from broker.errors import BrokerError

    cluster: LocalCluster | None = None
    try:
        cluster = start_cluster(
            args.brokers,
            launcher=args.launcher,
            properties=properties,
            listeners=listeners,
            workdir=workdir,
            ready_timeout_s=args.ready_timeout,
            progress=_progress,
            version=version,
            request_log=args.request_log,
            sasl_users=tuple(args.sasl_users) or DEFAULT_USERS,
        )
        print(
            f"kafka {cluster.version} cluster of {len(cluster.brokers)} ready "
            f"({cluster.launcher} launcher)"
        )
        print(f"bootstrap: {cluster.bootstrap}")
        for b in cluster.brokers:
            node = b.plan.node_id
            where = f"pid {b.pid}" if b.pid else f"container {getattr(b, 'container_id', '?')[:12]}"
            print(f"broker {node}: {where}, log {b.log_path}")
            for name, port in b.listener_ports.items():
                print(f"listener: broker {node} {name}={b.host}:{port}")
            for key, path in b.client_configs.items():
                print(f"client-config: broker {node} {key}={path}")
            print(f"metrics: broker {node} {b.metrics_url or metrics_absent(b)}")
        urls = {b.plan.node_id: b.metrics_url for b in cluster.brokers if b.metrics_url}
        per_node = ",".join(f"{n}={u}" for n, u in sorted(urls.items()))
        first = cluster.brokers[0]
        print(f"gate it: {gate_command(first.listener_ports, first, per_node or None)}")
        return _serve([(f"broker {b.plan.node_id}", b) for b in cluster.brokers])
    except _Stop as stop:
        print(f"{stop}: stopping the cluster…", flush=True)
        return 0 if cluster is not None else 130
    except BrokerError as exc:
        _error(str(exc))
        return 1
    finally:
        _shutdown(cluster, "cluster")


def _serve(nodes: list[tuple[str, Any]]) -> int:
    """Serve until Ctrl-C / SIGTERM (the caller's handlers raise `_Stop` out of here) or
    until a node exits by itself: then its log's last lines, and 1."""
    from broker.errors import tail

    print("Ctrl-C to stop", flush=True)
    while True:
        time.sleep(0.5)
        for label, node in nodes:
            if getattr(node, "running", True) is False:
                log = node.log_path.read_text(errors="replace") if node.log_path else ""
                print(
                    f"error: {label} exited unexpectedly; last lines of {node.log_path}:\n"
                    f"{tail(log)}",
                    file=sys.stderr,
                )
                return 1


def _shutdown(what: Any, name: str) -> None:
    """Stop a started broker or cluster; a second Ctrl-C while stopping must not leave a
    JVM behind, so both signals are ignored from here on."""
    if what is None:
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    what.stop()
    print(f"{name} stopped", flush=True)
