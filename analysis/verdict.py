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

import itertools
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from analysis.checks import ALL_CHECKS, FAIL, NA, PASS, UNKNOWN, Check, CheckResult, run_check
from analysis.checks.base import MAX_WITNESSES, not_applicable
from analysis.checks.broker_side import broker_expectations
from analysis.checks.front import NAME as FRONT
from analysis.checks.kafka_metrics import CAUSE_NO_METRICS, CAUSE_NO_SCRAPE_PAIR, METRICS_HINT
from analysis.frames import build as build_frames
from base.history.rows import HarnessFaultEnd, HarnessFaultStart, HarnessPhaseEnd

if TYPE_CHECKING:
    from analysis.load import Run

EXIT_CODES = {"pass": 0, "fail": 1, "unknown": 2, "n/a": 2}


def applicable(check: Check, run: Run) -> bool:
    target = "acceptor" if run.has_source("acceptor") else "broker"
    return target in check.targets


#: judged on the whole run even across an acceptor restart: what the load offered and how
#: the steady clients fared do not depend on which acceptor process answered
WHOLE_RUN = frozenset({"offered_load", "steady_fairness"})
#: checks judged at once. Each is a pure function of the run, and a small run's analysis
#: is mostly per-job latency (planning, code generation, scheduling) that a second thread
#: overlaps: a 5,392-event run's checks took 11.0 s one at a time, 8.2 s two at a time, no
#: less with three to six threads on 2 cores. The derived tables they share are built once
#: (`Run.cached` locks each key).
CHECK_THREADS = 2
OUTAGE = "front_outage"


def run_checks(
    run: Run, checks: list[Check] | None = None, progress: Callable[[str], None] | None = None
) -> list[CheckResult]:
    """Every applicable check on the run; a run whose acceptor was killed and restarted is
    judged through each of its processes (`across_restarts`)."""
    fronts = sorted(run.fronts()) if run.has_source("acceptor") else []
    # a front's own processes are found in its view (`across_fronts`)
    incarnations = run.incarnations() if run.has_source("acceptor") and not fronts else []
    if len(fronts) > 1:
        results = across_fronts(run, fronts, checks, progress)
    elif len(incarnations) > 1:
        results = across_restarts(run, incarnations, checks, progress)
    else:
        results = _judge(run, checks, progress)
    results = saturated(_unpushed(results))
    if checks is not None:
        return results
    outages = [_killed_loads(run), _disk_full(run)]
    return [*results, *(r for r in outages if r is not None)]


def _disk_full(run: Run) -> CheckResult | None:
    """A broker whose log directory filled (`broker_disk_full`): what Kafka said and did.
    Kafka fails the write and, with every log directory failed, stops itself; the runner
    frees the room and restarts it. The window is judged by no check."""
    rows = (
        run.events("fault_start", "fault_end", source="harness")
        .where("reason = 'broker_disk_full'")
        .select("event", "mono_ns", "detail")
        .orderBy("mono_ns")
        .collect()
    )
    if not rows:
        return None
    t0 = run.scenario_t0_ns()
    windows = []
    start: int | None = None
    for r in rows:
        if r["event"] == "fault_start":
            start = int(r["mono_ns"])
            continue
        d = HarnessFaultEnd.parse(r["detail"])
        lo = (start if start is not None else int(r["mono_ns"])) - t0
        code = d.get("broker_exit_code")
        did = (
            f"Kafka stopped (exit {code}) and was restarted in {d.get('restart_s')} s"
            if code is not None
            else "Kafka kept running"
        )
        said = d.get("broker_said") or "no log line about it"
        windows.append(
            f"broker log directory full {lo / 1e9:.1f}–{(int(r['mono_ns']) - t0) / 1e9:.1f} s "
            f"({d.get('ballast_bytes', 0) // 2**20} MB of ballast): {did}; it said: {said}"
        )
    return CheckResult(
        "broker_log_dir_full",
        UNKNOWN,
        observed="; ".join(windows),
        expected="a broker with room in its log directory",
        explanation=(
            "a broker whose log directory is full fails its writes and, every log directory "
            "failed, stops: the window is judged by no check"
        ),
        family="faults",
        data={"outage": windows},
    )


