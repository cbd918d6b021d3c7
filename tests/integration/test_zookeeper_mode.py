"""A broker in ZooKeeper mode (Kafka 3.6.2, the last releases before 4.0 still have it):
the harness starts ZooKeeper from Kafka's own classpath, the broker registers there, IP
quotas go through the admin API as on KRaft, a killed broker restarts once its ZooKeeper
session has expired, and nothing is left once the CLI is stopped."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from base.admin.client import alter_ip_quota, describe_ip_quotas
from broker.errors import BrokerError
from broker.probe import probe
from tests.integration.conftest import pgid_gone, read_until_ready

pytestmark = pytest.mark.integration
VERSION = "3.6.2"


def test_the_cli_starts_zookeeper_and_the_broker_and_stops_both(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "harness", "broker", "--kafka-version", VERSION, "--zookeeper"]
    cmd += ["--workdir", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = read_until_ready(proc, 240)
        assert f"kafka {VERSION} ready" in out, out
        zk = re.search(r"^zookeeper: (127\.0\.0\.1:\d+) \(pid (\d+)", out, re.M)
        boot = re.search(r"^bootstrap: (127\.0\.0\.1:\d+)$", out, re.M)
        broker_pid = re.search(r"pid (\d+)\)", out)
        assert zk and boot and broker_pid, out
        props = (tmp_path / "run" / "server.properties").read_text()
        assert f"zookeeper.connect={zk.group(1)}" in props and "process.roles" not in props
        host, port = boot.group(1).split(":")
        assert probe(host, int(port), timeout_s=10).brokers == 1
        alter_ip_quota(boot.group(1), "127.0.0.9", 4)  # kept in ZooKeeper's /config
        assert describe_ip_quotas(boot.group(1), "127.0.0.9") == {"127.0.0.9": 4.0}
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, rest
        assert pgid_gone(int(broker_pid.group(1)), 30) and pgid_gone(int(zk.group(2)), 30), (
            "a JVM is left"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_killed_broker_restarts_once_its_session_expired(tmp_path: Path) -> None:
    from broker.local import start_local

    broker = start_local(
        version=VERSION, zookeeper=True, metrics=False, workdir=tmp_path / "b", progress=print
    )
    try:
        assert broker.zookeeper is not None and broker.zookeeper.running
        broker.kill()
        started = time.monotonic()
        broker.restart()  # waits out the dead broker's ZooKeeper session (3 s + a tick)
        assert time.monotonic() - started >= 3.0
        assert broker.probe().brokers == 1
    finally:
        broker.stop()
    assert not broker.zookeeper.running


def test_zookeeper_mode_is_refused_where_kafka_has_none() -> None:
    from broker.local import zookeeper_mode

    assert zookeeper_mode("2.8.2", None) and not zookeeper_mode("3.6.2", None)
    with pytest.raises(BrokerError, match=r"4\.0 removed ZooKeeper mode"):
        zookeeper_mode("4.3.1", True)
