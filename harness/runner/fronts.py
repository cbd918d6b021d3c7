"""The acceptor processes of a run: one in front of the broker, or one per broker of a
cluster; each started from its configuration, awaited through its ready file, killed,
stopped and restarted on the same ports and state (faults `acceptor_kill`, `broker_kill`
on a fronted cluster)."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from base.supervisor import ManagedProcess
from harness.runner.plan import TargetError


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

    def write(
        self, props: dict[str, str], history: Path, run_id: str, overrides: dict[str, str]
    ) -> None:
        """Its configuration file and its command line (`harness acceptor`)."""
        self.props = props
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.argv = [
            sys.executable,
            "-m",
            "harness",
            "acceptor",
            "--config",
            str(self.config_path),
            "--history",
            str(history),
            "--run-id",
            run_id,
            "--ready-file",
            str(self.ready_path),
        ]
        for k, v in overrides.items():
            self.argv += ["--set", f"{k}={v}"]


def read_ready(
    ready_path: Path, listeners: Collection[str]
) -> tuple[dict[str, tuple[str, int]], str | None]:
    """A front's ready file: where it listens (the run's listeners) and its metrics URL."""
    ready = json.loads(ready_path.read_text())
    addresses = {
        n: (str(e["host"]), int(e["port"])) for n, e in ready["listeners"].items() if n in listeners
    }
    return addresses, ready.get("metrics_url")


class Fronts:
    """A target's acceptors, by the node each fronts (None: the one broker)."""

    def __init__(
        self, listeners: Collection[str], timeout: float, progress: Callable[[str], None]
    ) -> None:
        self.listeners = listeners
        self.timeout = timeout
        self.progress = progress
        self.all: list[Front] = []

    def __iter__(self) -> Iterator[Front]:
        return iter(self.all)

    @property
    def first(self) -> Front:
        return self.all[0]

    @property
    def metrics(self) -> dict[int, str]:
        """A fronted cluster: each front's metrics endpoint by its broker's node id."""
        return {f.node: f.metrics_url for f in self.all if f.node and f.metrics_url}

    def start(self) -> None:
        """Every front launched before any is awaited."""
        for f in self.all:
            self._spawn(f)
        for f in self.all:
            self._await_ready(f)

    def _spawn(self, front: Front) -> None:
        front.ready_path.unlink(missing_ok=True)
        self.progress(f"starting the {front.name} (config {front.config_path}, log {front.log})")
        front.process = ManagedProcess(front.name.replace(" ", "-"), front.argv, log_path=front.log)

    def _await_ready(self, front: Front) -> None:
        """Until the front's ready file appears (its addresses and metrics endpoint)."""
        proc = front.process
        assert proc is not None
        deadline = time.monotonic() + self.timeout
        while not front.ready_path.exists():
            code = proc.poll()
            if code is not None:
                raise TargetError(
                    f"the {front.name} exited with code {code} before it was ready; its log "
                    f"({front.log}) ends with:\n{proc.tail(25)}"
                )
            if time.monotonic() > deadline:
                raise TargetError(
                    f"the {front.name} was not ready within {self.timeout:.0f}s; see {front.log}"
                )
            time.sleep(0.1)
        addresses, front.metrics_url = read_ready(front.ready_path, self.listeners)
        moved = {
            n: a for n, a in addresses.items() if front.addresses and front.addresses.get(n) != a
        }
        if moved:
            raise TargetError(f"the restarted {front.name} listens elsewhere: {moved}")
        front.addresses = addresses

    def of(self, node: int | None) -> Front:
        """The front a fault hits: broker ``node``'s in a fronted cluster (default: node
        1's), else the one acceptor."""
        if node is None:
            return self.all[0]
        for f in self.all:
            if f.node == int(node):
                return f
        raise TargetError(f"no acceptor of broker {node} in this run")

    def kill(self, node: int | None = None) -> int | None:
        """Fault `acceptor_kill`: SIGKILL every process of the acceptor (in a fronted
        cluster: broker ``node``'s) (no flush, no goodbye: what it had not written is lost,
        and its listening sockets close, so the kernel refuses new connections). Returns
        the killed process id."""
        proc = self.of(node).process
        if proc is None:
            return None
        proc.signal_group(signal.SIGKILL)
        proc.wait(10)
        proc.stop(timeout=1)
        return proc.pid

    def fronted(self, node: int | None) -> bool:
        """True if broker ``node`` has a front of its own (a fronted cluster): that front is
        the broker's listener, so the node's failure takes both down (`stop_node`)."""
        return node is not None and any(f.node == int(node) for f in self.all)

    def stop_node(self, node: int) -> int | None:
        """Broker ``node``'s front stops with its broker (fault `broker_kill` on a fronted
        cluster): SIGTERM, so it flushes its history and closes its listeners, and the
        kernel refuses its broker's clients as Kafka's own dead listener would (each passes
        over the broker to the others: the failover). Returns the stopped process id."""
        return self._stop(self.of(node))

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
        front = self.of(node)
        self._spawn(front)
        self._await_ready(front)

    def pids(self) -> list[int]:
        """The running fronts' process ids (each leads its process group)."""
        return [
            f.process.pid for f in self.all if f.process is not None and f.process.poll() is None
        ]

    def alive(self) -> str | None:
        for f in self.all:
            code = f.process.poll() if f.process is not None else None
            if code is not None:
                return f"the {f.name} exited with code {code} (log {f.log})"
        return None

    def stop(self) -> None:
        for f in self.all:
            self._stop(f)
