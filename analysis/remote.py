"""How `harness analyze` reaches an analysis server (`analysis/server.py`, which says what
the server does and when the client analyses in its own process instead): start one if
none answers, send the request, print what comes back, and on the way out of an
interrupted analysis wait until the server is gone. Also what both ends share: the
socket's variable, the code's fingerprint, the wire's frames, and stopping a server."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any

from base import procfs
from base.supervisor import signal_group

SERVER_ENV = "HARNESS_ANALYSIS_SERVER"
#: How long a client waits for a server it started to answer (a Spark session's start
#: takes 5-15 s here; a loaded machine several times that).
START_TIMEOUT_S = 180.0
#: How long a client waits for the server it left to be gone.
GONE_TIMEOUT_S = 30.0

_ROOT = Path(__file__).resolve().parent.parent
#: The code an analysis runs: the checker and the history definitions it reads through.
_CODE = ("analysis", "base/history")


class ServerUnavailable(Exception):
    """No server could take this analysis; the reason says why."""


def fingerprint(root: Path = _ROOT) -> str:
    """A hash of every source file of the analysis (its checks, report templates and the
    history definitions it reads through); a server judges only for clients whose code
    hashes the same."""
    h = hashlib.sha256()
    for part in _CODE:
        for path in sorted((root / part).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".html", ".css", ".js", ".j2"):
                h.update(str(path.relative_to(root)).encode() + b"\0")
                h.update(path.read_bytes())
    return h.hexdigest()


def frame(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def socket_path() -> Path | None:
    value = os.environ.get(SERVER_ENV, "").strip()
    return Path(value) if value else None


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # our own child that exited: reaped, and so gone from /proc
    try:
        return procfs.read_stat(pid).state != "Z"
    except OSError:
        return False


def _start(path: Path) -> socket.socket:
    """Start a server at `path` and connect to it; the caller holds the start lock."""
    log_path = Path(f"{path}.log")
    env = {k: v for k, v in os.environ.items() if k != SERVER_ENV}
    argv = [sys.executable, "-m", "analysis.server", "--socket", str(path)]
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        pid = os.posix_spawn(
            sys.executable,
            argv,
            env,
            setsid=True,  # its own process group: the server kills that group when a client leaves
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
            ],
        )
    finally:
        os.close(log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if not _alive(pid):
            tail = log_path.read_text(errors="replace").splitlines()[-5:]
            raise ServerUnavailable(f"it exited while starting ({log_path}: {' | '.join(tail)})")
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return _connect(path)
        if time.monotonic() > deadline:
            signal_group(pid, signal.SIGKILL)
            raise ServerUnavailable(f"it did not answer in {START_TIMEOUT_S:.0f} s ({log_path})")
        time.sleep(0.1)


def _connect_or_start(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one client starts a server, the others wait for it
        try:
            return _connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            path.unlink(missing_ok=True)  # a server that died left its socket file
        return _start(path)


def _wait_gone(pid: int, timeout: float = GONE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.05)


def analyze_remotely(
    path: Path, argv: list[str], out: IO[str] | None = None, err: IO[str] | None = None
) -> int | None:
    """Run `harness analyze ARGV` on the server at `path`; its exit code, or None when no
    server took it (the reason printed to `err`: analyse here instead). An exception
    raised meanwhile (Ctrl-C, the SIGTERM handler's) leaves the server stopped, and so
    nothing of this analysis written after it, before it propagates."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        sock = _connect_or_start(path)
    except (OSError, ServerUnavailable) as exc:
        print(f"harness analyze: no analysis server at {path} ({exc}); analysing here", file=err)
        return None
    pid: int | None = None
    done = False
    try:
        sock.sendall(frame({"argv": argv, "cwd": os.getcwd(), "code": fingerprint()}))
        for line in sock.makefile("r", encoding="utf-8"):
            msg = json.loads(line)
            if "pid" in msg:
                pid = int(msg["pid"])
            elif "out" in msg:
                out.write(msg["out"])
                out.flush()
            elif "err" in msg:
                err.write(msg["err"])
                err.flush()
            elif "exit" in msg:
                done = True
                return int(msg["exit"])
            elif msg.get("stale"):
                done = True
                print(
                    f"harness analyze: the analysis server at {path} runs other code; "
                    "it stops, and this analysis runs here",
                    file=err,
                )
                return None
        print(f"harness analyze: the analysis server at {path} ended without an answer", file=err)
        return 1
    finally:
        sock.close()
        if not done and pid is not None:
            _wait_gone(pid)  # it saw the close and killed its group, Spark's JVM with it


def server_pid(path: Path) -> int | None:
    """The pid of the server serving at `path`, from its pid file, if that process is one
    (a server that was killed leaves its file, and its pid can be reused)."""
    try:
        pid = int(Path(f"{path}.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    serving = b"analysis.server" in cmdline and str(path).encode() in cmdline
    return pid if serving and _alive(pid) else None


def stop_server(path: Path) -> None:
    """Stop the server at `path` if one runs, and wait until it is gone."""
    pid = server_pid(path)
    if pid is not None:
        signal_group(pid, signal.SIGTERM)
        _wait_gone(pid, timeout=10.0)


def remove_server(path: Path) -> None:
    """Stop the server at `path` and remove its files (socket, pid, lock and log)."""
    stop_server(path)
    for suffix in ("", ".lock", ".log", ".pid"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
