"""A KRaft cluster of three local nodes (`harness broker --brokers 3`) against real Kafka:
three bootstrap addresses, a produce with acks=all to a topic replicated three times, one
node killed and restarted under a running cluster, and nothing left once the harness
process is SIGKILLed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from broker.errors import BrokerError
from broker.probe import probe
from tests.integration.conftest import pgid_gone, read_until_ready

pytestmark = pytest.mark.integration


def _produce_all(bootstrap: list[str], topic: str, rf: int | None = None) -> int:
    """An acks=all write to ``topic``, created first with replication factor ``rf``."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    if rf is not None:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            admin.create_topics([NewTopic(topic, 3, rf)])
        finally:
            admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=30000)
    try:
        return int(producer.send(topic, b"replicated").get(timeout=60).offset)
    finally:
        producer.close()


def test_three_nodes_from_the_cli_replicate_and_die_with_a_sigkilled_harness(
    tmp_path: Path,
) -> None:
    cmd = [sys.executable, "-m", "harness", "broker", "--launcher", "local", "--brokers", "3"]
    cmd += ["--workdir", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = read_until_ready(proc, 240)
        assert "Ctrl-C to stop" in out, out
        boot = re.search(r"^bootstrap: (\S+)$", out, re.M)
        assert boot, out
        addresses = boot.group(1).split(",")
        assert len(addresses) == 3 and len(set(addresses)) == 3, addresses
        pids = [int(p) for p in re.findall(r"^broker \d: pid (\d+)", out, re.M)]
        assert len(pids) == 3, out
        for address in addresses:  # every node answers and sees the whole cluster
            host, port = address.split(":")
            assert probe(host, int(port), timeout_s=10).brokers == 3
        assert _produce_all(addresses, "replicated-3", 3) >= 0
        for i in (1, 2, 3):
            assert (tmp_path / "run" / f"broker-{i}" / "broker.log").exists()
        proc.kill()  # SIGKILL: no handler runs; each JVM's PR_SET_PDEATHSIG must end it
        proc.wait(timeout=30)
        assert all(pgid_gone(p, 30) for p in pids), "a broker JVM outlived the harness process"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_one_node_killed_and_restarted_under_a_running_cluster(tmp_path: Path) -> None:
    from broker.cluster import start_local_cluster

    fast = {"replica.lag.time.max.ms": "5000"}  # the dead replica leaves the ISR sooner
    with start_local_cluster(
        3, workdir=tmp_path / "c", properties=fast, metrics=False, progress=lambda m: None
    ) as c:
        boot = c.bootstrap.split(",")
        assert _produce_all(boot, "survives", 3) >= 0
        third = c.broker(3)
        third.kill()
        assert not third.running
        # two of three voters and replicas left: the others still take acks=all writes once
        # the leader has dropped the dead replica from the ISR (replica.lag.time.max.ms)
        assert _produce_all(boot[:2], "survives") >= 0  # no admin: its controller may be 3
        third.restart()
        c.wait_members(60)
        assert probe(third.host, third.port, timeout_s=10).brokers == 3
        with pytest.raises(BrokerError, match="no broker with node id 4"):
            c.broker(4)
    for b in c.brokers:
        assert not b.running


def test_brokers_out_of_range_is_a_clear_cli_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "harness", "broker", "--launcher", "local", "--brokers", "9"]
    out = subprocess.run(
        [*cmd, "--workdir", str(tmp_path / "x")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0 and "brokers=9: between 1 and 5" in out.stderr, out


def test_every_node_of_a_secured_cluster_logs_each_user_in(tmp_path: Path) -> None:
    """The nodes share the run's CA and SCRAM users: each node's own client configuration
    logs bob in over SASL_SSL and sees the whole cluster."""
    from kafka.admin import KafkaAdminClient

    from base.security import clientprops
    from broker.cluster import start_local_cluster

    listeners = ("PLAINTEXT", "S=SASL_SSL:SCRAM-SHA-256")
    with start_local_cluster(
        3, listeners=listeners, workdir=tmp_path / "c", metrics=False, progress=lambda m: None
    ) as c:
        for b in c.brokers:
            config = clientprops.kafka_python_config(clientprops.read(b.client_configs["S@bob"]))
            admin = KafkaAdminClient(**config, request_timeout_ms=20000)
            try:
                assert len(admin.describe_cluster()["brokers"]) == 3
            finally:
                admin.close()