def _killed_loads(run: Run) -> CheckResult | None:
    """Load phases killed (`load_kill`): what each recorded is judged; from its last
    recorded arrival (its `phase_end`) to its death, its rows died unflushed with it, and
    that window is judged by no check (the enforcer's connections of its addresses there
    are explained as after the load, `client_acceptor_agreement`)."""
    rows = (
        run.events("fault_start", "phase_end", source="harness")
        .select("event", "mono_ns", "reason", "detail")
        .orderBy("mono_ns")
        .collect()
    )
    kills = {
        HarnessFaultStart.parse(r["detail"]).get("phase"): int(r["mono_ns"])
        for r in rows
        if r["event"] == "fault_start" and r["reason"] == "load_kill"
    }
    if not kills:
        return None
    t0 = run.scenario_t0_ns()
    windows = []
    for r in rows:
        d = HarnessPhaseEnd.parse(r["detail"])
        if r["event"] == "phase_end" and d.get("killed") and d.get("name") in kills:
            end, died = int(r["mono_ns"]), kills[d["name"]]
            windows.append(
                f"phase {d['name']} (pid {d.get('pid')}): killed at {(died - t0) / 1e9:.1f} s, "
                f"its history ends at {(min(end, died) - t0) / 1e9:.1f} s (its last flush)"
            )
    return CheckResult(
        "load_outage",
        UNKNOWN,
        observed="; ".join(windows) or "a load_kill fault found no phase to kill",
        expected="every load process writes its history to the end of its phase",
        explanation=(
            "a killed load process's last rows died with it: its connections in that "
            "window are judged by no check (never a fail, never a silent pass)"
        ),
        family="faults",
        data={"outage": windows},
    )


def _split(checks: list[Check] | None, whole: frozenset[str]) -> tuple[list[Check], list[Check]]:
    """The checks judged per view (a process, a front) and those judged on the whole run."""
    chosen = checks if checks is not None else ALL_CHECKS
    return [c for c in chosen if c.name not in whole], [c for c in chosen if c.name in whole]


def across_restarts(
    run: Run,
    incarnations: list[Any],
    checks: list[Check] | None,
    progress: Callable[[str], None] | None,
) -> list[CheckResult]:
    """A killed acceptor's meters, counts and unflushed rows die with it, and the restarted
    one starts afresh (with the dynamic quotas its state file kept): each check is judged on
    each process's own history and the client rows of its time (`Run.during`), the results
    merged (fail > unknown > pass; a process with nothing to judge adds nothing). The window
    without a front (the killed one's last row to the restarted one's readiness) is judged
    by no check: a `front_outage` result says so, `unknown`, and the run's verdict with it.
    A front stopped with its broker (a fronted cluster's `broker_kill`) is judged the same
    way per process, but its window adds no `front_outage`: its history is whole, and while
    its node was down the kernel refused its clients, as a dead Kafka broker's listener
    does (`accounting` counts each attempt of that window)."""
    per_view, whole = _split(checks, WHOLE_RUN)
    views: list[list[CheckResult]] = []
    for inc in incarnations:
        if progress:
            progress(f"  acceptor process {inc.index + 1} of {len(incarnations)} (pid {inc.pid})")
        views.append(_judge(run.during(inc), per_view, progress))
    merged = [_merge_views(incarnations, [v[i] for v in views]) for i in range(len(views[0]))]
    outage = _outage(run, incarnations)
    return [*merged, *_judge(run, whole, progress), *([outage] if outage else [])]


