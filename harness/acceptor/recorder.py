"""History rows of the acceptor, keyed by one connection's identity.

Why a thin wrapper: every row of a connection repeats the same six identity columns (the
join key with the client's rows), and the acceptor must run with or without a history
directory; `record()` only appends to the writer's buffer, so it never blocks the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.history import HistoryWriter


@dataclass(slots=True)
class ConnInfo:
    conn_id: str
    listener: str
    client_ip: str
    client_port: int
    sock_ip: str
    sock_port: int


class Recorder:
    def __init__(self, writer: HistoryWriter | None) -> None:
        self.writer = writer

    def conn(self, event: str, info: ConnInfo, mono_ns: int, **fields: Any) -> None:
        if self.writer is None:
            return
        try:
            self._record(event, info, mono_ns, fields)
        except RuntimeError:  # the writer closed at shutdown: late rows are dropped
            pass

    def _record(self, event: str, info: ConnInfo, mono_ns: int, fields: dict[str, Any]) -> None:
        assert self.writer is not None
        self.writer.record(
            event,
            mono_ns=mono_ns,
            conn_id=info.conn_id,
            listener=info.listener,
            client_ip=info.client_ip,
            client_port=info.client_port,
            sock_ip=info.sock_ip,
            sock_port=info.sock_port,
            **fields,
        )

    def row(self, event: str, mono_ns: int, **fields: Any) -> None:
        if self.writer is not None:
            try:
                self.writer.record(event, mono_ns=mono_ns, **fields)
            except RuntimeError:  # closed at shutdown
                pass

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
