"""Phase rows bracket the load itself: read from the phase's own client history (no
processes, no sockets: files written here)."""

from __future__ import annotations

from pathlib import Path

from base.history import HistoryWriter
from harness.runner.phases import intended_arrivals_in
from tests.handbuilt import record


def test_intended_arrivals_of_one_locust_process(tmp_path: Path) -> None:
    hist = tmp_path / "history"
    mine = HistoryWriter(hist, "client", "r", name="client-host-4242", background=False)
    other = HistoryWriter(hist, "client", "r", name="client-host-77", background=False)
    for k in (3, 1, 2):
        record(mine, "connect_invoke", detail={"intended_mono_ns": k * 100})
    record(mine, "connect_fail", reason="refused", detail={"intended_mono_ns": 100})  # repeat
    record(mine, "connect_fail", reason="not_offered", detail={"intended_mono_ns": 400})
    record(other, "connect_invoke", detail={"intended_mono_ns": 5})
    mine.close()
    other.close()
    assert intended_arrivals_in(hist / "client", "client-*-4242-*.parquet") == [100, 200, 300, 400]
    assert intended_arrivals_in(hist / "client", "client-*-77-*.parquet") == [5]
    assert intended_arrivals_in(hist / "client", "client-*-1-*.parquet") == []
