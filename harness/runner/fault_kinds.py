"""What each scheduled fault does to the run, one small class a kind (`KINDS`): how it
starts (and what it did, for its `fault_end` row) and how it ends: at once, or by a
restart of what it killed (`FaultSchedule` runs that restart off the run loop).

Each kind receives a `Hit`: the target, the broker node the fault names, whether that
node's front goes down with it (a fronted cluster), and the running load phases."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from harness.runner.target import Target

#: a restart to run off the loop (None: the fault ended at once)
Restart = Callable[[], None] | None


@dataclass
class Hit:
    """Where one fault lands."""

    target: Target
    params: Mapping[str, Any]
    #: the broker the fault names (a cluster's node, default node 1), or the one broker
    broker: Any
    #: a fronted cluster's broker kill: the node's front goes down with it
    with_front: bool
    #: the run's load phases by name (`harness.runner.phases.RunningPhase`)
    phases: Mapping[str, Any]

    @property
    def node(self) -> int | None:
        node = self.params.get("broker")
        return None if node is None else int(node)

    def fronts(self) -> Any:
        fronts = self.target.fronts
        assert fronts is not None, "supports_fault lets no front fault reach a broker target"
        return fronts


class FaultKind(Protocol):
    #: a process is down on purpose while it is in force (one such fault at a time)
    process: bool

    def start(self, hit: Hit) -> dict[str, Any]:
        """Do it; returns what it did (a killed pid, bytes written) for `fault_end`."""

    def end(self, hit: Hit, detail: dict[str, Any]) -> Restart:
        """Undo it, or return the restart that will; `detail` gains what was seen."""


class BrokerPause:
    process = True

    def start(self, hit: Hit) -> dict[str, Any]:
        hit.broker.pause()
        return {}

    def end(self, hit: Hit, detail: dict[str, Any]) -> Restart:
        hit.broker.resume()
        return None


class BrokerKill:
    process = True

    def start(self, hit: Hit) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        if hit.with_front:  # first, so no front accepts for a dead broker
            assert hit.node is not None
            facts["front_stopped_pid"] = hit.fronts().stop_node(hit.node)
        hit.broker.kill()
        return facts

    def end(self, hit: Hit, detail: dict[str, Any]) -> Restart:
        def restart() -> None:
            hit.broker.restart()
            if hit.with_front:  # the broker first: its front's upstream
                hit.fronts().restart(hit.node)

        return restart


class AcceptorKill:
    """What it had not flushed is lost: its history ends at its last part file."""

    process = True

    def start(self, hit: Hit) -> dict[str, Any]:
        return {"killed_pid": hit.fronts().kill(hit.node)}

    def end(self, hit: Hit, detail: dict[str, Any]) -> Restart:
        return lambda: hit.fronts().restart(hit.node)


class BrokerDiskFull:
    """Kafka fails its next write to the full log directory (and, every log directory
    failed, stops itself); it is restarted only if it stopped."""

    process = True

    def start(self, hit: Hit) -> dict[str, Any]:
        return {"ballast_bytes": hit.broker.fill_log_dir()}

    def end(self, hit: Hit, detail: dict[str, Any]) -> Restart:
        broker = hit.broker
        broker.free_log_dir()
        detail["broker_said"] = broker.log_dir_failure()
        if broker.running:
            return None  # Kafka kept running: nothing to restart
        detail["broker_exit_code"] = broker.returncode
        return broker.restart  # type: ignore[no-any-return]


class LoadKill:
    """The phase's Locust processes die; its unflushed rows die with them, and its
    phase_end falls at its last recorded arrival. A killed load stays dead."""

    process = False

    def start(self, hit: Hit) -> dict[str, Any]:
        rp = hit.phases.get(str(hit.params["phase"]))
        if rp is None or rp.ended:
            return {}
        rp.killed = True
        rp.proc.signal_group(signal.SIGKILL)
        return {"killed_pid": rp.proc.pid}

    def end(self, hit: Hit, detail: dict[str, Any]) -> Restart:
        return None


class UpstreamLatency:
    process = False

    def start(self, hit: Hit) -> dict[str, Any]:
        hit.target.set_upstream_latency(float(hit.params["latency_ms"]))
        return {}

    def end(self, hit: Hit, detail: dict[str, Any]) -> Restart:
        hit.target.set_upstream_latency(0.0)
        return None


KINDS: dict[str, FaultKind] = {
    "broker_pause": BrokerPause(),
    "broker_kill": BrokerKill(),
    "acceptor_kill": AcceptorKill(),
    "broker_disk_full": BrokerDiskFull(),
    "load_kill": LoadKill(),
    "upstream_latency": UpstreamLatency(),
}
