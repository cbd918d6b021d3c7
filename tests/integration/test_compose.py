"""compose/ for real: Kafka, the acceptor and a Locust master with two workers in containers.

The whole path up → scenario → `harness analyze` → verdict, on a short run of the ci-gate
scenario (8 s of its storm; about 2 minutes, most of it Spark). `make compose-demo` is the same
with the full scenario. Skipped only when no Docker engine answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from broker.container import OWNER, OWNER_LABEL, docker_available

pytestmark = [pytest.mark.integration, pytest.mark.container, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


CLUSTER_SCENARIO = """\
name: compose-cluster
description: three brokers in compose, each behind its own acceptor
brokers: 3
duration: 10
seed: 5
limits:
  max.connection.creation.rate: 15
ip_quotas:
  default: 3
load:
  - name: storm
    profile: storm
    arrival: constant:rate=60
    source_ips: 127.0.0.2-127.0.0.9
expect:
  verdict: pass
  checks: [broker_rate_span, offered_load]
"""


def _demo(scenario: str, seconds: int) -> tuple[int, Path]:
    """`python compose/demo.py SCENARIO --duration S`: its exit code and run directory, once
    it ended with a verdict, pass or (a short run may not reach every limit) unknown; never
    fail or a broken run."""
    ok, why = docker_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why}")
    res = subprocess.run(
        [sys.executable, "compose/demo.py", scenario, "--duration", str(seconds)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert res.returncode in (0, 2), res.stdout[-3000:] + res.stderr[-3000:]
    line = next(x for x in res.stdout.splitlines() if "compose run " in x and "verdict" in x)
    return res.returncode, Path(line.rsplit("report in ", 1)[1]).parent


def test_compose_runs_a_catalog_scenario_and_leaves_nothing_behind() -> None:
    returncode, run_dir = _demo("ci-gate", 8)
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    assert verdict["verdict"] == ("pass" if returncode == 0 else "unknown")
    assert any(c["verdict"] == "pass" for c in verdict["checks"])
    run = json.loads((run_dir / "run.json").read_text())
    assert run["launcher"] == "compose" and run["ended_at"] and "error" not in run

    def rows(source: str) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for f in sorted((run_dir / "history" / source).glob("*.parquet")):
            out += pq.read_table(f).to_pylist()
        return out

    client, acceptor, harness = rows("client"), rows("acceptor"), rows("harness")
    # both workers wrote their own client history (one file set per worker process)
    files = {f.name.rsplit("-", 1)[0] for f in (run_dir / "history" / "client").glob("*.parquet")}
    assert len(files) >= 2, files
    assert any(r["event"] == "connect_ok" for r in client)
    # the acceptor saw the load's own 127.0.0.x addresses (host networking, no proxy)
    ips = {r["client_ip"] for r in acceptor if r["event"] == "accept"}
    assert ips and all(str(ip).startswith("127.0.0.") for ip in ips) and len(ips) > 1
    events = [r["event"] for r in harness]
    for event in ("config", "run_start", "phase_start", "phase_end", "run_end"):
        assert event in events
    # the containers' processes were read by role, and the acceptor's loop judged by them
    stats = [json.loads(str(r["detail"])) for r in harness if r["event"] == "process_stats"]
    assert {d["role"] for d in stats} >= {"acceptor", "broker", "load"}, stats[:3]
    assert any("loop_busy" in d for d in stats if d["role"] == "acceptor")
    assert "kernel_net" in events
    front = next(c for c in verdict["checks"] if c["name"] == "front_saturation")
    assert front["verdict"] != "n/a", front
    import docker

    client_api = docker.from_env()
    try:
        left = client_api.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={OWNER}"})
        assert [
            c.name
            for c in left
            if "compose" in c.labels.get("org.kafka-connection-harness.role", "")
        ] == []
    finally:
        client_api.close()


def test_compose_runs_a_secured_scenario_with_no_secret_outside_its_private_folder() -> None:
    """mutual-tls-quota in compose: Kafka with a mutual-TLS listener from the run's private
    folder, the acceptor ending TLS with its own certificate, steady clients presenting the
    client certificate; the requests are charged to Kafka's name for it, nothing secret is in
    compose.env, the logs or run.json, and the private folder is gone afterwards."""
    _, run_dir = _demo("mutual-tls-quota", 10)
    run_text = (run_dir / "run.json").read_text()
    assert "PRIVATE KEY" not in run_text
    run = json.loads(run_text)
    assert run["listener_security"]["CLIENT"]["protocol"] == "SSL"
    assert not (run_dir / "broker" / "private").exists()
    env = (run_dir / "compose.env").read_text()
    assert "HARNESS_SERVER_PROPERTIES=" in env and "BEGIN" not in env
    masked = (run_dir / "broker" / "server.properties").read_text()
    assert "ssl.keystore.location" in masked and "PRIVATE KEY" not in masked
    logs = (run_dir / "logs" / "compose.log").read_text(errors="replace")
    assert "PRIVATE KEY" not in logs
    acceptor = [
        r
        for f in sorted((run_dir / "history" / "acceptor").glob("*.parquet"))
        for r in pq.read_table(f).to_pylist()
    ]
    charged = {r["principal"] for r in acceptor if r["event"] == "request"}
    assert "OU=harness,CN=client1" in charged, charged


def test_compose_runs_a_cluster_with_an_acceptor_per_broker(tmp_path: Path) -> None:
    """Three Kafka containers, each advertising its own acceptor container, the storm spread
    over the fronts: every front testifies as its broker (`node.id` in its config rows),
    accepts its share, and the verdict is judged per front (docs/clusters.md)."""
    scenario = tmp_path / "compose-cluster.yaml"
    scenario.write_text(CLUSTER_SCENARIO)
    _, run_dir = _demo(str(scenario), 10)
    run = json.loads((run_dir / "run.json").read_text())
    assert sorted(run["brokers"]) == ["1", "2", "3"]
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    spans = next(c for c in verdict["checks"] if c["name"] == "broker_rate_span")
    assert sorted(spans["per_broker"]) == ["1", "2", "3"], spans
    assert spans["verdict"] in ("pass", "unknown"), spans
    nodes = set()
    for f in (run_dir / "history" / "harness").glob("acceptor-config-*.parquet"):
        for d in pq.read_table(f, columns=["detail"])["detail"].to_pylist():
            nodes.add(json.loads(d)["node.id"])
    assert nodes == {1, 2, 3}
    accepted: dict[str, int] = {}
    for f in (run_dir / "history" / "acceptor").glob("*.parquet"):
        pid = f.name.split("-")[1]
        events = pq.read_table(f, columns=["event"])["event"].to_pylist()
        accepted[pid] = accepted.get(pid, 0) + events.count("accept")
    assert len(accepted) == 3 and all(n > 0 for n in accepted.values()), accepted
