"""A run whose broker never started is stopped with the reason and exit 3, and never analysed.

(The issue this guards against: an engine without a usable image made `make demo` analyse an
empty run and print a verdict for a run that never happened.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_a_broker_that_cannot_start_stops_the_run_with_exit_3(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}"}
    res = subprocess.run(
        [sys.executable, "-m", "harness", "run", "ci-gate", "--launcher", "container"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 3, out
    assert "the container launcher needs a Docker engine" in out
    assert "--launcher local" in out  # what to do next
    assert "not analysed: the target never started" in out
    assert "analysing with PySpark" not in out
    run_dir = next(
        Path(line.rsplit("output in ", 1)[1])
        for line in res.stdout.splitlines()
        if "output in " in line
    )
    run_dir = run_dir if run_dir.is_absolute() else ROOT / run_dir
    assert not (run_dir / "report" / "verdict.json").exists()
    shutil.rmtree(run_dir, ignore_errors=True)  # nothing in it worth keeping
