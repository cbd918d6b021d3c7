"""Running the checks, deciding the run's verdict, and writing verdict.json and junit.xml.

Per check: pass / fail / unknown / n/a (analysis.checks.base). When the generator fell
short of its intended load, a check that needs that load and would have passed becomes
`unknown` (a limit that was never pushed proves nothing); a fail stays a fail.

The run's verdict says what was proven (`overall`):
- `fail` when any check failed (exit 1);
- `unknown` (exit 2) when a check crashed, when no check that judges a configured limit
  was exercised and passed, or when a check named in the scenario's `expect.checks` was
  not exercised and passed (the reason names the load to raise);
- `pass` (exit 0) otherwise. `n/a` checks count for nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from analysis.checks import ALL_CHECKS, FAIL, NA, PASS, UNKNOWN, Check, CheckResult, run_check
from analysis.checks.broker_side import broker_expectations

if TYPE_CHECKING:
    from analysis.load import Run

EXIT_CODES = {"pass": 0, "fail": 1, "unknown": 2, "n/a": 2}


def applicable(check: Check, run: Run) -> bool:
    target = "acceptor" if run.has_source("acceptor") else "broker"
    return target in check.targets


def run_checks(
    run: Run, checks: list[Check] | None = None, progress: Callable[[str], None] | None = None
) -> list[CheckResult]:
    results: list[CheckResult] = []
    # Without an acceptor, everything is judged from the client rows; none means nothing
    # to judge (say so, never hand the checks an empty history to trip over).
    blind = not run.has_source("acceptor") and not run.has_source("client")
    for check in checks if checks is not None else ALL_CHECKS:
        if not applicable(check, run):
            continue
        t = time.monotonic()
        if blind:
            result = CheckResult(
                check.name,
                UNKNOWN,
                observed="no client rows (and no acceptor rows): no connection was recorded",
                expected="a client history (target broker is judged from the client side)",
                explanation="nothing to judge: did the load start? see locust/ in the run folder",
                family=check.family,
                needs_load=check.needs_load,
                judges_limit=check.judges_limit,
            )
        else:
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


def overall(
    results: list[CheckResult], expect_checks: list[str] | None = None
) -> tuple[str, list[str]]:
    """The run's verdict and why: fail on any fail; pass only when a configured limit was
    exercised and passed and every expected check was exercised; else unknown."""
    by_name = {r.name: r for r in results}
    failed = [r.name for r in results if r.verdict == FAIL]
    if failed:
        return FAIL, [f"failed: {', '.join(failed)}"]
    reasons: list[str] = []
    crashed = [r.name for r in results if r.data.get("crashed")]
    if crashed:
        reasons.append(f"the checker crashed on {', '.join(crashed)}: nothing is proven by them")
    for name in expect_checks or []:
        r = by_name.get(name)
        if r is None:
            reasons.append(f"expected check {name} did not run on this target")
        elif r.verdict != FAIL and r.unjudged_parts():
            for part in r.unjudged_parts():
                why = f" ({part.note})" if part.note else ""
                hint = part.hint or "the load this part needs"
                reasons.append(
                    f"expected check {name}: part '{part.name}' judged nothing{why}; raise {hint}"
                )
        elif r.verdict != PASS or r.exercised is False:
            hint = r.raise_hint or "the load against its limit"
            reasons.append(
                f"expected check {name} was not exercised and passed ({r.verdict}: "
                f"{r.observed}); raise {hint}"
            )
    proven = [r.name for r in results if r.judges_limit and r.verdict == PASS and r.exercised]
    if not proven:
        reasons.append(
            "nothing configured was exercised: no check of a configured limit saw the load "
            "reach its limit and pass"
        )
    if reasons:
        return UNKNOWN, reasons
    return PASS, [f"exercised and passed: {', '.join(proven)}"]


def _incomplete(run: Run, verdict: str, reasons: list[str]) -> tuple[str, list[str]]:
    """A history some writer could not finish (a full disk: `HistoryWriter.marker`) proves
    nothing either way: what was written is judged and shown, the run's verdict is
    `unknown`, and the reasons name the writer, why it stopped and the rows it lost."""
    from harness.history.writer import incomplete_markers

    markers = incomplete_markers(run.run_dir / "history")
    if not markers:
        return verdict, reasons
    lost = [
        f"history incomplete: writer {m['writer']} stopped writing ({m['reason']}); "
        f"{m.get('rows_lost', 'some')} rows lost"
        for m in markers
    ]
    if verdict != UNKNOWN:
        lost.append(f"on the rows that were written the checks say {verdict.upper()}")
    return UNKNOWN, lost + reasons


def build_verdict(
    run: Run, results: list[CheckResult], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta = run.meta
    expect_checks = list(run.expect.get("checks") or [])
    if run.target == "broker":
        # the acceptor-side checks a scenario expects, as the client side can judge them
        expect_checks = broker_expectations(expect_checks)
    verdict, reasons = overall(results, expect_checks) if results else (UNKNOWN, ["no checks ran"])
    verdict, reasons = _incomplete(run, verdict, reasons)
    counts = {v: sum(1 for r in results if r.verdict == v) for v in (PASS, FAIL, UNKNOWN, NA)}
    return {
        "run_id": meta.get("run_id") or run.run_dir.name,
        "run_dir": str(run.run_dir),
        "scenario": meta.get("scenario"),
        "target": run.target,
        "started_at": meta.get("started_at"),
        "ended_at": meta.get("ended_at"),
        "verdict": verdict,
        "reasons": reasons,
        "exercised": [r.name for r in results if r.exercised and r.verdict == PASS],
        "expected_verdict": run.expect.get("verdict"),
        "counts": counts,
        "checks": [r.to_dict() for r in results],
        "config_changes": len(run.timeline.changes),
        **(extra or {}),
    }


def write_atomically(path: Path, text: str) -> Path:
    """Write under a hidden name, then rename: a reader sees the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def clear_outputs(report_dir: Path) -> None:
    """Remove an earlier analysis's outputs before a new one starts: an analysis that is
    interrupted leaves no verdict behind that could be read as its own."""
    for name in REPORT_FILES:
        (report_dir / name).unlink(missing_ok=True)
        (report_dir / f".{name}.tmp").unlink(missing_ok=True)


#: what an analysis writes into report/; verdict.json last (its presence = a finished one)
REPORT_FILES = ("junit.xml", "report.html", "verdict.json")


def write_verdict(report_dir: Path, verdict: dict[str, Any]) -> Path:
    return write_atomically(report_dir / "verdict.json", json.dumps(verdict, indent=2, default=str))


def write_junit(report_dir: Path, verdict: dict[str, Any]) -> Path:
    """One testcase per check: <failure> for fail, <skipped> for unknown and n/a."""
    checks = verdict["checks"]
    c = dict(verdict["counts"])
    c["unknown"] = c.get("unknown", 0) + c.get("n/a", 0)  # both are skipped in JUnit
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
        elif ch["verdict"] in ("unknown", "n/a"):
            lines.append(
                f"      <skipped message={quoteattr(ch['verdict'] + ': ' + ch['observed'][:300])}/>"
            )
            lines.append(f"      <system-out>{escape(body)}</system-out>")
        lines.append("    </testcase>")
    lines += ["  </testsuite>", "</testsuites>", ""]
    return write_atomically(report_dir / "junit.xml", "\n".join(lines))
