"""Target decisions that need no process: which faults apply where, where admin goes,
how the scenario becomes acceptor properties and broker properties."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.runner import catalog
from harness.runner.acceptor_target import AcceptorTarget, acceptor_properties
from harness.runner.broker_target import BrokerTarget
from harness.runner.kafka_side import KafkaSide
from harness.runner.kafka_side import broker_properties as _props
from harness.runner.plan import RunPlan
from harness.runner.schedule import initial_limits


def test_faults_per_target(tmp_path: Path) -> None:
    sc = catalog.load("faults")
    broker = BrokerTarget(RunPlan(sc, tmp_path))
    broker.kafka.broker = SimpleNamespace(launcher="local")
    assert broker.supports_fault("broker_pause") is None
    assert broker.supports_fault("broker_kill") is None
    assert "no upstream" in (broker.supports_fault("upstream_latency") or "")
    acceptor = AcceptorTarget(RunPlan(sc, tmp_path))
    acceptor.kafka.broker = SimpleNamespace(launcher="external")
    assert "external" in (acceptor.supports_fault("broker_kill") or "")
    assert "latency proxy" in (acceptor.supports_fault("upstream_latency") or "")


def test_acceptor_properties_carry_kafka_keys_and_upstreams(tmp_path: Path) -> None:
    sc = catalog.load("haproxy-flood")
    props = acceptor_properties(
        RunPlan(sc, tmp_path),
        {"CLIENT": 9001, "REPLICATION": 9002},
        {"CLIENT": "127.0.0.1:19001", "REPLICATION": "127.0.0.1:19002"},
    )
    assert props["listeners"] == "CLIENT://127.0.0.1:9001,REPLICATION://127.0.0.1:9002"
    assert props["inter.broker.listener.name"] == "REPLICATION"
    assert props["listener.name.client.upstream"] == "127.0.0.1:19001"
    assert props["listener.name.client.proxy.protocol"] == "required"
    assert "listener.name.replication.proxy.protocol" not in props
    assert props["metrics.port"] == "0"
    # Kafka's defaults (Int.MaxValue) are left out: only what the scenario sets
    assert "max.connections" not in props


def test_broker_properties_are_the_scenarios_limits() -> None:
    sc = catalog.load("max-connections-protected")
    props = _props(initial_limits(sc))
    assert props["max.connections"] == "12"
    assert props["listener.name.replication.max.connections"] == "1"
    assert props["quota.window.num"] == "11"
    assert "ip_quotas" not in props and "listeners" not in props


def test_broker_admin_goes_to_the_protected_listener_from_an_unused_address() -> None:
    from harness.runner.admin_changes import admin_source_ip, broker_admin_listener

    assert broker_admin_listener(catalog.load("max-connections-protected")) == "REPLICATION"
    assert broker_admin_listener(catalog.load("quota-change")) == "CLIENT"
    sc = catalog.load("quota-change")  # load from 127.0.0.2-127.0.0.11
    assert admin_source_ip(sc, "127.0.0.1") == "127.0.0.254"
    assert admin_source_ip(sc, "kafka.example.com") is None  # not loopback: no binding


def test_broker_target_holds_admin_only_for_run_time_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.runner.admin_changes import Changes

    opened: list[str] = []

    def started(self: KafkaSide, props: object, **kw: object) -> object:
        ports = {n: 9000 + i for i, n in enumerate(self.scenario.listeners)}
        return SimpleNamespace(listener_ports=ports, address=lambda n: f"127.0.0.1:{ports[n]}")

    monkeypatch.setattr(KafkaSide, "start", started)
    monkeypatch.setattr(Changes, "hold", lambda self: opened.append(self.scenario.name))
    monkeypatch.setattr(Changes, "apply_initial_quotas", lambda self: None)
    for name in ("quota-change", "ci-gate", "faults"):
        BrokerTarget(RunPlan(catalog.load(name), tmp_path)).start()
    assert opened == ["quota-change"]  # faults' schedule holds only faults


def test_the_acceptor_target_refuses_request_quotas_it_could_not_charge(tmp_path: Path) -> None:
    """Request quotas with load on a TLS listener the acceptor passes through: refused before
    anything starts (it reads no request there); ended at the acceptor, accepted."""
    import pytest

    from harness.runner.acceptor_target import passed_through_request_quotas
    from harness.runner.plan import TargetError

    sc = catalog.load("mutual-tls-quota")
    through = {"listener.name.client.tls.mode": "pass-through"}
    with pytest.raises(TargetError, match=r"passes through untouched.*tls.mode=terminate"):
        AcceptorTarget(RunPlan(sc, tmp_path, set_acceptor=through)).start()
    assert passed_through_request_quotas(sc, dict(sc.acceptor)) is None  # it terminates
    assert passed_through_request_quotas(catalog.load("ssl-storm"), {}) is None  # no quotas


def test_static_broker_keys_are_not_sent_to_a_running_cluster() -> None:
    """An existing cluster gets only the dynamic keys through the admin API; static ones
    (`quota.window.*`, the failed-login delay) are its operators' and only noted."""
    from harness.runner.kafka_side import is_dynamic as _dynamic

    sc = catalog.load("auth-failure-storm")
    props = _props(initial_limits(sc))
    assert props["connection.failed.authentication.delay.ms"] == "500"
    assert not _dynamic("connection.failed.authentication.delay.ms")
    assert not _dynamic("quota.window.num")
    assert _dynamic("max.connection.creation.rate")
    assert _dynamic("listener.name.client.max.connections")


