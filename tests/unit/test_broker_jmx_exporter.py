"""The JMX exporter agent: cached resolution, the JVM flag, and rules that give docs/metrics.md's
names (no Maven, no JVM: the real broker's exporter is tested in
tests/integration/test_kafka_metrics_exporter.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from broker import artifacts
from broker.artifacts import JMX_EXPORTER_VERSION, jmx_exporter


def test_a_cached_agent_is_used_without_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    jar = tmp_path / "jmx-exporter" / JMX_EXPORTER_VERSION
    jar.mkdir(parents=True)
    (jar / f"jmx_prometheus_javaagent-{JMX_EXPORTER_VERSION}.jar").write_bytes(b"PK")

    def no_maven() -> str:
        raise AssertionError("Maven must not run when the agent is cached")

    monkeypatch.setattr(artifacts, "find_maven", no_maven)
    exp = jmx_exporter()
    assert exp.jar.parent == jar and exp.version == JMX_EXPORTER_VERSION
    config = exp.write_config(tmp_path / "rules.yaml")
    flag = exp.java_agent_option(9404, config)
    assert flag == f"-javaagent:{exp.jar}=127.0.0.1:9404:{config}"


def test_rules_map_kafkas_mbeans_to_the_documented_names() -> None:
    rules = yaml.safe_load(artifacts.JMX_EXPORTER_RULES_FILE.read_text())
    assert rules["lowercaseOutputName"] is True
    documented = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    names = set(re.findall(r"`(kafka_[a-z_]+)`", documented.read_text()))
    produced = set()
    for rule in rules["rules"]:
        name = rule["name"]
        for group in ("connection_count", "connection_creation_rate"):
            produced.add(name.replace("$3", group).replace("$2", group))
        pattern = rule["pattern"]
        for kafka_name in re.findall(r"\(([a-z|-]+)\)", pattern):
            for alt in kafka_name.split("|"):
                produced.add(re.sub(r"\$\d", alt.replace("-", "_"), name))
    for want in (
        "kafka_server_socket_server_metrics_connection_accept_rate",
        "kafka_server_socket_server_metrics_broker_connection_accept_rate",
        "kafka_server_socket_server_metrics_connection_accept_throttle_time",
        "kafka_server_socket_server_metrics_ip_connection_accept_throttle_time",
        "kafka_server_socket_server_metrics_connection_count",
        "kafka_network_acceptor_acceptorblockedpercent",
        "kafka_network_acceptor_acceptorblockedpercent_count",
        "kafka_server_request_throttle_time",
        "kafka_server_request_request_time",
    ):
        assert want in produced, want
        assert want in names, f"{want} is not documented in docs/metrics.md"
