"""The run's last step: `harness analyze RUN_DIR --gate` in a process group of its own,
bounded by the scenario's analysis timeout, its output shown and logged, the Spark JVM
under it never orphaned; the verdict read back from `report/verdict.json`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from base.supervisor import ManagedProcess
from harness.runner.rundir import RunDir


def analyse(
    rd: RunDir, timeout: float, say: Callable[[str], None], spark_master: str | None = None
) -> tuple[str, list[dict[str, Any]], Path | None]:
    """(verdict, checks, report path); "unknown" with no checks when none was written."""
    argv = [sys.executable, "-m", "harness", "analyze", str(rd.root), "--gate"]
    if spark_master:
        argv += ["--spark-master", spark_master]
    log = rd.logs / "analysis.log"
    say(f"analysing with PySpark: {' '.join(argv[2:])} (log {log})")
    with open(log, "wb") as fh:
        child = ManagedProcess("analysis", argv, stdout=subprocess.PIPE)
        proc = child.proc
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        killer = threading.Timer(timeout, child.signal_group, (signal.SIGKILL,))
        killer.start()
        try:
            for line in proc.stdout:
                fh.write(line)
                print("  | " + line.decode(errors="replace").rstrip(), flush=True)
            child.wait(max(1.0, deadline - time.monotonic()))
        finally:
            killer.cancel()
            # the Spark JVM is a child of the analysis: never orphan it
            child.stop(timeout=10, sig=signal.SIGKILL)
    verdict_path = rd.report / "verdict.json"
    if not verdict_path.is_file():
        say(f"the analysis wrote no verdict (exit {proc.returncode}); see {log}")
        return "unknown", [], None
    data = json.loads(verdict_path.read_text())
    report = rd.report / "report.html"
    return (
        str(data.get("verdict", "unknown")),
        list(data.get("checks", [])),
        report if report.exists() else None,
    )
