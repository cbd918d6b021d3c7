"""Carry out a selftest plan: each job is a real `harness run SCENARIO` in a process of its own.

A fault is *caught* when its run's verdict is FAIL and the clean run of the same scenario
is not FAIL, or fails fewer checks (a check that fails without any fault proves nothing
about the fault). The kill rate is caught / faults. A clean run that fails is a *false fail*. The
selftest passes (exit 0) only when every fault is caught and no clean run fails.

Two phases: first every run's load (``harness run`` without its analysis; ``--jobs N`` runs
N of them at once, each with its own broker, acceptor and ports), then every run's analysis
(``harness analyze --gate``'s checks) in one Spark session, which saves a JVM start per run
(with ``--jobs`` above 1 the session starts while the loads run); ``harness selftest
--reanalyze DIR`` repeats the second phase on the recorded runs (after the checks changed).

Output: ``<out>/selftest-<UTC stamp>/`` with ``summary.json``, ``index.html`` (a table
linking every run's report), ``runs/<job>/<run>/`` (the run folders) and ``logs/<job>.log``
(each run's console output, then its analysis).
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from base.quota.faults import FAULT_KEY
from harness.runner.noise import NOISE_BESIDE_ENV
from harness.selftest.plan import Job

__all__ = ["JobResult", "Selftest", "summarize"]


@dataclass
class JobResult:
    scenario: str
    fault: str | None
    verdict: str  # pass | fail | unknown | error
    failing: list[str] = field(default_factory=list)
    witness: str = ""
    run_dir: str | None = None
    report: str | None = None
    error: str | None = None
    wall_s: float = 0.0
    analysis_s: float = 0.0


#: runs one job's load and returns its (not yet analysed) result
RunOne = Callable[[Job, Path, Path], JobResult]
#: analyses one recorded run (fills verdict, failing checks, witness, report)
AnalyzeOne = Callable[[JobResult, Any, Path], JobResult]


def first_witness(check: dict[str, Any]) -> str:
    ws = check.get("witnesses") or []
    if ws:
        w = ws[0]
        if isinstance(w, dict):  # the why first; clock values say little in a table
            keys = sorted(w, key=lambda k: (k != "why", k in ("mono_ns", "ts")))
            text = ", ".join(f"{k}={w[k]}" for k in keys if w[k] not in (None, ""))
        else:
            text = str(w)
        return f"{check.get('name')}: {text}"[:300]
    return f"{check.get('name')}: {check.get('observed', '')}"[:300]


def run_job(
    job: Job,
    runs_dir: Path,
    log_path: Path,
    acceptor: Mapping[str, str] | None = None,
    noise: Any = None,
    placement_off: bool = False,
) -> JobResult:
    """One scenario's load against the acceptor with the job's fault (if any), and the
    extra acceptor properties every run of this selftest gets (`acceptor`): ``harness run
    SCENARIO --target acceptor --no-analyze`` in a process of its own (so that several can
    run at once), its console output in `log_path`, its run folder under
    ``runs_dir/<job slug>/``."""
    overrides = dict(acceptor or {})
    if job.fault:
        overrides[FAULT_KEY] = job.fault
    out = runs_dir / job.slug
    argv = [sys.executable, "-m", "harness", "run", job.scenario, "--target", "acceptor"]
    argv += ["--no-analyze", "--out", str(out)]
    if placement_off:
        argv += ["--placement", "off"]
    for key, value in overrides.items():
        argv += ["--set-acceptor", f"{key}={value}"]
    env = None
    if noise:  # the selftest's one noise group runs beside every run: each records it
        env = {**os.environ, NOISE_BESIDE_ENV: str(noise)}
    t0 = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        code = subprocess.run(
            argv, stdout=log, stderr=subprocess.STDOUT, check=False, env=env
        ).returncode
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []
    run_dir = runs[-1] if runs else None
    history = run_dir / "history" / "acceptor" if run_dir else None
    ran = history is not None and history.is_dir() and any(history.glob("*.parquet"))
    error = None
    if code != 0:  # the run's own account of what broke (run.json), else its exit code
        error = _run_error(run_dir) or f"harness run exited {code} (its output: {log_path})"
    elif not ran:
        error = "no acceptor history: nothing ran"
    return JobResult(
        scenario=job.scenario,
        fault=job.fault,
        verdict="recorded" if ran else "error",
        run_dir=str(run_dir) if run_dir else None,
        error=error,
        wall_s=round(time.monotonic() - t0, 1),
    )


def _run_error(run_dir: Path | None) -> str | None:
    from analysis.load import RunDirError, read_run_json

    if run_dir is None:
        return None
    try:
        said = read_run_json(run_dir).get("error")
    except RunDirError:
        return None
    return str(said) if said else None


def analyze_job(res: JobResult, spark: Any, log_path: Path) -> JobResult:
    """`harness analyze RUN --gate`'s checks on a recorded run, in the given Spark session."""
    from analysis import analyze_run

    if res.run_dir is None or res.verdict == "error":
        return res
    t0 = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:

        def say(msg: str) -> None:
            print(f"  | {msg}", file=log, flush=True)

        verdict = analyze_run(Path(res.run_dir), spark=spark, progress=say)
    checks: list[dict[str, Any]] = list(verdict.get("checks", []))
    res.failing = [str(c.get("name")) for c in checks if c.get("verdict") == "fail"]
    res.witness = next((first_witness(c) for c in checks if c.get("verdict") == "fail"), "")
    res.verdict = str(verdict.get("verdict", "unknown"))
    if res.error and res.verdict == "pass":
        res.verdict = "unknown"  # a broken run cannot certify anything (as harness run)
    report = Path(res.run_dir) / "report" / "report.html"
    res.report = str(report) if report.exists() else None
    res.analysis_s = round(time.monotonic() - t0, 1)
    return res


