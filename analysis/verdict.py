"""Running the checks, merging the verdict, and writing verdict.json and junit.xml.

Jepsen's merge: fail > unknown > pass. When the generator fell short of its intended
load, a check that needs that load and would have passed becomes `unknown` (a limit that
was never pushed proves nothing); a fail stays a fail — a violation is a violation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from analysis.checks import ALL_CHECKS, PASS, UNKNOWN, Check, CheckResult, merge, run_check

if TYPE_CHECKING:
    from analysis.load import Run

EXIT_CODES = {"pass": 0, "fail": 1, "unknown": 2}


def applicable(check: Check, run: Run) -> bool:
    target = "acceptor" if run.has_source("acceptor") else "broker"
    return target in check.targets


def run_checks(
    run: Run, checks: list[Check] | None = None, progress: Callable[[str], None] | None = None
) -> list[CheckResult]:
    results: list[CheckResult] = []
    for check in checks if checks is not None else ALL_CHECKS:
        if not applicable(check, run):
            continue
        t = time.monotonic()
        result = run_check(check, run)
        if progress:
            progress(f"  {check.name:<34} {result.verdict:<8} ({time.monotonic() - t:.1f}s)")
        results.append(result)
    short = next((r for r in results if r.name == "offered_load" and r.data.get("short")), None)
    if short is not None:
        for r in results:
            if r.needs_load and r.verdict == PASS:
                r.verdict = UNKNOWN
                r.explanation = (
                    f"would pass, but the offered load fell short ({short.observed}); "
                    f"a limit that was not pushed proves nothing. {r.explanation}"
                )
    return results


def build_verdict(
    run: Run, results: list[CheckResult], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta = run.meta
    verdict = merge(r.verdict for r in results) if results else UNKNOWN
    counts = {v: sum(1 for r in results if r.verdict == v) for v in ("pass", "fail", "unknown")}
    return {
        "run_id": meta.get("run_id") or run.run_dir.name,
        "run_dir": str(run.run_dir),
        "scenario": meta.get("scenario"),
        "target": run.target,
        "started_at": meta.get("started_at"),
        "ended_at": meta.get("ended_at"),
        "verdict": verdict,
        "expected_verdict": run.expect.get("verdict"),
        "counts": counts,
        "checks": [r.to_dict() for r in results],
        "config_changes": len(run.timeline.changes),
        **(extra or {}),
    }


def write_verdict(report_dir: Path, verdict: dict[str, Any]) -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "verdict.json"
    path.write_text(json.dumps(verdict, indent=2, default=str))
    return path


def write_junit(report_dir: Path, verdict: dict[str, Any]) -> Path:
    """One testcase per check: <failure> for fail, <skipped> for unknown."""
    checks = verdict["checks"]
    c = verdict["counts"]
    suite = f"harness.analyze.{verdict.get('scenario') or 'run'}"
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name={quoteattr("harness analyze")} tests="{len(checks)}" '
        f'failures="{c["fail"]}" skipped="{c["unknown"]}">',
        f'  <testsuite name={quoteattr(suite)} tests="{len(checks)}" failures="{c["fail"]}" '
        f'skipped="{c["unknown"]}" errors="0">',
    ]
    for ch in checks:
        lines.append(
            f"    <testcase classname={quoteattr(suite + '.' + (ch['family'] or 'check'))} "
            f"name={quoteattr(ch['name'])}>"
        )
        body = (
            f"observed: {ch['observed']}\nexpected: {ch['expected']}\n"
            f"tolerance: {ch['tolerance']}\n{ch['explanation']}\n"
            + "\n".join(json.dumps(w, default=str) for w in ch["witnesses"])
        )
        if ch["verdict"] == "fail":
            lines.append(
                f"      <failure message={quoteattr(ch['observed'][:300])}>{escape(body)}</failure>"
            )
        elif ch["verdict"] == "unknown":
            lines.append(
                f"      <skipped message={quoteattr('unknown: ' + ch['observed'][:300])}/>"
            )
            lines.append(f"      <system-out>{escape(body)}</system-out>")
        lines.append("    </testcase>")
    lines += ["  </testsuite>", "</testsuites>", ""]
    path = report_dir / "junit.xml"
    path.write_text("\n".join(lines))
    return path
