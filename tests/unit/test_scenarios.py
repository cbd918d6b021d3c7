"""Scenario parsing and validation: good files parse as written, bad ones say key, value, why."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from harness.runner.scenario import (
    INT_MAX,
    ScenarioError,
    expand_ips,
    intended_rate,
    load_scenario_file,
    parse_arrival,
    parse_scenario,
)

BASE: dict[str, Any] = {
    "name": "tiny",
    "description": "a tiny scenario",
    "covers": ["max.connection.creation.rate"],
    "duration": 20,
    "limits": {"max.connection.creation.rate": 30},
    "ip_quotas": {"default": 5, "127.0.0.9": 1},
    "load": [{"name": "storm", "profile": "storm", "arrival": "constant:rate=50"}],
    "expect": {"verdict": "pass", "checks": ["broker_rate"]},
}


def variant(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def error_of(data: object) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    return info.value


def test_base_parses_with_defaults() -> None:
    sc = parse_scenario(BASE)
    assert sc.name == "tiny"
    assert sc.targets == ("acceptor", "broker") and sc.target == "acceptor"
    assert sc.listeners == ("CLIENT",) and sc.inter_broker_listener is None
    assert sc.limits == {"max.connection.creation.rate": 30}
    assert sc.ip_quotas == {"default": 5, "127.0.0.9": 1}
    (phase,) = sc.load
    assert (phase.start, phase.stop, phase.listener, phase.users) == (0.0, 20.0, "CLIENT", 1)
    assert phase.source_ips == "127.0.0.2-127.0.0.40"
    assert phase.intended_rate == 50.0
    assert sc.expect.checks == ("broker_rate", "accounting")  # expected by every scenario
    assert sc.expect_for("broker") == sc.expect


@pytest.mark.parametrize(
    ("changes", "key", "reason_part"),
    [
        ({"name": "Bad Name"}, "name", "lower-case"),
        ({"description": ""}, "description", "say what"),
        ({"duration": 0}, "duration", ">="),
        ({"duration": "long"}, "duration", "number"),
        ({"duration": 4 * 3600 + 1}, "duration", "at most 14400"),
        ({"target": "zookeeper"}, "target", "not one of"),
        ({"targets": ["acceptor", "kraft"]}, "targets", "non-empty list"),
        ({"limits": {"max.connections": -1}}, "max.connections", "between 0"),
        ({"limits": {"max.connections": 1.5}}, "max.connections", "integer"),
        (
            {"limits": {"max.connection.creation.rate": True}},
            "max.connection.creation.rate",
            "integer",
        ),
        ({"limits": {"max.conections": 5}}, "max.conections", "not a Kafka"),
        (
            {"limits": {"listener.name.client.max.connections": 0}},
            "listener.name.client.max.connections",
            "between 1",
        ),
        (
            {"limits": {"listener.name.plain.max.connections": 5}},
            "listener.name.plain.max.connections",
            "not one of",
        ),
        (
            {"limits": {"max.connections.per.ip.overrides": "127.0.0.9"}},
            "max.connections.per.ip.overrides",
            "host:count",
        ),
        ({"limits": {"max.connections.per.ip": 0}}, "limits.max.connections.per.ip", "only with"),
        ({"limits": {"quota.window.num": 0}}, "quota.window.num", "between 1"),
        ({"ip_quotas": {"300.1.1.1": 5}}, "ip_quotas.300.1.1.1", "IP address"),
        ({"ip_quotas": {"default": -2}}, "ip_quotas.default", "between 0"),
        ({"load": []}, "load", "non-empty"),
        ({"extra": 1}, "<document>", "unknown key"),
        ({"expect": {"verdict": "maybe"}}, "expect.verdict", "one of"),
        ({"expect": {"fairness_p99_ratio": 0.5}}, "expect.fairness_p99_ratio", ">="),
        (
            {"request_quotas": [{"request_percentage": 10}]},
            "request_quotas[0]",
            "user and/or client-id",
        ),
        (
            {"request_quotas": [{"client-id": "x", "request_percentage": 0}]},
            "request_quotas[0].request_percentage",
            "greater than 0",
        ),
    ],
)
def test_bad_top_level_values_name_key_and_reason(
    changes: dict[str, Any], key: str, reason_part: str
) -> None:
    err = error_of(variant(**changes))
    assert err.key == key
    assert reason_part in err.reason
    assert key in str(err) and reason_part in str(err)


@pytest.mark.parametrize(
    ("phase", "key", "reason_part"),
    [
        ({"profile": "tsunami", "arrival": "constant:rate=1"}, "load[0].profile", "one of"),
        (
            {"profile": "storm", "arrival": "burst:rate=5"},
            "load[0].arrival",
            "unknown arrival kind",
        ),
        ({"profile": "storm", "arrival": "step:rates=1/2"}, "load[0].arrival", "needs every"),
        ({"profile": "storm", "arrival": "constant:rate=-4"}, "load[0].arrival", "number >= 0"),
        ({"profile": "storm"}, "load[0].arrival", "expected"),
        ({"profile": "storm", "arrival": "constant:rate=5", "stop": 25}, "load[0].stop", "beyond"),
        (
            {"profile": "storm", "arrival": "constant:rate=5", "start": 10, "stop": 5},
            "load[0].stop",
            "after start",
        ),
        (
            {"profile": "storm", "arrival": "constant:rate=5", "source_ips": "10.0.0.1"},
            "load[0].source_ips",
            "loopback",
        ),
        (
            {"profile": "storm", "arrival": "constant:rate=5", "source_ips": "127.0.0.9-127.0.0.2"},
            "load[0].source_ips",
            "backwards",
        ),
        (
            {"profile": "storm", "arrival": "constant:rate=5", "listener": "REPLICATION"},
            "load[0].listener",
            "not one of",
        ),
        (
            {"profile": "storm", "arrival": "constant:rate=5", "proxy_protocol": "v3"},
            "load[0].proxy_protocol",
            "one of",
        ),
        (
            {"profile": "storm", "arrival": "constant:rate=5", "users": 0},
            "load[0].users",
            "between 1",
        ),
        (
            {"profile": "storm", "arrival": "constant:rate=5", "colour": "red"},
            "load[0]",
            "unknown key",
        ),
    ],
)
def test_bad_phases(phase: dict[str, Any], key: str, reason_part: str) -> None:
    err = error_of(variant(load=[phase]))
    assert err.key == key
    assert reason_part in err.reason


def test_steady_needs_no_arrival_and_offers_no_new_connections() -> None:
    sc = parse_scenario(variant(load=[{"profile": "steady", "users": 3}]))
    assert sc.load[0].intended_rate == 0.0
    assert sc.load[0].arrival == ""
    assert "3 long-lived" in sc.load[0].shape


def test_duplicate_phase_names_refused() -> None:
    phase = {"name": "a", "profile": "storm", "arrival": "constant:rate=5"}
    assert error_of(variant(load=[phase, phase])).key == "load.name"


def test_haproxy_phase_defaults_to_proxy_v2() -> None:
    sc = parse_scenario(
        variant(
            load=[{"profile": "single_ip_flood", "arrival": "constant:rate=5", "via": "haproxy"}]
        )
    )
    assert sc.load[0].proxy_protocol == "v2"


def test_listeners_inter_broker_and_proxy_modes() -> None:
    sc = parse_scenario(
        variant(
            listeners={
                "names": ["CLIENT", "REPLICATION"],
                "inter_broker": "REPLICATION",
                "proxy_protocol": {"CLIENT": "required"},
            },
            limits={"listener.name.replication.max.connections": 30},
        )
    )
    assert sc.listeners == ("CLIENT", "REPLICATION")
    assert sc.inter_broker_listener == "REPLICATION"
    assert sc.proxy_protocol == {"CLIENT": "required"}
    for bad, key in [
        ({"names": ["CLIENT"], "inter_broker": "REPLICATION"}, "listeners.inter_broker"),
        ({"names": ["client"]}, "listeners.names"),
        ({"names": ["CLIENT", "CONTROLLER"]}, "listeners.names"),
        ({"names": ["CLIENT", "CLIENT"]}, "listeners.names"),
        (
            {"names": ["CLIENT"], "proxy_protocol": {"CLIENT": "sometimes"}},
            "listeners.proxy_protocol.CLIENT",
        ),
    ]:
        assert error_of(variant(listeners=bad)).key == key


def test_secured_listeners_are_checked_by_the_brokers_own_parser() -> None:
    names = {"names": ["REPLICATION", "CLIENT"], "inter_broker": "REPLICATION"}
    sc = parse_scenario(variant(listeners={**names, "security": {"CLIENT": "SASL_SSL:PLAIN"}}))
    assert sc.security == {"CLIENT": "SASL_SSL:PLAIN"}
    assert sc.broker_listeners == ("REPLICATION", "CLIENT=SASL_SSL:PLAIN")
    # PLAINTEXT is not a secured listener: nothing to record
    assert (
        parse_scenario(variant(listeners={**names, "security": {"CLIENT": "PLAINTEXT"}})).security
        == {}
    )
    for security, key, reason in [
        ({"OTHER": "SSL"}, "listeners.security", "not one of"),
        ({"CLIENT": "TLS"}, "listeners.security.CLIENT", "protocol 'TLS'"),
        ({"CLIENT": "SASL_SSL"}, "listeners.security.CLIENT", "needs a mechanism"),
        ({"CLIENT": ""}, "listeners.security.CLIENT", "a protocol and options"),
        # the first listener is the bootstrap and readiness probe: PLAINTEXT
        ({"REPLICATION": "SSL"}, "listeners.security", "must be PLAINTEXT"),
    ]:
        err = error_of(variant(listeners={**names, "security": security}))
        assert (err.key, reason in err.reason) == (key, True), err
    proxied = {**names, "proxy_protocol": {"CLIENT": "optional"}, "security": {"CLIENT": "SSL"}}
    assert "no PROXY header" in error_of(variant(listeners=proxied)).reason


def test_every_profile_loads_a_secured_listener() -> None:
    """The engine profiles, steady (kafka-python) and greedy (the harness's blocking
    client) all speak TLS and SASL; a profile outside SECURED_PROFILES is refused."""
    from harness.runner import scenario as scenario_module

    listeners = {"names": ["REPLICATION", "CLIENT"], "security": {"CLIENT": "SSL"}}
    for profile in scenario_module.PROFILES:
        phase = {"name": profile, "profile": profile, "listener": "CLIENT"}
        if profile in scenario_module.CLOSED_PROFILES:
            phase["users"] = 2
        else:
            phase["arrival"] = "constant:rate=5"
        assert parse_scenario(variant(listeners=listeners, load=[phase])).load[0].listener == (
            "CLIENT"
        )
    greedy = {"name": "g", "profile": "greedy", "users": 2, "listener": "CLIENT"}
    original = scenario_module.SECURED_PROFILES
    scenario_module.SECURED_PROFILES = tuple(p for p in original if p != "greedy")
    try:
        err = error_of(variant(listeners=listeners, load=[greedy]))
    finally:
        scenario_module.SECURED_PROFILES = original
    assert err.key == "load[0].profile" and "speaks TLS" in err.reason


def test_a_phase_logs_in_as_a_run_user_on_a_sasl_listener_only() -> None:
    sasl = {"names": ["REPLICATION", "CLIENT"], "security": {"CLIENT": "SASL_SSL:PLAIN"}}
    steady = {"name": "s", "profile": "steady", "users": 1, "listener": "CLIENT"}
    sc = parse_scenario(variant(listeners=sasl, load=[{**steady, "sasl_user": "bob"}]))
    assert sc.load[0].sasl_user == "bob"
    assert parse_scenario(variant(listeners=sasl, load=[steady])).load[0].sasl_user is None
    err = error_of(variant(listeners=sasl, load=[{**steady, "sasl_user": "mallory"}]))
    assert (err.key, "run's SASL users" in err.reason) == ("load[0].sasl_user", True), err
    ssl = {**sasl, "security": {"CLIENT": "SSL"}}
    err = error_of(variant(listeners=ssl, load=[{**steady, "sasl_user": "alice"}]))
    assert (err.key, "no SASL login" in err.reason) == ("load[0].sasl_user", True), err


def test_schedule_is_sorted_and_validated() -> None:
    sc = parse_scenario(
        variant(
            schedule=[
                {"at": 12, "broker_config": {"max.connection.creation.rate": None}},
                {"at": 3, "ip_quota": {"ip": "default", "rate": 2}},
                {"at": 5, "fault": "broker_pause", "for": 2},
                {"at": 8, "fault": "upstream_latency", "for": 3},
            ]
        )
    )
    assert [a.at for a in sc.schedule] == [3, 5, 8, 12]
    assert sc.schedule[0].params == {"ip": "default", "rate": 2}
    assert sc.schedule[1].end == 7
    assert sc.schedule[2].params["latency_ms"] == 200  # default
    assert sc.schedule[3].params == {"max.connection.creation.rate": None}
    assert [a.params["kind"] for a in sc.faults] == ["broker_pause", "upstream_latency"]


@pytest.mark.parametrize(
    ("entry", "key", "reason_part"),
    [
        ({"at": 3}, "schedule[0]", "exactly one"),
        (
            {"at": 3, "ip_quota": {"ip": "default", "rate": 2}, "fault": "broker_kill"},
            "schedule[0]",
            "exactly one",
        ),
        ({"ip_quota": {"ip": "default", "rate": 2}}, "schedule[0].at", "missing"),
        (
            {"at": 25, "ip_quota": {"ip": "default", "rate": 2}},
            "schedule[0].at",
            "not before the end",
        ),
        (
            {"at": 3, "ip_quota": {"ip": "nobody", "rate": 2}},
            "schedule[0].ip_quota.ip",
            "IP address",
        ),
        (
            {"at": 3, "broker_config": {"quota.window.num": 5}},
            "schedule[0].broker_config.quota.window.num",
            "not dynamically",
        ),
        ({"at": 3, "broker_config": {}}, "schedule[0].broker_config", "no key"),
        ({"at": 3, "fault": "broker_melt", "for": 2}, "schedule[0].fault", "one of"),
        ({"at": 3, "fault": "broker_kill"}, "schedule[0].for", "missing"),
        ({"at": 15, "fault": "broker_kill", "for": 5}, "schedule[0].for", "must end before"),
        (
            {"at": 3, "fault": "broker_pause", "for": 2, "latency_ms": 5},
            "schedule[0].latency_ms",
            "only for",
        ),
        ({"at": 3, "fault": "load_kill", "for": 1}, "schedule[0].phase", "one of the load"),
        (
            {"at": 3, "fault": "load_kill", "for": 1, "phase": "nope"},
            "schedule[0].phase",
            "['storm']",
        ),
        (
            {"at": 3, "fault": "broker_kill", "for": 1, "phase": "storm"},
            "schedule[0].phase",
            "only for load_kill",
        ),
        (
            {"at": 3, "fault": "upstream_latency", "for": 1, "broker": 1},
            "schedule[0].broker",
            "only for broker faults and acceptor_kill",
        ),
        (
            {"at": 3, "fault": "acceptor_kill", "for": 1, "broker": 2},
            "schedule[0].broker",
            "node ids are 1-1",
        ),
    ],
)
def test_bad_schedule_entries(entry: dict[str, Any], key: str, reason_part: str) -> None:
    err = error_of(variant(schedule=[entry]))
    assert err.key == key
    assert reason_part in err.reason


def test_overlapping_broker_faults_refused_but_latency_may_overlap() -> None:
    pause = {"at": 3, "fault": "broker_pause", "for": 5}
    kill = {"at": 6, "fault": "broker_kill", "for": 2}
    latency = {"at": 4, "fault": "upstream_latency", "for": 6}
    assert "overlaps" in error_of(variant(schedule=[pause, kill])).reason
    assert len(parse_scenario(variant(schedule=[pause, latency])).faults) == 2


def test_expect_by_target_overrides_only_what_it_says() -> None:
    sc = parse_scenario(
        variant(
            expect={
                "verdict": "pass",
                "checks": ["ip_rate"],
                "slack_ms": 50,
                "by_target": {"broker": {"verdict": "unknown"}},
            }
        )
    )
    assert sc.expect_for("acceptor").verdict == "pass"
    broker = sc.expect_for("broker")
    checks = ("ip_rate", "accounting")
    assert (broker.verdict, broker.checks, broker.slack_ms) == ("unknown", checks, 50)
    assert broker.to_json() == {"verdict": "unknown", "checks": list(checks), "slack_ms": 50}


def test_admin_needs_a_listener_without_required_proxy_header() -> None:
    required = {"names": ["CLIENT"], "proxy_protocol": {"CLIENT": "required"}}
    err = error_of(variant(listeners=required))
    assert err.key == "listeners.proxy_protocol" and "admin" in err.reason
    no_quotas = variant(listeners=required)
    no_quotas.pop("ip_quotas")
    assert parse_scenario(no_quotas).proxy_protocol == {"CLIENT": "required"}
    both = {"names": ["CLIENT", "REPLICATION"], "proxy_protocol": {"CLIENT": "required"}}
    assert parse_scenario(variant(listeners=both)).listeners == ("CLIENT", "REPLICATION")


def test_not_a_mapping() -> None:
    assert error_of(["a", "list"]).key == "<document>"


def test_arrival_specs_and_intended_rates() -> None:
    assert parse_arrival("step:rates=10/50/100,every=5") == (
        "step",
        {"rates": "10/50/100", "every": "5"},
    )
    assert intended_rate("constant:rate=50") == 50
    assert intended_rate("poisson:rate=7.5") == 7.5
    assert intended_rate("step:rates=10/50/90,every=5") == 50
    assert intended_rate("spike:base=5,peak=200,at=10,for=2") == 5
    assert intended_rate("ramp:from=0,to=200,over=30") == 100
    assert intended_rate("sawtooth:low=0,high=100,period=10") == 50
    with pytest.raises(ScenarioError):
        parse_arrival("constant:rate")


def test_expand_ips() -> None:
    assert expand_ips("127.0.0.2-127.0.0.4") == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert expand_ips("127.0.0.9, 127.0.1.1") == ["127.0.0.9", "127.0.1.1"]
    with pytest.raises(ScenarioError, match="loopback"):
        expand_ips("192.168.1.1")
    with pytest.raises(ScenarioError, match="too large"):
        expand_ips("127.0.0.1-127.1.0.0")


def test_file_errors_name_the_file(tmp_path: Any) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario_file(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("name: wrong\ndescription: x\nduration: 10\nload: []\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario_file(wrong)
    assert str(wrong) in str(info.value) and info.value.key == "load"
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario_file(tmp_path / "missing.yaml")


def test_int_max_is_kafkas() -> None:
    assert INT_MAX == 2**31 - 1


def test_a_cluster_scenario_spreads_engine_load_and_names_the_faulted_node() -> None:
    from harness.runner.loadgen import LoadTarget, locust_argv

    storm = {"name": "s", "profile": "storm", "arrival": "constant:rate=10",
             "hot_broker": {"id": 2, "share": 0.5}}  # fmt: skip
    boot = {"name": "b", "profile": "storm", "arrival": "constant:rate=10", "spread": "bootstrap"}
    steady = {"name": "v", "profile": "steady", "users": 1}
    fault = {"at": 5, "fault": "broker_kill", "broker": 3, "for": 2}
    sc = parse_scenario(
        variant(brokers=3, targets=["broker"], load=[storm, boot, steady], schedule=[fault])
    )
    assert sc.brokers == 3 and sc.schedule[0].params["broker"] == 3
    brokers = tuple((n, "127.0.0.1", 9090 + n) for n in (1, 2, 3))
    target = LoadTarget("127.0.0.1", 9091, brokers=brokers)

    def argv(i: int) -> list[str]:
        return locust_argv(sc.load[i], locust_bin="locust", profile_dir=Path("p"), target=target,
                           run_dir=Path("r"), run_id="x", seed=1)  # fmt: skip

    def opt(args: list[str], name: str) -> str | None:
        return args[args.index(name) + 1] if name in args else None

    every = "1=127.0.0.1:9091,2=127.0.0.1:9092,3=127.0.0.1:9093"
    assert opt(argv(0), "--brokers") == every and opt(argv(0), "--hot-broker") == "2:0.5"
    assert opt(argv(1), "--brokers") == "1=127.0.0.1:9091"  # all on the bootstrap broker
    assert opt(argv(2), "--brokers") == every  # kafka-python: attributed by address
    assert all(opt(argv(i), "--replication-factor") == "3" for i in range(3))


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        ({"brokers": 9}, "brokers", "at most 5"),
        ({"brokers": 2, "targets": ["broker"], "load": [{"name": "s", "profile": "storm",
          "arrival": "constant:rate=5", "hot_broker": {"id": 3, "share": 0.5}}]},
         "load[0].hot_broker.id", "node ids are 1-2"),
        ({"brokers": 2, "targets": ["broker"], "schedule": [
            {"at": 1, "fault": "broker_kill", "broker": 4, "for": 1}]},
         "schedule[0].broker", "node ids are 1-2"),
        ({"brokers": 2, "schedule": [{"at": 1, "broker": 3,
          "broker_config": {"max.connection.creation.rate": 5}}]},
         "schedule[0].broker", "node id of the scenario's cluster (1-2"),
        ({"schedule": [{"at": 1, "broker": 1,
          "broker_config": {"max.connection.creation.rate": 5}}]},
         "schedule[0].broker", "brokers > 1"),
        ({"brokers": 2, "schedule": [{"at": 1, "broker": 1, "ip_quota": {"rate": 5}}]},
         "schedule[0]", "unknown key; allowed: at, ip_quota"),
    ],
)  # fmt: skip
def test_bad_cluster_keys_name_key_and_reason(
    change: dict[str, Any], key: str, reason: str
) -> None:
    err = error_of(variant(**change))
    assert (err.key, reason in err.reason) == (key, True), err


def test_a_per_broker_config_change_names_its_node() -> None:
    sc = parse_scenario(
        variant(
            brokers=3,
            schedule=[
                {"at": 1, "broker_config": {"max.connection.creation.rate": 9}},
                {"at": 2, "broker": 2, "broker_config": {"max.connection.creation.rate": 4}},
            ],
        )
    )
    assert [a.node for a in sc.schedule] == [None, 2]
    assert sc.schedule[1].params == {"max.connection.creation.rate": 4}


def test_a_load_kill_names_its_phase_and_may_overlap_a_process_fault() -> None:
    sc = parse_scenario(
        variant(
            schedule=[
                {"at": 3, "fault": "acceptor_kill", "for": 3},
                {"at": 4, "fault": "load_kill", "phase": "storm", "for": 1},
            ]
        )
    )
    assert sc.schedule[1].params == {"kind": "load_kill", "for": 1.0, "phase": "storm"}
