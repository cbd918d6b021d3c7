"""History rows of the acceptor: the writer's `put`, and a connection's identity.

Why a thin wrapper: the acceptor must run with or without a history directory, and every
row of a connection repeats the same six identity columns (the join key with the client's
rows), which `ConnInfo` carries. Each row is its event's typed row
(`harness.history.rows`, e.g. ``AcceptorRegister(now, info, processor, delay_ms)``): one
tuple, which `put` hands to the writer's buffer as it is (no keyword dict per row, no copy,
nothing converted or written on the event loop: `harness.history.writer`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from harness.history import HistoryWriter
from harness.history.rows import ConnInfo as ConnInfo  # re-exported: the acceptor imports it here
from harness.history.rows import Row

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


def _drop(row: Row) -> None:
    """No history: the row is dropped."""


class Recorder:
    def __init__(self, writer: HistoryWriter | None) -> None:
        self.writer = writer
        #: write one typed row; a row after the writer closed (at shutdown) is dropped
        self.put: Callable[[Row], None] = _drop
        if writer is not None:
            writer.drop_late = True
            self.put = writer.append
            _freeze_start_up()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
