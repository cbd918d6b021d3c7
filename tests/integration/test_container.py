"""The container launcher against a real Docker engine and the locally built Kafka image.

Skipped (with the reason) only when no Docker engine answers: .ci/run starts one where Debian's
docker.io is installed. The image is built once (cold: about a minute, mostly mmdebstrap) and
reused afterwards; every broker here is a real Kafka (the default release) in a container on
the host network.
These tests run once, under whatever launcher the rest of the suite uses (marker ``container``).
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from base.localnet import free_ports
from broker import KAFKA_VERSION, Broker, BrokerError, start_broker
from broker.container import (
    OWNER,
    OWNER_LABEL,
    PID_LABEL,
    ContainerBroker,
    docker_available,
    sweep,
)

pytestmark = [pytest.mark.integration, pytest.mark.container]

ROOT = Path(__file__).resolve().parents[2]


def _progress(message: str) -> None:
    stream = sys.__stderr__ or sys.stderr
    print(f"[container] {message}", file=stream, flush=True)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    ok, why = docker_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why}")
    from broker.images import docker_client

    c = docker_client()
    yield c
    c.close()


@pytest.fixture(scope="module")
def image(client: Any) -> str:
    from broker.images import ensure_kafka_image

    return ensure_kafka_image(client, progress=_progress).tag


def _ours(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={OWNER}"}))


def _api_versions(host: str, port: int, source_ip: str, timeout_s: float = 5.0) -> bytes | None:
    """One ApiVersions v0 round trip from ``source_ip``; None when the broker closed on us."""
    client_id = b"container-test"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.socket() as s:
        s.settimeout(timeout_s)
        s.bind((source_ip, 0))
        s.connect((host, port))
        try:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(4)
        except (ConnectionResetError, BrokenPipeError):
            return None
        if len(head) < 4:
            return None
        size = struct.unpack(">i", head)[0]
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data


def test_the_image_is_built_once_and_reused(client: Any, image: str) -> None:
    from broker.images import INPUTS_LABEL, ensure_kafka_image

    again = ensure_kafka_image(client, progress=_progress)
    assert again.reused and again.build_s == 0.0 and again.tag == image
    attrs = client.images.get(image).attrs
    assert attrs["Config"]["Labels"][INPUTS_LABEL]
    assert attrs["Config"]["Entrypoint"] == ["/usr/local/bin/kafka-entrypoint"]
    libs = client.containers.run(
        image, entrypoint=["ls", "/opt/kafka/libs", "/opt/kafka/jmx"], remove=True
    ).decode()
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in libs and "jmx_prometheus_javaagent.jar" in libs
    java = client.containers.run(
        image, entrypoint=["java", "-version"], remove=True, stderr=True
    ).decode()
    assert 'version "17.' in java


def test_container_broker_is_the_default_kafka_with_our_limits(
    image: str, kafka_broker: Broker, tmp_path: Path
) -> None:
    """Same ApiVersions as the local broker, and KAFKA_* settings reach Kafka: a per-IP limit
    of 2 lets two connections from one address in and closes the third."""
    with start_broker(
        launcher="container",
        properties={"max.connections.per.ip": "2"},
        workdir=tmp_path,
        progress=_progress,
    ) as broker:
        assert isinstance(broker, ContainerBroker)
        assert broker.version == KAFKA_VERSION
        got = broker.probe()
        assert got.api_versions == kafka_broker.probe().api_versions
        held: list[socket.socket] = []
        try:
            # the broker answers at all (from an address of its own: a probe from 127.0.0.31
            # would still count against it until Kafka's processor sees its close, and the
            # third idle connection below could then be let in as the probe's count drops)
            assert _api_versions(broker.host, broker.port, "127.0.0.33") is not None
            # idle connections from 127.0.0.31 fill its quota of 2: the next one is closed
            for _ in range(3):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.31", 0))
                s.connect((broker.host, broker.port))
            time.sleep(0.5)
            assert _api_versions(broker.host, broker.port, "127.0.0.31") is None
            # another address is not affected
            assert _api_versions(broker.host, broker.port, "127.0.0.32") is not None
        finally:
            for s in held:
                s.close()
        assert broker.metrics_url
        import urllib.request

        text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
        assert "kafka_server" in text or "kafka_network" in text
    log = broker.log_path.read_text() if broker.log_path else ""
    assert f"Kafka version: {KAFKA_VERSION}" in log


def test_another_kraft_release_runs_in_its_own_image(client: Any, image: str) -> None:
    """`--kafka-version 3.9.1 --launcher container`: that release's image, built from its
    own jars (the root filesystem is shared), logging through log4j 1 as Kafka 3.x does; the
    release is read from the broker's own log line, so a silent log would show as the default
    release."""
    with start_broker(launcher="container", version="3.9.1", progress=_progress) as broker:
        assert isinstance(broker, ContainerBroker)
        assert broker.version == "3.9.1"
        assert broker.probe().brokers
        from broker.images import kafka_image

        attrs = client.images.get(kafka_image("3.9.1")).attrs
        assert attrs["Config"]["Labels"]["org.opencontainers.image.version"] == "3.9.1"


class _Squatted:
    """A port picker whose first pick hands out, as its ``index``-th port, one that another
    process listens on: a port taken between its choice and the broker's bind, as another
    test's server took a container's metrics port in CI. Later picks are fresh."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.picks: list[list[int]] = []
        self.squatter = socket.socket()
        self.squatter.bind(("127.0.0.1", 0))
        self.squatter.listen()
        self.taken = int(self.squatter.getsockname()[1])

    def __call__(self, count: int) -> list[int]:
        ports = free_ports(count)
        if not self.picks:
            ports[self.index] = self.taken
        self.picks.append(ports)
        return ports


