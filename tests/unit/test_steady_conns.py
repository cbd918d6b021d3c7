"""The steady profile's connection rows (loadprofiles.steady_conns), driven by hand."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from base.history.rows import FIELDS, Row
from loadprofiles.steady_conns import ConnectionRecorder, close_reason, principal_of


class Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def append(self, row: Row) -> None:
        self.rows.append(dict(zip(FIELDS, row, strict=True)))


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def ms(self, d: float) -> None:
        self.ns += int(d * 1e6)


class Resp:
    def __init__(self, api_key: int, throttle: int = 0) -> None:
        self.API_KEY = api_key
        self.throttle_time_ms = throttle


def recorder(principal: str | None = None) -> tuple[ConnectionRecorder, Rows, Clock]:
    rows, clock = Rows(), Clock()
    rec = ConnectionRecorder(rows, listener="client", clock=clock, principal=principal)
    return rec, rows, clock


def test_served_connection_rows_and_throttle() -> None:
    rec, h, clock = recorder("alice")
    conn = object()
    rec.invoke(conn)
    clock.ms(2)
    rec.made(conn, ("127.0.0.1", 40001), "harness-steady-producer")
    rec.reading(conn, [clock.ns - 1_000_000])  # ApiVersions sent 1 ms ago
    clock.ms(3)
    rec.response(conn, Resp(18))  # ApiVersions: ready
    rec.reading(conn, [clock.ns + 2_000_000, clock.ns + 6_000_000])  # two produces in flight
    clock.ms(10)
    rec.response(conn, Resp(0, throttle=37))  # a throttled Produce
    rec.response(conn, Resp(0))
    rec.response(conn, Resp(3))  # a response whose send time was not seen
    clock.ms(100)
    rec.lost(conn, None)
    events = [r["event"] for r in h.rows]
    assert events == [
        "connect_invoke", "connect_ok", "ready", *["request_ok"] * 4, "closed"
    ]  # fmt: skip
    inv, ok, ready, api, thr, plain, unseen, closed = h.rows
    assert inv["mono_ns"] == 1_000_000_000 and inv["detail"] == {"profile": "steady"}
    assert all(r["client_ip"] == "127.0.0.1" and r["client_port"] == 40001 for r in h.rows)
    assert all(r["listener"] == "client" for r in h.rows)
    assert all(r["client_id"] == "harness-steady-producer" for r in h.rows)
    assert ok["latency_ms"] == pytest.approx(2.0)
    assert ready["latency_ms"] == pytest.approx(5.0) and ready["api_key"] == 18
    assert api["detail"] == {"profile": "steady", "in_flight_ms": 4.0, "principal": "alice"}
    assert thr["api_key"] == 0 and thr["detail"]["throttle_time_ms"] == 37
    assert thr["detail"]["in_flight_ms"] == pytest.approx(8.0)
    assert plain["detail"] == {"profile": "steady", "in_flight_ms": 4.0, "principal": "alice"}
    assert "in_flight_ms" not in unseen["detail"]
    assert all(r.get("latency_ms") is None for r in (api, thr, plain, unseen))  # steady's own
    assert closed["reason"] == "done" and closed["detail"]["outcome"] == "served"
    assert rec.open_count() == 0


@pytest.mark.parametrize(
    ("config", "principal"),
    [
        ({}, "ANONYMOUS"),
        ({"security_protocol": "SSL", "ssl_cafile": "ca.pem"}, "ANONYMOUS"),
        ({"security_protocol": "SSL", "ssl_certfile": "/nonexistent/me.pem"}, None),
        ({"security_protocol": "SASL_SSL", "sasl_plain_username": "bob"}, "bob"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "alice"}, "alice"),
    ],
)
def test_principal_as_kafkas_quota_callback_names_it(
    config: dict[str, str], principal: str | None
) -> None:
    assert principal_of(config) == principal


def test_a_client_certificates_principal_is_its_subject_reversed(tmp_path: Any) -> None:
    from base.security.certs import issue, make_ca

    ca = make_ca("test CA")
    cert = issue(ca, "client1", unit="harness", client=True)
    path = tmp_path / "client.pem"
    path.write_bytes(cert.cert_pem)
    assert principal_of({"security_protocol": "SSL", "ssl_certfile": str(path)}) == (
        "OU=harness,CN=client1"
    )


def test_eof_before_any_response_is_eof_after_accept() -> None:
    rec, h, clock = recorder()
    conn = object()
    rec.invoke(conn)
    rec.made(conn, ("127.0.0.2", 40002), "c")
    clock.ms(1)
    rec.lost(conn, ConnectionError("socket disconnected"))
    closed = h.rows[-1]
    assert closed["event"] == "closed" and closed["reason"] == "eof"
    assert closed["detail"]["outcome"] == "eof_after_accept"
    assert closed["detail"]["closed_by"] == "eof"


def test_eof_after_a_response_is_served_then_closed_by_the_broker() -> None:
    rec, h, clock = recorder()
    conn = object()
    rec.invoke(conn)
    rec.made(conn, ("127.0.0.1", 40003), "c")
    rec.response(conn, Resp(18))
    clock.ms(400)
    rec.lost(conn, ConnectionError("socket disconnected"))
    closed = h.rows[-1]
    assert closed["reason"] == "eof" and closed["detail"]["outcome"] == "served"


def test_slow_first_response_is_delayed_served_and_timeout_before_response() -> None:
    rec, h, clock = recorder()
    a, b = object(), object()
    rec.invoke(a)
    rec.invoke(b)
    rec.made(a, ("127.0.0.1", 1), "c")
    rec.made(b, ("127.0.0.1", 2), "c")
    clock.ms(251)
    rec.response(a, Resp(18))
    rec.lost(a, None)
    rec.lost(b, TimeoutError("Request timed out after 1000 ms"))
    by_port = {r["client_port"]: r for r in h.rows if r["event"] == "closed"}
    assert by_port[1]["detail"]["outcome"] == "delayed_served"
    assert by_port[2]["reason"] == "timeout" and by_port[2]["detail"]["outcome"] == "timeout"


def test_failed_connect_and_unknown_connections_write_nothing() -> None:
    rec, h, _ = recorder()
    conn = object()
    rec.invoke(conn)
    rec.lost(conn, ConnectionError("unable to connect"))  # before the handshake
    rec.response(object(), Resp(0, 5))
    rec.made(object(), None, "c")  # no local address
    assert h.rows == []


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (None, "done"),
        (ConnectionError("socket disconnected"), "eof"),
        (ConnectionError(OSError(errno.ECONNRESET, "Connection reset by peer")), "reset"),
        (ConnectionResetError(errno.ECONNRESET, "reset"), "reset"),
        (TimeoutError("Request timed out after 30000 ms"), "timeout"),
        (ValueError("something else"), "error"),
    ],
)
def test_close_reason(exc: BaseException | None, reason: str) -> None:
    assert close_reason(exc) == reason


def test_kafka_python_error_types_map() -> None:
    import kafka.errors as Errors

    assert close_reason(Errors.KafkaConnectionError("socket disconnected")) == "eof"
    assert close_reason(Errors.RequestTimedOutError("Request timed out after 5 ms")) == "timeout"
    assert close_reason(Errors.KafkaTimeoutError()) == "timeout"
    # KafkaConnection.close() while initialising: our own close, not a failure
    assert close_reason(Errors.KafkaConnectionError()) == "done"
    assert close_reason(Errors.KafkaConnectionError("Connection closed during connect")) == "error"
    assert close_reason(ConnectionError()) == "error"  # only kafka-python's own close is ours


def _lost_on_a_real_transport(close_ourselves: bool) -> BaseException | None:
    """What kafka-python 3.0 hands ``connection_lost`` for a connection still initialising
    (its transport on one end of a socket pair, no broker) whose peer has closed: our own
    ``close()`` before kafka-python read the socket, or kafka-python reading the EOF."""
    import socket

    from kafka.net.connection import KafkaConnection
    from kafka.net.selector import NetworkSelector
    from kafka.net.transport import KafkaTCPTransport

    got: list[BaseException | None] = []

    class Conn(KafkaConnection):  # type: ignore[misc]
        def connection_lost(self, exc: BaseException | None) -> None:
            got.append(exc)
            super().connection_lost(exc)

    net = NetworkSelector()
    ours, peer = socket.socketpair()
    try:
        ours.setblocking(False)
        conn = Conn(net)
        conn.connection_made(KafkaTCPTransport(net, ours))
        assert conn.initializing
        peer.close()  # the enforcer closes at once: a FIN waits unread in our socket
        if close_ourselves:
            conn.close()  # a consumer's close() at the end of its phase
        for _ in range(10):
            if got:
                break
            net.poll(timeout_ms=20)
    finally:
        ours.close()
        net.close()
    assert got, "kafka-python reported no connection_lost"
    return got[0]


def test_our_own_close_while_initialising_is_done_and_the_peers_fin_is_eof() -> None:
    """Read against kafka-python itself: the two ways one rejected, still initialising
    connection ends. Our close before reading is ``done`` (not an ``error``: it saw nothing
    of the close either way); the FIN read is ``eof``."""
    own = _lost_on_a_real_transport(close_ourselves=True)
    assert type(own).__name__ == "KafkaConnectionError" and own is not None and not own.args
    assert close_reason(own) == "done"
    fin = _lost_on_a_real_transport(close_ourselves=False)
    assert close_reason(fin) == "eof", fin


def test_our_own_close_before_a_response_is_done_with_no_eof() -> None:
    import kafka.errors as Errors

    rec, h, clock = recorder()
    conn = object()
    rec.invoke(conn)
    rec.made(conn, ("127.0.0.2", 40004), "c")
    clock.ms(5)
    rec.lost(conn, Errors.KafkaConnectionError())
    closed = h.rows[-1]
    assert closed["event"] == "closed" and closed["reason"] == "done"
    assert "eof_ms" not in closed["detail"] and "error" not in closed["detail"]
    assert "closed_by" not in closed["detail"]


def test_a_socket_is_recorded_when_made_and_its_connection_takes_the_same_record() -> None:
    rec, rows, clock = recorder()
    invoke = clock()
    clock.ms(2)
    rec.socket_made(("127.0.0.1", 40010), ("127.0.0.1", 9092), invoke)
    conn = object()
    rec.made(conn, ("127.0.0.1", 40010), "steady-producer")
    rec.response(conn, Resp(18))
    rec.lost(conn, None)
    events = [r["event"] for r in rows.rows]
    assert events == ["connect_invoke", "connect_ok", "ready", "request_ok", "closed"]
    assert rows.rows[0]["mono_ns"] == invoke and rows.rows[1]["latency_ms"] == 2.0
    assert {r["conn_id"] for r in rows.rows} == {rows.rows[0]["conn_id"]}
    assert rows.rows[2]["client_id"] == "steady-producer"


def test_a_socket_no_connection_took_is_still_recorded() -> None:
    rec, rows, clock = recorder()
    rec.socket_made(("127.0.0.1", 40011), ("127.0.0.1", 9092), clock())
    assert [(r["event"], r["client_port"]) for r in rows.rows] == [
        ("connect_invoke", 40011),
        ("connect_ok", 40011),
    ]


def test_a_connect_kafka_python_gave_up_is_recorded_with_its_address() -> None:
    # its socket may still complete the handshake: the enforcer sees it, the history too
    import asyncio

    from base.history.events import conformance

    rec, rows, clock = recorder()
    start = clock()
    clock.ms(30)
    rec.abandoned(("127.0.0.1", 40012), start, asyncio.CancelledError())
    rec.abandoned(("0.0.0.0", 0), start, TimeoutError())  # no port bound: no SYN sent
    assert [(r["event"], r["client_port"], r.get("reason")) for r in rows.rows] == [
        ("connect_invoke", 40012, None),
        ("connect_fail", 40012, "cancelled"),
    ]
    assert rows.rows[1]["latency_ms"] == 30.0
    rows_as_written = [{"source": "client", **r} for r in rows.rows]
    for r in rows_as_written:
        r["detail"] = r.get("detail")
    assert conformance(rows_as_written) == []
