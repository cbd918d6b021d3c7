"""The steady profile's kafka-python sockets recorded as history connections, against real
Kafka: connect_invoke … closed for every socket, and Kafka's throttle_time_ms under a
client-id request quota; a server that closes at once is an EOF before any response."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer

from base.admin.client import alter_client_quota
from loadprofiles import steady_conns
from loadprofiles.steady_conns import ConnectionRecorder
from tests.unit.test_steady_conns import Rows


@pytest.fixture
def rows() -> Iterator[Rows]:
    steady_conns.install()
    r = Rows()
    steady_conns.activate(ConnectionRecorder(r, listener="client"))
    yield r
    steady_conns.activate(None)


def _by_port(rows: Rows) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in rows.rows:
        out.setdefault(int(r["client_port"]), []).append(r)
    return out


def test_producer_sockets_and_request_throttle_recorded(kafka_broker: Any, rows: Rows) -> None:
    boot = kafka_broker.bootstrap
    entity = {"client-id": "steady-hog"}
    alter_client_quota(boot, entity, {"request_percentage": 0.01})
    try:
        producer = KafkaProducer(bootstrap_servers=boot, client_id="steady-hog", linger_ms=0)
        try:
            for _ in range(400):  # bounded: stops at the first throttled response
                producer.send("steady-conns-test", b"x").get(timeout=10)
                if any("throttle_time_ms" in (r["detail"] or {}) for r in rows.rows):
                    break
        finally:
            producer.close(timeout=5)
    finally:
        alter_client_quota(boot, entity, {"request_percentage": None})
    conns = _by_port(rows)
    assert len(conns) >= 2  # the bootstrap socket, then the broker's
    for port, rs in conns.items():
        events = [r["event"] for r in rs]
        assert events[:3] == ["connect_invoke", "connect_ok", "ready"], (port, events)
        assert events[-1] == "closed", (port, events)
        assert rs[0]["detail"] == {"profile": "steady"}
        assert rs[-1]["detail"]["outcome"] in ("served", "delayed_served")
        assert all(r["client_ip"] == "127.0.0.1" and r["client_id"] == "steady-hog" for r in rs)
        assert rs[0]["mono_ns"] <= rs[1]["mono_ns"] <= rs[2]["mono_ns"] <= rs[-1]["mono_ns"]
    answered = [r for r in rows.rows if r["event"] == "request_ok"]
    throttled = [r for r in answered if "throttle_time_ms" in r["detail"]]
    assert throttled, "Kafka never throttled the client-id at 0.01 % of request time"
    assert all(0 < r["detail"]["throttle_time_ms"] <= 1000 for r in throttled)
    # every response is a row, with the time it was in flight
    assert all(r["detail"]["in_flight_ms"] >= 0 for r in answered if "in_flight_ms" in r["detail"])
    assert sum("in_flight_ms" in r["detail"] for r in answered) >= len(answered) - 2


def test_a_server_closing_at_once_is_an_eof_before_any_response(rows: Rows) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except TimeoutError:
                continue
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with pytest.raises(Exception):  # noqa: B017  (NoBrokersAvailable / timeout)
            KafkaProducer(
                bootstrap_servers=f"127.0.0.1:{srv.getsockname()[1]}",
                client_id="steady-eof",
                max_block_ms=1500,
                request_timeout_ms=1000,
                bootstrap_timeout_ms=2000,  # kafka-python 3's default waits 30 s
            )
    finally:
        stop.set()
        t.join(2)
        srv.close()
    closed = [r for r in rows.rows if r["event"] == "closed"]
    assert closed
    assert all(r["reason"] in ("eof", "reset") for r in closed), closed
    assert all(r["detail"]["outcome"] == "eof_after_accept" for r in closed)
    assert not [r for r in rows.rows if r["event"] == "ready"]
