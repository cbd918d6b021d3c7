"""The analysis server (analysis/server.py) judges a run as `harness analyze` does in its
own process, stays up between analyses, and refuses a client whose analysis code differs.
Its interruption is in test_interrupted_analysis.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis import analyze_run
from analysis.server import SERVER_ENV, frame, remove_server, server_pid
from analysis.synth import SynthSpec, generate
from analysis.verdict import EXIT_CODES


@pytest.fixture
def server() -> Iterator[Path]:
    path = Path(f"/tmp/harness-analysis-test-{os.getpid()}.sock")
    yield path
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


def test_the_server_judges_as_here_stays_up_and_refuses_other_code(
    spark: Any, synth_root: Path, server: Path
) -> None:
    here = synth_root / "server-here"
    generate(here, SynthSpec(run_id="server", cycles=1, broken=frozenset({"ip_rate"})))
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

    second = _analyze(there, server)  # the same server, warm
    assert second.returncode == first.returncode, second.stderr[-2000:]
    assert server_pid(server) == pid
    assert _judged(json.loads((there / "report" / "verdict.json").read_text())) == _judged(expected)

    # a client running other analysis code is refused, and the server leaves
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(str(server))
        sock.sendall(frame({"argv": [str(there)], "cwd": "/", "code": "other"}))
        answer = json.loads(sock.makefile("r").readline())
    assert answer == {"stale": True}
    deadline = time.monotonic() + 60
    while server_pid(server) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server_pid(server) is None
