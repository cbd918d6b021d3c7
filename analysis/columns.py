"""Column expressions every reader of the history shares, and the one way a small table of
the driver's values becomes a DataFrame (`driver_table`); a leaf (no `analysis` import), so
`analysis.load`, `analysis.frames` and the checks can all use them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession, WindowSpec

#: `driver_table`'s column types: Spark's name -> Arrow's type (what the JVM reads it as)
ARROW_TYPES = {
    "long": "int64",
    "int": "int32",
    "string": "string",
    "boolean": "bool",
    "double": "float64",
}


def driver_table(
    spark: SparkSession, rows: Iterable[Sequence[Any]], columns: Sequence[tuple[str, str]]
) -> DataFrame:
    """A DataFrame of ``rows`` (tuples) with ``columns`` ((name, Spark type) in order, a
    type of `ARROW_TYPES`), handed to the JVM as one Arrow table.

    Never ``spark.createDataFrame(a_list)``: PySpark makes a Python RDD of a list, and the
    first job that reads one starts Spark's Python worker daemon and forks a worker from it
    (a JVM thread waited 0.7 s on that in a cold 4.4 k-event analysis, inside the check that
    asked); the JVM reads an Arrow table itself, as it reads the history's."""
    import pyarrow as pa

    values = list(zip(*rows, strict=True)) or [()] * len(columns)
    table = pa.table(
        {
            name: pa.array(list(col), type=pa.type_for_alias(ARROW_TYPES[kind]))
            for (name, kind), col in zip(columns, values, strict=True)
        }
    )
    return spark.createDataFrame(table)


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
