"""A real single-node KRaft broker run from the cached Maven artifacts with the machine's Java.

The JVM runs in its own process group so stop/pause/kill reach every thread and nothing it forks;
it is reaped at interpreter exit (atexit), on SIGTERM/SIGHUP when nobody else handles them, and,
when started from the main thread, by the kernel if this Python process dies outright
(PR_SET_PDEATHSIG). A harness that leaves JVMs behind poisons the next run's ports and the
other engineers' CPU.

Secured listeners (``listeners=("PLAINTEXT", "SSL=SSL:mtls", ...)``, `parse_listener`) get a
fresh CA, certificates and SASL passwords at every `start_local`, written to ``<workdir>/private``
(0700, files 0600) with the broker's real ``server.properties`` and one ``client-*.properties``
per secured listener; ``<workdir>/server.properties`` is then a masked copy, and the storage
format's output (it prints SCRAM stored keys) goes to the private folder, not ``broker.log``.
The private folder is removed when the broker stops (docs/security.md).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from kafka.errors import KafkaError

from base import procfs, supervisor
from base.localnet import LOOPBACK, free_ports
from base.security import secrets
from base.security.material import RunSecurity, SecurityFiles
from base.security.sasl import DEFAULT_USERS
from base.supervisor import ManagedProcess
from broker.artifacts import (
    KAFKA_VERSION,
    Artifacts,
    JmxExporter,
    Progress,
    find_java,
    jar_version,
    jmx_exporter,
    resolve_artifacts,
)
from broker.base import Broker
from broker.config import (
    LOG4J_PROPERTIES,
    REQUEST_LOG_NAME,
    ListenerPlan,
    ListenerSpec,
    log4j2_properties,
    render_properties,
    server_properties,
)
from broker.errors import BrokerError, PortInUse, lost_a_port, tail
from broker.probe import probe
from broker.secured import PRIVATE_DIR, NodeSecurity, check_listeners
from broker.zookeeper import SESSION_TIMEOUT_MS, TICK_MS, ZooKeeperProcess

#: Small heap and the serial collector: the broker shares two cores with the load and Spark.
DEFAULT_JVM_OPTS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:MaxDirectMemorySize=256m",
    "-Djava.awt.headless=true",
)
STOP_TIMEOUT_S = 30.0
#: how long every thread of a SIGSTOPped JVM may take to stop (milliseconds, normally)
PAUSE_TIMEOUT_S = 5.0
#: a harness key, never given to Kafka: the broker's log directory is a tmpfs of this many
#: MB, so a run can fill it (fault `broker_disk_full`) without touching the machine's disk
LOG_DIR_MB_KEY = "harness.log.dir.mb"
BALLAST = ".harness-ballast"
PORT_ATTEMPTS = 3


_VERSION_RE = re.compile(r"Kafka version: (\S+)")


def threads_stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped (``T`` or ``t`` in its
    ``/proc/<pid>/task/<tid>/stat``). A process gone, or no procfs, counts as stopped: there
    is nothing left that could answer."""
    try:
        tids = procfs.thread_ids(pid)
    except OSError:
        return True
    for tid in tids:
        try:
            state = procfs.read_stat(pid, tid).state
        except OSError:
            continue  # the thread ended
        if state not in ("T", "t"):
            return False
    return True


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars).

    Never starting with "-": StorageTool's argument parser would read that as an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class LocalBroker(Broker):
    """A KRaft broker+controller JVM, its client listeners on ``plan.host`` (127.0.0.1
    unless asked otherwise); see :func:`start_local`."""

    launcher = "local"

    def __init__(
        self,
        *,
        java: Path,
        artifacts: Artifacts,
        plan: ListenerPlan,
        workdir: Path,
        temp_workdir: bool,
        ready_timeout_s: float,
        progress: Progress,
        properties: Mapping[str, str] | None = None,
        exporter: JmxExporter | None = None,
        metrics_port: int | None = None,
        request_log: bool = False,
        security: RunSecurity | None = None,
        cluster_uuid: str | None = None,
    ) -> None:
        super().__init__(
            bootstrap=f"{plan.host}:{plan.ports[plan.first]}",
            listener_ports=dict(plan.ports),
            version=artifacts.version,
            log_path=workdir / "broker.log",
            workdir=workdir,
        )
        self.java = java
        self.artifacts = artifacts
        self.plan = plan
        #: the broker's server.properties (with secured listeners: a masked copy for reading;
        #: the broker reads ``private/server.properties``)
        self.config_path = workdir / "server.properties"
        #: the run's certificates and SASL users (None when every listener is PLAINTEXT)
        self.security = security
        self._secured = (
            NodeSecurity(security, workdir / PRIVATE_DIR) if security is not None else None
        )
        self.private_dir = self._secured.folder if self._secured is not None else None
        self._broker_config_path = (
            self._secured.server_config if self._secured is not None else self.config_path
        )
        self.controller_port = plan.controller_port
        #: ZooKeeper mode: the ZooKeeper this broker starts first and stops last (on the
        #: plan's controller port); None for KRaft
        self.zookeeper: ZooKeeperProcess | None = None
        self._killed_at: float | None = None
        if plan.zookeeper:
            self.zookeeper = ZooKeeperProcess(
                self._jvm_command,
                workdir,
                plan.controller_port,
                die_with_parent=True,
            )
        #: the KRaft cluster id its storage is formatted with (shared by a cluster's nodes)
        self.cluster_uuid = cluster_uuid or cluster_id()
        self._temp_workdir = temp_workdir
        self._ready_timeout_s = ready_timeout_s
        self._progress = progress
        self._properties = dict(properties or {})
        mb = self._properties.pop(LOG_DIR_MB_KEY, None)
        #: the log directory's own file system, in MB (None: the work dir's)
        self.log_dir_mb = int(mb) if mb else None
        self._mounted = False
        self._child: ManagedProcess | None = None
        self._lock = threading.RLock()
        self._stopped = False
        self._request_log = request_log
        if request_log:
            self.request_log_path = workdir / REQUEST_LOG_NAME
        #: the Prometheus JMX exporter agent (Kafka's own metrics), when it could be resolved
        self.exporter = exporter
        self.metrics_port = metrics_port if exporter is not None else None
        #: ``http://127.0.0.1:PORT/metrics`` of the JMX exporter, or None without it
        self.metrics_url = (
            f"http://{LOOPBACK}:{metrics_port}/metrics"
            if exporter is not None and metrics_port
            else None
        )

    # -- state -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """The JVM process exists and has not exited (it may be paused)."""
        return self._child is not None and self._child.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._child is None else self._child.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    # -- lifecycle -------------------------------------------------------------------------

    def _jvm_command(self, main: str, *args: str, short_lived: bool = False) -> list[str]:
        opts = list(DEFAULT_JVM_OPTS)
        if short_lived:  # C1 only: a one-shot tool finishes before C2 would pay off
            opts.append("-XX:TieredStopAtLevel=1")
        opts += os.environ.get("HARNESS_BROKER_JVM_OPTS", "").split()
        assert self.workdir is not None
        opts += [
            f"-Dlog4j2.configurationFile=file:{self.workdir / 'log4j2.properties'}",
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            f"-Dkafka.logs.dir={self.workdir}",
        ]
        return [str(self.java), *opts, "-cp", self.artifacts.classpath, main, *args]

    def _format(self) -> None:
        """Format the KRaft metadata log once; a restart reuses the formatted data dir.

        SCRAM users are created here (``--add-scram``). Their passwords go to the JVM in a
        private argument file (never on a command line ``/proc`` shows), and the tool's
        output, which prints the SCRAM records, to the private folder instead of broker.log.
        """
        assert self.workdir is not None and self.log_path is not None
        if self.log_dir_mb is not None and not self._mounted:
            self._mount_log_dir()
        if self.zookeeper is not None or (self.workdir / "data" / "meta.properties").exists():
            return  # ZooKeeper mode has no KRaft storage to format; a restart reuses it
        self._progress(f"formatting KRaft storage in {self.workdir / 'data'}…")
        args = ["format", "-t", self.cluster_uuid, "-c", str(self._broker_config_path)]
        output = self.log_path
        argfile: Path | None = None
        if self._secured is not None:
            argfile = self._secured.write_format_args(["kafka.tools.StorageTool", *args], self.plan)
            if argfile is not None:
                output = self._secured.format_log
        scram = argfile is not None
        if argfile is not None:
            cmd = self._jvm_command(f"@{argfile}", short_lived=True)
        else:
            cmd = self._jvm_command("kafka.tools.StorageTool", *args, short_lived=True)
        with open(self.log_path, "ab") as log:
            note = f" (with SCRAM users; its output, secret, is in {output})" if scram else ""
            log.write(f"== harness: kafka.tools.StorageTool format{note} ==\n".encode())
        try:
            with open(output, "ab") as out:
                if scram:
                    os.chmod(output, 0o600)
                try:
                    rc = subprocess.run(
                        cmd, stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False
                    ).returncode
                except subprocess.TimeoutExpired as exc:
                    raise BrokerError(
                        f"formatting KRaft storage took over 120 s; see {output}"
                    ) from exc
        finally:
            if argfile is not None:
                argfile.unlink(missing_ok=True)
        if rc != 0:
            text = output.read_text(errors="replace") if output.exists() else ""
            raise BrokerError(
                f"kafka.tools.StorageTool format exited {rc}; the config is "
                f"{self._broker_config_path}; last lines of {output}:\n"
                f"{secrets.mask(tail(text))}"
            )

    def _spawn(self) -> None:
        assert self.workdir is not None and self.log_path is not None
        cmd = self._jvm_command("kafka.Kafka", str(self._broker_config_path))
        if self.exporter is not None and self.metrics_port:
            config = self.exporter.write_config(self.workdir / "jmx-exporter.yaml")
            cmd.insert(1, self.exporter.java_agent_option(self.metrics_port, config, LOOPBACK))
        supervisor.register(self)  # its stop() also unmounts, stops ZooKeeper, removes files
        self._child = ManagedProcess(
            "kafka",
            cmd,
            log_path=self.log_path,
            header="== harness: kafka.Kafka ==",
            cwd=self.workdir,
            die_with_parent=True,
        )
        self.pid = self._child.pid

    def _wait_ready(self, log_offset: int) -> None:
        """Until the first listener answers ApiVersions and Metadata lists a broker."""
        assert self._child is not None
        started = time.monotonic()
        deadline = started + self._ready_timeout_s
        next_note = started + 10
        last_error: Exception | None = None
        while True:
            rc = self._child.poll()
            if rc is not None:
                text = self.log_text()[log_offset:]
                kind: type[BrokerError] = PortInUse if lost_a_port(text) else BrokerError
                raise kind(
                    f"the broker exited early (exit code {rc}); last lines of "
                    f"{self.log_path}:\n{tail(text)}"
                )
            try:
                result = probe(self.host, self.port, timeout_s=2.0)
                if result.brokers:
                    return
                last_error = ConnectionError("Metadata lists no brokers yet")
            except (OSError, TimeoutError, ConnectionError, KafkaError) as exc:
                last_error = exc  # not listening yet, or answering half-started
            now = time.monotonic()
            if now > deadline:
                text = self.log_text()[log_offset:]
                self._terminate()
                raise BrokerError(
                    f"the broker was not ready within {self._ready_timeout_s:.0f} s "
                    f"(last probe of {self.bootstrap}: {last_error}); it was stopped; last lines "
                    f"of {self.log_path}:\n{tail(text)}"
                )
            if now > next_note:
                self._progress(f"waiting for the broker… {now - started:.0f} s ({self.log_path})")
                next_note = now + 10
            time.sleep(0.25)

    def _read_version(self, log_offset: int) -> str:
        m = _VERSION_RE.search(self.log_text()[log_offset:])
        if m:
            return m.group(1)
        return jar_version(self.artifacts.jars) or self.artifacts.version

    def start(self) -> None:
        """Write the config, format if needed, spawn the JVM and wait until it serves."""
        with self._lock:
            self.await_ready(self.launch())

    def await_ready(self, log_offset: int) -> None:
        """Until the JVM `launch` started serves (a cluster's nodes are launched together,
        then awaited: none is ready before a majority of the quorum is up)."""
        with self._lock:
            self._wait_ready(log_offset)
            self.version = self._read_version(log_offset)

    def launch(self) -> int:
        """Write the config, format if needed and spawn the JVM; returns where its lines
        start in broker.log."""
        with self._lock:
            assert self.workdir is not None and self.log_path is not None
            props = server_properties(
                self.plan, str(self.workdir / "data"), self._security_properties()
            )
            if self._secured is None:
                self.config_path.write_text(render_properties(props))
            else:
                self._secured.write_config(props, self.config_path)
                self.client_configs = self._secured.client_configs(self.plan, self.address)
            (self.workdir / "log4j2.properties").write_text(
                log4j2_properties(request_log=self._request_log)
            )
            (self.workdir / "log4j.properties").write_text(LOG4J_PROPERTIES)
            if self.zookeeper is not None and not self.zookeeper.running:
                self._progress(f"starting ZooKeeper on {self.zookeeper.connect}…")
                self.zookeeper.start()
            self._format()
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            self._progress(f"starting Kafka {self.artifacts.version} on {self.bootstrap}…")
            self._spawn()
            self._stopped = False
            return offset

    def _security_properties(self) -> dict[str, str]:
        """Fresh private files and the secured listeners' keys; the caller's keys win."""
        if self._secured is None:
            return dict(self._properties)
        return self._secured.properties(self.plan, self._properties)

    @property
    def security_files(self) -> SecurityFiles | None:
        """File names of the private material, once written."""
        return self._secured.files if self._secured is not None else None

    def _signal_group(self, sig: int) -> None:
        if self._child is not None:
            self._child.signal_group(sig)

    def begin_stop(self) -> None:
        """SIGTERM now (after SIGCONT), without waiting: a cluster's nodes shut down
        together (`LocalCluster.stop`). One by one, the last node has lost its quorum and
        waits out STOP_TIMEOUT_S before it is killed."""
        if self._child is not None:
            self._child.begin_stop()

    def _terminate(self) -> None:
        """SIGTERM (after SIGCONT, a paused JVM cannot shut down), then SIGKILL at the deadline;
        anything the JVM left in its group goes too."""
        if self._child is not None:
            self._child.stop(STOP_TIMEOUT_S)

    # -- a log directory that fills ---------------------------------------------------------

    def _mount_log_dir(self) -> None:
        """The log directory on a tmpfs of `log_dir_mb` MB (root: mount(8))."""
        assert self.workdir is not None
        data = self.workdir / "data"
        if os.geteuid() != 0:
            raise BrokerError(
                f"a {self.log_dir_mb} MB log directory is a tmpfs, and mounting one needs root"
            )
        data.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={self.log_dir_mb}m,mode=0755",
                "tmpfs",
                str(data),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise BrokerError(f"cannot mount a tmpfs on {data}: {done.stderr.strip()}")
        self._mounted = True

    def fill_log_dir(self) -> int:
        """Fill the log directory's file system (a ballast file, 1 MB at a time, until the
        kernel says ENOSPC); returns the bytes written. Kafka fails its next write there."""
        if not self._mounted or self.workdir is None:
            raise BrokerError("the log directory is not the broker's own file system")
        written = 0
        chunk = b"\0" * 2**20
        with open(self.workdir / "data" / BALLAST, "ab") as f:
            try:
                while True:
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        return written

    def free_log_dir(self) -> None:
        """Remove the ballast: the log directory has room again."""
        if self.workdir is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.workdir / "data" / BALLAST).unlink()

    def log_dir_failure(self) -> str | None:
        """The broker log's line saying a log directory failed or the disk is full, if any."""
        for line in reversed(self.log_text().splitlines()):
            if "No space left on device" in line or ("log dirs" in line and "failed" in line):
                return line.strip()[:300]
        return None

    def _unmount(self) -> None:
        if self._mounted and self.workdir is not None:
            subprocess.run(["umount", "-l", str(self.workdir / "data")], capture_output=True)
            self._mounted = False

    def stop(self) -> None:
        with self._lock:
            self._terminate()
            self._unmount()
            if self.zookeeper is not None:
                self.zookeeper.stop()
            supervisor.unregister(self)
            if not self._stopped and self._temp_workdir and self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
            if self._secured is not None:
                self._secured.remove()
            self._stopped = True

    def pause(self) -> None:
        """SIGSTOP the JVM's group, and return once every thread of it is stopped: the
        signal is delivered to each thread as it next leaves the kernel, so a thread busy on
        the other core may answer a request after `killpg` has returned."""
        self._require_running("pause")
        self._signal_group(signal.SIGSTOP)
        deadline = time.monotonic() + PAUSE_TIMEOUT_S
        while self.pid is not None and not threads_stopped(self.pid):
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"broker pid {self.pid} not stopped {PAUSE_TIMEOUT_S:g}s after SIGSTOP"
                )
            time.sleep(0.01)

    def resume(self) -> None:
        self._require_running("resume")
        self._signal_group(signal.SIGCONT)

    def kill(self) -> None:
        with self._lock:
            self._require_running("kill")
            assert self._child is not None
            self._signal_group(signal.SIGKILL)
            self._child.wait(STOP_TIMEOUT_S)
            self._killed_at = time.monotonic()

    def restart(self) -> None:
        with self._lock:
            if self._stopped and self._temp_workdir:
                raise BrokerError("this broker was stopped and its temporary workdir removed")
            self._terminate()
            self._await_registration_expiry()
            busy = self._busy_ports()
            if busy:
                raise PortInUse(
                    f"cannot restart on the same ports: {', '.join(busy)} in use by another "
                    "process (find it with `ss -ltnp`); the broker stays stopped"
                )
            try:
                self.start()
            except PortInUse as exc:
                raise PortInUse(f"cannot restart on the same ports: {exc}") from exc

    def _await_registration_expiry(self) -> None:
        """ZooKeeper mode, after a kill: until the dead broker's ZooKeeper session (and its
        registration) has expired, as a restarted Kafka would otherwise find its id taken
        and exit. A clean stop deregisters; KRaft needs no wait."""
        killed_at, self._killed_at = self._killed_at, None
        if self.zookeeper is None or killed_at is None:
            return
        timeout_ms = int(self._properties.get("zookeeper.session.timeout.ms", SESSION_TIMEOUT_MS))
        due = killed_at + (timeout_ms + TICK_MS) / 1000
        if time.monotonic() < due:
            self._progress(
                f"waiting {due - time.monotonic():.1f} s for the killed broker's ZooKeeper "
                "session to expire"
            )
            time.sleep(max(0.0, due - time.monotonic()))

    def _busy_ports(self, timeout_s: float = 3.0) -> list[str]:
        """Ports still taken after a short grace (a dead JVM's sockets close with it)."""
        wanted = {name: (self.host, port) for name, port in self.listener_ports.items()}
        if self.zookeeper is None:  # ZooKeeper's port stays taken by ZooKeeper, which runs on
            wanted["CONTROLLER"] = (LOOPBACK, self.controller_port)
        deadline = time.monotonic() + timeout_s
        while True:
            busy = []
            for name, (host, port) in wanted.items():
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind((host, port))
                    except OSError:
                        busy.append(f"{name} {host}:{port}")
            if not busy or time.monotonic() > deadline:
                return busy
            time.sleep(0.1)

    def _require_running(self, what: str) -> None:
        if not self.running:
            raise BrokerError(
                f"cannot {what}: the broker process is not running "
                f"(exit code {self.returncode}); restart() starts it again"
            )


