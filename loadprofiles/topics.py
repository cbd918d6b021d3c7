"""Make sure the load's topic exists before the load starts.

A produce storm must measure connection limits, not topic auto-creation races, so
the per-request profile creates its topic up front with CreateTopics (kafka-python's
protocol classes over the same client) and waits until it has a leader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka.protocol.admin.topics import CreateTopicsRequest

from loadprofiles.kafka_client import ClientConfig, ClientError, KafkaConnection, Recorder
from loadprofiles.options import Settings

TOPIC_ALREADY_EXISTS = 36


class TopicError(RuntimeError):
    """The topic could not be created or got no leader in time."""


def ensure_topic(
    host: str,
    port: int,
    topic: str,
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    history: Recorder | None = None,
    client_config: Mapping[str, str] | None = None,
    broker: int | None = None,
) -> None:
    """Create ``topic`` (idempotent) and wait until its partitions have a leader.

    ``history``: where its connections are recorded (profile ``setup``), as every
    connection the load side makes is: the enforcer sees them too, and the checker
    explains each connection it saw by a client attempt (``client_acceptor_agreement``).

    ``broker``: a cluster's node id at host:port, named in the set-up connection's rows.

    ``client_config``: Kafka's client keys of a secured listener (TLS, SASL login): the
    topic is then made over `harness.admin.client.KafkaWire`, which speaks them (such a
    set-up connection is not recorded: secured listeners are judged on the broker, where
    no enforcer-side history needs it explained).
    """

    def create(version: int) -> Any:
        return _create(version, topic, partitions, replication_factor, timeout_s)

    def plain() -> str | None:
        config = ClientConfig(
            host=host, port=port, client_id="harness-setup", profile="setup", broker=broker
        )
        with KafkaConnection(config, history=history) as conn:
            conn.connect()
            conn.api_versions()
            version = conn.version_for(CreateTopicsRequest.API_KEY)
            created = conn.request(create(version), "CreateTopics")
            return _not_ready(topic, created, lambda: conn.metadata([topic]))

    def secured(props: Mapping[str, str]) -> str | None:
        from kafka.protocol.metadata import MetadataRequest

        from harness.admin.client import KafkaWire

        with KafkaWire(f"{host}:{port}", client_id="harness-setup", client_config=props) as w:
            created = w.request(create(w.version_for(CreateTopicsRequest)))
            return _not_ready(
                topic,
                created,
                lambda: w.request(
                    MetadataRequest(
                        version=w.version_for(MetadataRequest),
                        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                        allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False,
                    )
                ),
            )

    from harness.admin.client import AdminError

    deadline = time.monotonic() + timeout_s
    last: str | None = "no attempt"
    while time.monotonic() < deadline:
        try:
            last = plain() if not client_config else secured(client_config)
        except (ClientError, OSError, AdminError) as exc:
            last = str(exc)
        if last is None:
            return
        time.sleep(0.5)
    raise TopicError(f"topic {topic!r} at {host}:{port} not ready in {timeout_s} s: {last}")


def _not_ready(topic: str, created: Any, metadata: Callable[[], Any]) -> str | None:
    """Why the topic is not usable yet (None: created or there, every partition led)."""
    codes = {t.error_code for t in created.topics}
    if codes - {0, TOPIC_ALREADY_EXISTS}:
        return f"CreateTopics error codes {sorted(codes)}"
    meta = metadata()
    parts = [p for t in meta.topics if t.name == topic for p in t.partitions]
    if parts and all(p.error_code == 0 and p.leader_id >= 0 for p in parts):
        return None
    return "no leader yet"


def _create(version: int, topic: str, partitions: int, rf: int, timeout_s: float) -> Any:
    spec = CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=rf, assignments=[], configs=[]
    )
    return CreateTopicsRequest(
        version=version, topics=[spec], timeout_ms=int(timeout_s * 1000), validate_only=False
    )


def ensure_load_topic(s: Settings, history: Recorder | None) -> None:
    """``--topic`` of a producing profile, created before any load (its connection
    recorded as profile ``setup``); a ValueError naming the option when it cannot be."""
    from pathlib import Path

    from harness.security import clientprops

    try:
        props = clientprops.read(Path(s.command_config)) if s.command_config else None
        ensure_topic(
            s.host,
            s.port,
            s.topic,
            replication_factor=s.replication_factor,
            broker=next((n for n, h, p in s.brokers if (h, p) == (s.host, s.port)), None),
            timeout_s=20.0,
            history=history,
            client_config=props,
        )
    except (TopicError, OSError) as exc:
        raise ValueError(f"--topic: {exc}") from None


def payload(size: int, seed: int) -> bytes:
    """A deterministic record value of ``size`` bytes."""
    base = f"harness-{seed}-".encode()
    return (base * (size // len(base) + 1))[:size]
