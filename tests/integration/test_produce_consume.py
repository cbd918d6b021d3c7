"""Records survive the real broker: 10,000 in with acks=all, exactly those 10,000 out."""

from __future__ import annotations

import time
import uuid

from kafka import KafkaConsumer, KafkaProducer

from broker import Broker

RECORDS = 10_000


def test_ten_thousand_records_round_trip_exactly_once(kafka_broker: Broker) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    sent = {f"k{i:05d}".encode(): f"v{i:05d}-{uuid.uuid4().hex}".encode() for i in range(RECORDS)}

    producer = KafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap,
        acks="all",
        linger_ms=5,
        retries=5,
        client_id="roundtrip-producer",
    )
    try:
        futures = [producer.send(topic, key=k, value=v) for k, v in sent.items()]
        producer.flush(timeout=120)
        offsets = [f.get(timeout=60).offset for f in futures]
    finally:
        producer.close(timeout=30)
    assert sorted(offsets) == list(range(RECORDS))  # one partition, every record acknowledged once

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_broker.bootstrap,
        group_id=f"roundtrip-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        client_id="roundtrip-consumer",
    )
    received: list[tuple[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + 120
        while len(received) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                received.extend((r.key, r.value) for r in records)
        # Anything beyond RECORDS would be a duplicate: give it a moment to show up.
        for records in consumer.poll(timeout_ms=1000).values():
            received.extend((r.key, r.value) for r in records)
    finally:
        consumer.close()

    keys = [k for k, _ in received]
    assert len(received) == RECORDS, f"got {len(received)} records, {len(set(keys))} unique keys"
    assert len(set(keys)) == RECORDS
    assert dict(received) == sent
