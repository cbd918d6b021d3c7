"""History rows of the acceptor, keyed by one connection's identity.

Why a thin wrapper: every row of a connection repeats the same six identity columns (the
join key with the client's rows), and the acceptor must run with or without a history
directory. `conn()` is on the accept and forwarding paths (four to six rows per
connection), so it is one flat tuple handed to the writer's buffer: the fields are named
parameters (no keyword dict per row, and a misspelt field fails at the call), ``detail``
is stored as given (a constant string, or a mapping the flush thread encodes as JSON), and
nothing is converted or written on the event loop (`base.history.writer`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from typing import Any

from base.history import HistoryWriter, events
from base.history.rows import ConnInfo as ConnInfo  # re-exported: the acceptor imports it here
from base.history.rows import Row

_time_ns = time.time_ns
_new = tuple.__new__


_frozen = False


def _freeze_start_up() -> None:
    """Move the objects alive now out of the cyclic collector's reach, once per process.

    A history writer imports pyarrow, which imports pandas: ~36,000 more container objects
    that every full collection would scan, 16-35 ms with the loop stopped (measured: the
    loop's worst lateness under 3,000 recorded connections/s fell from 15-18 ms to 6-7 ms
    with them frozen). They live as long as the process; later objects are collected as
    before (``gc.freeze``).
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


class Recorder:
    def __init__(self, writer: HistoryWriter | None) -> None:
        self.writer = writer
        if writer is not None:
            _freeze_start_up()

    def conn(
        self,
        event: str,
        info: ConnInfo,
        mono_ns: int,
        *,
        processor: int | None = None,
        reason: str | None = None,
        delay_ms: float | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        principal: str | None = None,
        latency_ms: float | None = None,
        bytes: int | None = None,  # the history column's name (shadows the builtin here)
        detail: Mapping[str, Any] | str | None = None,
    ) -> None:
        """One row of a connection (the writer's ``ROW`` order); dropped after close."""
        writer = self.writer
        if writer is None:
            return
        if detail is not None and not isinstance(detail, str):
            detail = dict(detail)  # the caller may reuse its mapping
        try:
            writer.append(
                _new(
                    Row,
                    (
                        _time_ns(),
                        mono_ns,
                        event,
                        info.conn_id,
                        info.listener,
                        info.client_ip,
                        info.client_port,
                        info.sock_ip,
                        info.sock_port,
                        processor,
                        reason,
                        delay_ms,
                        api_key,
                        client_id,
                        principal,
                        latency_ms,
                        bytes,
                        detail,
                    ),
                )
            )
        except RuntimeError:  # the writer closed at shutdown: late rows are dropped
            pass

    def closed(
        self,
        info: ConnInfo,
        mono_ns: int,
        reason: str,
        *,
        processor: int | None = None,
        bytes: int | None = None,  # the history column's name (shadows the builtin here)
        **detail: Any,
    ) -> None:
        """A connection's one `close` row, registered or not: every `close` row is written
        here, its `detail` keys checked against `base/history/events.py`."""
        self.conn(
            "close",
            info,
            mono_ns,
            reason=reason,
            processor=processor,
            bytes=bytes,
            detail=events.checked("acceptor", "close", detail),
        )

    def row(self, event: str, mono_ns: int, **fields: Any) -> None:
        """A row of no connection (loop lag, blocked listener, processor stall): rare."""
        if self.writer is not None:
            try:
                self.writer.record(event, mono_ns=mono_ns, **fields)
            except RuntimeError:  # closed at shutdown
                pass

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
