"""Outcome classification of the load client against small local sockets.

Each server here misbehaves in exactly one way a limit enforcer can: refuse, reset,
close after accept, stay silent, answer late. The served/delayed cases answer with a
real ApiVersions response encoded by kafka-python's protocol classes.
"""

from __future__ import annotations

import io
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from loadprofiles.kafka_client import (
    ClientConfig,
    ConnectFailed,
    KafkaConnection,
    NotOffered,
    Outcome,
    RequestFailed,
)
from loadprofiles.proxy_header import V2_SIGNATURE


class Rows:
    """Records rows the way HistoryWriter.record is called."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record(self, event: str, **fields: Any) -> int:
        self.rows.append({"event": event, **fields})
        return len(self.rows)

    def events(self) -> list[str]:
        return [r["event"] for r in self.rows]

    def one(self, event: str) -> dict[str, Any]:
        (row,) = [r for r in self.rows if r["event"] == event]
        return row


def read_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def read_request(conn: socket.socket) -> ApiVersionsRequest:
    (size,) = struct.unpack("!i", read_exact(conn, 4))
    body = read_exact(conn, size)
    return ApiVersionsRequest.decode(io.BytesIO(body), version=3, header=True)


def answer(conn: socket.socket, request: Any) -> None:
    response = ApiVersionsResponse(
        version=3,
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)],
        throttle_time_ms=0,
    )
    response.with_header(correlation_id=request.header.correlation_id)
    conn.sendall(bytes(response.encode(framed=True, header=True)))


Handler = Callable[[socket.socket], None]


@pytest.fixture
def server() -> Iterator[Callable[[Handler], int]]:
    """Start a one-thread TCP server on 127.0.0.1 running ``handler`` per connection."""
    socks: list[socket.socket] = []

    def start(handler: Handler) -> int:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        socks.append(listener)

        def loop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    try:
                        handler(conn)
                    except (OSError, EOFError):
                        pass

        threading.Thread(target=loop, daemon=True).start()
        return int(listener.getsockname()[1])

    yield start
    for s in socks:
        s.close()


def client(port: int, rows: Rows, **kw: Any) -> KafkaConnection:
    config = ClientConfig(
        host="127.0.0.1",
        port=port,
        connect_timeout_s=2,
        request_timeout_s=kw.pop("request_timeout_s", 2),
        delayed_threshold_ms=200,
        profile="unit",
        listener="CLIENT",
        proxy_protocol=kw.pop("proxy_protocol", "off"),
    )
    return KafkaConnection(config, history=rows, intended_mono_ns=123, **kw)


def served(conn: socket.socket) -> None:
    answer(conn, read_request(conn))


def test_served_quickly(server: Callable[[Handler], int]) -> None:
    rows = Rows()
    c = client(server(served), rows, source_ip="127.0.0.7")
    c.connect()
    response = c.api_versions()
    assert response.error_code == 0 and c.versions == {18: (0, 3)}
    assert c.close() is Outcome.SERVED
    assert rows.events() == ["connect_invoke", "connect_ok", "ready", "request_ok", "closed"]
    invoke = rows.one("connect_invoke")
    assert invoke["client_ip"] == invoke["sock_ip"] == "127.0.0.7"
    assert invoke["client_port"] == invoke["sock_port"] > 0
    assert invoke["detail"] == {"intended_mono_ns": 123, "profile": "unit"}
    assert rows.one("closed")["detail"]["outcome"] == "served"
    assert rows.one("request_ok")["api_key"] == 18


def test_delayed_then_served(server: Callable[[Handler], int]) -> None:
    def late(conn: socket.socket) -> None:
        request = read_request(conn)
        time.sleep(0.5)
        answer(conn, request)

    rows = Rows()
    c = client(server(late), rows)
    c.connect()
    c.api_versions()
    assert c.close() is Outcome.DELAYED_SERVED
    assert rows.one("ready")["latency_ms"] >= 450
    assert rows.one("closed")["detail"]["outcome"] == "delayed_served"


def test_eof_after_accept(server: Callable[[Handler], int]) -> None:
    rows = Rows()
    c = client(server(lambda conn: read_request(conn) and None), rows)
    c.connect()
    with pytest.raises(RequestFailed) as err:
        c.api_versions()
    assert err.value.reason == "eof"
    assert c.close() is Outcome.EOF_AFTER_ACCEPT
    assert rows.one("request_fail")["reason"] == "eof"
    assert rows.one("closed")["reason"] == "eof"
    assert rows.one("closed")["detail"]["closed_by"] == "eof"


def rst(conn: socket.socket) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_reset_before_any_response_is_closed_after_accept(
    server: Callable[[Handler], int],
) -> None:
    # what Kafka's count-reject / throttle-close look like when our request is unread
    rows = Rows()
    c = client(server(lambda conn: rst(conn) if read_request(conn) else None), rows)
    c.connect()
    with pytest.raises(RequestFailed) as err:
        c.api_versions()
    assert err.value.reason == "reset"
    assert c.close() is Outcome.EOF_AFTER_ACCEPT
    assert rows.one("request_fail")["reason"] == "reset"
    closed = rows.one("closed")
    assert closed["reason"] == "reset"
    assert closed["detail"]["outcome"] == "eof_after_accept"
    assert closed["detail"]["closed_by"] == "reset"


def test_reset_after_a_response_is_a_reset(server: Callable[[Handler], int]) -> None:
    def serve_then_rst(conn: socket.socket) -> None:
        served(conn)
        read_request(conn)
        rst(conn)

    rows = Rows()
    c = client(server(serve_then_rst), rows)
    c.connect()
    c.api_versions()
    with pytest.raises(RequestFailed) as err:
        c.api_versions()
    assert err.value.reason == "reset"
    assert c.close() is Outcome.RESET
    assert rows.one("closed")["detail"]["outcome"] == "reset"


def test_abort_leaves_the_outcome_open(server: Callable[[Handler], int]) -> None:
    rows = Rows()
    c = client(server(served), rows)
    c.connect()
    c.abort()
    assert "closed" not in rows.events() and c.result.outcome is None


def test_timeout(server: Callable[[Handler], int]) -> None:
    def silent(conn: socket.socket) -> None:
        read_request(conn)
        time.sleep(1.5)

    rows = Rows()
    c = client(server(silent), rows, request_timeout_s=0.3)
    c.connect()
    started = time.monotonic()
    with pytest.raises(RequestFailed) as err:
        c.api_versions()
    assert err.value.reason == "timeout" and time.monotonic() - started < 1.2
    assert c.close() is Outcome.TIMEOUT


def test_refused() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    rows = Rows()
    c = client(port, rows)
    with pytest.raises(ConnectFailed) as err:
        c.connect()
    assert err.value.reason == "refused" and c.result.outcome is Outcome.REFUSED
    assert rows.events() == ["connect_invoke", "connect_fail", "closed"]
    assert rows.one("connect_fail")["reason"] == "refused"
    assert rows.one("closed")["detail"]["outcome"] == "refused"


def test_unbindable_source_is_not_offered() -> None:
    rows = Rows()
    c = client(9, rows, source_ip="192.0.2.1")  # TEST-NET-1: not an address of this host
    with pytest.raises(NotOffered) as err:
        c.connect()
    assert err.value.cause == "ports"
    assert rows.rows == []  # the caller writes connect_fail reason=not_offered


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_proxy_header_claims_the_client_address(
    server: Callable[[Handler], int], version: str
) -> None:
    seen: list[bytes] = []

    def proxied(conn: socket.socket) -> None:
        if version == "v1":
            line = b""
            while not line.endswith(b"\r\n"):
                line += read_exact(conn, 1)
            seen.append(line)
        else:
            head = read_exact(conn, 16)
            seen.append(head + read_exact(conn, struct.unpack("!H", head[14:16])[0]))
        served(conn)

    rows = Rows()
    c = client(server(proxied), rows, proxy_protocol=version, proxy_client_ip="127.0.1.9")
    c.connect()
    c.api_versions()
    assert c.close() is Outcome.SERVED
    invoke = rows.one("connect_invoke")
    assert invoke["client_ip"] == "127.0.1.9" and invoke["sock_ip"] == "127.0.0.1"
    assert invoke["client_port"] == invoke["sock_port"]
    (header,) = seen
    if version == "v1":
        assert header.startswith(b"PROXY TCP4 127.0.1.9 127.0.0.1 %d " % invoke["client_port"])
    else:
        assert header.startswith(V2_SIGNATURE) and header[16:20] == bytes([127, 0, 1, 9])


def test_request_hook_gets_locust_event_fields(server: Callable[[Handler], int]) -> None:
    events: list[dict[str, Any]] = []
    c = KafkaConnection(
        ClientConfig(host="127.0.0.1", port=server(served)),
        on_request=lambda **kw: events.append(kw),
    )
    c.connect()
    c.api_versions()
    c.close()
    assert [e["name"] for e in events] == ["connect", "ApiVersions"]
    assert all(e["exception"] is None and e["request_type"] == "kafka" for e in events)
    assert events[1]["response_length"] > 0


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ValueError, match="proxy-protocol='v9'"):
        ClientConfig(host="127.0.0.1", port=1, proxy_protocol="v9")
    with pytest.raises(ValueError, match="request_timeout_s=0"):
        ClientConfig(host="127.0.0.1", port=1, request_timeout_s=0)