def test_a_port_taken_before_the_broker_binds_it_is_retried_on_fresh_ones(
    image: str, tmp_path: Path
) -> None:
    """The JMX exporter's port is taken when the container's JVM binds it: the container
    exits, the launcher reads why from its log (not by waiting out the ready timeout, which
    would end in `NotReady`) and starts again on fresh ports."""
    from broker.container import start_container

    picker = _Squatted(-1)  # the metrics agent's port
    said: list[str] = []
    try:
        with start_container(workdir=tmp_path, progress=said.append, port_picker=picker) as broker:
            assert len(picker.picks) == 2
            assert broker.metrics_port == picker.picks[1][-1] != picker.taken
            assert broker.probe().brokers == 1
    finally:
        picker.squatter.close()
    assert "a port was taken while starting; retrying on fresh ports…" in said


def test_a_cluster_of_three_containers(client: Any, image: str, tmp_path: Path) -> None:
    """`harness broker --brokers 3 --launcher container`: three combined KRaft nodes, one
    container each on the host network, one quorum; Metadata lists all three, a node killed
    and restarted rejoins, and stopping the cluster leaves no container of it. The first
    ports picked give the last node's metrics port to another process: that node exits, and
    the whole cluster starts again on fresh ports (its quorum was formatted with the old)."""
    from broker.cluster import start_container_cluster
    from broker.probe import probe

    picker = _Squatted(-1)
    try:
        cluster = start_container_cluster(
            3, workdir=tmp_path, progress=_progress, port_picker=picker
        )
    finally:
        picker.squatter.close()
    assert len(picker.picks) == 2
    with cluster:
        assert cluster.launcher == "container" and cluster.version == KAFKA_VERSION
        assert [b.plan.node_id for b in cluster.brokers] == [1, 2, 3]
        ids = {b.container_id for b in cluster.brokers}
        assert len(ids) == 3
        for b in cluster.brokers:
            assert probe(b.host, b.port, timeout_s=10).brokers == 3
        third = cluster.broker(3)
        third.kill()
        third.restart()
        cluster.wait_members(60)
    left = {c.id for c in _ours(client)}
    assert not ids & left