@dataclass
class PreparedLocal:
    """What every node of a local launch shares: the checked listeners, the run's security
    material, the JVM, Kafka's jars and the metrics agent (`prepare_local`)."""

    names: tuple[str, ...]
    advertised: dict[str, str]
    inter_broker_listener: str
    specs: dict[str, ListenerSpec]
    security: RunSecurity | None
    properties: dict[str, str]
    java: Path
    artifacts: Artifacts
    exporter: JmxExporter | None
    workdir: Path
    temp_workdir: bool
    progress: Progress
    request_log: bool
    #: ZooKeeper mode (`zookeeper_mode`)
    zookeeper: bool = False
    #: where the client-facing listeners listen (`check_listen_host`)
    listen_host: str = LOOPBACK

    def broker(
        self,
        plan: ListenerPlan,
        workdir: Path,
        metrics_port: int,
        *,
        ready_timeout_s: float,
        cluster_uuid: str | None = None,
    ) -> LocalBroker:
        """One node with ``plan`` in ``workdir`` (not started)."""
        return LocalBroker(
            java=self.java,
            artifacts=self.artifacts,
            plan=plan,
            workdir=workdir,
            temp_workdir=self.temp_workdir and workdir == self.workdir,
            ready_timeout_s=ready_timeout_s,
            progress=self.progress,
            properties=self.properties,
            exporter=self.exporter,
            metrics_port=metrics_port,
            request_log=self.request_log,
            security=self.security,
            cluster_uuid=cluster_uuid,
        )


