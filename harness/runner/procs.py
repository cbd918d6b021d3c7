"""Child processes that can never outlive the run.

Each child gets its own session (process group), so a terminal Ctrl-C reaches only
the runner, which then stops the children in order (load first, then the acceptor so
it flushes history, then the broker). Stopping is SIGTERM to the group, a bounded
wait, then SIGKILL to the group; an atexit hook repeats it for anything left.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

_LIVE: set[ManagedProcess] = set()
_LOCK = threading.Lock()


class ManagedProcess:
    """A subprocess in its own process group, output to a log file, stopped for sure."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_path, "ab")
        self._log.write(f"# {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
        self.started = time.monotonic()
        with _LOCK:
            _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGTERM) -> int | None:
        """Ask politely, then force; returns the exit code (negative = killed by a signal)."""
        if self.proc.poll() is None:
            self.signal_group(sig)
            if self.wait(timeout) is None:
                self.signal_group(signal.SIGKILL)
                self.wait(10)
        # children of the child (e.g. locust workers) may still hold the group
        self.signal_group(signal.SIGKILL)
        try:
            self._log.close()
        except OSError:
            pass
        with _LOCK:
            _LIVE.discard(self)
        return self.proc.returncode

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_all(timeout: float = 10.0) -> None:
    with _LOCK:
        live = list(_LIVE)
    for p in live:
        p.stop(timeout)


atexit.register(stop_all)
