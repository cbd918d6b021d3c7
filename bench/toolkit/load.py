"""The order a bench visits its paths in, round by round, and a producer's throughput."""

from __future__ import annotations

import time
from typing import TypeVar

T = TypeVar("T")


def rotations(targets: list[T], rounds: int) -> list[tuple[int, list[T]]]:
    """Round r visits the paths in an order rotated by r (no path always goes first)."""
    return [(r, targets[r % len(targets) :] + targets[: r % len(targets)]) for r in range(rounds)]


def produce_throughput(boot: str, topic: str, records: int, size: int) -> float:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=boot, acks=1, linger_ms=5, batch_size=256 * 1024)
    value = b"x" * size
    p.send(topic, value).get(30)  # metadata and connection warm-up
    t0 = time.perf_counter()
    for _ in range(records):
        p.send(topic, value)
    p.flush(300)
    elapsed = time.perf_counter() - t0
    p.close()
    return records / elapsed
