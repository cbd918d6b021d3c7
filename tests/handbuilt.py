"""Hand-built histories for tests: one row by its event's name and columns as keywords.

The product writes only typed rows (`base.history.rows`: a row class per event, mypy
checks its columns and `detail` keys). A test that builds a history by hand names events
and columns as data; `record` checks them against `base/history/events.py` at the call
(KeyError on a column or `detail` key the event lacks, ValueError on another source's
event) and appends the row as the product's writers do.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from base.history.rows import FIELDS, Row
from base.history.schema import EVENTS
from base.history.writer import HistoryWriter, check_row

_COLUMNS = frozenset(FIELDS[3:-1])


def record(
    writer: HistoryWriter,
    event: str,
    *,
    ts_us: int | None = None,
    mono_ns: int | None = None,
    detail: Mapping[str, Any] | str | None = None,
    **columns: Any,
) -> None:
    """One row of `event` into `writer` (``mono_ns``, ``ts_us`` None: now); a `detail`
    mapping is copied."""
    if event not in EVENTS[writer.source]:
        raise ValueError(f"event {event!r} is not a {writer.source} event")
    if columns.keys() - _COLUMNS:
        raise KeyError(f"unknown history fields: {sorted(columns.keys() - _COLUMNS)}")
    check_row(writer.source, event, columns, detail)
    if detail is not None and not isinstance(detail, str):
        detail = dict(detail)
    mono = time.monotonic_ns() if mono_ns is None else mono_ns
    ts = time.time_ns() if ts_us is None else ts_us * 1000
    row = (ts, mono, event, *[columns.get(name) for name in FIELDS[3:-1]], detail)
    writer.append(cast(Row, row))
