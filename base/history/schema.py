"""The shared history schema (see docs/history.md for what each event means).

One schema for every source so that Spark can read `history/**.parquet` in one pass.
Timestamps are microseconds in UTC because Spark cannot read nanosecond Parquet
timestamps; `mono_ns` is CLOCK_MONOTONIC, comparable across processes on one
machine, and is the clock the quota engine was fed (now_ms = mono_ns // 1_000_000).
"""

from __future__ import annotations

import pyarrow as pa

from base.history.events import BY_SOURCE

SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("mono_ns", pa.int64()),
        pa.field("event", pa.string()),
        pa.field("conn_id", pa.string()),
        pa.field("listener", pa.string()),
        pa.field("client_ip", pa.string()),
        pa.field("client_port", pa.int32()),
        pa.field("sock_ip", pa.string()),
        pa.field("sock_port", pa.int32()),
        pa.field("processor", pa.int16()),
        pa.field("reason", pa.string()),
        pa.field("delay_ms", pa.float64()),
        pa.field("api_key", pa.int16()),
        pa.field("client_id", pa.string()),
        pa.field("principal", pa.string()),
        pa.field("latency_ms", pa.float64()),
        pa.field("bytes", pa.int64()),
        pa.field("detail", pa.string()),
    ]
)

COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)

SOURCES = ("client", "acceptor", "harness")

#: event names per source, from the one definition of each (base.history.events)
EVENTS: dict[str, frozenset[str]] = {src: frozenset(BY_SOURCE[src]) for src in SOURCES}