def test_command_config_is_checked_before_anything_starts(tmp_path: Path) -> None:
    from harness.runner.cli import _command_config_problem

    good = tmp_path / "client.properties"
    good.write_text("security.protocol=SSL\nssl.truststore.location=/x/ca.pem\n")
    assert _command_config_problem(good, "127.0.0.1:9093", "broker") == ""
    assert "needs --bootstrap-server" in _command_config_problem(good, None, "broker")
    assert "needs --target broker" in _command_config_problem(good, "h:1", "acceptor")
    assert "cannot read" in _command_config_problem(tmp_path / "missing", "h:1", "broker")
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SSL\nssl.keystore.password=hunter2\n")
    problem = _command_config_problem(bad, "h:1", "broker")
    assert "ssl.keystore.password" in problem and "hunter2" not in problem


def test_an_existing_clusters_brokers_are_learnt_from_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several brokers in Metadata: the bootstrap broker first (the engine's arrivals stay
    on it), the others for attribution; none at the bootstrap's address: one broker."""
    import broker.probe as probe

    sc = catalog.load("ci-gate")
    nodes = [(1, "127.0.0.1", 9001), (2, "127.0.0.1", 9002), (3, "127.0.0.1", 9003)]
    monkeypatch.setattr(probe, "cluster_brokers", lambda bootstrap, **kw: nodes)
    said: list[str] = []
    t = KafkaSide(RunPlan(sc, tmp_path, said.append))
    t.learn_brokers("CLIENT", "127.0.0.1:9002")
    assert t.broker_addresses == {"CLIENT": [nodes[1], nodes[0], nodes[2]]}
    assert t.spread_all is False and "judged per broker" in said[-1]
    elsewhere = KafkaSide(RunPlan(sc, tmp_path, said.append))
    elsewhere.learn_brokers("CLIENT", "127.0.0.1:9999")
    assert elsewhere.broker_addresses == {} and "judged as one broker" in said[-1]


def test_seeded_fault_keeps_the_failed_login_delay_from_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`failed_login_delay_dropped` (selftest): the broker behind the acceptor is started
    without `connection.failed.authentication.delay.ms`; without the fault it gets it."""
    import harness.runner.acceptor_target as acceptor_target

    monkeypatch.setattr(acceptor_target, "free_port", lambda: 9)  # no socket: nothing started
    given: list[dict[str, str]] = []

    class Stop(Exception):
        pass

    def start(self: KafkaSide, properties: dict[str, str], **kw: object) -> object:
        given.append(dict(properties))
        raise Stop

    monkeypatch.setattr(KafkaSide, "start", start)

    sc = catalog.load("auth-failure-storm")
    fault = {"harness.test.fault": "failed_login_delay_dropped"}
    for overrides in ({}, fault):
        with pytest.raises(Stop):
            AcceptorTarget(RunPlan(sc, tmp_path, set_acceptor=overrides)).start()
    assert given[0] == {"connection.failed.authentication.delay.ms": "500"}
    assert given[1] == {}
