"""The target a run names (`--target acceptor|broker`, `--bootstrap-server`), made from the
run's plan: one of the `harness.runner.target.Target` implementations."""

from __future__ import annotations

from harness.runner.acceptor_target import AcceptorTarget
from harness.runner.broker_target import BrokerTarget, ExistingClusterTarget
from harness.runner.plan import RunPlan, TargetError
from harness.runner.target import Target

NAMES = ("acceptor", "broker")


def make_target(name: str, plan: RunPlan) -> Target:
    if name == "acceptor":
        return AcceptorTarget(plan)
    if name == "broker" and plan.bootstrap_server:
        return ExistingClusterTarget(plan)
    if name == "broker":
        return BrokerTarget(plan)
    raise TargetError(f"--target={name!r}: one of {', '.join(NAMES)}")
