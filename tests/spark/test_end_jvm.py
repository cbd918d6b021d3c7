"""The report's charts drawn in a process of their own (`report.painter`) are the charts drawn
here; a painter that died leaves them drawn here; `harness analyze` leaves no process behind
(its JVM, its painter) when it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from analysis.load import load_run
from analysis.report import draw, painter
from analysis.synth import SynthSpec, generate
from tests.spark.test_interrupted_analysis import _session_processes


def _run(synth_root: Path) -> Path:
    run_dir = synth_root / "painter"
    if not (run_dir / "run.json").exists():
        generate(run_dir, SynthSpec(run_id="painter", cycles=1, target_events=3000))
    return run_dir


def test_charts_drawn_by_the_painter_are_the_charts_drawn_here(
    spark: Any, synth_root: Path
) -> None:
    run = load_run(spark, _run(synth_root))
    here = draw(run)
    pool = painter()
    try:
        there = draw(run, pool)
        assert pool._processes  # type: ignore[attr-defined]  # drawn in another process
        assert all(pid != os.getpid() for pid in pool._processes)  # type: ignore[attr-defined]
    finally:
        pool.shutdown(cancel_futures=True)
        run.release()
    assert [c["title"] for c in there.charts] == [c["title"] for c in here.charts]
    assert len(here.charts) >= 4 and all(c["png"] for c in there.charts)
    assert there.outcomes == here.outcomes


def test_a_painter_that_died_leaves_the_charts_drawn_here(spark: Any, synth_root: Path) -> None:
    run = load_run(spark, _run(synth_root))
    pool = painter()
    try:
        pool.submit(os._exit, 3)  # its process dies: the pool is broken from then on
        drawn = draw(run, pool)
    finally:
        pool.shutdown(cancel_futures=True)
        run.release()
    assert [c["title"] for c in drawn.charts] == [c["title"] for c in draw(run).charts]


def test_analyze_leaves_no_process_behind_when_it_exits(synth_root: Path, tmp_path: Path) -> None:
    """The JVM and the painter are gone when `harness analyze` is: the JVM would otherwise
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
