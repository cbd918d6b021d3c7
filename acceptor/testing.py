"""Small blocking helpers for tests and benchmarks that drive the acceptor over real sockets.

Why in the package: the integration tests, the bench and the load profiles all need the
same "connect from a given 127.0.0.x, send ApiVersions, see a response / EOF / reset"
steps, and test folders may only hold test modules.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka.protocol.metadata import ApiVersionsRequest

from base import procfs
from base.admin.client import KafkaWire
from base.history import read_history

if TYPE_CHECKING:
    from acceptor import AcceptorHandle

_RST = struct.pack("ii", 1, 0)


def bootstrap(addr: tuple[str, int]) -> str:
    return f"{addr[0]}:{addr[1]}"


def connect(
    addr: tuple[str, int],
    source_ip: str | None = None,
    *,
    preamble: bytes = b"",
    timeout: float = 15,
) -> KafkaWire:
    return KafkaWire(bootstrap(addr), source_ip=source_ip, timeout=timeout, preamble=preamble)


def ping(wire: KafkaWire) -> Any:
    """One ApiVersions round trip (raises ConnectionError on EOF)."""
    return wire.request(
        ApiVersionsRequest[3](client_software_name="harness-test", client_software_version="0")
    )


def api_versions_frame(correlation_id: int = 1) -> bytes:
    req = ApiVersionsRequest[3](client_software_name="harness-test", client_software_version="0")
    req.with_header(correlation_id=correlation_id, client_id="harness-test")
    return bytes(req.encode(header=True, framed=True))


def raw(addr: tuple[str, int], source_ip: str | None = None, timeout: float = 15) -> socket.socket:
    return socket.create_connection(
        addr, timeout=timeout, source_address=(source_ip, 0) if source_ip else None
    )


def read_outcome(sock: socket.socket, timeout: float) -> str:
    """'data', 'eof', 'reset' or 'timeout' for the next read on `sock`."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except TimeoutError:
        return "timeout"
    except ConnectionResetError:
        return "reset"
    return "data" if data else "eof"


def reset_close(sock: socket.socket) -> None:
    """Close with RST instead of FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
    sock.close()


def round_trip(addr: tuple[str, int], source_ip: str | None = None, timeout: float = 15) -> str:
    """connect -> ApiVersions -> close; returns 'ok', 'eof', 'reset', 'timeout' or 'refused'."""
    try:
        s = raw(addr, source_ip, timeout)
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    try:
        s.sendall(api_versions_frame())
        out = read_outcome(s, timeout)
        return "ok" if out == "data" else out
    except OSError:
        return "reset"
    finally:
        s.close()


class StandInUpstream:
    """A listener on 127.0.0.1 standing in for the broker: each accepted connection goes to
    `handle` on a daemon thread of its own; `accepted` counts them."""

    def __init__(self, handle: Callable[[socket.socket], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self._handle = handle
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def listen_backlog(port: int) -> int:
    """Connections waiting in the kernel's accept queue of the IPv4 listening socket on
    `port`; -1 when there is no such socket."""
    queues = [s.accept_queue for s in procfs.listen_sockets() if s.port == port]
    return queues[0] if queues else -1


def close_times(socks: list[socket.socket], seconds: float) -> dict[int, float]:
    """Watch idle sockets for up to `seconds`: index -> seconds until the peer closed it."""
    t0 = time.monotonic()
    closed: dict[int, float] = {}
    deadline = t0 + seconds
    while len(closed) < len(socks):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(
            [s for i, s in enumerate(socks) if i not in closed], [], [], left
        )
        now = time.monotonic()
        for s in ready:
            try:
                data = s.recv(1)
            except ConnectionResetError:
                data = b""
            if not data:
                closed[socks.index(s)] = now - t0
    return closed


def nonconformant_rows(h: AcceptorHandle) -> list[str]:
    """What the acceptor's history so far carries that no event definition allows
    (`base.history.events.conformance`): [] for a history true to its one definition."""
    from base.history.events import conformance

    return conformance(history_rows(h))


def until_throttled(
    addr: tuple[str, int], source_ip: str, limit: int = 600, timeout: float = 10
) -> tuple[int, float, str]:
    """Round trips from `source_ip` until one is not answered (an IP-rate throttle, its
    meter just over the bound, so its throttle is a few ms): how many were answered, the
    seconds from that one's connect to its end, and how it ended ('eof', 'reset',
    'timeout')."""
    for n in range(limit):
        t0 = time.monotonic()
        s = raw(addr, source_ip, timeout)
        try:
            s.sendall(api_versions_frame())
            out = read_outcome(s, timeout)
        finally:
            s.close()
        if out != "data":
            return n, time.monotonic() - t0, out
    raise AssertionError(f"{source_ip}: none of {limit} connections to {addr} was throttled")


def wait_until(
    pred: Callable[[], Any], timeout: float = 30, interval: float = 0.05, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def history_rows(h: AcceptorHandle, event: str | None = None) -> list[dict[str, Any]]:
    """The acceptor's history rows so far (flushed first), optionally of one event."""
    writer = h.acceptor.rec.writer
    assert writer is not None
    writer.flush()
    table = read_history(writer.dir.parent, "acceptor").to_pylist()
    return [r for r in table if event is None or r["event"] == event]
