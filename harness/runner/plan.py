"""One run's plan: everything a target needs to start, decided once by the orchestrator.

A target takes this one value (`harness.runner.target.Target`), never a fan of keywords:
the scenario (with its ip quotas already on the worker hosts' addresses), where the run
writes, which broker to start or which existing cluster to reach, the operator's acceptor
overrides, the bounds on start-up, and where the client listeners listen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.runner.scenario import Scenario

Progress = Callable[[str], None]

#: where a started target's client listeners listen unless the run has worker hosts
LOOPBACK_HOST = "127.0.0.1"


@dataclass(frozen=True)
class RunPlan:
    scenario: Scenario
    #: the run directory (runs/<run-id>): configs, history, logs, the broker's workdir
    run_dir: Path
    progress: Progress = print
    run_id: str = ""
    #: broker launcher: auto, local, container (`--launcher`)
    launcher: str = "auto"
    #: an existing cluster (`--bootstrap-server`); None: the run starts its broker
    bootstrap_server: str | None = None
    #: the existing cluster's client properties (`--command-config`)
    command_config: Path | None = None
    #: the operator's acceptor keys (`--set-acceptor`), over the scenario's
    set_acceptor: Mapping[str, str] = field(default_factory=dict)
    #: the Kafka release of the started broker, or the one an existing cluster is judged as
    kafka_version: str | None = None
    #: the started broker keeps its metadata in ZooKeeper (None: its release's default)
    zookeeper: bool | None = None
    #: where client listeners listen: loopback, or the bridge to the run's worker hosts
    listen_host: str = LOOPBACK_HOST
    #: a latency proxy between each front and its broker (the scenario delays upstream)
    latency_proxy: bool = False
    #: seconds a broker (or cluster) and an acceptor may take to be ready
    broker_timeout: float = 180.0
    acceptor_timeout: float = 60.0

    @property
    def history_dir(self) -> Path:
        return self.run_dir / "history"

    @property
    def broker_dir(self) -> Path:
        return self.run_dir / "broker"

    @property
    def acceptor_overrides(self) -> dict[str, str]:
        """The acceptor keys in force: the scenario's, the operator's over them."""
        return {**self.scenario.acceptor, **self.set_acceptor}


class TargetError(RuntimeError):
    """The system under test could not be started or changed as planned; the message says
    what to do."""