def prepare_local(
    *,
    properties: Mapping[str, str] | None,
    listeners: Sequence[str],
    advertised: Mapping[str, str] | None,
    inter_broker_listener: str | None,
    workdir: Path | None,
    progress: Progress,
    version: str,
    metrics: bool | None,
    request_log: bool,
    sasl_users: Sequence[str],
    zookeeper: bool | None = None,
    listen_host: str = LOOPBACK,
) -> PreparedLocal:
    """Check the request and resolve what the nodes need (see `start_local`)."""
    use_zk = zookeeper_mode(version, zookeeper)
    props = dict(properties or {})
    checked = check_listeners(
        listeners,
        advertised,
        inter_broker_listener,
        props,
        sasl_users=sasl_users,
        where=(
            f"Kafka {version} in ZooKeeper mode: secured listeners run in KRaft mode only "
            "(their SCRAM users are made when KRaft storage is formatted)"
            if use_zk
            else ""
        ),
        listen_host=listen_host,
    )
    if request_log and int(version.split(".")[0]) < 4:
        raise BrokerError(
            f"config request_log with Kafka {version}: the request log is configured through "
            "log4j2, which Kafka has used since 4.0 (request quotas charged from the broker's "
            "log need a 4.x broker)"
        )
    java = find_java()
    artifacts = resolve_artifacts(version, progress)
    if metrics is None:
        metrics = os.environ.get("HARNESS_BROKER_METRICS", "1") not in ("0", "false", "no")
    exporter: JmxExporter | None = None
    if metrics:
        try:
            exporter = jmx_exporter(progress=progress)
        except BrokerError as exc:
            progress(f"starting without Kafka's JMX metrics: {exc}")
    temp = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="harness-broker-")) if workdir is None else Path(workdir)
    wd = wd.resolve()  # the JVM runs with cwd=workdir, so relative paths would break
    wd.mkdir(parents=True, exist_ok=True)
    supervisor.install_reapers()
    return PreparedLocal(
        names=checked.names,
        advertised=checked.advertised,
        inter_broker_listener=checked.inter_broker_listener,
        specs=checked.specs,
        security=checked.security,
        properties=props,
        java=java,
        artifacts=artifacts,
        exporter=exporter,
        workdir=wd,
        temp_workdir=temp,
        progress=progress,
        request_log=request_log,
        zookeeper=use_zk,
        listen_host=checked.host,
    )


