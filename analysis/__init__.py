"""The PySpark conformance stage: history → independent model + checks → verdict, report.

`analyze_run(run_dir)` is the Python API the scenario runner calls; `harness analyze`
is the same from the command line. Never imports `base.quota`: the checker carries its
own model (analysis.model), so an enforcer bug cannot certify itself.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
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
    from analysis.report import draw, write_report
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
            _prefetch(report)
            say("starting Spark (local JVM, ~5 s)…")
            spark = build_session(spark_master, small=rows < SMALL_RUN_EVENTS)
            own = True
    try:
        say(f"loading {run_dir}…")
        run = load_run(spark, run_dir)
        # the footers' count (`history_rows`, read above): the rows the history DataFrame
        # holds, without a Spark job to count them again
        n_events = rows
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
            # the report's charts drawn beside the checks (they read the same frames and
            # nothing a check decides): a small run's checks leave the driver idle between
            # their jobs, and the charts' jobs and drawing fill it
            drawing = _beside(draw, run) if report and REPORT_BESIDE else None
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
                    drawn = drawing.result() if drawing is not None else None
                    path = report_dir / "report.html"
                    outputs["html"] = str(write_report(run, verdict, path, drawn))
            except BaseException:  # the tables kept for the run and its views, freed; a
                # failure to free them (a py4j call cut by a signal) never hides the cause
                if drawing is not None:
                    drawing.cancel()
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


#: the report's charts drawn on a thread of their own while the checks run (`draw`), not
#: after them
REPORT_BESIDE = True
#: what an analysis imports on its way, each the first time its step needs it (pandas for
#: the checks' small tables, matplotlib and jinja2 for the report): read while the driver
#: JVM starts, on a thread of their own, instead of in the steps' way
PREFETCH = ("pandas", "pyarrow.parquet")
PREFETCH_REPORT = ("matplotlib.pyplot", "jinja2")


def _prefetch(report: bool) -> None:
    """Import `PREFETCH` (and, when a report is written, `PREFETCH_REPORT`) on a daemon
    thread: the JVM's start is mostly the JVM's own CPU, and on a second core Python's
    imports (about 2 CPU-s for these) then cost the analysis no wall time. An import that
    fails here fails again, and is said, where it is needed."""
    import importlib

    names = PREFETCH + (PREFETCH_REPORT if report else ())

    def load() -> None:
        for name in names:
            with contextlib.suppress(Exception):
                if name == "matplotlib.pyplot":
                    import matplotlib

                    matplotlib.use("Agg")  # as `report.charts` does, before pyplot
                importlib.import_module(name)

    threading.Thread(target=load, name="analysis-prefetch", daemon=True).start()


def _beside(fn: Callable[[Any], Any], arg: Any) -> Future[Any]:
    """``fn(arg)`` on a thread of its own; its result (or its exception) from the future."""
    future: Future[Any] = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(arg))
        except BaseException as exc:  # handed to whoever waits for it
            future.set_exception(exc)

    threading.Thread(target=work, name="analysis-report", daemon=True).start()
    return future


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
