"""Real Kafka clients through the acceptor, in front of a broker that advertises it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType

from acceptor import AcceptorHandle, start_in_thread
from acceptor.testing import round_trip
from base.history import read_history
from base.localnet import free_port


@pytest.fixture(scope="module")
def fronted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, int]]:
    """A broker of our own advertising 127.0.0.1:<port>, where each test's acceptor listens."""
    from broker import start_broker

    port = free_port()
    broker = start_broker(
        launcher="local",
        advertised={"PLAINTEXT": f"127.0.0.1:{port}"},
        workdir=tmp_path_factory.mktemp("fronted-broker"),
        progress=lambda m: None,
    )
    try:
        yield broker, port
    finally:
        broker.stop()


@pytest.fixture
def acceptor(fronted: tuple[Any, int], tmp_path: Path) -> Iterator[Callable[..., AcceptorHandle]]:
    broker, port = fronted
    handles: list[AcceptorHandle] = []

    def _start(**props: str) -> AcceptorHandle:
        base = {
            "listeners": f"CLIENT://127.0.0.1:{port}",
            "listener.name.client.upstream": broker.bootstrap,
            "metrics.port": "0",
        }
        base.update(props)
        h = start_in_thread(base, history_dir=tmp_path / "history", run_id="clients")
        handles.append(h)
        return h

    yield _start
    for h in handles:
        h.stop()


def _storm(addr: tuple[str, int], stop: threading.Event, results: list[str]) -> None:
    i = 0
    while not stop.is_set() and i < 5000:  # bounded in count and time
        results.append(round_trip(addr, f"127.0.7.{i % 50 + 1}", timeout=20))
        i += 1


def test_ten_thousand_records_acks_all_during_a_connection_storm(
    acceptor: Callable[..., AcceptorHandle],
) -> None:
    h = acceptor(**{"max.connections.per.ip": "50", "max.connection.creation.rate": "400"})
    addr = h.address("CLIENT")
    boot = f"{addr[0]}:{addr[1]}"
    stop = threading.Event()
    storm: list[str] = []
    stormers = [threading.Thread(target=_storm, args=(addr, stop, storm)) for _ in range(3)]
    for t in stormers:
        t.start()
    topic = f"storm-{int(time.time())}"
    sent = {f"r{i}".encode() for i in range(10_000)}
    try:
        producer = KafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5, retries=10)
        futures = [producer.send(topic, v) for v in sorted(sent)]
        producer.flush(120)
        assert all(f.succeeded() for f in futures)
        producer.close()
    finally:
        stop.set()
        for t in stormers:
            t.join(60)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=boot,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        enable_auto_commit=False,
    )
    got = [m.value for m in consumer]
    consumer.close()
    assert len(got) == 10_000 and set(got) == sent  # none lost, none duplicated
    assert len(storm) > 50 and set(storm) == {"ok"}
    writer = h.acceptor.rec.writer
    assert writer is not None
    writer.flush()
    hist = read_history(writer.dir.parent, "acceptor").to_pylist()
    produce = [r for r in hist if r["event"] == "request" and r["api_key"] == 0]
    assert produce and all(r["latency_ms"] >= 0 for r in produce)


def test_kafka_python_admin_client_changes_broker_limits_through_the_acceptor(
    acceptor: Callable[..., AcceptorHandle], fronted: tuple[Any, int]
) -> None:
    h = acceptor()
    addr = h.address("CLIENT")
    admin = KafkaAdminClient(bootstrap_servers=f"{addr[0]}:{addr[1]}")
    try:
        result = admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.BROKER, "1", configs={"max.connections.per.ip": "7"}
                )
            ]
        )
        assert result == {"broker": {"1": "OK"}}, result
    finally:
        admin.close()
    assert h.acceptor.quota_cfg.max_connections_per_ip == 7
    import urllib.request

    assert h.metrics_url is not None
    text = urllib.request.urlopen(h.metrics_url, timeout=10).read().decode()
    assert 'harness_acceptor_limit{key="max.connections.per.ip"} 7.0' in text
    assert "kafka_server_socket_server_metrics_connection_count" in text
