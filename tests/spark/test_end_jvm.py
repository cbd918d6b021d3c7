"""`harness analyze` ends the driver JVM it started (`session.end_jvm`) before it returns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from analysis.remote import SERVER_ENV
from analysis.session import LOCAL_DIR_PREFIX
from analysis.synth import SynthSpec, generate
from base import procfs


def _run(synth_root: Path) -> Path:
    run_dir = synth_root / "end-jvm"
    if not (run_dir / "run.json").exists():
        generate(run_dir, SynthSpec(run_id="end-jvm", cycles=1, target_events=3000))
    return run_dir


#: `harness analyze` in a process of its own, which then lists its live child processes: the
#: JVM it started is one of them unless it was ended (and waited for) before the CLI returned
ANALYZE = """
import os
import sys
from base import procfs
from harness.cli import main
rc = main(["analyze", sys.argv[1], "--quiet"])
children = []
for entry in procfs.PROC.iterdir():
    if entry.name.isdigit():
        try:
            stat = procfs.read_stat(entry.name)
        except OSError:
            continue
        if stat.ppid == os.getpid() and stat.state != "Z":
            children.append(stat.comm)
print("rc", rc, "children", sorted(children))
"""


def _scratch(tmp: Path, pid: int, started: str) -> Path:
    """A driver scratch folder as `session.local_dir` names it, with a file in it."""
    path = tmp / f"{LOCAL_DIR_PREFIX}{pid}-{started}"
    (path / "blockmgr-1").mkdir(parents=True)
    (path / "blockmgr-1" / "shuffle_0_0_0.data").write_bytes(b"x" * 1024)
    return path


def test_analyze_has_ended_its_jvm_when_it_returns(synth_root: Path, tmp_path: Path) -> None:
    """The JVM is gone when `harness analyze` returns: otherwise it ends up to 300 ms after
    the process (HotSpot waits for its threads in native socket reads), and whoever reads
    the output through a pipe waits for it (it inherits stdout). Its scratch folder is gone
    too, and so is a dead process's it found; a live one's is kept."""
    run_dir = _run(synth_root)
    gone = subprocess.Popen(["true"])  # a process that ended: its pid names no process
    gone.wait()
    tmp = tmp_path / "tmp"
    dead = _scratch(tmp, gone.pid, "1")
    live = _scratch(tmp, os.getpid(), procfs.start_time(os.getpid()))
    reused = _scratch(tmp, os.getpid(), "1")  # this pid, another process's start time
    env = {k: v for k, v in os.environ.items() if k != SERVER_ENV}  # judged here, no server
    env["TMPDIR"] = str(tmp)
    proc = subprocess.run(
        [sys.executable, "-c", ANALYZE, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
        env=env,
    )
    assert "rc 0 children []" in proc.stdout, proc.stdout + proc.stderr
    assert (run_dir / "report" / "report.html").is_file()
    assert sorted(tmp.glob(f"{LOCAL_DIR_PREFIX}*")) == [live], list(tmp.iterdir())
    assert not dead.exists() and not reused.exists()


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
