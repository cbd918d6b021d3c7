"""The same single-node KRaft broker, in a container driven by testcontainers.

The image is the harness's own (:mod:`broker.images`: Debian's JRE and the Maven-resolved
Kafka jars, built locally; no registry), configured like the official ``apache/kafka`` image
through ``KAFKA_*`` variables computed from the very server.properties the local launcher writes.
With secured listeners nothing secret goes into the container's environment (``docker
inspect`` shows it): the node's private folder (`broker.secured`) is mounted at its own
path, and the entrypoint reads the real server.properties and the SCRAM users' format
arguments from it (``HARNESS_SERVER_PROPERTIES``, ``HARNESS_FORMAT_ARGS``; the format's
output, which prints SCRAM records, goes to ``HARNESS_FORMAT_LOG`` there, not the log).

Host networking, not published ports: Docker's port publishing puts a userland proxy in front of
the broker, so Kafka would see every client as the bridge gateway and ``max.connections.per.ip``
could never be exercised. On the host network the broker listens on 127.0.0.1 ports exactly like
the local launcher, and sees the 127.0.0.x source addresses the load binds.

No reaper: testcontainers' Ryuk needs an image from a registry. Instead every container carries
our labels (owner, host, the harness's pid); a sweep at each start removes containers whose
harness process is gone, and the entrypoint (with the host's pid namespace) stops the broker as
soon as that process disappears, so even a SIGKILLed harness leaves no broker running.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from base import procfs, supervisor
from base.localnet import LOOPBACK, free_ports
from base.security.sasl import DEFAULT_USERS
from broker.artifacts import KAFKA_VERSION, Progress
from broker.base import Broker, NotReady
from broker.config import ListenerPlan, server_properties
from broker.errors import BrokerError, PortInUse, lost_a_port, tail
from broker.local import cluster_id, on_fresh_ports
from broker.probe import ProbeResult
from broker.secured import PRIVATE_DIR, CheckedListeners, NodeSecurity, check_listeners

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

DATA_DIR = "/var/lib/kafka/data"
JMX_DIR = "/opt/kafka/jmx"
#: Labels on every container the harness starts; ``sweep`` finds them by OWNER_LABEL.
OWNER_LABEL = "org.kafka-connection-harness.owner"
OWNER = "kafka-connection-harness"
PID_LABEL = "org.kafka-connection-harness.pid"
HOST_LABEL = "org.kafka-connection-harness.host"
ROLE_LABEL = "org.kafka-connection-harness.role"
STOP_TIMEOUT_S = 30
#: runc's cgroup-v1 freezer can fail to freeze a busy cgroup ("unable to freeze": it retries,
#: then thaws and gives up; opencontainers/runc#2791 calls freezing "a game of chances"), so
#: a pause is tried this many times, 0.1 s more apart each time, before the fault fails
PAUSE_ATTEMPTS = 5
_VERSION_RE = re.compile(r"Kafka version: (\S+)")


class ContainerUnavailable(BrokerError):
    """No engine, no image, or the engine refused the container: nothing was started.

    ``auto`` falls back to the local launcher on this error (and says why).
    """


def docker_available(timeout_s: float = 3.0) -> tuple[bool, str]:
    """(True, "") when a Docker engine answers a ping quickly; else (False, why not)."""
    try:
        import docker
    except ImportError:
        return False, "the docker package is not installed (pip install '.[container]')"
    try:
        client = docker.from_env(timeout=int(max(1, timeout_s)))
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return False, f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return True, ""


def env_for(props: Mapping[str, str]) -> dict[str, str]:
    """server.properties -> ``KAFKA_*`` variables (the official image's convention, which the
    local image's entrypoint shares): ``_`` -> ``__``, ``-`` -> ``___``, ``.`` -> ``_``."""
    return {
        "KAFKA_" + key.replace("_", "__").replace("-", "___").replace(".", "_").upper(): value
        for key, value in props.items()
    }


PID_START_LABEL = "org.kafka-connection-harness.pid-start"


def our_labels(role: str) -> dict[str, str]:
    return {
        OWNER_LABEL: OWNER,
        PID_LABEL: str(os.getpid()),
        PID_START_LABEL: procfs.start_time(os.getpid()),
        HOST_LABEL: socket.gethostname(),
        ROLE_LABEL: role,
    }


def sweep(client: Any, *, everything: bool = False, progress: Progress | None = None) -> int:
    """Remove our containers whose harness process is gone (all of ours with ``everything``).

    Containers of another host (a shared engine) are left alone unless ``everything``.
    Returns how many were removed.
    """
    removed = 0
    for c in client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={OWNER}"}):
        labels = c.labels or {}
        pid = labels.get(PID_LABEL, "")
        ours = labels.get(HOST_LABEL) == socket.gethostname()
        started = labels.get(PID_START_LABEL, "")
        orphan = ours and (not pid.isdigit() or not procfs.alive(int(pid), started))
        if everything or orphan:
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
                removed += 1
    if removed and progress:
        progress(f"removed {removed} container(s) left behind by an earlier harness process")
    return removed


class ContainerBroker(Broker):
    """A broker in a Docker container; pause/resume/kill/restart act on the container."""

    launcher = "container"
    #: the image runs KRaft only (no ZooKeeper of its own, as `LocalBroker.zookeeper`)
    zookeeper = None

    def __init__(
        self,
        container: Any,
        plan: ListenerPlan,
        version: str,
        timeout_s: float,
        *,
        image: str,
        workdir: Path | None,
        metrics_port: int | None,
        secured: NodeSecurity | None = None,
    ) -> None:
        super().__init__(
            bootstrap=f"{plan.host}:{plan.ports[plan.first]}",
            listener_ports=dict(plan.ports),
            version=version,
            log_path=(workdir / "broker.log") if workdir else None,
            workdir=workdir,
        )
        self.container = container
        self.image = image
        self.plan = plan
        self.controller_port = plan.controller_port
        self.metrics_port = metrics_port
        #: ``http://127.0.0.1:PORT/metrics`` of the JMX exporter in the container, or None
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None
        self._timeout_s = timeout_s
        self._stopped = False
        #: `on_fresh_ports`'s protocol: a container's workdir is the caller's, never removed
        self._temp_workdir = False
        #: while its cluster starts, the other nodes: a node cannot serve before a quorum
        #: has, so waiting for it ends when any of them has exited (`_exited`). Empty once
        #: the cluster serves (a node restarted later may serve without a killed one).
        self.fellows: Sequence[ContainerBroker] = ()
        self._lock = threading.RLock()
        self._secured = secured
        if secured is not None:
            self.security = secured.security
            self.private_dir = secured.folder
            self.client_configs = secured.client_configs(plan, self.address)

    @property
    def security_files(self) -> Any:
        """File names of the private material (None without secured listeners)."""
        return self._secured.files if self._secured is not None else None

    def _wrapped(self) -> Any:
        return self.container.get_wrapped_container()

    @property
    def container_id(self) -> str:
        return str(self._wrapped().id)

    @property
    def running(self) -> bool:
        """The container exists and runs (it may be paused)."""
        try:
            c = self._wrapped()
            c.reload()
            return c.status in ("running", "paused")
        except Exception:
            return False

    def logs(self, lines: int | None = None) -> str:
        with contextlib.suppress(Exception):
            raw = self._wrapped().logs(tail=lines if lines else "all")
            return bytes(raw).decode(errors="replace")
        return ""

    def _save_log(self) -> None:
        """The container's output into ``workdir/broker.log`` (the local launcher's place)."""
        if self.log_path is None:
            return
        text = self.logs()
        if text:
            with contextlib.suppress(OSError):
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self.log_path.write_text(text)

    def _exited(self) -> BrokerError | None:
        """The container's end, as soon as it has exited: `PortInUse` when the broker or its
        metrics agent could not bind a port it was given (another process took it after it
        was picked), else the broker's failure with the container's last lines."""
        for node in (self, *self.fellows):
            gone = node._exit_code()
            if gone is not None:
                text = node.logs()
                kind: type[BrokerError] = PortInUse if lost_a_port(text) else BrokerError
                return kind(
                    f"{node.image} (container {node.container_id[:12]}) exited (code {gone}) "
                    f"before serving on {node.bootstrap}; last container log lines:\n"
                    f"{tail(text)}"
                )
        return None

    def _exit_code(self) -> int | None:
        """The container's exit code once it has exited; None while it runs (or when the
        engine did not answer this time)."""
        try:
            c = self._wrapped()
            c.reload()
            if c.status not in ("exited", "dead"):
                return None
            return int(c.attrs.get("State", {}).get("ExitCode", -1))
        except Exception:
            return None

    def wait_ready(self, timeout_s: float | None = None) -> ProbeResult:
        try:
            return super().wait_ready(self._timeout_s if timeout_s is None else timeout_s)
        except NotReady as exc:
            raise NotReady(
                f"{self.image} (container {self.container_id[:12]}, running): {exc}; last "
                f"container log lines:\n{tail(self.logs(60))}"
            ) from exc

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._save_log()
            with contextlib.suppress(Exception):
                self._wrapped().remove(force=True, v=True)
            with contextlib.suppress(Exception):
                self.container.get_docker_client().client.close()
            supervisor.unregister(self)
            if self._secured is not None:
                self._secured.remove()

    def pause(self) -> None:
        self._require("pause")
        pause_retrying(self._wrapped().pause)

    def resume(self) -> None:
        self._require("resume")
        self._wrapped().unpause()

    def kill(self) -> None:
        self._require("kill")
        self._wrapped().kill()
        self._wrapped().wait(timeout=STOP_TIMEOUT_S)

    def restart(self) -> None:
        """Stop (SIGTERM, clean shutdown) and start the same container: same ports, same
        formatted data dir; waits until the broker serves again."""
        with self._lock:
            if self._stopped:
                raise BrokerError("this broker was stopped and its container removed")
            c = self._wrapped()
            c.reload()
            if c.status == "paused":
                c.unpause()
            c.restart(timeout=STOP_TIMEOUT_S)
            self.wait_ready()

    def _require(self, what: str) -> None:
        if self._stopped or not self.running:
            raise BrokerError(
                f"cannot {what}: the broker container is not running; restart() starts it again"
            )


def agent_jar(progress: Progress) -> Any:
    """The JMX exporter (the image carries it), or None when it cannot be had."""
    try:
        from broker.artifacts import jmx_exporter
    except ImportError:
        return None
    if os.environ.get("HARNESS_BROKER_METRICS", "1") in ("0", "false", "no"):
        return None
    try:
        return jmx_exporter(progress=progress)
    except BrokerError as exc:
        progress(f"starting without Kafka's JMX metrics: {exc}")
        return None


def ensure_image(progress: Progress, version: str = KAFKA_VERSION) -> str:
    """The local Kafka image's tag, built first if missing; ContainerUnavailable if it cannot be."""
    from broker.images import docker_client, ensure_kafka_image

    try:
        client = docker_client(timeout_s=900)
        built = ensure_kafka_image(client, version, progress)
    except ContainerUnavailable:
        raise
    except BrokerError as exc:
        raise ContainerUnavailable(f"no usable Kafka image: {exc}") from exc
    if not built.reused:
        progress(f"image {built.describe()}")
    sweep(client, progress=progress)
    client.close()
    return built.tag


def require_engine() -> None:
    ok, why = docker_available()
    if not ok:
        raise ContainerUnavailable(
            f"the container launcher needs a Docker engine: {why}; start one (Debian: "
            "apt-get install docker.io; dockerd as root) or use --launcher local"
        )


def launch_node(
    plan: ListenerPlan,
    props: Mapping[str, str],
    *,
    tag: str,
    exporter: Any,
    metrics_port: int,
    uuid: str,
    workdir: Path | None,
    ready_timeout_s: float,
    progress: Progress,
    checked: CheckedListeners,
) -> ContainerBroker:
    """Start one node's container (the local launcher's exact server.properties as
    ``KAFKA_*`` variables, or with secured listeners as a file in its mounted private
    folder; host network) and return it, not yet waited for."""
    secured: NodeSecurity | None = None
    if checked.security is not None:
        assert workdir is not None, "secured listeners need a workdir for their private folder"
        secured = NodeSecurity(checked.security, Path(workdir).resolve() / PRIVATE_DIR)
        props = secured.properties(plan, props)
    conf = server_properties(plan, DATA_DIR, props)

    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer

    testcontainers_config.ryuk_disabled = True  # Ryuk's image needs a registry; we sweep
    container = DockerContainer(tag)
    if secured is None:
        for key, value in env_for(conf).items():
            container.with_env(key, value)
    else:
        assert workdir is not None
        secured.write_config(conf, Path(workdir) / "server.properties")
        container.with_volume_mapping(str(secured.folder), str(secured.folder), "rw")
        for key, value in secured.entrypoint_env(uuid, plan).items():
            container.with_env(key, value)
    container.with_env("CLUSTER_ID", uuid)
    container.with_env("HARNESS_WATCH_PID", str(os.getpid()))
    container.with_env("HARNESS_WATCH_PID_START", procfs.start_time(os.getpid()))
    if exporter is not None:
        container.with_env(
            "KAFKA_OPTS",
            f"-javaagent:{JMX_DIR}/jmx_prometheus_javaagent.jar="
            f"127.0.0.1:{metrics_port}:{JMX_DIR}/jmx-exporter.yaml",
        )
    # "network" (not network_mode) also stops testcontainers from picking a network itself.
    container.with_kwargs(network="host", pid_mode="host", labels=our_labels("broker"))
    progress(f"starting Kafka in a container ({tag}, host network) on {dict(plan.ports)}…")
    try:
        container.start()
    except Exception as exc:
        with contextlib.suppress(Exception):
            container.stop()
        raise ContainerUnavailable(
            f"the Docker engine did not start {tag}: {type(exc).__name__}: {exc}; "
            "use --launcher local"
        ) from exc
    broker = ContainerBroker(
        container,
        plan,
        KAFKA_VERSION,
        ready_timeout_s,
        image=tag,
        workdir=Path(workdir).resolve() if workdir else None,
        metrics_port=metrics_port if exporter is not None else None,
        secured=secured,
    )
    supervisor.register(broker)  # removed at exit
    return broker


def wait_serving(broker: ContainerBroker, started: float, progress: Progress) -> ContainerBroker:
    """Wait until ``broker`` answers (stopping it if it never does); its release is read
    from its own log line."""
    try:
        broker.wait_ready()
    except BaseException:
        broker.stop()
        raise
    m = _VERSION_RE.search(broker.logs())
    broker.version = m.group(1) if m else KAFKA_VERSION
    progress(
        f"container {broker.container_id[:12]} serving after {time.monotonic() - started:.1f} s"
    )
    return broker


def start_container(
    *,
    properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
    advertised: Mapping[str, str] | None = None,
    inter_broker_listener: str | None = None,
    workdir: Path | None = None,
    ready_timeout_s: float = 120,
    progress: Progress = print,
    image: str | None = None,
    sasl_users: Sequence[str] = DEFAULT_USERS,
    port_picker: Callable[[int], list[int]] = free_ports,
    listen_host: str = LOOPBACK,
) -> ContainerBroker:
    """Start the local Kafka image with testcontainers (host network, client listeners on
    ``listen_host``, 127.0.0.1 unless asked otherwise; `start_local`).
    ``listeners`` take `parse_listener`'s syntax; secured ones need a ``workdir`` (their
    private folder is made in it and removed on stop). A port taken between its choice
    and the broker's bind (the container exits) is retried on fresh ones (`on_fresh_ports`)."""
    require_engine()
    props = dict(properties or {})
    checked = check_listeners(
        listeners,
        advertised,
        inter_broker_listener,
        props,
        sasl_users=sasl_users,
        where="" if workdir is not None else "the container launcher needs a workdir",
        listen_host=listen_host,
    )
    names = checked.names
    tag = image or ensure_image(progress)
    exporter = agent_jar(progress)
    started = time.monotonic()

    def build() -> ContainerBroker:
        ports = port_picker(len(names) + 2)
        return launch_node(
            checked.plan(ports[: len(names)], ports[len(names)]),
            props,
            tag=tag,
            exporter=exporter,
            metrics_port=ports[-1],
            uuid=cluster_id(),
            workdir=workdir,
            ready_timeout_s=ready_timeout_s,
            progress=progress,
            checked=checked,
        )

    return on_fresh_ports(
        build, lambda broker: wait_serving(broker, started, progress), progress=progress
    )


def pause_retrying(pause: Any, sleep: Any = time.sleep) -> int:
    """`pause()` (a container's), tried again while the engine answers that runc could not
    freeze its cgroup (`PAUSE_ATTEMPTS` in all); any other error, or the last, is raised.
    Returns the attempts it took."""
    for attempt in range(1, PAUSE_ATTEMPTS + 1):
        try:
            pause()
            return attempt
        except Exception as exc:  # docker.errors.APIError, by its message
            if "unable to freeze" not in str(exc) or attempt == PAUSE_ATTEMPTS:
                raise
            sleep(0.1 * attempt)
    raise AssertionError("unreachable")
