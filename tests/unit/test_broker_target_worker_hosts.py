"""The broker target with load from worker hosts (`--worker-netns`): Kafka's client
listeners go on the bridge (`listen_host`), except where the hosts cannot reach what
would be loaded; those stop before anything starts, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner import catalog
from harness.runner.plan import LOOPBACK_HOST, RunPlan, TargetError
from harness.runner.target import Target
from harness.runner.targets import make_target

BRIDGE = "198.18.7.1"


def _target(
    name: str, tmp_path: Path, listen_host: str = BRIDGE, bootstrap: str | None = None
) -> Target:
    plan = RunPlan(
        catalog.load(name),
        tmp_path,
        listen_host=listen_host,
        bootstrap_server=bootstrap,
        broker_timeout=1,
    )
    return make_target("broker", plan)


def test_an_existing_cluster_is_not_reached_from_the_worker_hosts(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match=r"198\.18\.7\.1's bridge, which reaches no existing "
                       r"cluster \(--bootstrap-server 127\.0\.0\.1:9\)"):  # fmt: skip
        _target("hosts-ip-rate", tmp_path, bootstrap="127.0.0.1:9").start()
    assert not (tmp_path / "broker").exists()


def test_a_cluster_of_several_brokers_is_not_started_on_the_bridge(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="one started broker, not a cluster of 3"):
        _target("cluster-storm", tmp_path).start()
    assert not (tmp_path / "broker").exists()


def test_the_started_broker_is_asked_to_listen_on_the_bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `start_broker` is given (the launcher itself is tested against real Kafka in
    tests/integration/test_broker.py); without worker hosts, loopback."""
    import broker as broker

    asked: list[str] = []

    def stop_here(**kw: object) -> None:
        asked.append(str(kw["listen_host"]))
        raise RuntimeError("stop here")

    monkeypatch.setattr(broker, "start_broker", stop_here)
    for host in (BRIDGE, LOOPBACK_HOST):
        with pytest.raises(RuntimeError, match="stop here"):
            _target("hosts-ip-rate", tmp_path, host).start()
    assert asked == [BRIDGE, LOOPBACK_HOST]
