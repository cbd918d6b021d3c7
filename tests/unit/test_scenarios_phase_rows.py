"""Phase rows bracket the load itself: read from the phase's own client history and the
Locust log markers (no processes, no sockets: files written here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.history import HistoryWriter
from harness.runner.orchestrator import _intended_arrivals, _RunningPhase
from harness.runner.scenario import parse_scenario


def _phase(profile: str = "storm") -> Any:
    spec = (
        {"profile": profile, "users": 2}
        if profile == "steady"
        else {"profile": profile, "arrival": "constant:rate=10"}
    )
    return parse_scenario({"name": "p", "description": "p", "duration": 5, "load": [spec]}).load[0]


def test_intended_arrivals_of_one_locust_process(tmp_path: Path) -> None:
    hist = tmp_path / "history"
    mine = HistoryWriter(hist, "client", "r", name="client-host-4242", background=False)
    other = HistoryWriter(hist, "client", "r", name="client-host-77", background=False)
    for k in (3, 1, 2):
        mine.record("connect_invoke", detail={"intended_mono_ns": k * 100})
    mine.record("connect_fail", reason="refused", detail={"intended_mono_ns": 100})  # repeat
    mine.record("connect_fail", reason="not_offered", detail={"intended_mono_ns": 400})
    mine.record("ready", detail={"intended_mono_ns": 999})  # not an arrival row
    other.record("connect_invoke", detail={"intended_mono_ns": 5})
    mine.close()
    other.close()
    assert _intended_arrivals(hist / "client", 4242) == [100, 200, 300, 400]
    assert _intended_arrivals(hist / "client", 77) == [5]
    assert _intended_arrivals(hist / "client", 1) == []


def test_log_markers_are_read_incrementally(tmp_path: Path) -> None:
    log = tmp_path / "locust.log"
    log.write_text("Starting Locust\nAll users spawned: 1\n")
    rp = _RunningPhase(_phase(), SimpleNamespace(log_path=log))  # type: ignore[arg-type]
    assert rp.start_marker == ": driving " and rp.end_marker == "schedule done"
    assert rp.new_log_lines() == ["Starting Locust", "All users spawned: 1"]
    with open(log, "a") as fh:
        fh.write("storm: driving constant:rate=10 (slot 0 of 1)\nstorm: sched")
    assert rp.new_log_lines() == ["storm: driving constant:rate=10 (slot 0 of 1)"]
    with open(log, "a") as fh:
        fh.write("ule done: intended 50\n")
    assert rp.new_log_lines() == ["storm: schedule done: intended 50"]
    assert rp.new_log_lines() == []
    steady = _RunningPhase(_phase("steady"), SimpleNamespace(log_path=log))  # type: ignore[arg-type]
    assert steady.start_marker == "All users spawned"
    assert steady.end_marker == "--run-time limit reached"
