"""The report names each load worker of a phase: its addresses, rows home and clock offset
with its bound (run.json `worker_phases`, as the runner judged the roster)."""

from __future__ import annotations

from typing import Any

from analysis.report import render

VERDICT: dict[str, Any] = {
    "run_id": "hosts-ip-rate-acceptor-x",
    "run_dir": "/runs/hosts-ip-rate-acceptor-x",
    "scenario": "hosts-ip-rate",
    "target": "acceptor",
    "verdict": "pass",
    "reasons": [],
    "exercised": [],
    "counts": {"pass": 0, "fail": 0, "unknown": 0, "n/a": 0},
    "checks": [],
    "config_changes": 0,
    "events": 0,
    "outputs": {},
}


def test_each_worker_with_its_offset_and_bound() -> None:
    meta = {
        "worker_phases": {
            "storm": [
                {"index": 1, "addresses": ["198.18.1.11"], "rows_received": 1100,
                 "rows_reported": 1100, "clock_offset_ns": -200_100_000,
                 "clock_rtt_ns": 1_400_000, "gone": False},
                {"index": 2, "addresses": ["198.18.1.12"], "rows_received": 0,
                 "rows_reported": 221, "clock_offset_ns": None, "clock_rtt_ns": None,
                 "gone": True},
            ]
        }
    }  # fmt: skip
    html = render(VERDICT, [], None, meta=meta, outcomes={})
    assert "Load workers" in html
    assert "198.18.1.11" in html and "1100 / 1100" in html
    assert "-200.1 ms ± 0.7 ms" in html
    assert "0 / 221" in html and "gone" in html and "not measured" in html


def test_no_section_without_workers() -> None:
    assert "Load workers" not in render(VERDICT, [], None, meta={}, outcomes={})