def zookeeper_mode(version: str, asked: bool | None) -> bool:
    """Whether the broker keeps its metadata in ZooKeeper: as asked, else for releases
    before 3.3 (KRaft was not production-ready before it, and 2.8's was early access).
    Kafka 4.0 removed ZooKeeper mode."""
    release = tuple(int(p) for p in version.split(".")[:2])
    if asked is None:
        return release < (3, 3)
    if asked and release >= (4, 0):
        raise BrokerError(f"config zookeeper with Kafka {version}: 4.0 removed ZooKeeper mode")
    if not asked and release < (2, 8):
        raise BrokerError(f"config kraft with Kafka {version}: KRaft came in 2.8")
    return asked


def start_local(
    *,
    properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
    advertised: Mapping[str, str] | None = None,
    inter_broker_listener: str | None = None,
    workdir: Path | None = None,
    ready_timeout_s: float = 120,
    progress: Progress = print,
    version: str = KAFKA_VERSION,
    port_picker: Callable[[int], list[int]] = free_ports,
    metrics: bool | None = None,
    request_log: bool = False,
    sasl_users: Sequence[str] = DEFAULT_USERS,
    zookeeper: bool | None = None,
    listen_host: str = LOOPBACK,
) -> LocalBroker:
    """Resolve the jars, then start a broker; retries fresh ports if one was taken meanwhile.

    ``zookeeper``: keep the metadata in a ZooKeeper the broker starts and stops itself
    (default: for releases before 3.3; `zookeeper_mode`), on the port a KRaft broker's
    controller would have.

    ``metrics`` (default: on unless ``HARNESS_BROKER_METRICS=0``) runs the broker with the
    Prometheus JMX exporter on a free loopback port (``broker.metrics_url``). If the agent
    cannot be resolved the broker starts without it and says so: the metric checks are then
    ``unknown``, nothing else changes.

    ``request_log`` turns on Kafka's request logger into ``broker.request_log_path`` (one line
    per completed request with its handler time, which an acceptor in front charges instead of
    the time it sees: `upstream.request.log`). It costs the broker a JSON line per request.

    ``listeners`` take `parse_listener`'s syntax: ``"CLIENT"`` (PLAINTEXT), ``"SSL=SSL"``,
    ``"MTLS=SSL:mtls"``, ``"SASL=SASL_SSL:SCRAM-SHA-512,PLAIN"``... With any secured listener
    the first must be PLAINTEXT, and a fresh CA, certificates and ``sasl_users`` with random
    passwords are made for this broker (``broker.security``, ``broker.client_configs``).

    ``listen_host``: where the client-facing listeners listen and what they advertise
    (an IPv4 address of this machine; PLAINTEXT listeners only when not 127.0.0.1); the
    controller listener, ZooKeeper and the metrics agent stay on loopback.
    """
    prep = prepare_local(
        properties=properties,
        listeners=listeners,
        advertised=advertised,
        inter_broker_listener=inter_broker_listener,
        workdir=workdir,
        progress=progress,
        version=version,
        metrics=metrics,
        request_log=request_log,
        sasl_users=sasl_users,
        zookeeper=zookeeper,
        listen_host=listen_host,
    )
    names, adv, inter = prep.names, prep.advertised, prep.inter_broker_listener
    wd = prep.workdir

    def build() -> LocalBroker:
        ports = port_picker(len(names) + 2)
        plan = ListenerPlan(
            names=names,
            ports=dict(zip(names, ports[: len(names)], strict=True)),
            controller_port=ports[len(names)],
            advertised=adv,
            inter_broker_listener=inter,
            specs=prep.specs,
            zookeeper=f"{LOOPBACK}:{ports[len(names)]}" if prep.zookeeper else "",
            host=prep.listen_host,
        )
        # A fresh data dir per attempt: the controller port is part of the formatted quorum.
        shutil.rmtree(wd / "data", ignore_errors=True)
        shutil.rmtree(wd / "zookeeper-data", ignore_errors=True)  # no stale broker registration
        return prep.broker(plan, wd, ports[-1], ready_timeout_s=ready_timeout_s)

    return on_fresh_ports(
        build,
        lambda broker: broker.start(),
        workdir=wd,
        temp_workdir=prep.temp_workdir,
        progress=progress,
    )


class _Startable(Protocol):
    _temp_workdir: bool

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Startable)


def on_fresh_ports(
    build: Callable[[], S],
    start: Callable[[S], object],
    *,
    progress: Progress,
    workdir: Path | None = None,
    temp_workdir: bool = False,
    what: str = "",
) -> S:
    """Build a broker or cluster on freshly picked ports and start it; when a port was taken
    meanwhile (`PortInUse`), stop it and try again on new ones, up to PORT_ATTEMPTS times.
    Any other failure stops it and keeps its directory (the logs) for whoever reads the
    error; a temporary directory is removed only when every attempt lost its ports."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        started = build()
        try:
            start(started)
            return started
        except PortInUse:
            started._temp_workdir = False  # keep the dir for the next attempt
            started.stop()
            if attempt == PORT_ATTEMPTS:
                if temp_workdir and workdir is not None:
                    shutil.rmtree(workdir, ignore_errors=True)
                raise
            progress(f"a port was taken while starting; retrying {what}on fresh ports…")
        except BaseException:
            started._temp_workdir = False  # keep the logs for whoever reads the error
            started.stop()
            raise
    raise AssertionError("unreachable")
