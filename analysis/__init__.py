"""The PySpark conformance stage: history → independent model + checks → verdict, report.

`analyze_run(run_dir)` is the Python API the scenario runner calls; `harness analyze`
is the same from the command line. Never imports `harness.quota`: the checker carries its
own model (analysis.model), so an enforcer bug cannot certify itself.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["analyze_run"]


def analyze_run(
    run_dir: str | Path,
    spark: SparkSession | None = None,
    spark_master: str | None = None,
    progress: Callable[[str], None] | None = None,
    report: bool = True,
) -> dict[str, Any]:
    """Check one run; writes report/junit.xml, report.html and, last, verdict.json (each
    atomically; an earlier analysis's outputs are removed first, so an interrupted one
    leaves no verdict); returns the verdict."""
    import time

    from analysis.load import history_rows, load_run
    from analysis.session import SMALL_RUN_EVENTS, build_session, ensure_open_files, sized_for
    from analysis.verdict import (
        build_verdict,
        clear_outputs,
        run_checks,
        write_junit,
        write_verdict,
    )

    say = progress or (lambda _msg: None)
    t_start = time.monotonic()
    report_dir = Path(run_dir) / "report"
    # every history file's footer first (RunDirError naming a damaged one), before any
    # output is touched or a JVM started
    rows = history_rows(Path(run_dir)) if (Path(run_dir) / "history").is_dir() else 0
    clear_outputs(report_dir)
    own = False
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:  # ours to stop; an active session belongs to the caller
            ensure_open_files()  # a clear error instead of a JVM that cannot start
            say("starting Spark (local JVM, ~10 s)…")
            spark = build_session(spark_master, small=rows < SMALL_RUN_EVENTS)
            own = True
    try:
        say(f"loading {run_dir}…")
        run = load_run(spark, run_dir)
        n_events = run.history.count()
        say(
            f"{n_events} events in {len(run.files)} files; target {run.target}; "
            f"{len(run.timeline.changes)} config change(s)"
        )
        moves: dict[tuple[float, float | None], int] = {}
        for a in run.aligned:  # one line per writer (its files share one shift)
            key = (a["shift_ms"], a["error_ms"])
            moves[key] = moves.get(key, 0) + 1
        for (shift, error), files in moves.items():
            bound = "unmeasured" if error is None else f"± {error:.3f} ms"
            say(
                f"clock: {files} file(s) written on another machine moved {shift:+.3f} ms ({bound})"
            )
        with sized_for(spark, n_events):
            try:
                say("checks…")
                results = run_checks(run, progress=say)
                verdict = build_verdict(run, results, {"events": n_events})
                if run.aligned:
                    verdict["clock_alignment"] = run.aligned
                outputs = {
                    "verdict": str(report_dir / "verdict.json"),  # written last, below
                    "junit": str(write_junit(report_dir, verdict)),
                }
                if report:
                    say("report…")
                    from analysis.report import write_report

                    outputs["html"] = str(write_report(run, verdict, report_dir / "report.html"))
            except BaseException:  # the tables kept for the run and its views, freed; a
                # failure to free them (a py4j call cut by a signal) never hides the cause
                with contextlib.suppress(Exception):
                    run.release()
                raise
            run.release()
        verdict["outputs"] = outputs
        verdict["analysis_seconds"] = round(time.monotonic() - t_start, 2)
        write_verdict(report_dir, verdict)
        return verdict
    finally:
        if own:
            _stop(spark, raising=sys.exc_info()[0] is not None)


def _stop(spark: SparkSession, *, raising: bool) -> None:
    """Stop the session this analysis started. When the analysis is already ending on an
    exception, a failure to stop is not reported over it: a signal can land inside a py4j
    call and leave its connection holding that call's answer, so `stop` fails then, and the
    JVM ends with this process anyway (Spark's gateway exits when its stdin, a pipe from
    this process, closes)."""
    if not raising:
        spark.stop()
        return
    with contextlib.suppress(Exception):
        spark.stop()
