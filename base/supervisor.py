"""Every child process the harness starts, and everything that must be stopped before it
exits, in one registry with one kill path.

A child (`ManagedProcess`) runs in a process group of its own (a session), so a terminal's
Ctrl-C reaches only the harness, which stops its children in its own order; optionally it
also dies with its parent (``PR_SET_PDEATHSIG``: a SIGKILLed harness leaves no JVM behind).
Stopping is the one kill path: SIGCONT (a paused group cannot act on SIGTERM), SIGTERM to
the group, a bounded wait, then SIGKILL to the group (what the child left in it goes too).

The registry holds whatever has a ``stop()``: children, and the owners that stop more than
a process (a broker unmounts its log directory and removes its private folder; a container
is removed). `stop_all` stops them newest first; it runs at exit, and, once a broker's
launcher asks (`install_reapers`), on SIGTERM/SIGHUP where nobody else handles those.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

PR_SET_PDEATHSIG = 1


class Stoppable(Protocol):
    def stop(self) -> Any: ...


_LIVE: dict[int, Stoppable] = {}  # id -> owner, in registration order
_LOCK = threading.RLock()  # re-entered when a signal lands while held
_AT_EXIT = False
_ON_SIGNALS = False


def register(owner: Stoppable) -> None:
    """`owner.stop()` runs at exit unless it was `unregister`ed first."""
    global _AT_EXIT
    with _LOCK:
        _LIVE[id(owner)] = owner
        if not _AT_EXIT:
            atexit.register(stop_all)
            _AT_EXIT = True


def unregister(owner: Stoppable) -> None:
    with _LOCK:
        _LIVE.pop(id(owner), None)


def stop_all() -> None:
    """Stop everything registered, newest first; one failing does not spare the others."""
    with _LOCK:
        live = list(_LIVE.values())
    for owner in reversed(live):
        with contextlib.suppress(Exception):
            owner.stop()


def _on_signal(signum: int, frame: Any) -> None:
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_reapers() -> None:
    """`stop_all` on SIGTERM and SIGHUP too (a JVM outlives a killed harness otherwise), where
    nobody else (pytest, the CLI, Locust) handles them; asked for by whoever starts a
    broker."""
    global _ON_SIGNALS
    with _LOCK:
        if _ON_SIGNALS:
            return
        _ON_SIGNALS = True
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


def set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """``preexec_fn``: the child gets SIGKILL when the thread that forked it ends."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def signal_group(pgid: int, sig: int) -> None:
    """`sig` to a process group; a group already gone (or not ours) is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ManagedProcess:
    """A subprocess in its own process group (unless ``own_session`` is False: then only it is
    signalled), its output to a log file (or ``stdout``), registered until stopped."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path | None = None,
        header: str | None = None,
        stdout: int | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        own_session: bool = True,
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.own_session = own_session
        self._log: IO[bytes] | None = None
        out: int | IO[bytes] | None = stdout
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(log_path, "ab")
            self._log.write(f"{header or '# ' + ' '.join(self.argv)}\n".encode())
            self._log.flush()
            out = self._log
        # the forking thread's end kills the child: only the main thread lives as long as we do
        pdeath = die_with_parent and threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=str(cwd) if cwd else None,
            start_new_session=own_session,
            preexec_fn=set_pdeathsig if pdeath else None,
        )
        self.started = time.monotonic()
        register(self)

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
        if self.own_session:
            signal_group(self.proc.pid, sig)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                self.proc.send_signal(sig)

    def begin_stop(self) -> None:
        """SIGCONT and SIGTERM now, without waiting (several children stopping together)."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGCONT)
            self.signal_group(signal.SIGTERM)

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGTERM) -> int | None:
        """The kill path: ask (`sig`, after SIGCONT), wait up to `timeout`, then force;
        returns the exit code (negative: killed by a signal)."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGCONT)
            self.signal_group(sig)
            if self.wait(timeout) is None:
                self.signal_group(signal.SIGKILL)
                self.wait(10)
        # children of the child (e.g. Locust workers, a JVM's helpers) may still hold the group
        self.signal_group(signal.SIGKILL)
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
        unregister(self)
        return self.proc.returncode

    def tail(self, lines: int = 30) -> str:
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
