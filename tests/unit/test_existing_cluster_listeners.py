"""A cluster the harness did not start names its listeners its own way: the runner finds the
load's listener among the broker's (`base.admin.listeners`), the checker maps the metrics'
labels to the scenario's names (`analysis.checks.kafka_metrics.cluster_name`), and a static
setting the cluster keeps apart from the scenario's is said, key by key."""

from __future__ import annotations

import pytest

from analysis.checks.kafka_metrics import cluster_name
from analysis.verdict import _static_differs
from base.admin.listeners import listener_at, parse_listeners, parse_protocol_map
from harness.runner.kafka_metrics import compare_static

pytestmark = pytest.mark.unit

CONFIGS = {
    "listeners": "REPL://0.0.0.0:9092,OPS_SASL://0.0.0.0:9093,CONTROLLER://0.0.0.0:9094",
    "advertised.listeners": "REPL://kafka1:9092,OPS_SASL://127.0.0.1:19093",
    "listener.security.protocol.map": "REPL:PLAINTEXT,OPS_SASL:SASL_SSL,CONTROLLER:PLAINTEXT",
}


def test_listeners_and_the_protocol_map_parse_as_kafka_writes_them() -> None:
    assert parse_listeners("A://h:1,B://[::1]:2,bad,C://:3") == {
        "A": ("h", 1),
        "B": ("::1", 2),
        "C": ("", 3),
    }
    assert parse_protocol_map(CONFIGS["listener.security.protocol.map"])["OPS_SASL"] == "SASL_SSL"


def test_the_load_listener_is_the_one_advertised_at_the_bootstrap_else_bound_there() -> None:
    assert listener_at(CONFIGS, "127.0.0.1", 19093) == "OPS_SASL"  # advertised elsewhere
    assert listener_at(CONFIGS, "127.0.0.1", 9092) == "REPL"  # by port alone
    assert listener_at(CONFIGS, "127.0.0.1", 9094) == "CONTROLLER"  # bound, not advertised
    assert listener_at(CONFIGS, "127.0.0.1", 1) is None


def test_the_metrics_labels_map_to_the_scenarios_listener() -> None:
    labels = {"repl", "ops_sasl", "ops_tls"}
    read = {**CONFIGS, "load": {"CLIENT": "OPS_SASL"}}
    # the scenario's own name wins; then what DescribeConfigs said
    assert cluster_name("REPL", labels, read, "PLAINTEXT") == "repl"
    assert cluster_name("CLIENT", labels, read, "SASL_SSL") == "ops_sasl"
    # not read: the one label of the load's protocol in the map
    assert cluster_name("CLIENT", labels, CONFIGS, "SASL_SSL") == "ops_sasl"
    # no map (DescribeConfigs refused): Kafka's default names a listener after its protocol
    assert cluster_name("CLIENT", {"plaintext", "sasl_ssl"}, {}, "SASL_SSL") == "sasl_ssl"
    # else the only label; never a guess among several
    assert cluster_name("CLIENT", {"outside"}, {}, "SSL") == "outside"
    assert cluster_name("CLIENT", {"a", "b"}, {}, "SSL") is None


def test_a_static_key_the_cluster_keeps_apart_is_named_in_the_run_and_the_verdict() -> None:
    said: list[str] = []
    static = compare_static(
        {"connection.failed.authentication.delay.ms": "500", "quota.window.num": "11"},
        {"connection.failed.authentication.delay.ms": "100", "quota.window.num": "11.0"},
        said.append,
    )
    assert not static["connection.failed.authentication.delay.ms"]["same"]
    assert static["quota.window.num"]["same"]
    assert len(said) == 1 and "connection.failed.authentication.delay.ms is 100" in said[0]
    reasons = _static_differs({"cluster_listeners": {"static": static}})
    assert reasons == [
        "the cluster's static connection.failed.authentication.delay.ms is 100, the "
        "scenario's 500: judged by the scenario's (set one to the other)"
    ]
    said.clear()
    compare_static({"quota.window.num": "11"}, {"quota.window.num": "11"}, said.append)
    assert said == ["the cluster's static settings equal the scenario's (quota.window.num)"]


def test_harness_broker_prints_the_whole_gate_command_with_its_metrics_url() -> None:
    from pathlib import Path
    from types import SimpleNamespace

    from broker.cli import gate_command, metrics_absent

    ports = {"PLAINTEXT": 9092, "SASL_SSL": 9093, "SSL": 9094}
    broker = SimpleNamespace(
        host="127.0.0.1",
        port=9092,
        launcher="local",
        client_configs={
            "SASL_SSL": Path("/p/client-sasl_ssl.properties"),
            "SASL_SSL@bob": Path("/p/client-sasl_ssl-bob.properties"),
            "SSL": Path("/p/client-ssl.properties"),
        },
    )
    assert gate_command(ports, broker, "http://127.0.0.1:7071/metrics") == (
        "harness run ci-gate --target broker --bootstrap-server 127.0.0.1:9093 "
        "--command-config /p/client-sasl_ssl.properties "
        "--broker-metrics-url http://127.0.0.1:7071/metrics --gate"
    )
    plain = SimpleNamespace(host="127.0.0.1", port=9092, launcher="local", client_configs={})
    assert gate_command({"PLAINTEXT": 9092}, plain, "1=http://a/metrics,2=http://b/metrics") == (
        "harness run ci-gate --target broker --bootstrap-server 127.0.0.1:9092 "
        "--broker-metrics-url 1=http://a/metrics,2=http://b/metrics --gate"
    )
    assert "--broker-metrics-url" in metrics_absent(SimpleNamespace(launcher="external"))
    assert "HARNESS_BROKER_METRICS=0" in metrics_absent(plain)
