"""Target broker: run-time changes go over an admin connection held from before the load.

Kafka's acceptor thread sleeps one rate delay per connection while the broker-wide rate is
at its limit (SocketServer.scala waitForConnectionSlot), so a new connection on that
listener, an operator's admin connection included, waits behind the flood in the listen
backlog (docs/kafka-reference.md 10.1). The held connection was accepted before: its
request is answered while a fresh connection made at the same moment is still unaccepted.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from harness.admin.client import KafkaWire, alter_broker_config
from harness.runner.targets import HeldAdmin

pytestmark = pytest.mark.integration


def test_held_admin_is_answered_while_a_new_connection_queues(kafka_broker: Any) -> None:
    boot = kafka_broker.bootstrap
    held = HeldAdmin(boot, "127.0.0.254")
    held.open()
    flood: list[socket.socket] = []
    try:
        held.alter_broker_config({"max.connection.creation.rate": "1"})
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
