"""The broker launcher against real Apache Kafka: version, CLI lifecycle, faults, errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from broker import Broker, BrokerError, resolve_artifacts, start_broker
from broker.artifacts import KAFKA_VERSION, jar_version
from broker.container import docker_available
from broker.local import PortInUse
from broker.probe import probe
from tests.integration.conftest import pgid_gone, read_until_ready

API_VERSIONS, PRODUCE, FETCH, METADATA = 18, 0, 1, 3


def _needs_local(broker: Broker) -> None:
    if broker.launcher != "local":
        pytest.skip(f"needs a local broker process (launcher is {broker.launcher})")


def test_broker_answers_api_versions_with_the_resolved_kafka_version(kafka_broker: Broker) -> None:
    _needs_local(kafka_broker)
    result = kafka_broker.probe(timeout_s=10)
    assert {API_VERSIONS, PRODUCE, FETCH, METADATA} <= set(result.api_versions)
    assert result.brokers == 1
    assert result.inferred_version().startswith("4.")  # the API ranges of a 4.x broker
    expected = jar_version(resolve_artifacts(progress=lambda _: None).jars)
    assert expected == KAFKA_VERSION
    assert kafka_broker.version == expected
    assert kafka_broker.log_path is not None
    assert f"Kafka version: {expected}" in kafka_broker.log_path.read_text()


def test_cli_prints_bootstrap_and_stops_on_sigterm_leaving_no_jvm(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "harness", "broker", "--launcher", "local"]
    cmd += ["--workdir", str(tmp_path / "run"), "--set", "max.connections.per.ip=50"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = read_until_ready(proc, 150)
        assert "Ctrl-C to stop" in out, out
        bootstrap = re.search(r"^bootstrap: (127\.0\.0\.1:\d+)$", out, re.M)
        pid = re.search(r"pid (\d+)\)", out)
        assert bootstrap and pid, out
        assert f"kafka {KAFKA_VERSION} ready" in out
        assert f"log: {tmp_path / 'run' / 'broker.log'}" in out
        host, port = bootstrap.group(1).split(":")
        assert probe(host, int(port), timeout_s=10).brokers == 1
        props = (tmp_path / "run" / "server.properties").read_text()
        assert "max.connections.per.ip=50" in props

        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, rest
        assert "broker stopped" in rest
        assert pgid_gone(int(pid.group(1))), "the broker's process group is still alive"
        with pytest.raises(OSError):
            probe(host, int(port), timeout_s=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_second_fetch_runs_no_maven(tmp_path: Path) -> None:
    resolve_artifacts(progress=lambda _: None)  # the session broker has populated the cache
    # No mvn (and no java) on PATH: any attempt to run Maven would fail the command.
    env = {**os.environ, "PATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "broker", "--fetch-only"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "already cached" in done.stdout
    assert "resolving" not in done.stdout


def test_pause_resume_kill_restart_and_advertised_listeners(
    broker_factory: Callable[..., Broker],
) -> None:
    broker = broker_factory(
        listeners=("CLIENT", "INTERNAL"),
        advertised={"CLIENT": "127.0.0.1:19092"},
        inter_broker_listener="INTERNAL",
    )
    _needs_local(broker)
    client_port = broker.listener_ports["CLIENT"]
    assert broker.bootstrap == f"127.0.0.1:{client_port}"

    # Metadata through each listener advertises that listener's address.
    from kafka.protocol.metadata import MetadataRequest

    from broker.probe import _roundtrip

    def advertised_via(listener: str) -> tuple[str, int]:
        with socket.create_connection(("127.0.0.1", broker.listener_ports[listener]), 10) as s:
            meta = _roundtrip(s, MetadataRequest[12](topics=[]), time.monotonic() + 10)
        return meta.brokers[0].host, meta.brokers[0].port

    assert advertised_via("CLIENT") == ("127.0.0.1", 19092)
    assert advertised_via("INTERNAL") == ("127.0.0.1", broker.listener_ports["INTERNAL"])

    broker.pause()
    try:
        with pytest.raises(TimeoutError):
            broker.probe(timeout_s=2)
    finally:
        broker.resume()
    # Paused together, the controller may fence its own broker for a moment: wait, don't probe once.
    assert broker.wait_ready(timeout_s=90).brokers == 1

    first_pid = broker.pid
    assert first_pid is not None
    broker.kill()
    assert pgid_gone(first_pid)
    with pytest.raises(OSError):
        broker.probe(timeout_s=2)

    # Someone takes the CLIENT port while the broker is down: restart says so, starts nothing.
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        squatter.bind(("127.0.0.1", client_port))
        squatter.listen()
        with pytest.raises(PortInUse, match=rf"CLIENT 127\.0\.0\.1:{client_port} in use"):
            broker.restart()
    assert broker.pid == first_pid

    broker.restart()
    assert broker.pid != first_pid
    assert broker.listener_ports["CLIENT"] == client_port
    assert broker.probe(timeout_s=10).brokers == 1
    assert advertised_via("CLIENT") == ("127.0.0.1", 19092)


def test_a_listen_host_carries_the_client_listeners_and_the_controller_stays_on_loopback(
    broker_factory: Callable[..., Broker],
) -> None:
    """Client listeners on another address of this machine (here 127.0.0.5, as the bridge
    to a run's worker hosts would be): the broker listens, advertises and is probed there,
    not on 127.0.0.1; the controller stays on loopback; a restart comes back there."""
    broker = broker_factory(
        listeners=("CLIENT", "INTERNAL"), inter_broker_listener="INTERNAL", listen_host="127.0.0.5"
    )
    _needs_local(broker)
    ports = dict(broker.listener_ports)
    assert broker.bootstrap == f"127.0.0.5:{ports['CLIENT']}"
    assert broker.address("INTERNAL") == f"127.0.0.5:{ports['INTERNAL']}"
    from kafka.protocol.metadata import MetadataRequest

    from broker.probe import _roundtrip

    with socket.create_connection(("127.0.0.5", ports["CLIENT"]), 10) as s:
        meta = _roundtrip(s, MetadataRequest[12](topics=[]), time.monotonic() + 10)
    assert (meta.brokers[0].host, meta.brokers[0].port) == ("127.0.0.5", ports["CLIENT"])
    for port in ports.values():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), 5).close()
    assert broker.workdir is not None
    props = (broker.workdir / "server.properties").read_text()
    assert re.search(r"^listeners=.*CONTROLLER://127\.0\.0\.1:\d+", props, re.M), props

    first_pid = broker.pid
    broker.kill()
    broker.restart()
    assert broker.pid != first_pid and broker.listener_ports == ports
    assert broker.probe(timeout_s=10).brokers == 1


def test_broker_refusing_its_config_reports_kafkas_reason(tmp_path: Path) -> None:
    with pytest.raises(BrokerError) as info:
        start_broker(
            launcher="local",
            workdir=tmp_path,
            properties={"num.network.threads": "not-a-number"},
            progress=lambda _: None,
        )
    msg = str(info.value)
    # Kafka's own complaint (from StorageTool or the broker, whichever validates first).
    assert "exited" in msg
    assert "not-a-number" in msg and "num.network.threads" in msg
    assert str(tmp_path / "broker.log") in msg


def test_missing_java_is_a_clear_cli_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java, no mvn
    done = subprocess.run(
        [sys.executable, "-m", "harness", "broker", "--launcher", "local"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Java not found" in done.stderr
    assert "JAVA_HOME" in done.stderr


def test_external_launcher_checks_the_cluster_and_refuses_faults(kafka_broker: Broker) -> None:
    external = start_broker(launcher="auto", bootstrap_server=kafka_broker.bootstrap)
    assert external.launcher == "external"
    assert external.pid is None
    assert external.version.startswith("4.")
    with pytest.raises(BrokerError, match="cannot pause"):
        external.pause()
    with pytest.raises(BrokerError, match="cannot kill"):
        external.kill()
    external.stop()  # a no-op: the cluster is not ours
    assert kafka_broker.probe(timeout_s=10).brokers == 1


def test_external_launcher_rejects_a_dead_address() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        with pytest.raises(BrokerError, match="does not answer Kafka's ApiVersions"):
            start_broker(launcher="external", bootstrap_server=f"127.0.0.1:{port}")


def test_container_launcher_without_an_engine_says_what_to_do() -> None:
    ok, _ = docker_available()
    if ok:
        pytest.skip("an engine answers: tests/integration/test_container.py covers the launcher")
    with pytest.raises(BrokerError, match=r"needs a Docker engine.*--launcher local"):
        start_broker(launcher="container", progress=lambda _: None)


def test_kafkas_own_kafka_configs_tool_runs_from_the_cache(kafka_broker: Broker) -> None:
    from broker import run_tool

    ip = "127.0.0.253"  # an address no other test uses: this is the shared session broker
    base = ["--bootstrap-server", kafka_broker.bootstrap, "--entity-type", "ips"]
    base += ["--entity-name", ip]
    altered = run_tool(
        "kafka-configs", *base, "--alter", "--add-config", "connection_creation_rate=7"
    )
    assert altered.returncode == 0, altered.stderr
    try:
        described = run_tool("kafka-configs", *base, "--describe")
        assert described.returncode == 0, described.stderr
        assert f"Quota configs for ip '{ip}' are connection_creation_rate=7.0" in described.stdout
    finally:
        run_tool("kafka-configs", *base, "--alter", "--delete-config", "connection_creation_rate")


_OWNER = """
import sys, time
from pathlib import Path
from broker import start_broker
b = start_broker(launcher="local", workdir=Path(sys.argv[1]), progress=lambda _: None)
print("PID", b.pid, flush=True)
time.sleep(300)
"""


def test_jvm_dies_with_its_python_process_even_on_sigkill(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path / "wd")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.startswith("PID "), line + owner.stdout.read()
        jvm = int(line.split()[1])
        os.killpg(jvm, 0)  # alive, in its own process group
        owner.kill()  # SIGKILL: no atexit, no handler; only PR_SET_PDEATHSIG can help
        owner.wait(timeout=30)
        assert pgid_gone(jvm, timeout_s=30), "the broker JVM outlived its Python process"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_unreachable_maven_central_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty local repository in offline mode is what a machine without network sees.
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MAVEN_OPTS", f"-Dmaven.repo.local={tmp_path / 'm2'}")
    with pytest.raises(BrokerError, match=r"Maven cannot reach Maven Central") as info:
        resolve_artifacts(progress=lambda _: None, offline=True)
    assert "mvn.log" in str(info.value)
    assert not (tmp_path / "cache" / "kafka" / KAFKA_VERSION / "resolved.json").exists()
