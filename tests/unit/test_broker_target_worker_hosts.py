"""The broker target with load from worker hosts (`--worker-netns`): Kafka's client
listeners go on the bridge (`listen_host`), except where the hosts cannot reach what
would be loaded; those stop before anything starts, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner import catalog
from harness.runner.targets import LOOPBACK_HOST, BrokerTarget, TargetError

BRIDGE = "198.18.7.1"


def _target(name: str, tmp_path: Path, listen_host: str = BRIDGE) -> BrokerTarget:
    target = BrokerTarget(catalog.load(name), tmp_path, print)
    target.listen_host = listen_host
    return target


def test_an_existing_cluster_is_not_reached_from_the_worker_hosts(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match=r"198\.18\.7\.1's bridge, which reaches no existing "
                       r"cluster \(--bootstrap-server 127\.0\.0\.1:9\)"):  # fmt: skip
        _target("hosts-ip-rate", tmp_path).start(bootstrap_server="127.0.0.1:9", timeout=1)
    assert not (tmp_path / "broker").exists()


def test_a_cluster_of_several_brokers_is_not_started_on_the_bridge(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="one started broker, not a cluster of 3"):
        _target("cluster-storm", tmp_path).start(timeout=1)
    assert not (tmp_path / "broker").exists()


def test_the_started_broker_is_asked_to_listen_on_the_bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `start_broker` is given (the launcher itself is tested against real Kafka in
    tests/integration/test_broker.py); without worker hosts, loopback."""
    import harness.broker as broker

    asked: list[str] = []

    def stop_here(**kw: object) -> None:
        asked.append(str(kw["listen_host"]))
        raise RuntimeError("stop here")

    monkeypatch.setattr(broker, "start_broker", stop_here)
    for host in (BRIDGE, LOOPBACK_HOST):
        with pytest.raises(RuntimeError, match="stop here"):
            _target("hosts-ip-rate", tmp_path, host).start(timeout=1)
    assert asked == [BRIDGE, LOOPBACK_HOST]
