"""`harness run --target broker --bootstrap-server`: a scenario against an existing cluster.

The cluster here is a broker this test starts (with its JMX exporter, whose URL is passed
as an operator passes theirs); it is its own, so the per-IP quota the run sets
through the admin API leaks into no other test; the runner treats it as the operators'.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from broker import Broker
from tests.integration.test_runner_end_to_end import harness_run, only_run_dir, write_tiny

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TWO_LISTENERS = """
name: two-listeners
description: loads two listeners (integration test)
covers: [max.connections]
duration: 4
seed: 1
listeners:
  names: [CLIENT, REPLICATION]
  inter_broker: REPLICATION
limits:
  max.connections: 10
load:
  - name: storm
    profile: storm
    arrival: constant:rate=5
    source_ips: 127.0.0.2
  - name: replication
    profile: storm
    listener: REPLICATION
    arrival: constant:rate=5
    source_ips: 127.0.0.3
expect:
  verdict: pass
"""


@pytest.mark.timeout(900)
def test_a_scenario_runs_against_an_existing_cluster(
    tmp_path: Path, broker_factory: Callable[..., Broker]
) -> None:
    cluster = broker_factory()
    out = tmp_path / "runs"
    res = harness_run(
        [str(write_tiny(tmp_path)), "--target", "broker", "--bootstrap-server",
         cluster.bootstrap, "--broker-metrics-url", str(cluster.metrics_url),
         "--out", str(out), "--gate"],
        tmp_path / "run.log",
        timeout=800,
    )  # fmt: skip
    assert "launcher external" in res.stdout, res.stdout[-3000:]
    # the cluster's own metrics come from the exporter URL given, as for any existing cluster
    assert f"from {cluster.metrics_url}" in res.stdout
    verdict = json.loads((only_run_dir(out) / "report" / "verdict.json").read_text())
    # 7.5 connections/s per address against the 3/s default quota the run set on the cluster
    assert verdict["verdict"] == "pass", (verdict["reasons"], res.stdout[-3000:])
    assert "client_ip_rate_span" in verdict["exercised"]
    assert res.returncode == 0


@pytest.mark.timeout(300)
def test_a_two_listener_scenario_is_refused_with_the_reason(
    tmp_path: Path, broker_factory: Callable[..., Broker]
) -> None:
    cluster = broker_factory()
    scenario = tmp_path / "two-listeners.yaml"
    scenario.write_text(TWO_LISTENERS)
    out = tmp_path / "runs"
    res = harness_run(
        [str(scenario), "--target", "broker", "--bootstrap-server", cluster.bootstrap,
         "--out", str(out), "--gate"],
        tmp_path / "run.log",
        timeout=250,
    )  # fmt: skip
    assert res.returncode == 3, res.stdout[-3000:]
    assert "one bootstrap address" in res.stdout
    assert "VERDICT: none (the target never started" in res.stdout  # nothing is analysed


@pytest.mark.timeout(900)
def test_a_secured_cluster_is_reached_with_its_client_properties(
    tmp_path: Path, broker_factory: Callable[..., Broker]
) -> None:
    """`harness run ssl-storm --bootstrap-server <SASL_SSL listener> --command-config F`:
    the probe, the quota changes and the load log in with F's keys; without F the run is
    refused before anything starts; no password reaches the run folder."""
    from base.security import clientprops
    from base.security.secrets import leaks

    cluster = broker_factory(launcher="local", listeners=("PLAINTEXT", "SECURE=SASL_SSL:PLAIN"))
    config = cluster.client_configs["SECURE"]
    boot = cluster.address("SECURE")
    out = tmp_path / "runs"
    refused = harness_run(
        ["ssl-storm", "--target", "broker", "--bootstrap-server", boot, "--out", str(out)],
        tmp_path / "refused.log",
        timeout=250,
    )  # fmt: skip
    assert refused.returncode == 3 and "--command-config" in refused.stdout, refused.stdout
    assert not out.exists() or not any(out.glob("*/report"))
    res = harness_run(
        ["ssl-storm", "--target", "broker", "--bootstrap-server", boot, "--command-config",
         str(config), "--duration", "8", "--out", str(out)],
        tmp_path / "run.log",
        timeout=800,
    )  # fmt: skip
    assert "launcher external, SASL_SSL" in res.stdout, res.stdout[-3000:]
    # the operators' cluster keeps what the run set, and the run says so
    assert "keeps what the run set: ip quotas ['default']" in res.stdout, res.stdout[-3000:]
    run_dir = next(p for p in out.iterdir() if (p / "report").exists())
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    # 8 s of load: the per-IP quota (set over the secured admin connection) is exercised;
    # the broker-wide rate may not be yet, which leaves the verdict unknown, never fail
    assert verdict["verdict"] in ("pass", "unknown"), (verdict["reasons"], res.stdout[-3000:])
    status = {c["name"]: c["verdict"] for c in verdict["checks"]}
    if status["offered_load"] == "pass":
        assert "client_ip_rate_span" in verdict["exercised"], verdict["reasons"]
    else:  # a machine too busy for the TLS logins' pace: fewer reach the quota, and it says so
        print("the generator fell behind its schedule:", verdict["reasons"])
        assert any("offered" in r for r in verdict["reasons"]), verdict["reasons"]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["listener_security"]["CLIENT"]["protocol"] == "SASL_SSL"
    assert res.returncode == 0
    users = clientprops.read(cluster.private_dir / "users.properties")
    assert leaks([run_dir, tmp_path / "run.log"], list(users.values())) == []