def test_secured_listeners_in_a_container_keep_their_secrets_out_of_it(
    client: Any, image: str, tmp_path: Path
) -> None:
    """`harness broker --secure --launcher container`: SASL_SSL with SCRAM and PLAIN and
    mutual TLS serve logins from the client.properties the launcher writes; nothing secret
    is in the container's environment or log (the config and the SCRAM users' format
    arguments come from the mounted private folder, the format's output stays there); a
    restart keeps the users (formatted storage), stop removes the folder."""
    pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")
    from kafka import KafkaAdminClient

    from base.security import clientprops
    from base.security.secrets import leaks

    listeners = ("PLAINTEXT", "S=SASL_SSL:SCRAM-SHA-512,PLAIN", "M=SSL:mtls")
    broker = start_broker(
        launcher="container", listeners=listeners, workdir=tmp_path, progress=_progress
    )
    try:
        assert isinstance(broker, ContainerBroker) and broker.private_dir is not None
        private = broker.private_dir
        passwords = list(clientprops.read(private / "users.properties").values())
        assert len(passwords) == 2

        def login(key: str) -> None:
            config = clientprops.kafka_python_config(clientprops.read(broker.client_configs[key]))
            admin = KafkaAdminClient(**config, request_timeout_ms=20000)
            try:
                assert len(admin.describe_cluster()["brokers"]) == 1
            finally:
                admin.close()

        for key in ("S", "S:PLAIN", "S@bob", "M"):
            login(key)
        attrs = client.containers.get(broker.container_id).attrs
        env = "\n".join(attrs["Config"]["Env"])
        assert "HARNESS_SERVER_PROPERTIES=" in env and "KAFKA_LISTENERS" not in env
        assert not [p for p in passwords if p in env]
        assert "storedKey" in (private / "format.log").read_text()
        assert not (private / "format.args").exists()  # read once, then removed
        assert not [p for p in passwords if p in broker.logs()]
        assert leaks([tmp_path / "server.properties"], passwords) == []
        broker.restart()
        login("S@bob")  # SCRAM users live in the formatted storage
    finally:
        broker.stop()
    assert not private.exists()
    assert not [p for p in passwords if p in (tmp_path / "broker.log").read_text()]


def test_restart_and_pause_faults_in_a_container(client: Any, image: str) -> None:
    with start_broker(launcher="container", progress=_progress) as broker:
        assert isinstance(broker, ContainerBroker)
        cid, port = broker.container_id, broker.port
        broker.pause()
        with pytest.raises((OSError, TimeoutError)):
            _api_versions(broker.host, port, "127.0.0.1", timeout_s=2.0)
        broker.resume()
        broker.wait_ready(60)
        broker.restart()
        assert broker.container_id == cid and broker.port == port
        assert broker.probe().brokers
        broker.kill()
        assert not broker.running
        with pytest.raises(BrokerError, match="not running"):
            broker.pause()
        broker.restart()  # a killed broker comes back on the same ports and data
        assert broker.port == port and broker.probe().brokers
    with pytest.raises(Exception, match=r"404|No such container|not found"):
        client.containers.get(cid)


def test_no_container_survives_a_sigkilled_harness(client: Any, image: str) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from broker import start_broker
        b = start_broker(launcher="container", progress=lambda _: None)
        print(b.container_id, flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        cid = proc.stdout.readline().strip()
        assert cid, "the child did not start a container broker"
        c = client.containers.get(cid)
        assert c.labels[PID_LABEL] == str(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            c.reload()
            if c.status == "exited":
                break
            time.sleep(0.5)
        assert c.status == "exited", "the entrypoint's watchdog did not stop the broker"
        assert sweep(client) >= 1  # what the next harness start does
        assert all(x.id != cid for x in _ours(client))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_nothing_of_ours_is_left_running(client: Any) -> None:
    """After the tests above (each stops its broker): no harness container of a live process
    other than this one's... and none at all of this process."""
    mine = [c for c in _ours(client) if c.labels.get(PID_LABEL) == str(os.getpid())]
    assert mine == []
