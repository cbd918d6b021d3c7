"""The analysis server (analysis/server.py) judges a run as `harness analyze` does in its
own process and stays up between analyses. Its interruption is in
test_interrupted_analysis.py; what it does with a client running other code, in
tests/unit/test_analysis_server_client.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis import analyze_run
from analysis.remote import SERVER_ENV, remove_server, server_pid, socket_path
from analysis.synth import SynthSpec, generate
from analysis.verdict import EXIT_CODES


@pytest.fixture
def server() -> Iterator[Path]:
    """This test process's analysis server (tests/conftest.py), warm if an earlier test
    used it, or one of the test's own when the suite runs without."""
    shared = socket_path()
    path = shared or Path(f"/tmp/harness-analysis-test-{os.getpid()}.sock")
    yield path
    if shared is None:
        remove_server(path)


def _analyze(run_dir: Path, server: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, SERVER_ENV: str(server)}
    return subprocess.run(
        [sys.executable, "-m", "harness", "analyze", str(run_dir), "--gate", "--no-html"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def _judged(verdict: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(c["name"], c["verdict"], c.get("judged", 0)) for c in verdict["checks"]]


def test_the_server_judges_as_here_and_stays_up(spark: Any, synth_root: Path, server: Path) -> None:
    here = synth_root / "server-here"
    generate(here, SynthSpec(run_id="server", target_events=3000, broken=frozenset({"ip_rate"})))
    there = synth_root / "server-there"
    shutil.copytree(here, there)
    expected = analyze_run(here, spark=spark, report=False)
    assert expected["verdict"] == "fail"  # something to agree on, not an empty pass

    first = _analyze(there, server)
    pid = server_pid(server)
    assert pid is not None, first.stderr[-2000:]
    assert first.returncode == EXIT_CODES["fail"], first.stderr[-2000:]
    assert "verdict: FAIL" in first.stdout
    assert "no analysis server" not in first.stderr
    judged = json.loads((there / "report" / "verdict.json").read_text())
    assert _judged(judged) == _judged(expected)

    # the same server answers the next analysis (one with nothing to read: refused at once)
    empty = synth_root / "server-empty"
    empty.mkdir()
    second = _analyze(empty, server)
    assert second.returncode == 2, second.stderr[-2000:]
    assert "harness analyze: " in second.stderr and "no analysis server" not in second.stderr
    assert server_pid(server) == pid
