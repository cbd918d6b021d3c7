"""The catalog's verdict table: one row per scenario, the outcome on each target.

Reads only what runs leave behind (run.json, report/verdict.json), so it works on runs
analysed later with `harness analyze` as well as on `harness run` results.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunSummary:
    scenario: str
    target: str
    run_dir: Path
    verdict: str  # pass | fail | unknown | "not analysed"
    expected: str
    load_s: float
    run_s: float | None  # broker start .. everything stopped
    analysis_s: float | None
    interrupted: bool
    not_pass: tuple[str, ...]  # checks that did not pass, "name=verdict"


def _parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def summarise_run(run_dir: Path) -> RunSummary | None:
    try:
        meta: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return None
    verdict_path = run_dir / "report" / "verdict.json"
    verdict = "not analysed"
    not_pass: tuple[str, ...] = ()
    if verdict_path.is_file():
        data = json.loads(verdict_path.read_text())
        verdict = str(data.get("verdict", "unknown"))
        not_pass = tuple(
            f"{c.get('name')}={c.get('verdict')}"
            for c in data.get("checks", [])
            if c.get("verdict") not in ("pass", "n/a")  # n/a: not configured, not a finding
        )
    result = meta.get("result") or {}
    start, end = _parse_time(meta.get("started_at")), _parse_time(meta.get("ended_at"))
    run_s = result.get("run_s")
    if run_s is None and start and end:
        run_s = (end - start).total_seconds()
    return RunSummary(
        scenario=str(meta.get("scenario")),
        target=str(meta.get("target")),
        run_dir=run_dir,
        verdict=verdict,
        expected=str((meta.get("expect") or {}).get("verdict", "pass")),
        load_s=float(meta.get("duration_s") or 0),
        run_s=run_s,
        analysis_s=result.get("analysis_s"),
        interrupted=bool(meta.get("interrupted")),
        not_pass=not_pass,
    )


def summarise(root: Path) -> list[RunSummary]:
    """The newest run of each (scenario, target) under ``root``."""
    latest: dict[tuple[str, str], RunSummary] = {}
    for run_json in sorted(root.glob("*/run.json")):
        s = summarise_run(run_json.parent)
        if s is None:
            continue
        latest[(s.scenario, s.target)] = s  # names sort by UTC stamp: later wins
    return sorted(latest.values(), key=lambda s: (s.scenario, s.target))


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f} s"


def markdown_table(rows: list[RunSummary]) -> str:
    out = [
        "| scenario | target | verdict (expected) | load | run (start→stop) | analysis "
        "| checks not passing |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = r.verdict.upper() + (" (interrupted)" if r.interrupted else "")
        out.append(
            f"| `{r.scenario}` | {r.target} | {verdict} ({r.expected}) | {r.load_s:.0f} s "
            f"| {_secs(r.run_s)} | {_secs(r.analysis_s)} | {', '.join(r.not_pass) or '-'} |"
        )
    return "\n".join(out)