def across_fronts(
    run: Run,
    nodes: list[int],
    checks: list[Check] | None,
    progress: Callable[[str], None] | None,
) -> list[CheckResult]:
    """A cluster fronted by one acceptor per broker: each front enforces its own broker's
    limits with its own meters and counts, as every Kafka broker does, so each check is
    judged on each front's own history and the client attempts that reached its broker
    (`Run.front`), the results merged per broker (fail > unknown > pass; every witness
    naming its broker; a `per_broker` table in verdict.json and the report). What the load
    offered and how the steady clients fared are the whole run's."""
    from analysis.checks.broker_side import merge_brokers

    # the front's own saturation is judged per process already (each names its pid)
    per_view, whole = _split(checks, WHOLE_RUN | {FRONT})
    by_name: dict[str, list[tuple[int, CheckResult]]] = {}
    for node in nodes:
        if progress:
            progress(f"  the acceptor of broker {node}")
        view = run.front(node)
        lives = view.incarnations()
        if len(lives) > 1:  # this front was killed and restarted: judged per process
            results = across_restarts(view, lives, per_view, progress)
        else:
            results = _judge(view, per_view, progress)
        for r in results:  # a front that was killed adds its `front_outage`
            by_name.setdefault(r.name, []).append((node, r))
    merged = [merge_brokers(views, 0, 0) for views in by_name.values()]
    return [*merged, *_judge(run, whole, progress)]


def _merge_views(incarnations: list[Any], results: list[CheckResult]) -> CheckResult:
    from analysis.checks.base import adds_nothing, merge, merge_parts

    judged_here = [r for r in results if not adds_nothing(r)]
    verdicts = [r.verdict for r in (judged_here or results)]
    verdict = NA if all(v == NA for v in verdicts) else merge(v for v in verdicts if v != NA)
    first = results[0]
    ratios = [(r.peak / r.limit, r) for r in results if r.peak is not None and r.limit]
    worst = max(ratios, key=lambda t: t[0])[1] if ratios else first
    return CheckResult(
        first.name,
        verdict,
        observed="; ".join(
            f"acceptor process {inc.index + 1} (pid {inc.pid}): {r.observed}"
            for inc, r in zip(incarnations, results, strict=True)
        ),
        expected=first.expected,
        tolerance=first.tolerance,
        witnesses=[
            {"acceptor_pid": inc.pid, **w}
            for inc, r in zip(incarnations, results, strict=True)
            for w in r.witnesses
        ][:10],
        explanation="judged on each acceptor process's own history (the acceptor was "
        + ("killed" if any(inc.crashed for inc in incarnations) else "stopped with its broker")
        + " and restarted). "
        + first.explanation,
        family=first.family,
        needs_load=first.needs_load,
        judged=sum(r.judged for r in results),
        exercised=any(r.exercised for r in results)
        if any(r.exercised is not None for r in results)
        else None,
        peak=worst.peak,
        limit=worst.limit,
        raise_hint=first.raise_hint,
        judges_limit=first.judges_limit,
        parts=merge_parts(results),
        data={
            **({"crashed": True} if any(r.data.get("crashed") for r in results) else {}),
            # no process reached the limit: the merged view adds nothing to other fronts'
            **(
                {"not_exercised": True}
                if not judged_here and any(r.data.get("not_exercised") for r in results)
                else {}
            ),
        },
    )


def _outage(run: Run, incarnations: list[Any]) -> CheckResult | None:
    """The windows without a front: from a killed acceptor's last written row to the
    restarted one's readiness (the runner's `fault_end`), with what the clients tried;
    None when no process was killed (each stopped with its broker)."""
    from pyspark.sql import functions as F

    from analysis.load import fault_instants

    ends = fault_instants(run, "fault_end", "acceptor_kill")
    t0 = run.scenario_t0_ns()
    windows = []
    for inc, nxt in itertools.pairwise(incarnations):
        if not inc.crashed:
            continue
        back = next((e for e in ends if e >= inc.last_ns), nxt.first_ns)
        tried = (
            run.events("connect_invoke", source="client")
            .where((F.col("mono_ns") > inc.last_ns) & (F.col("mono_ns") <= back))
            .count()
        )
        windows.append(
            f"{(inc.last_ns - t0) / 1e9:.1f}–{(back - t0) / 1e9:.1f} s (acceptor pid {inc.pid} "
            f"killed; its history ends at its last flush; {tried} client attempts started "
            "in the window)"
        )
    if not windows:
        return None
    return CheckResult(
        OUTAGE,
        UNKNOWN,
        observed="no front in " + "; ".join(windows),
        expected="a front answering for the whole run",
        explanation=(
            "while no acceptor ran, nothing was enforced and nothing recorded: every check is "
            "judged on each acceptor process's own time, and this window on none (never a "
            "fail, never a silent pass)"
        ),
        family="faults",
        data={"outage": windows},
    )