def default_spark() -> Any:
    from analysis.session import build_session

    return build_session(None)


def summarize(results: list[JobResult]) -> dict[str, Any]:
    """Kill table, kill rate, false fails and the overall outcome (a pure function)."""
    clean = {r.scenario: r for r in results if r.fault is None}
    rows: list[dict[str, Any]] = []
    faults: dict[str, bool] = {}
    for r in results:
        if r.fault is None:
            continue
        control = clean.get(r.scenario)
        control_fails = control is not None and control.verdict == "fail"
        new_failures = [c for c in r.failing if control is None or c not in control.failing]
        # a FAIL counts when the clean run passes, or when it adds checks the clean run
        # does not fail (a scenario failing anyway proves nothing about the fault)
        caught = r.verdict == "fail" and (not control_fails or bool(new_failures))
        faults[r.fault] = faults.get(r.fault, False) or caught
        rows.append(
            {
                **asdict(r),
                "caught": caught,
                "new_failures": new_failures,
                "control_verdict": None if control is None else control.verdict,
            }
        )
    false_fails = [r.scenario for r in clean.values() if r.verdict == "fail"]
    unknown_clean = [r.scenario for r in clean.values() if r.verdict in ("unknown", "error")]
    killed = sorted(f for f, c in faults.items() if c)
    survived = [f for f, c in faults.items() if not c]
    return {
        "faults": len(faults),
        "killed": killed,
        "survived": survived,
        "kill_rate": (len(killed) / len(faults)) if faults else 0.0,
        "false_fails": false_fails,
        "clean_not_pass": unknown_clean,
        "rows": rows,
        "clean": [asdict(r) for r in clean.values()],
        "ok": bool(faults) and not survived and not false_fails,
    }


