"""Kafka as the reference: the broker-side checks fail a broken broker configuration.

The run's broker gets a per-IP quota through Kafka's own `kafka-configs` that the scenario
does not declare (an operator's mistake: the runner promises 127.0.0.9 no limit; the test
adds it right after the runner set the declared quotas). The load from 127.0.0.9 exceeds
the hidden quota on purpose, and the checker must FAIL the run: the EOFs Kafka caused
cannot be explained by any limit the run declared (client_over_throttling, with
127.0.0.9 as witness), while Kafka's own metrics, scraped every second, show the IP
throttling that caused them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from base.history import read_history
from broker import run_tool
from harness.runner.admin_changes import Changes
from harness.runner.orchestrator import Orchestrator, RunOptions
from harness.runner.scenario import load_scenario_file

pytestmark = pytest.mark.integration

SCENARIO = """
name: hidden-ip-quota
description: 127.0.0.9 opens 10 connections/s; the run declares no per-IP quota
covers: [over-throttling by a broker configuration the run did not declare]
targets: [broker]
duration: 8
seed: 3
load:
  - name: storm
    profile: storm
    arrival: constant:rate=10
    source_ips: 127.0.0.9
expect:
  verdict: pass
timeouts:
  drain: 20
"""


@pytest.mark.timeout(900)
def test_a_hidden_ip_quota_is_caught_as_over_throttling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    declared = Changes.apply_initial_quotas

    def with_hidden_quota(self: Changes) -> None:
        declared(self)
        done = run_tool(
            "kafka-configs",
            "--bootstrap-server",
            self.bootstrap,
            "--alter",
            "--add-config",
            "connection_creation_rate=1",
            "--entity-type",
            "ips",
            "--entity-name",
            "127.0.0.9",
        )
        assert done.returncode == 0, done.stdout + done.stderr

    monkeypatch.setattr(Changes, "apply_initial_quotas", with_hidden_quota)
    path = tmp_path / "hidden-ip-quota.yaml"
    path.write_text(SCENARIO)
    opts = RunOptions(target="broker", out=tmp_path / "runs", launcher="local")
    result = Orchestrator(load_scenario_file(path), opts).run()
    verdict = json.loads((result.run_dir / "report" / "verdict.json").read_text())
    checks = {c["name"]: c for c in verdict["checks"]}
    over = checks["client_over_throttling"]
    assert over["verdict"] == "fail", over
    assert {w["client_ip"] for w in over["witnesses"]} == {"127.0.0.9"}
    assert verdict["verdict"] == "fail"
    # Kafka's own testimony was recorded: the IP meter of 127.0.0.9 and its throttling
    table = read_history(result.run_dir)
    details = [
        json.loads(d)
        for e, d in zip(
            table.column("event").to_pylist(), table.column("detail").to_pylist(), strict=True
        )
        if e == "kafka_metrics" and d
    ]
    assert len(details) >= 5
    throttled = [
        v
        for d in details
        for name, labels, v in d.get("samples", [])
        if name.endswith("ip_connection_accept_throttle_time") and v is not None
    ]
    per_ip = [
        labels.get("ip")
        for d in details
        for name, labels, _ in d.get("samples", [])
        if name.endswith("connection_accept_rate") and labels.get("ip")
    ]
    assert throttled and max(throttled) <= 1000
    assert "127.0.0.9" in per_ip
