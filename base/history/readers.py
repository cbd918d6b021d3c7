"""Small readers of written history files for the run side (the analysis reads with Spark):
the `detail` keys they need, through the events' typed rows (`base.history.rows`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from base.history.rows import ClientConnectFail, ClientConnectInvoke

if TYPE_CHECKING:
    import pyarrow as pa

_PARSE = {"connect_invoke": ClientConnectInvoke.parse, "connect_fail": ClientConnectFail.parse}


def intended_arrivals(table: pa.Table) -> Iterator[int]:
    """The intended instants (``intended_mono_ns``) in a client history table (its `event`
    and `detail` columns): of every `connect_invoke` and every `connect_fail` that has one
    (an arrival not offered; a failure after an invoke repeats its invoke's)."""
    events = table.column("event").to_pylist()
    details = table.column("detail").to_pylist()
    for event, detail in zip(events, details, strict=True):
        parse = _PARSE.get(event)
        if parse is not None and detail:
            value = parse(detail).get("intended_mono_ns")
            if value is not None:
                yield int(value)
