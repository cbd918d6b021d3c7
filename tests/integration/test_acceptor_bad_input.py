"""Bad peers close only their own connection, with a reason row; nothing leaks."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptor import AcceptorHandle, start_in_thread
from acceptor.testing import (
    api_versions_frame,
    connect,
    nonconformant_rows,
    ping,
    raw,
    read_outcome,
    reset_close,
    round_trip,
    wait_until,
)
from base.history import read_history
from base.wire.proxy import encode_v1, encode_v2


@pytest.fixture
def acceptor(
    kafka_broker: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[AcceptorHandle]:
    h = start_in_thread(
        {
            "listeners": "CLIENT://127.0.0.1:0,PROXIED://127.0.0.1:0",
            "listener.name.client.upstream": kafka_broker.bootstrap,
            "listener.name.proxied.upstream": kafka_broker.bootstrap,
            "listener.name.proxied.proxy.protocol": "required",
            "proxy.header.timeout.ms": "500",
            "connections.max.idle.ms": "1500",
            "socket.request.max.bytes": "1048576",
            "max.connections.per.ip": "2",
            "metrics.port": "-1",
        },
        history_dir=tmp_path / "history",
        run_id="bad",
    )
    yield h
    try:
        assert nonconformant_rows(h) == []
    finally:
        h.stop()


def closes(h: AcceptorHandle) -> list[dict[str, Any]]:
    writer = h.acceptor.rec.writer
    assert writer is not None
    writer.flush()
    return [
        r for r in read_history(writer.dir.parent, "acceptor").to_pylist() if r["event"] == "close"
    ]


def _wait_close(h: AcceptorHandle, reason: str, n: int = 1) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = wait_until(
        lambda: (
            [r for r in closes(h) if r["reason"] == reason]
            if len([r for r in closes(h) if r["reason"] == reason]) >= n
            else None
        ),
        timeout=20,
        what=f"close row {reason}",
    )
    return found


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (struct.pack(">i", 2_000_000), "frame_too_large"),
        (struct.pack(">i", -1), "bad_frame"),
        (b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n", "frame_too_large"),
        (struct.pack(">i", 3) + b"\x00\x12\x00", "bad_frame"),  # header cut short
    ],
)
def test_bad_frames_close_that_connection_only(
    acceptor: AcceptorHandle, payload: bytes, reason: str
) -> None:
    addr = acceptor.address("CLIENT")
    steady = connect(addr, "127.0.0.2")
    ping(steady)
    bad = raw(addr, "127.0.0.3")
    bad.sendall(payload)
    assert read_outcome(bad, 15) in ("eof", "reset")
    bad.close()
    ping(steady)
    rows = _wait_close(acceptor, reason)
    assert rows[0]["client_ip"] == "127.0.0.3"
    steady.close()


def test_reset_mid_frame(acceptor: AcceptorHandle) -> None:
    addr = acceptor.address("CLIENT")
    steady = connect(addr, "127.0.0.2")
    ping(steady)
    s = raw(addr, "127.0.0.4")
    frame = api_versions_frame()
    s.sendall(frame[: len(frame) // 2])
    wait_until(
        lambda: acceptor.call(lambda: acceptor.acceptor.quotas.ip_count("127.0.0.4")) == 1,
        what="registered",
    )
    time.sleep(0.2)
    reset_close(s)
    rows = wait_until(
        lambda: [r for r in closes(acceptor) if r["client_ip"] == "127.0.0.4"],
        timeout=20,
        what="close row",
    )
    assert rows[0]["reason"] in ("reset", "client_eof")
    ping(steady)
    steady.close()
    wait_until(
        lambda: acceptor.call(lambda: acceptor.acceptor.quotas.total) == 0, what="counts released"
    )


def test_silent_peer_is_closed_when_idle(acceptor: AcceptorHandle) -> None:
    addr = acceptor.address("CLIENT")
    silent = raw(addr, "127.0.0.5")
    assert read_outcome(silent, 20) in ("eof", "reset")
    silent.close()
    rows = _wait_close(acceptor, "idle_timeout")
    assert rows[0]["client_ip"] == "127.0.0.5"


def test_proxy_header_sets_the_client_address_and_keys_the_limits(acceptor: AcceptorHandle) -> None:
    addr = acceptor.address("PROXIED")
    a = [
        connect(addr, preamble=encode_v1("10.9.8.7", 5000 + i, "127.0.0.1", addr[1]))
        for i in range(2)
    ]
    for c in a:
        ping(c)
    # a third connection claiming the same client hits max.connections.per.ip=2 ...
    third = raw(addr)
    third.sendall(encode_v2("10.9.8.7", 6000, "127.0.0.1", addr[1]))
    assert read_outcome(third, 15) in ("eof", "reset")
    third.close()
    # ... while another client behind the same proxy address is served
    other = connect(addr, preamble=encode_v2("10.9.8.6", 7000, "127.0.0.1", addr[1]))
    ping(other)
    writer = acceptor.acceptor.rec.writer
    assert writer is not None
    writer.flush()
    hist = read_history(writer.dir.parent, "acceptor").to_pylist()
    regs = [r for r in hist if r["event"] == "register" and r["listener"] == "PROXIED"]
    assert {(r["client_ip"], r["sock_ip"]) for r in regs} == {
        ("10.9.8.7", "127.0.0.1"),
        ("10.9.8.6", "127.0.0.1"),
    }
    assert {r["client_port"] for r in regs} == {5000, 5001, 7000}
    rejects = [r for r in hist if r["event"] == "reject"]
    assert [(r["client_ip"], r["client_port"]) for r in rejects] == [("10.9.8.7", 6000)]
    for c in [*a, other]:
        c.close()


def test_malformed_or_missing_proxy_header(acceptor: AcceptorHandle) -> None:
    addr = acceptor.address("PROXIED")
    bad = raw(addr, "127.0.0.6")
    bad.sendall(b"PROXY TCP4 999.1.1.1 127.0.0.1 1 2\r\n")
    assert read_outcome(bad, 15) in ("eof", "reset")
    bad.close()
    plain = raw(addr, "127.0.0.7")
    plain.sendall(api_versions_frame())  # Kafka bytes where a header is required
    assert read_outcome(plain, 15) in ("eof", "reset")
    plain.close()
    silent = raw(addr, "127.0.0.8")
    assert read_outcome(silent, 15) in ("eof", "reset")
    silent.close()
    rows = wait_until(
        lambda: closes(acceptor) if len(closes(acceptor)) >= 3 else None, what="3 close rows"
    )
    by_ip = {r["sock_ip"]: r["reason"] for r in rows}
    assert by_ip == {
        "127.0.0.6": "bad_proxy_header",
        "127.0.0.7": "bad_proxy_header",
        "127.0.0.8": "proxy_timeout",
    }
    # never admitted, never counted
    assert acceptor.call(lambda: acceptor.acceptor.quotas.total) == 0
    assert round_trip(acceptor.address("CLIENT"), "127.0.0.9") == "ok"


def _fd_set() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass
    return out


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_descriptor_left_open_after_a_storm(acceptor: AcceptorHandle) -> None:
    addr = acceptor.address("CLIENT")
    round_trip(addr, "127.0.0.10")  # warm up lazily created descriptors (loop, writer)
    before = _fds()
    before_set = _fd_set()
    outcomes: dict[str, int] = {}
    held = []
    for i in range(30):  # three per IP against max.connections.per.ip=2: every third rejected
        s = raw(addr, f"127.0.4.{i % 10 + 1}")
        s.sendall(api_versions_frame())
        held.append(s)
    for i in range(100):
        out = round_trip(addr, f"127.0.6.{i % 25 + 1}", timeout=10)
        outcomes[out] = outcomes.get(out, 0) + 1
    for s in held:
        out = read_outcome(s, 10)
        outcomes[out] = outcomes.get(out, 0) + 1
    for i in range(20):  # abrupt endings too
        s = raw(addr, f"127.0.5.{i + 1}")
        s.sendall(api_versions_frame()[:7])
        reset_close(s)
    for s in held:
        s.close()
    assert outcomes.get("ok", 0) == 100 and outcomes.get("data", 0) == 20
    assert outcomes.get("eof", 0) + outcomes.get("reset", 0) == 10
    wait_until(
        lambda: acceptor.call(lambda: acceptor.acceptor.quotas.total) == 0, what="all released"
    )
    wait_until(
        lambda: acceptor.call(lambda: len(acceptor.acceptor.connections)) == 0, what="all closed"
    )
    wait_until(lambda: _fds() <= before, timeout=20, what=f"fds back ({_fd_set() - before_set})")
    # and the server still works
    assert round_trip(addr, "127.0.0.10") == "ok"
