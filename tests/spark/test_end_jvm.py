"""`harness analyze` leaves no process behind when it exits: it ends the driver JVM it
started (`session.end_jvm`) before it returns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from analysis.synth import SynthSpec, generate
from tests.spark.test_interrupted_analysis import _session_processes


def _run(synth_root: Path) -> Path:
    run_dir = synth_root / "end-jvm"
    if not (run_dir / "run.json").exists():
        generate(run_dir, SynthSpec(run_id="end-jvm", cycles=1, target_events=3000))
    return run_dir


def test_analyze_leaves_no_process_behind_when_it_exits(synth_root: Path, tmp_path: Path) -> None:
    """The JVM is gone when `harness analyze` is: it would otherwise
    end up to 300 ms after it (HotSpot waits for its threads in native socket reads), and
    whoever reads the output through a pipe would wait for it (it inherits stdout). The
    output goes to a file here, so that nothing but the process itself is waited for."""
    run_dir = _run(synth_root)
    out = tmp_path / "analyze.out"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "analyze", str(run_dir), "--quiet"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=300)
            left = _session_processes(proc.pid)  # at once: no waiting for stragglers
        finally:
            if proc.poll() is None or _session_processes(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 0, out.read_text()
    assert (run_dir / "report" / "report.html").is_file()
    assert left == []


def test_end_jvm_ends_the_jvm_this_process_started() -> None:
    """`end_jvm` (what `harness analyze` does last) leaves the JVM exited, not exiting."""
    code = (
        "from pyspark import SparkContext\n"
        "from analysis.session import build_session, end_jvm\n"
        "session = build_session('local[1]', small=True)\n"
        "jvm = SparkContext._gateway.proc\n"
        "session.stop()\n"
        "end_jvm()\n"
        "print('jvm exit status', jvm.poll(), 'gateway', SparkContext._gateway)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert "jvm exit status 0 gateway None" in out, out
