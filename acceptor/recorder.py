"""History rows of the acceptor, keyed by one connection's identity.

Why a thin wrapper: every row of a connection repeats the same six identity columns (the
join key with the client's rows), and the acceptor must run with or without a history
directory. `write()` is on the accept and forwarding paths (four to six rows per
connection): the caller builds the row with its event's row class (`base.history.rows`,
the event's columns as named parameters, the identity from the connection's `ConnInfo`:
a column or `detail` key the event lacks is refused by mypy, a misspelt one fails at the
call), one plain tuple the writer buffers as it is. ``detail`` is stored as given (a
constant string, or a mapping the flush thread encodes as JSON), ``ts`` is derived from
``mono_ns`` at the flush, and nothing is converted or written on the event loop
(`base.history.writer`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any, cast

from base.history import HistoryWriter, events
from base.history.rows import AcceptorClose, AcceptorCloseDetail, AcceptorRow
from base.history.rows import ConnInfo as ConnInfo  # re-exported: the acceptor imports it here

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


def _drop(row: AcceptorRow) -> None:
    """No history: the row is not kept."""


class Recorder:
    def __init__(self, writer: HistoryWriter | None) -> None:
        self.writer = writer
        #: one row, built by its event's row class (`base.history.rows`: only the event's
        #: columns and `detail` keys), handed to the writer as it is (no frame of ours on
        #: the hot path); dropped without a writer, or after it closed at shutdown. A
        #: `detail` mapping is the row's from then on: the caller builds a fresh one.
        self.write: Callable[[AcceptorRow], None] = _drop
        if writer is not None:
            writer.drop_after_close = True
            self.write = writer.append
            _freeze_start_up()

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
        self.write(
            AcceptorClose(
                mono_ns,
                info,
                processor=processor,
                reason=reason,
                bytes=bytes,
                detail=cast(AcceptorCloseDetail, events.checked("acceptor", "close", detail)),
            )
        )

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