class Selftest:
    """Runs the jobs in order, printing progress, and writes the results as it goes."""

    def __init__(
        self,
        jobs: list[Job],
        out: Path,
        *,
        run_one: RunOne = run_job,
        analyze_one: AnalyzeOne = analyze_job,
        spark: Callable[[], Any] = default_spark,
        say: TextIO | None = None,
        stamp: str | None = None,
        root: Path | None = None,
        acceptor: Mapping[str, str] | None = None,
        at_once: int = 1,
        noise: Any = None,
    ) -> None:
        self.jobs = jobs
        #: `--noise` (harness.runner.noise.NoiseSpec): one group beside all the runs' loads
        self.noise = noise
        #: how many runs' loads go at once (`--jobs`)
        self.at_once = max(1, at_once)
        #: extra acceptor properties of every run (recorded in the summary)
        self.acceptor = dict(acceptor or {})
        stamp = stamp or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.root = root or out / f"selftest-{stamp}"
        self.run_one = run_one
        self.analyze_one = analyze_one
        self.spark = spark
        self.say_to = say or sys.stdout
        self.results: list[JobResult] = []
        self.t0 = time.monotonic()
        self._saying = threading.Lock()

    def say(self, msg: str) -> None:
        line = f"[selftest +{time.monotonic() - self.t0:6.0f}s] {msg}\n"
        with self._saying:  # one whole line at a time (the runs report from their threads)
            self.say_to.write(line)
            self.say_to.flush()

    def run(self) -> dict[str, Any]:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "runs").mkdir(exist_ok=True)
        n = len(self.jobs)
        self.say(
            f"{n} runs ({sum(1 for j in self.jobs if j.fault)} with faults); output in {self.root}"
        )
        if self.acceptor:
            extra = ", ".join(f"{k}={v}" for k, v in self.acceptor.items())
            self.say(f"every run's acceptor also gets: {extra}")
        session: Future[Any] | None = None
        if self.at_once > 1:  # the analysis's Spark session starts while the loads run
            self.say(f"{min(self.at_once, n)} runs at a time; the Spark session starts meanwhile")
            starter = ThreadPoolExecutor(1)
            session = starter.submit(self.spark)
            starter.shutdown(wait=False)
        noise = self._start_noise()
        try:
            self._run_all(n)
        finally:
            if noise is not None:
                noise.stop()
                self.say("noise stopped (the analysis runs without it)")
        return self.analyze(session)

    def _start_noise(self) -> Any:
        """One noise group for the whole selftest's loads (not one per run: with `--jobs 2`
        that would double the neighbours asked for); each run records it (run.json)."""
        if not self.noise:
            return None
        from harness.runner.noise import Noise

        noise = Noise(self.noise, self.root / ".noise", 6 * 3600.0, self.root / "logs/noise.log")
        noise.start()
        self.say(f"noise: {self.noise} beside every run's load (log {noise.log_path})")
        return noise

    def _run_all(self, n: int) -> None:
        done: dict[int, JobResult] = {}
        with ThreadPoolExecutor(self.at_once) as pool:
            futures: list[Future[JobResult]] = []
            for i, job in enumerate(self.jobs, 1):
                futures.append(pool.submit(self._run_one, i, job))
            try:
                for i, fut in enumerate(futures, 1):
                    done[i] = fut.result()
                    self.results = [done[k] for k in sorted(done)]
                    self.write()
            except KeyboardInterrupt:  # the runs got the same Ctrl-C: each stops cleanly
                self.say("interrupted: writing what ran so far")
                for fut in futures:
                    fut.cancel()
                pool.shutdown(wait=True)
                for i, fut in enumerate(futures, 1):
                    if i not in done and fut.done() and not fut.cancelled():
                        done[i] = fut.result()
                self.results = [done[k] for k in sorted(done)]
                self.write()

    def _run_one(self, i: int, job: Job) -> JobResult:
        n = len(self.jobs)
        log = self.root / "logs" / f"{job.slug}.log"
        self.say(f"[{i}/{n}] {job.label}: running (log {log})")
        try:
            res = self.run_one(job, self.root / "runs", log)
        except Exception as exc:  # one broken run must not lose the others
            res = JobResult(job.scenario, job.fault, "error", error=f"{type(exc).__name__}: {exc}")
        self.say(f"[{i}/{n}] {job.label}: {res.verdict} in {res.wall_s:.0f}s")
        return res

    @classmethod
    def reanalyze(cls, root: Path, **kw: Any) -> Selftest:
        """A selftest over the runs recorded in ``root`` (its summary.json), to analyse again."""
        data = json.loads((root / "summary.json").read_text(encoding="utf-8"))
        jobs = [Job(j["scenario"], j["fault"]) for j in data["planned"]]
        st = cls(jobs, root.parent, root=root, **kw)
        fields = JobResult.__dataclass_fields__
        for row in [*data["rows"], *data["clean"]]:
            st.results.append(JobResult(**{k: v for k, v in row.items() if k in fields}))
        order = {(j.scenario, j.fault): i for i, j in enumerate(jobs)}
        st.results.sort(key=lambda r: order.get((r.scenario, r.fault), len(order)))
        return st

    def analyze(self, session: Future[Any] | None = None) -> dict[str, Any]:
        """Phase 2: every recorded run's checks, in one Spark session (`session`, when it
        was started during the loads)."""
        todo = [r for r in self.results if r.run_dir and r.verdict != "error"]
        if not todo and session is None:
            return self.write()
        if todo:
            starting = session is None or not session.done()
            self.say(
                f"analysing {len(todo)} runs in one Spark session"
                + (" (starting it)" if starting else "")
            )
        spark = self.spark() if session is None else session.result()
        try:
            for i, res in enumerate(todo, 1):
                label = f"{res.fault or 'clean'} @ {res.scenario}"
                log = self.root / "logs" / f"{res.fault or 'clean'}--{res.scenario}.log"
                try:
                    self.analyze_one(res, spark, log)
                except KeyboardInterrupt:
                    self.say("interrupted: writing what was analysed so far")
                    break
                except Exception as exc:  # one bad analysis must not lose the others
                    res.verdict = "unknown"
                    res.error = f"analysis failed: {type(exc).__name__}: {exc}"
                self.say(f"analysed [{i}/{len(todo)}] {label}: {self._brief(res)}")
                self.write()
        finally:
            stop = getattr(spark, "stop", None)
            if stop is not None:
                stop()
        return self.write()

    def _brief(self, r: JobResult) -> str:
        text = f"{r.verdict.upper()} (run {r.wall_s:.0f}s, analysis {r.analysis_s:.0f}s)"
        if r.fault is not None:
            text += " -> CAUGHT" if r.verdict == "fail" else " -> survived"
        elif r.verdict == "fail":
            text += " -> FALSE FAIL"
        if r.failing:
            text += f"; failing: {', '.join(r.failing)}"
        if r.error:
            text += f"; error: {r.error}"
        return text

    def write(self) -> dict[str, Any]:
        summary = summarize(self.results)
        summary["planned"] = [asdict(j) for j in self.jobs]
        summary["acceptor_properties"] = self.acceptor
        summary["noise"] = str(self.noise) if self.noise else None
        summary["wall_s"] = round(time.monotonic() - self.t0, 1)
        summary["root"] = str(self.root)
        tmp = self.root / ".summary.json"
        tmp.write_text(json.dumps(summary, indent=2), encoding="utf-8")
        os.replace(tmp, self.root / "summary.json")
        (self.root / "index.html").write_text(render_html(summary, self.root), encoding="utf-8")
        (self.root / "summary.md").write_text(render_markdown(summary), encoding="utf-8")
        return summary


