"""SIGTERM during `harness analyze` stops the analysis and its Spark JVM and leaves no
verdict; the next `harness analyze` of the same run gives the full one. Both where the
analysis runs in the `harness analyze` process and where an analysis server judges it
(analysis/server.py: the server, its JVM with it, is gone when the client exits)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from analysis.remote import SERVER_ENV, remove_server, server_pid
from analysis.session import LOCAL_DIR_PREFIX, sweep_local_dirs
from analysis.synth import SynthSpec, generate
from base import procfs
from harness.cli import main


def _session_processes(sid: int) -> list[str]:
    """Command names of the processes still in session `sid` (from /proc)."""
    out = []
    for entry in procfs.PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = procfs.read_stat(entry.name)
        except OSError:
            continue
        if stat.session == sid:
            out.append(stat.comm)
    return out


@pytest.mark.parametrize("where", ["here", "server"])
def test_sigterm_leaves_no_jvm_and_no_verdict_and_a_rerun_judges(
    spark: Any, synth_root: Path, where: str
) -> None:
    run_dir = synth_root / f"interrupted-{where}"
    generate(run_dir, SynthSpec(run_id="interrupted", cycles=1))
    env = {k: v for k, v in os.environ.items() if k != SERVER_ENV}
    server = Path(f"/tmp/harness-analysis-interrupted-{os.getpid()}.sock")
    if where == "server":
        env[SERVER_ENV] = str(server)
    report = run_dir / "report"
    report.mkdir(exist_ok=True)
    (report / "verdict.json").write_text('{"verdict": "pass", "stale": true}')
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "analyze", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    jvm_session = proc.pid  # the analysis's JVM is in this session, or in its server's
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded by the analysis itself
            if line.startswith("checks"):
                break
        if where == "server":
            pid = server_pid(server)
            assert pid is not None, "the analysis ran in no server"
            jvm_session = pid
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        remove_server(server)
    assert rc == 143, err
    assert "interrupted (SIGTERM); no verdict written" in err
    assert not (report / "verdict.json").exists()  # neither a partial one nor the stale one
    deadline = time.monotonic() + 30
    while _session_processes(jvm_session) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _session_processes(jvm_session) == []  # the Spark JVM went with it
    if where == "server":  # killed with it, before Spark's hooks ran: its scratch folder stays
        left = list(Path(tempfile.gettempdir()).glob(f"{LOCAL_DIR_PREFIX}{jvm_session}-*"))
        assert len(left) == 1, left
        assert left[0] in sweep_local_dirs()  # what the next session started does first
        assert not left[0].exists()
    assert main(["analyze", str(run_dir), "--quiet", "--no-html"]) == 0
    assert json.loads((report / "verdict.json").read_text())["verdict"] in ("pass", "unknown")
