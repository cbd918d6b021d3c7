"""Column expressions every reader of the history shares; a leaf (no `analysis` import), so
`analysis.load` and `analysis.frames` can both use them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, WindowSpec


def detail_col(source: str, event: str, key: str) -> Column:
    """`detail.<key>` of that event's rows, the key checked against the event's one
    definition (`base.history.events`): a key renamed on one side fails here."""
    from pyspark.sql import functions as F

    from base.history.events import event as definition

    return F.get_json_object("detail", f"$.{definition(source, event).key(key)}")


def socket_rows() -> WindowSpec:
    """One client socket's rows in order, up to the current one: its address and its
    `conn_id` (one source address and port can serve two sockets at once to two brokers of
    a cluster, as Linux's connect() and IP_BIND_ADDRESS_NO_PORT allow: the 4-tuples
    differ), never its address alone."""
    from pyspark.sql import Window

    return (
        Window.partitionBy("client_ip", "client_port", "conn_id")
        .orderBy("mono_ns", "seq")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