def render_markdown(summary: dict[str, Any]) -> str:
    """The kill table as Markdown (for docs/selftest.md)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [
        "| fault | scenario | verdict | caught | failing checks | first witness |",
        "|---|---|---|---|---|---|",
    ]
    for r in summary["rows"]:
        lines.append(
            f"| `{r['fault']}` | {r['scenario']} | {r['verdict']} | "
            f"{'yes' if r['caught'] else '**no**'} | {cell(', '.join(r['failing']))} | "
            f"{cell(r['witness'][:160])} |"
        )
    lines += ["", "| clean run | verdict | failing checks |", "|---|---|---|"]
    for r in summary["clean"]:
        lines.append(f"| {r['scenario']} | {r['verdict']} | {cell(', '.join(r['failing']))} |")
    lines += [
        "",
        f"Kill rate {len(summary['killed'])}/{summary['faults']} ({summary['kill_rate']:.0%}); "
        f"survivors: {', '.join(summary['survived']) or 'none'}; false fails: "
        f"{', '.join(summary['false_fails']) or 'none'}; "
        f"wall time {summary.get('wall_s', 0):.0f} s.",
    ]
    return "\n".join(lines) + "\n"


def _link(path: str | None, root: Path, text: str) -> str:
    if not path:
        return html.escape(text)
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        rel = path
    return f'<a href="{html.escape(rel)}">{html.escape(text)}</a>'


def _run_link(r: dict[str, Any], root: Path) -> str:
    return _link(r["report"] or r["run_dir"], root, "report" if r["report"] else "run")


def render_html(summary: dict[str, Any], root: Path) -> str:
    e = html.escape
    rows = []
    for r in summary["rows"]:
        status = "caught" if r["caught"] else "SURVIVED"
        rows.append(
            f"<tr class='{'ok' if r['caught'] else 'bad'}'><td>{e(r['fault'])}</td>"
            f"<td>{e(r['scenario'])}</td><td>{e(r['verdict'])}</td><td>{status}</td>"
            f"<td>{e(', '.join(r['failing']))}</td><td>{e(r['witness'])}</td>"
            f"<td>{_run_link(r, root)}</td></tr>"
        )
    clean = []
    for r in summary["clean"]:
        bad = r["verdict"] == "fail"
        clean.append(
            f"<tr class='{'bad' if bad else 'ok'}'><td>{e(r['scenario'])}</td>"
            f"<td>{e(r['verdict'])}{' (FALSE FAIL)' if bad else ''}</td>"
            f"<td>{e(', '.join(r['failing']))}</td><td>{e(r['witness'])}</td>"
            f"<td>{_run_link(r, root)}</td></tr>"
        )
    verdict = "PASS" if summary["ok"] else "FAIL"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>harness selftest {e(verdict)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top;font-size:90%}}
tr.bad{{background:#fdd}}tr.ok{{background:#efe}}</style></head><body>
<h1>harness selftest: {e(verdict)}</h1>
<p>Kill rate {len(summary["killed"])}/{summary["faults"]} ({summary["kill_rate"]:.0%}),
false fails {len(summary["false_fails"])}, wall time {summary["wall_s"]:.0f} s.
Survivors: {e(", ".join(summary["survived"]) or "none")}.</p>
<h2>Seeded faults (acceptor started with {e(FAULT_KEY)}=&lt;fault&gt;)</h2>
<table><tr><th>fault</th><th>scenario</th><th>verdict</th><th></th><th>failing checks</th>
<th>first witness</th><th>run</th></tr>
{"".join(rows)}</table>
<h2>Clean runs (no fault)</h2>
<table><tr><th>scenario</th><th>verdict</th><th>failing checks</th><th>first witness</th>
<th>run</th></tr>{"".join(clean)}</table>
</body></html>
"""
