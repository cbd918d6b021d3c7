"""Make sure the load's topic exists before the load starts.

A produce storm must measure connection limits, not topic auto-creation races, so
the per-request profile creates its topic up front with CreateTopics (kafka-python's
protocol classes over the same client) and waits until it has a leader.
"""

from __future__ import annotations

import time

from kafka.protocol.admin.topics import CreateTopicsRequest

from loadprofiles.kafka_client import ClientConfig, ClientError, KafkaConnection, Recorder

TOPIC_ALREADY_EXISTS = 36


class TopicError(RuntimeError):
    """The topic could not be created or got no leader in time."""


def ensure_topic(
    host: str,
    port: int,
    topic: str,
    *,
    partitions: int = 1,
    timeout_s: float = 30.0,
    history: Recorder | None = None,
) -> None:
    """Create ``topic`` (idempotent) and wait until its partitions have a leader.

    ``history``: where its connections are recorded (profile ``setup``), as every
    connection the load side makes is: the enforcer sees them too, and the checker
    explains each connection it saw by a client attempt (``client_acceptor_agreement``).
    """
    deadline = time.monotonic() + timeout_s
    config = ClientConfig(host=host, port=port, client_id="harness-setup", profile="setup")
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            with KafkaConnection(config, history=history) as conn:
                conn.connect()
                conn.api_versions()
                topic_spec = CreateTopicsRequest.CreatableTopic(
                    name=topic,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=[],
                    configs=[],
                )
                response = conn.request(
                    CreateTopicsRequest(
                        version=conn.version_for(CreateTopicsRequest.API_KEY),
                        topics=[topic_spec],
                        timeout_ms=int(timeout_s * 1000),
                        validate_only=False,
                    ),
                    "CreateTopics",
                )
                codes = {t.error_code for t in response.topics}
                if codes - {0, TOPIC_ALREADY_EXISTS}:
                    last = f"CreateTopics error codes {sorted(codes)}"
                else:
                    meta = conn.metadata([topic])
                    parts = [p for t in meta.topics if t.name == topic for p in t.partitions]
                    if parts and all(p.error_code == 0 and p.leader_id >= 0 for p in parts):
                        return
                    last = "no leader yet"
        except ClientError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise TopicError(f"topic {topic!r} at {host}:{port} not ready in {timeout_s} s: {last}")
