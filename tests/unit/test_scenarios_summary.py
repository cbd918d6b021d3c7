"""The catalog's verdict table is built from what runs leave behind (run.json, verdict.json)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.runner.summary import markdown_table, summarise


def _run(root: Path, name: str, meta: dict[str, object], verdict: dict[str, object] | None) -> None:
    d = root / name
    (d / "report").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(meta))
    if verdict is not None:
        (d / "report" / "verdict.json").write_text(json.dumps(verdict))


def test_newest_run_per_scenario_and_target_with_durations(tmp_path: Path) -> None:
    base = {"scenario": "ci-gate", "duration_s": 20, "expect": {"verdict": "pass"}}
    _run(
        tmp_path,
        "ci-gate-acceptor-20260101T000000Z-aaaa",
        {
            **base,
            "target": "acceptor",
            "started_at": "2026-01-01T00:00:00.000Z",
            "ended_at": "2026-01-01T00:00:50.000Z",
        },
        {"verdict": "fail", "checks": []},
    )
    _run(
        tmp_path,
        "ci-gate-acceptor-20260101T010000Z-bbbb",
        {
            **base,
            "target": "acceptor",
            "started_at": "2026-01-01T01:00:00.000Z",
            "ended_at": "2026-01-01T01:00:40.000Z",
            "result": {"verdict": "pass", "run_s": 41.0, "analysis_s": 30.0},
        },
        {
            "verdict": "pass",
            "checks": [
                {"name": "offered_load", "verdict": "unknown"},
                {"name": "ip_rate_span", "verdict": "pass"},
            ],
        },
    )
    _run(
        tmp_path,
        "ci-gate-broker-20260101T020000Z-cccc",
        {
            **base,
            "target": "broker",
            "interrupted": True,
            "started_at": "2026-01-01T02:00:00Z",
            "ended_at": "2026-01-01T02:00:10Z",
        },
        None,
    )
    (tmp_path / "not-a-run").mkdir()

    rows = summarise(tmp_path)
    assert [(r.scenario, r.target, r.verdict) for r in rows] == [
        ("ci-gate", "acceptor", "pass"),
        ("ci-gate", "broker", "not analysed"),
    ]
    acc, brk = rows
    assert (acc.run_s, acc.analysis_s, acc.not_pass) == (41.0, 30.0, ("offered_load=unknown",))
    assert brk.run_s == 10.0 and brk.interrupted
    table = markdown_table(rows)
    assert (
        "| `ci-gate` | acceptor | PASS (pass) | 20 s | 41 s | 30 s | offered_load=unknown |"
        in table
    )
    assert "NOT ANALYSED (interrupted)" in table