def _judge(
    run: Run, checks: list[Check] | None = None, progress: Callable[[str], None] | None = None
) -> list[CheckResult]:
    # Without an acceptor, everything is judged from the client rows; none means nothing
    # to judge (say so, never hand the checks an empty history to trip over).
    blind = not run.has_source("acceptor") and not run.has_source("client")
    chosen = [c for c in (checks if checks is not None else ALL_CHECKS) if applicable(c, run)]
    # a limit configured at no time of the run: n/a before any Spark job
    decided = {c.name: _blind(c) if blind else not_applicable(c, run) for c in chosen}
    to_run = [c for c in chosen if decided[c.name] is None]
    frames = {f for c in to_run for f in c.frames}
    for name, seconds, error in build_frames(run, frames, CHECK_THREADS):
        if progress:
            failed = f": not built ({error}), left to its checks" if error else ""
            progress(f"  [frame] {name:<34} ({seconds:.1f}s){failed}")

    def judge(check: Check) -> tuple[CheckResult, float]:
        t = time.monotonic()
        result = decided[check.name] or run_check(check, run)
        return result, time.monotonic() - t

    results: list[CheckResult] = []
    pool = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="check")
    try:
        for result, seconds in pool.map(judge, chosen):  # in the catalog's order
            if progress:
                progress(f"  {result.name:<34} {result.verdict:<8} ({seconds:.1f}s)")
            results.append(result)
    finally:  # interrupted: what has not started never does (the JVM is stopped next)
        pool.shutdown(wait=False, cancel_futures=True)
    return results


def _blind(check: Check) -> CheckResult:
    return CheckResult(
        check.name,
        UNKNOWN,
        observed="no client rows (and no acceptor rows): no connection was recorded",
        expected="a client history (target broker is judged from the client side)",
        explanation="nothing to judge: did the load start? see locust/ in the run folder",
        family=check.family,
        needs_load=check.needs_load,
        judges_limit=check.judges_limit,
    )


#: why an expected check was not exercised and passed (`CheckResult.data["cause"]`, set by
#: the check or here), each with its own fix (`hint_for`); none of these: not enough load
CAUSE_GENERATOR_SHORT = "generator_short"
CAUSE_FRONT_SATURATED = "front_saturated"
#: how a metrics check without scrapes says so (`kafka_metrics._no_scrapes`, accounting)
NO_METRICS_WORDS = (
    "no kafka_metrics rows",
    "no successful scrape of Kafka's metrics",
    "no scrape of Kafka's metrics",
)


def _generator_short(results: list[CheckResult]) -> CheckResult | None:
    return next((r for r in results if r.name == "offered_load" and r.data.get("short")), None)


def hint_for(r: CheckResult, results: list[CheckResult], load_hint: str = "") -> str:
    """What to do about an expected check that judged nothing, chosen by the cause: no
    metrics endpoint, no scrape pair around what it judges, a saturated observer (the
    generator fell short, the front was saturated), or else not enough load (``raise``
    ``load_hint``, else the check's own `raise_hint`)."""
    cause = r.data.get("cause")
    if cause is None and any(words in r.observed for words in NO_METRICS_WORDS):
        cause = CAUSE_NO_METRICS  # a cluster's per-broker merge keeps the words, not the data
    short = _generator_short(results)
    if cause is None and short is not None and (r.needs_load or r is short):
        cause = CAUSE_GENERATOR_SHORT
    if cause == CAUSE_NO_METRICS:
        return METRICS_HINT
    if cause == CAUSE_NO_SCRAPE_PAIR:
        return (
            "get scrapes of Kafka's metrics before and after the connections it judges (every "
            "second while the load runs: a longer run, or an exporter that answers throughout)"
        )
    if cause == CAUSE_GENERATOR_SHORT:
        why = f" ({short.observed})" if short is not None else ""
        return (
            f"give the load generator room: it fell short of the intended load{why}; run it "
            "with fewer other processes on the machine, or lower the scenario's rate"
        )
    if cause == CAUSE_FRONT_SATURATED:
        return (
            f"give the acceptor room: {r.data.get('saturated') or 'it was saturated'}; run it "
            "with fewer other processes on the machine, or acceptor.process.model=split"
        )
    return f"raise {load_hint or r.raise_hint or 'the load against its limit'}"


