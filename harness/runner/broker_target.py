"""Kafka's own enforcement as the target: the scenario's limits become broker properties
and dynamic quotas, on a broker (or cluster) the run starts (`BrokerTarget`) or on an
existing cluster reached at one bootstrap address (`ExistingClusterTarget`, whose static
settings stay its operators' and which the run leaves running)."""

from __future__ import annotations

from typing import Any

from harness.runner.admin_changes import (
    Changes,
    apply_broker_config,
    broker_admin_listener,
    schedules_changes,
)
from harness.runner.kafka_side import KafkaSide, broker_properties, is_dynamic
from harness.runner.plan import RunPlan
from harness.runner.scenario import Action
from harness.runner.schedule import initial_limits


def broker_fault(kafka: KafkaSide, kind: str) -> str | None:
    """Which faults Kafka alone as the target takes: none on an acceptor or an upstream."""
    if kind == "acceptor_kill":
        return "target broker has no acceptor to kill"
    if kind == "load_kill":
        return None
    if kind == "upstream_latency":
        return "target broker has no upstream (clients connect to the broker itself)"
    return kafka.supports_fault(kind)


def judged_changes(plan: RunPlan, kafka: KafkaSide, bootstrap: str) -> Changes:
    """The admin side of a broker target: the scenario's quotas applied, and connections
    held from now when the schedule changes limits while the load runs."""
    changes = Changes(
        plan.scenario, bootstrap, plan.progress, kafka.admin_config, kafka.broker_addresses
    )
    changes.apply_initial_quotas()
    if schedules_changes(plan.scenario):
        changes.hold()
    return changes


class BrokerTarget:
    """A broker (or cluster) the run starts, enforcing the scenario's limits itself."""

    name = "broker"
    fronts = None
    metrics_url = None

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.kafka = KafkaSide(plan)
        self.client_addresses: dict[str, tuple[str, int]] = {}
        self.limits: dict[str, Any] = {}
        self.changes: Changes | None = None

    @property
    def broker_addresses(self) -> dict[str, list[tuple[int, str, int]]]:
        return self.kafka.broker_addresses

    def start(self) -> None:
        sc, host = self.plan.scenario, self.plan.listen_host
        b = self.kafka.start(broker_properties(initial_limits(sc)), listen_host=host)
        self.client_addresses = {n: (host, int(b.listener_ports[n])) for n in sc.listeners}
        self.limits = self.kafka.judged_limits(self.client_addresses)
        admin = b.address(broker_admin_listener(sc))
        self.changes = judged_changes(self.plan, self.kafka, admin)

    def apply(self, action: Action) -> None:
        assert self.changes is not None
        self.changes.apply(action)

    def supports_fault(self, kind: str) -> str | None:
        return broker_fault(self.kafka, kind)

    def set_upstream_latency(self, ms: float) -> None:
        raise AssertionError("no upstream on target broker (supports_fault says so)")

    def alive(self) -> str | None:
        return None

    def pids(self) -> dict[str, list[int]]:
        return {"acceptor": [], "broker": self.kafka.pids()}

    def stop(self) -> None:
        if self.changes is not None:
            self.changes.close()
        self.kafka.stop()


class ExistingClusterTarget(BrokerTarget):
    """An existing cluster at `--bootstrap-server`: its one address carries the load and
    the admin requests; only the scenario's dynamic broker keys are sent to it, and it is
    judged as the release `--kafka-version` pins (else the one it answers as)."""

    def start(self) -> None:
        sc = self.plan.scenario
        props = broker_properties(initial_limits(sc))
        b = self.kafka.start(props, listen_host=self.plan.listen_host)
        assert self.kafka.external_listener is not None
        self.client_addresses = {self.kafka.external_listener: (b.host, b.port)}
        dynamic = {k: v for k, v in props.items() if is_dynamic(k)}
        if dynamic:
            apply_broker_config(b.bootstrap, dynamic, None, self.kafka.admin_config)
        self.limits = self.kafka.judged_limits(self.client_addresses)
        self.changes = judged_changes(self.plan, self.kafka, b.bootstrap)

    def stop(self) -> None:
        if self.kafka.broker is not None:
            # its operators' cluster: the run does not guess what was there before
            sc = self.plan.scenario
            set_ = [f"ip quotas {sorted(sc.ip_quotas)}"] if sc.ip_quotas else []
            set_ += ["request quotas"] if sc.request_quotas else []
            keys = sorted(k for k in broker_properties(initial_limits(sc)) if is_dynamic(k))
            set_ += [f"broker configs {keys}"]
            set_ += ["the schedule's changes"] if schedules_changes(sc) else []
            self.plan.progress(
                f"note: the cluster at {self.kafka.broker.bootstrap} keeps what the run set: "
                + "; ".join(set_)
                + " (remove them with `harness quotas` or Kafka's kafka-configs.sh)"
            )
        super().stop()
