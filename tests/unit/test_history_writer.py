"""The history writer is the one contract every part shares: test it directly."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.history import SCHEMA, HistoryWriter, read_history


def test_rows_round_trip_with_schema_seq_and_json_detail(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "acceptor", "run-1", background=False)
    detail = {"count": 6, "max": 5}
    s1 = w.record("accept", mono_ns=10, conn_id="c1", client_ip="127.0.0.2", client_port=5000)
    s2 = w.record("reject", mono_ns=11, conn_id="c1", reason="ip_count", detail=detail)
    detail["count"] = 99  # the writer keeps what was recorded, not later mutations
    w.close()
    assert (s1, s2) == (1, 2)
    table = read_history(tmp_path)
    assert table.schema == SCHEMA
    rows = table.to_pylist()
    assert [r["event"] for r in rows] == ["accept", "reject"]
    assert rows[0]["client_port"] == 5000 and rows[0]["detail"] is None
    assert json.loads(rows[1]["detail"]) == {"count": 6, "max": 5}
    assert {r["source"] for r in rows} == {"acceptor"} and {r["run_id"] for r in rows} == {"run-1"}


def test_parts_are_atomic_and_named_per_writer(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "client", "r", name="client-a", background=False)
    w.record("connect_invoke")
    first = w.flush()
    w.record("closed", reason="done")
    w.close()
    files = sorted(p.name for p in (tmp_path / "client").iterdir())
    assert files == ["client-a-00001.parquet", "client-a-00002.parquet"]
    assert first is not None and pq.read_table(first).num_rows == 1
    assert w.flush() is None  # nothing buffered: no empty part


def test_background_thread_flushes_when_buffer_is_full(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "harness", "r", max_rows=10, flush_interval_s=30)
    for _ in range(25):
        w.record("phase_start", detail={"name": "storm"})
    w.close()
    assert read_history(tmp_path, "harness").num_rows == 25
    assert not [p for p in (tmp_path / "harness").iterdir() if p.name.startswith(".")]


def test_rejects_unknown_events_fields_and_sources(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "client", "r", background=False)
    with pytest.raises(ValueError, match="not a client event"):
        w.record("accept")
    with pytest.raises(KeyError, match="bogus"):
        w.record("closed", bogus=1)
    with pytest.raises(ValueError, match="unknown history source"):
        HistoryWriter(tmp_path, "nobody", "r")
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.record("closed")