def _unpushed(results: list[CheckResult]) -> list[CheckResult]:
    """A check that needs the load and would pass is `unknown` when the generator fell
    short of its intended load: a limit that was not pushed proves nothing."""
    short = _generator_short(results)
    if short is not None:
        short.data.setdefault("cause", CAUSE_GENERATOR_SHORT)
        for r in results:
            if r.needs_load and r.verdict == PASS:
                r.data.setdefault("cause", CAUSE_GENERATOR_SHORT)
                r.verdict = UNKNOWN
                r.explanation = (
                    f"would pass, but the offered load fell short ({short.observed}); "
                    f"a limit that was not pushed proves nothing. {r.explanation}"
                )
    return results


def saturated(results: list[CheckResult]) -> list[CheckResult]:
    """A failure about the front's pace is not a rule's: a check that fails only where the
    front was saturated (`front_saturation`: every witness, all of them listed, inside its
    windows) is `unknown`, naming them. One with a witness outside them, or too many to
    place, still fails."""
    front = next((r for r in results if r.name == FRONT and r.data.get("windows_ns")), None)
    if front is None:
        return results
    spans = [(int(lo), int(hi)) for lo, hi in front.data["windows_ns"]]

    def inside(w: dict[str, Any]) -> bool:
        t = w.get("mono_ns")
        return isinstance(t, int) and any(lo <= t < hi for lo, hi in spans)

    for r in results:
        if r.verdict != FAIL or r is front:
            continue
        if r.witnesses and len(r.witnesses) < MAX_WITNESSES and all(map(inside, r.witnesses)):
            r.data.setdefault("cause", CAUSE_FRONT_SATURATED)
            r.data.setdefault("saturated", f"the front was saturated ({front.observed})")
            r.verdict = UNKNOWN
            r.explanation = (
                f"every witness falls where the front was saturated ({front.observed}): "
                f"about its pace, not a rule. {r.explanation}"
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
    reasons: list[str] = [
        f"judged by no check: {w}" for r in results for w in r.data.get("outage", [])
    ]
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
                hint = hint_for(r, results, part.hint or "the load this part needs")
                reasons.append(
                    f"expected check {name}: part '{part.name}' judged nothing{why}; {hint}"
                )
        elif r.verdict != PASS or r.exercised is False:
            reasons.append(
                f"expected check {name} was not exercised and passed ({r.verdict}: "
                f"{r.observed}); {hint_for(r, results)}"
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
    from base.history.writer import incomplete_markers

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


def _static_differs(meta: dict[str, Any]) -> list[str]:
    """An existing cluster keeps its own static settings and the checks judge by the
    scenario's: each that differs (run.json ``cluster_listeners.static``), said."""
    static = (meta.get("cluster_listeners") or {}).get("static") or {}
    differ = {k: d for k, d in static.items() if isinstance(d, dict) and not d.get("same")}
    return [
        f"the cluster's static {k} is {d.get('cluster')}, the scenario's {d.get('scenario')}: "
        "judged by the scenario's (set one to the other)"
        for k, d in sorted(differ.items())
    ]


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
    reasons += _static_differs(meta)
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
        # neighbours made on purpose (`--noise`): the conditions the verdict holds under
        "noise": meta.get("noise"),
        "placement": meta.get("placement"),
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
