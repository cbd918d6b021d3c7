"""Check a run's history against the quota model: `harness analyze RUN_DIR [--gate]`.

Prints progress, a summary table and where the outputs are (report/verdict.json,
report/junit.xml, report/report.html). Ctrl-C or SIGTERM stops the analysis and its Spark
session and leaves no verdict (exit 130 / 143). Exit 0; with --gate 0/1/2 for pass/fail/unknown:
0 only when no check failed and a configured limit was exercised and passed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path


class Interrupted(BaseException):
    """SIGTERM during the analysis (Ctrl-C is KeyboardInterrupt); a BaseException, as
    KeyboardInterrupt, so that no `except Exception` on the way (a check that crashed is
    `unknown`, py4j's own retries) can swallow it."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="runs/<run-id>/ (holds history/)")
    parser.add_argument(
        "--gate", action="store_true", help="exit 0/1/2 for pass/fail/unknown (CI gate)"
    )
    parser.add_argument(
        "--spark-master", default=None, help="Spark master URL (default SPARK_MASTER or local[*])"
    )
    parser.add_argument("--quiet", action="store_true", help="only the verdict line")
    parser.add_argument("--no-html", action="store_true", help="skip report.html (faster)")


def summary_table(verdict: dict) -> str:  # type: ignore[type-arg]
    """Judged checks first; n/a checks (rule not configured) apart, below."""
    checks = verdict["checks"]
    judged = [c for c in checks if c["verdict"] != "n/a"]
    na = [c for c in checks if c["verdict"] == "n/a"]
    width = max((len(c["name"]) for c in checks), default=10)
    lines = [f"{'VERDICT':<8} {'CHECK':<{width}}  {'JUDGED':>7}  OBSERVED"]
    for c in judged:
        obs = c["observed"]
        obs = obs if len(obs) <= 110 else obs[:107] + "..."
        mark = "*" if c.get("exercised") and c["verdict"] == "pass" else " "
        lines.append(
            f"{c['verdict'].upper():<8} {c['name']:<{width}}  {c.get('judged', 0):>7}{mark} {obs}"
        )
    if na:
        lines.append("")
        lines.append("n/a (not configured in this run, not counted):")
        lines.append("  " + ", ".join(c["name"] for c in na))
    lines.append("(* = a configured limit the load reached, judged and passed)")
    for reason in verdict.get("reasons") or []:
        lines.append(f"why {verdict['verdict'].upper()}: {reason}")
    return "\n".join(lines)


def _argv(args: argparse.Namespace) -> list[str]:
    """`args` as `harness analyze` arguments again (for the analysis server)."""
    flags = [("--gate", args.gate), ("--quiet", args.quiet), ("--no-html", args.no_html)]
    return [args.run_dir, *(flag for flag, on in flags if on)]


def _server_for(args: argparse.Namespace) -> Path | None:
    """The analysis server's socket when one should judge this run (`analysis.server`):
    one is named, no Spark master is, this process has no session of its own, and the
    history is a small run's."""
    from analysis.remote import socket_path

    path = socket_path()
    if path is None or args.spark_master or os.environ.get("SPARK_MASTER"):
        return None
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        return None
    from analysis.load import RunDirError, history_rows
    from analysis.session import SMALL_RUN_EVENTS

    history = Path(args.run_dir) / "history"
    try:
        rows = history_rows(Path(args.run_dir)) if history.is_dir() else 0
    except RunDirError:
        return None  # said here, by the analysis itself
    return path if rows < SMALL_RUN_EVENTS else None


def run(args: argparse.Namespace) -> int:
    from analysis import analyze_run
    from analysis.load import RunDirError
    from analysis.session import EnvironmentProblem, end_jvm

    run_dir = Path(args.run_dir)

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    #: the signal that ends this analysis, once one came: whatever exception then reaches
    #: here is the interruption's (a signal inside a py4j call breaks that connection, and
    #: PySpark's own clean-up on the way out fails with a py4j error that replaces it)
    received: list[str] = []

    def interrupted(signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
        received.append(signal.Signals(signum).name)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(received[0])

    previous = {
        sig: signal.signal(sig, interrupted)
        for sig in (signal.SIGTERM, signal.SIGINT)
        if signal.getsignal(sig) is not signal.SIG_IGN  # as started, e.g. a background job
    }
    try:
        server = _server_for(args)
        if server is not None:
            from analysis.remote import analyze_remotely

            status = analyze_remotely(server, _argv(args))
            if status is not None:
                return status
        verdict = analyze_run(
            run_dir, spark_master=args.spark_master, progress=say, report=not args.no_html
        )
    except BaseException as exc:
        if not received:  # the handler above raised every Interrupted and KeyboardInterrupt
            if isinstance(exc, RunDirError | EnvironmentProblem):
                print(f"harness analyze: {exc}", file=sys.stderr)
                return 2
            raise
        # analyze_run stopped its Spark session on the way out; verdict.json is written
        # last, so none was left behind
        why = received[0]
        print(
            f"harness analyze: interrupted ({why}); no verdict written for {run_dir}; "
            f"run `harness analyze {run_dir}` again for the full verdict",
            file=sys.stderr,
        )
        return 130 if why == "SIGINT" else 143
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with contextlib.suppress(Exception):  # said above, if it matters
            end_jvm()  # this process ends next: so does the JVM it started, now
    if not args.quiet:
        print()
        print(summary_table(verdict))
        print()
        for kind, path in verdict.get("outputs", {}).items():
            print(f"{kind:>8}: {path}")
    c = verdict["counts"]
    print(
        f"verdict: {verdict['verdict'].upper()}  ({c['pass']} pass, {c['fail']} fail, "
        f"{c['unknown']} unknown, {c.get('n/a', 0)} n/a; {verdict.get('events', 0)} events in "
        f"{verdict.get('analysis_seconds', 0)} s)"
    )
    if args.gate:
        from analysis.verdict import EXIT_CODES

        return EXIT_CODES.get(verdict["verdict"], 2)
    return 0
