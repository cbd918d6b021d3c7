"""Target decisions that need no process: which faults apply where, where admin goes,
how the scenario becomes acceptor properties and broker properties."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.runner import catalog
from harness.runner.schedule import initial_limits
from harness.runner.targets import AcceptorTarget, BrokerTarget, _props


def test_faults_per_target(tmp_path: Path) -> None:
    sc = catalog.load("faults")
    broker = BrokerTarget(sc, tmp_path, print)
    broker.broker = SimpleNamespace(launcher="local")
    assert broker.supports_fault("broker_pause") is None
    assert broker.supports_fault("broker_kill") is None
    assert "no upstream" in (broker.supports_fault("upstream_latency") or "")
    acceptor = AcceptorTarget(sc, tmp_path, print)
    acceptor.broker = SimpleNamespace(launcher="external")
    assert "external" in (acceptor.supports_fault("broker_kill") or "")
    assert "latency proxy" in (acceptor.supports_fault("upstream_latency") or "")


def test_acceptor_properties_carry_kafka_keys_and_upstreams(tmp_path: Path) -> None:
    sc = catalog.load("haproxy-flood")
    t = AcceptorTarget(sc, tmp_path, print)
    props = t.acceptor_properties(
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
    from harness.runner.targets import admin_source_ip, broker_admin_listener

    assert broker_admin_listener(catalog.load("max-connections-protected")) == "REPLICATION"
    assert broker_admin_listener(catalog.load("quota-change")) == "CLIENT"
    sc = catalog.load("quota-change")  # load from 127.0.0.2-127.0.0.11
    assert admin_source_ip(sc, "127.0.0.1") == "127.0.0.254"
    assert admin_source_ip(sc, "kafka.example.com") is None  # not loopback: no binding


def test_broker_target_holds_admin_only_for_run_time_changes(tmp_path: Path) -> None:
    opened: list[str] = []

    class Probe(BrokerTarget):
        def open_held_admin(self) -> None:
            opened.append(self.scenario.name)

        def start_broker(self, **kw: object) -> object:
            self.broker = SimpleNamespace(
                listener_ports={n: 9000 + i for i, n in enumerate(self.scenario.listeners)},
                address=lambda n: f"127.0.0.1:{self.broker.listener_ports[n]}",
            )
            return self.broker

        def apply_initial_quotas(self) -> None:
            pass

    for name in ("quota-change", "ci-gate", "faults"):
        Probe(catalog.load(name), tmp_path, print).start()
    assert opened == ["quota-change"]  # faults' schedule holds only faults


def test_the_acceptor_target_refuses_request_quotas_it_could_not_charge(tmp_path: Path) -> None:
    """Request quotas with load on a TLS listener the acceptor passes through: refused before
    anything starts (it reads no request there); ended at the acceptor, accepted."""
    import pytest

    from harness.runner.targets import TargetError, passed_through_request_quotas

    sc = catalog.load("mutual-tls-quota")
    through = {"listener.name.client.tls.mode": "pass-through"}
    with pytest.raises(TargetError, match=r"passes through untouched.*tls.mode=terminate"):
        AcceptorTarget(sc, tmp_path, print).start(set_acceptor=through)
    assert passed_through_request_quotas(sc, dict(sc.acceptor)) is None  # it terminates
    assert passed_through_request_quotas(catalog.load("ssl-storm"), {}) is None  # no quotas


def test_static_broker_keys_are_not_sent_to_a_running_cluster() -> None:
    """An existing cluster gets only the dynamic keys through the admin API; static ones
    (`quota.window.*`, the failed-login delay) are its operators' and only noted."""
    from harness.runner.targets import _dynamic

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
    import harness.broker.probe as probe

    sc = catalog.load("ci-gate")
    nodes = [(1, "127.0.0.1", 9001), (2, "127.0.0.1", 9002), (3, "127.0.0.1", 9003)]
    monkeypatch.setattr(probe, "cluster_brokers", lambda bootstrap, **kw: nodes)
    said: list[str] = []
    t = BrokerTarget(sc, tmp_path, said.append)
    t._learn_brokers("CLIENT", "127.0.0.1:9002")
    assert t.broker_addresses == {"CLIENT": [nodes[1], nodes[0], nodes[2]]}
    assert t.spread_all is False and "judged per broker" in said[-1]
    elsewhere = BrokerTarget(sc, tmp_path, said.append)
    elsewhere._learn_brokers("CLIENT", "127.0.0.1:9999")
    assert elsewhere.broker_addresses == {} and "judged as one broker" in said[-1]


def test_seeded_fault_keeps_the_failed_login_delay_from_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`failed_login_delay_dropped` (selftest): the broker behind the acceptor is started
    without `connection.failed.authentication.delay.ms`; without the fault it gets it."""
    import harness.runner.targets as targets

    monkeypatch.setattr(targets, "free_port", lambda: 9)  # no socket: nothing is started
    given: list[dict[str, str]] = []

    class Stop(Exception):
        pass

    class Probe(AcceptorTarget):
        def start_broker(self, **kw: object) -> object:
            given.append(dict(kw["properties"]))  # type: ignore[call-overload]
            raise Stop

    sc = catalog.load("auth-failure-storm")
    fault = {"harness.test.fault": "failed_login_delay_dropped"}
    for overrides in ({}, fault):
        with pytest.raises(Stop):
            Probe(sc, tmp_path, print).start(set_acceptor=overrides)
    assert given[0] == {"connection.failed.authentication.delay.ms": "500"}
    assert given[1] == {}
