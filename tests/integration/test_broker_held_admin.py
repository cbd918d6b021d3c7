"""Target broker: run-time changes go over an admin connection held from before the load.

Kafka's acceptor thread sleeps one rate delay per connection while the broker-wide rate is
at its limit (SocketServer.scala waitForConnectionSlot), so a new connection on that
listener, an operator's admin connection included, waits behind the flood in the listen
backlog (docs/kafka-reference.md 10.1). The held connection was accepted before: its
request is answered while a fresh connection made at the same moment is still unaccepted.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from base.admin.client import KafkaWire, alter_broker_config
from harness.runner.admin_changes import HeldAdmin

pytestmark = pytest.mark.integration


def _broker_default_rate(boot: str) -> str | None:
    from kafka.protocol.admin import DescribeConfigsRequest as D

    from base.admin.client import BROKER_RESOURCE

    with KafkaWire(boot, source_ip="127.0.0.253") as wire:
        res = D.DescribeConfigsResource(
            resource_type=BROKER_RESOURCE,
            resource_name="",
            configuration_keys=["max.connection.creation.rate"],
        )
        resp = wire.request(D[wire.version_for(D)](resources=[res]))
    for r in resp.results:
        for c in r.configs:
            if c.name == "max.connection.creation.rate":
                return str(c.value) if c.value is not None else None
    return None


def _wait_until_broker_shows_rate(boot: str, value: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _broker_default_rate(boot) != value:
        assert time.monotonic() < deadline, f"the broker never showed the rate {value}"
        time.sleep(0.05)


def test_held_admin_is_answered_while_a_new_connection_queues(broker_factory: Any) -> None:
    # a broker of its own: the test sets a broker-wide rate (the session broker must not be
    # reconfigured, tests/integration/conftest.py)
    kafka_broker = broker_factory()
    boot = kafka_broker.bootstrap
    held = HeldAdmin(boot, "127.0.0.254")
    held.open()
    flood: list[socket.socket] = []
    try:
        held.alter_broker_config({"max.connection.creation.rate": "1"})
        # the change reaches the broker when it replays the metadata record: until its own
        # DescribeConfigs shows the rate, a flood could still be accepted at once
        _wait_until_broker_shows_rate(boot, "1")
        # 30 handshakes completed into the backlog: Kafka accepts one per ~1 s from now
        for _ in range(30):
            s = socket.socket()
            s.settimeout(5)
            s.connect(("127.0.0.1", kafka_broker.port))
            flood.append(s)
        fresh = KafkaWire(boot, timeout=3.0)  # the handshake completes (kernel backlog) ...
        try:
            with pytest.raises(TimeoutError):
                fresh.versions()  # ... but Kafka has not accepted it: no answer
        finally:
            fresh.close()
        # the held connection is past the acceptor: answered at once
        held.alter_broker_config({"max.connection.creation.rate": None})
        assert held.reconnects == 0
    finally:
        for s in flood:
            s.close()
        try:
            held.alter_broker_config({"max.connection.creation.rate": None})
        finally:
            held.close()
        alter_broker_config(boot, {"max.connection.creation.rate": None})
