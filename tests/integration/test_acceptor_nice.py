"""`acceptor.nice`: every thread of a started acceptor runs at that nice value (read back
from /proc), and a value the process may not take stops the start with key, value, reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from base import procfs

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")


def start(tmp_path: Path, nice: int, prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    ready = tmp_path / "ready.json"
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "harness", "acceptor",
         "--set", "listeners=CLIENT://127.0.0.1:0",
         "--set", "listener.name.client.upstream=127.0.0.1:9",
         "--set", "metrics.port=-1", "--set", f"acceptor.nice={nice}",
         "--ready-file", str(ready)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def thread_nices(pid: int) -> dict[str, int]:
    """nice (field 19 of stat) of each thread of `pid`, by thread name."""
    out = {}
    for tid in procfs.thread_ids(pid):
        stat = procfs.read_stat(pid, tid)
        out[f"{stat.comm}-{tid}"] = stat.nice
    return out


def test_every_thread_takes_the_configured_nice(tmp_path: Path) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    want = min(base + 5, 19)  # raising one's own nice needs no privilege
    proc = start(tmp_path, want)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready.json").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "acceptor did not start"
            time.sleep(0.05)
        assert json.loads((tmp_path / "ready.json").read_text())["pid"] == proc.pid
        nices = thread_nices(proc.pid)
        assert len(nices) >= 2  # the loop and the history writer at least
        assert set(nices.values()) == {want}, nices
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_nice_the_process_may_not_take_stops_the_start(tmp_path: Path) -> None:
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # root may take any nice value: run it as nobody
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root, and no setpriv (util-linux) to drop the privilege")
        prefix = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
        tmp_path.chmod(0o777)
    proc = start(tmp_path, -20, prefix)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "acceptor.nice=-20" in err and "cannot be applied" in err
    assert not (tmp_path / "ready.json").exists()
