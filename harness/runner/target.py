"""What the orchestrator asks of the system under test, whichever it is: `Target`.

Three implementations take one `RunPlan` each: `acceptor_target.AcceptorTarget` (the
project's acceptor in front of a broker or of each broker of a cluster),
`broker_target.BrokerTarget` (Kafka's own enforcement on a broker the run starts) and
`broker_target.ExistingClusterTarget` (Kafka's own, on a cluster reached at
`--bootstrap-server`). They share small parts (`kafka_side.KafkaSide`,
`admin_changes.Changes`, `fronts.Fronts`), never a base class, so a scenario runs unchanged
against each and the verdicts compare.
"""

from __future__ import annotations

from typing import Any, Protocol

from harness.runner.fronts import Fronts
from harness.runner.kafka_side import KafkaSide
from harness.runner.scenario import Action


class Target(Protocol):
    #: "acceptor" or "broker": what run.json and the metrics rows call it
    @property
    def name(self) -> str: ...

    #: the Kafka behind or being the target (its broker, cluster, client configs)
    @property
    def kafka(self) -> KafkaSide: ...

    #: the acceptors in front of it (None: the load reaches Kafka itself)
    @property
    def fronts(self) -> Fronts | None: ...

    #: where the load connects, per listener (once started)
    @property
    def client_addresses(self) -> dict[str, tuple[str, int]]: ...

    #: per listener, every broker the load may reach as (node id, host, port)
    @property
    def broker_addresses(self) -> dict[str, list[tuple[int, str, int]]]: ...

    #: the enforcer's metrics endpoint (the acceptor's /metrics), if any
    @property
    def metrics_url(self) -> str | None: ...

    #: the limits in force at the start, as the checker judges them
    @property
    def limits(self) -> dict[str, Any]: ...

    def start(self) -> None:
        """Start (or reach) the target; returns once load may connect."""

    def apply(self, action: Action) -> None:
        """A scheduled change, through Kafka's admin protocol."""

    def supports_fault(self, kind: str) -> str | None:
        """None if the fault can be applied here, else why not."""

    def set_upstream_latency(self, ms: float) -> None: ...

    def alive(self) -> str | None:
        """None if every process of the target still runs, else what died."""

    def pids(self) -> dict[str, list[int]]:
        """Its processes by role ("acceptor", "broker"), as process groups (each started
        in a session of its own), for `process_stats` and CPU placement."""

    def stop(self) -> None: ...
