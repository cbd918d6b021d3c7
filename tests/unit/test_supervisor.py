"""The one supervisor: a child in its own process group, stopped by the one kill path (SIGCONT,
SIGTERM, a bounded wait, SIGKILL to the group), and the one registry that stops everything
left, newest first. Real processes (`sh`, `sleep`), no sockets."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from base import supervisor
from base.supervisor import ManagedProcess

pytestmark = pytest.mark.unit


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _grandchild(tmp_path: Path) -> tuple[ManagedProcess, int]:
    """A shell that starts a `sleep` in its group, writes its pid and waits."""
    pidfile = tmp_path / "grandchild.pid"
    child = ManagedProcess(
        "sh",
        ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"],
        log_path=tmp_path / "sh.log",
    )
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the shell never started its sleep"
        time.sleep(0.01)
    return child, int(pidfile.read_text())


def test_stop_takes_the_whole_group_and_closes_the_log(tmp_path: Path) -> None:
    child, grandchild = _grandchild(tmp_path)
    assert os.getpgid(child.pid) == child.pid  # a group of its own
    assert os.getpgid(grandchild) == child.pid
    assert child.stop(timeout=5) == -signal.SIGTERM
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(grandchild)
    assert (tmp_path / "sh.log").read_text().startswith("# sh -c")
    assert child not in supervisor._LIVE.values()


def test_a_paused_group_is_continued_so_it_can_stop(tmp_path: Path) -> None:
    child = ManagedProcess("sleep", ["sleep", "60"], log_path=tmp_path / "s.log")
    child.signal_group(signal.SIGSTOP)
    t0 = time.monotonic()
    assert child.stop(timeout=5) == -signal.SIGTERM  # TERM acted on, not the KILL fallback
    assert time.monotonic() - t0 < 5


def test_a_child_that_ignores_sigterm_is_killed_at_the_deadline(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('re' + 'ady', flush=True); time.sleep(60)"
    )
    child = ManagedProcess("stubborn", [sys.executable, "-c", code], log_path=tmp_path / "p.log")
    deadline = time.monotonic() + 10
    while "ready" not in (tmp_path / "p.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert child.stop(timeout=0.2) == -signal.SIGKILL


def test_stop_all_stops_what_is_registered_newest_first_and_survives_a_failure() -> None:
    order: list[str] = []

    class Owner:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        def stop(self) -> None:
            order.append(self.name)
            supervisor.unregister(self)
            if self.fail:
                raise RuntimeError("cannot")

    before = dict(supervisor._LIVE)
    supervisor._LIVE.clear()
    try:
        a, b, c = Owner("broker"), Owner("acceptor", fail=True), Owner("load")
        for o in (a, b, c):
            supervisor.register(o)
        supervisor.unregister(a)
        supervisor.register(a)  # registered again: now the newest
        supervisor.stop_all()
        assert order == ["broker", "load", "acceptor"]
        assert supervisor._LIVE == {}
    finally:
        supervisor._LIVE.update(before)


def test_a_child_outside_its_own_session_is_signalled_alone(tmp_path: Path) -> None:
    child = ManagedProcess("sleep", ["sleep", "60"], log_path=tmp_path / "s.log", own_session=False)
    assert os.getpgid(child.pid) == os.getpgid(0)  # our group: never signal it whole
    assert child.stop(timeout=5) == -signal.SIGTERM
    assert _alive(os.getpid())
