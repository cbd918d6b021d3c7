"""How a connection ended, against small local sockets, on every path the load takes.

Each server here misbehaves in exactly one way a limit enforcer can: refuse, reset,
close after accept, stay silent, answer late. The served/delayed cases answer with real
responses encoded by kafka-python's protocol classes. The set-up connection
(`kafka_client`), the storm engine (every arrival profile) and the steady profile's
connection recorder classify the same events the same way (`loadprofiles.outcomes`).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse

from base.history.rows import FIELDS, Row
from loadprofiles import arrivals
from loadprofiles.client_history import ClientHistory
from loadprofiles.engine import EngineConfig, StormEngine
from loadprofiles.kafka_client import ConnectFailed, KafkaConnection, RequestFailed
from loadprofiles.outcomes import Outcome
from loadprofiles.steady_conns import ConnectionRecorder


class Rows:
    """Keeps the rows a history writer is given, by column name."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def append(self, row: Row) -> None:
        self.rows.append(dict(zip(FIELDS, row, strict=True)))

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


def read_request(conn: socket.socket) -> tuple[int, int]:
    """One request frame: (api key, correlation id)."""
    (size,) = struct.unpack("!i", read_exact(conn, 4))
    body = read_exact(conn, size)
    api_key, _version, cid = struct.unpack("!hhi", body[:8])
    return api_key, cid


def answer(conn: socket.socket, request: tuple[int, int]) -> None:
    """ApiVersions v3 or Metadata v12 (header v1), as Kafka answers them."""
    api_key, cid = request
    if api_key == 18:
        body = ApiVersionsResponse(
            version=3,
            error_code=0,
            api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)],
            throttle_time_ms=0,
        ).encode(version=3)
        head = struct.pack("!i", cid)
    else:
        body = MetadataResponse(
            version=12, throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1,
            topics=[],
        ).encode(version=12)  # fmt: skip
        head = struct.pack("!i", cid) + b"\x00"
    frame = head + bytes(body)
    conn.sendall(struct.pack("!i", len(frame)) + frame)


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
    config = EngineConfig(
        host="127.0.0.1",
        port=port,
        connect_timeout_s=2,
        request_timeout_s=kw.pop("request_timeout_s", 2),
        delayed_threshold_ms=200,
        profile="unit",
        listener="CLIENT",
    )
    return KafkaConnection(config, history=rows, **kw)


def served(conn: socket.socket) -> None:
    answer(conn, read_request(conn))


def test_served_quickly(server: Callable[[Handler], int]) -> None:
    rows = Rows()
    c = client(server(served), rows)
    c.connect()
    response = c.api_versions()
    assert response.error_code == 0 and c.versions == {18: (0, 3)}
    assert c.close() is Outcome.SERVED
    assert rows.events() == ["connect_invoke", "connect_ok", "ready", "request_ok", "closed"]
    invoke = rows.one("connect_invoke")
    assert invoke["client_ip"] == invoke["sock_ip"] == "127.0.0.1"
    assert invoke["client_port"] == invoke["sock_port"] > 0
    assert invoke["detail"] == {"profile": "unit"}
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


def test_timeout(server: Callable[[Handler], int]) -> None:
    def silent(conn: socket.socket) -> None:
        read_request(conn)
        time.sleep(1.5)

    rows = Rows()
    c = client(server(silent), rows, request_timeout_s=0.3)
    c.connect()
    with pytest.raises(RequestFailed) as err:
        c.api_versions()
    assert err.value.reason == "timeout"
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


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ValueError, match="request_timeout_s=0"):
        EngineConfig(host="127.0.0.1", port=1, request_timeout_s=0)


# -- one classification on every path ------------------------------------------------------
def late(conn: socket.socket) -> None:
    """The first answer 0.4 s late, then the next one at once (as `serves_twice`): a close
    right after the first answer would race the engine's next request, and an unread
    request makes the kernel close with a reset instead of a FIN."""
    request = read_request(conn)
    time.sleep(0.4)
    answer(conn, request)
    served(conn)


