"""A cluster fronted by one acceptor per broker: each front's processes, and the client rows of the
attempts that reached its broker."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from base.history.rows import HarnessConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


#: an acceptor process writes its rows (`acceptor-<pid>-N`) and its `config` rows
#: (`acceptor-config-<pid>-N`, among the harness rows)
_WRITER = re.compile(r"^acceptor-(?:config-)?(?P<pid>\d+)-\d+\.parquet$")


def writer_pid(f: Path) -> str | None:
    m = _WRITER.match(f.name)
    return m["pid"] if m and f.parent.name in ("acceptor", "harness") else None


def front_pids(files: list[Path]) -> dict[int, set[str]]:
    """Each front's process ids by its broker's node id, from the `node.id` in its
    `config` rows (``acceptor-config-<pid>-N``); {} when no front names a broker."""
    import pyarrow.parquet as pq

    out: dict[int, set[str]] = {}
    for f in files:
        m = _WRITER.match(f.name)
        if not m or f.parent.name != "harness":
            continue
        for d in pq.read_table(f, columns=["detail"])["detail"].to_pylist():
            node = HarnessConfig.parse(d).get("node.id")
            if node is not None:
                out.setdefault(int(node), set()).add(m["pid"])
                break
    return out


def on_front(df: DataFrame, node: int) -> DataFrame:
    """Client rows of the attempts that reached broker ``node`` (their `connect_invoke`'s
    ``detail.broker``; a socket's later rows follow its attempt); every other row whole.
    A client row of no attempt with a broker (one the load could not attribute) is in no
    front's view."""
    from pyspark.sql import functions as F

    from analysis.columns import detail_col, socket_rows

    client = F.col("source") == "client"
    broker = F.when(
        F.col("event") == "connect_invoke",
        detail_col("client", "connect_invoke", "broker").cast("int"),
    )
    mine = (
        df.where(client)
        .withColumn("_broker", F.last(broker, ignorenulls=True).over(socket_rows()))
        .where(F.col("_broker") == F.lit(node))
        .drop("_broker")
    )
    return df.where(~client).unionByName(mine)