def closes(conn: socket.socket) -> None:
    read_request(conn)


def resets(conn: socket.socket) -> None:
    read_request(conn)
    rst(conn)


def serves_then_resets(conn: socket.socket) -> None:
    served(conn)
    resets(conn)


def silent(conn: socket.socket) -> None:
    read_request(conn)
    time.sleep(1.5)


def serves_twice(conn: socket.socket) -> None:
    served(conn)
    served(conn)


#: server behaviour -> (the outcome, the reason the connection ended: the events a
#: kafka-python connection of the steady profile reports for the same behaviour)
BEHAVIOURS = {
    "served": (serves_twice, Outcome.SERVED, None),
    "delayed": (late, Outcome.DELAYED_SERVED, None),
    "eof": (closes, Outcome.EOF_AFTER_ACCEPT, "eof"),
    "reset before any response": (resets, Outcome.EOF_AFTER_ACCEPT, "reset"),
    "reset after a response": (serves_then_resets, Outcome.RESET, "reset"),
    "silent": (silent, Outcome.TIMEOUT, "timeout"),
}


#: the paths' request timeout: 0.6 s above the late answer, so a busy machine that runs the
#: server's thread late does not turn it into a timeout; under the silent server's 1.5 s
PATH_TIMEOUT_S = 1.0


def _setup_path(port: int) -> str:
    c = client(port, Rows(), request_timeout_s=PATH_TIMEOUT_S)
    try:
        c.connect()
        c.api_versions()
        c.metadata()
    except RequestFailed:
        pass
    return str(c.close())


def _engine_path(port: int, tmp_path: Path) -> str:
    hist = ClientHistory(None, "t")
    cfg = EngineConfig(host="127.0.0.1", port=port, shape="storm", request_timeout_s=PATH_TIMEOUT_S,
                       delayed_threshold_ms=200, max_lag_ms=5000.0)  # fmt: skip
    engine = StormEngine(cfg, hist, conn_prefix="o-")
    schedule = arrivals.split(
        arrivals.arrival_times(arrivals.parse_arrival("constant:rate=10"), max_arrivals=1), 0, 1
    )
    stats = engine.run(schedule, time.monotonic_ns())
    (outcome,) = stats.outcomes
    return outcome


def _steady_path(behaviour: str, reason: str | None) -> str:
    """The same behaviour as kafka-python reports it to the steady profile's recorder
    (the instants given: 0.5 ms to connect; the first answer at 300 ms when late)."""
    now = [0]
    rows = Rows()
    rec = ConnectionRecorder(rows, listener="CLIENT", delayed_threshold_ms=200,
                             clock=lambda: now[0])  # fmt: skip
    conn = object()
    rec.invoke(conn)
    now[0] = 500_000
    rec.made(conn, ("127.0.0.1", 40000), "c")
    answered = behaviour in ("served", "delayed", "reset after a response")
    if answered:
        now[0] = 300_000_000 if behaviour == "delayed" else 2_000_000
        rec.response(conn, object())
    exc = {
        None: None,
        "eof": OSError("socket disconnected"),
        "reset": ConnectionResetError(104, "Connection reset by peer"),
        "timeout": TimeoutError("request timed out"),
    }[reason]
    rec.lost(conn, exc)
    return str(rows.one("closed")["detail"]["outcome"])


@pytest.mark.parametrize("behaviour", list(BEHAVIOURS))
def test_every_path_classifies_the_same_events_the_same(
    server: Callable[[Handler], int], behaviour: str, tmp_path: Path
) -> None:
    handler, expected, reason = BEHAVIOURS[behaviour]
    port = server(handler)
    assert _setup_path(port) == expected
    assert _engine_path(port, tmp_path) == expected
    assert _steady_path(behaviour, reason) == expected
