"""A warm analysis server: `harness analyze` judged in a Spark session that stays up.

A small run's analysis costs about as much again to start its JVM and compile its code as to
judge the run (`harness analyze` of a 10 k-event `ci-gate` run: 47 CPU-s cold, 18-21 CPU-s
in a session that judged one run before, `docs/status.md`). Whoever analyses many small
runs one after another (a test suite, a catalog pass) sets ``HARNESS_ANALYSIS_SERVER`` to
a Unix socket path: `harness analyze` then sends its arguments to the server listening
there (starting one if none answers) and prints what it prints, exit code included.

What is judged does not change: the server runs `analysis.cli.run` itself, one analysis at
a time, in the directory the client ran in, on the session a small run gets
(`build_session(small=True)`). It serves only what that session is for, so the client
analyses in its own process when

- a Spark master is named (``--spark-master``, ``SPARK_MASTER``), or this process already
  has a session (a warm one here is better than a server);
- the history has ``SMALL_RUN_EVENTS`` rows or more (a large run's JVM is started for it);
- the server cannot start, or runs other analysis code than the client (the code's
  fingerprint, `fingerprint()`, differs: the server exits, the next client starts one).

Interruption keeps `harness analyze`'s promise (no verdict written): a client that ends
before its answer (Ctrl-C, SIGTERM, a kill) closes its connection, and the server, seeing
that, kills its own process group, its Spark JVM with it, so nothing is written after; the
client waits for that before it exits. The next client starts a new server. A server with
nothing to do for ``--idle`` seconds (default 600) stops its session and exits.

The wire is one JSON line each way to start (the request: argv, cwd, the code's
fingerprint), then JSON lines from the server: ``{"pid": N}``, ``{"out": text}``,
``{"err": text}`` and last ``{"exit": code}`` (or ``{"stale": true}`` and nothing else).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

SERVER_ENV = "HARNESS_ANALYSIS_SERVER"
#: How long a client waits for a server it started to answer (a Spark session's start
#: takes 5-15 s here; a loaded machine several times that).
START_TIMEOUT_S = 180.0
#: How long a server waits for the next request before it exits.
IDLE_S = 600.0
#: How long a client waits for the server it left to be gone.
GONE_TIMEOUT_S = 30.0

_ROOT = Path(__file__).resolve().parent.parent
#: The code an analysis runs: the checker and the history definitions it reads through.
_CODE = ("analysis", "harness/history")


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


# -- the client ---------------------------------------------------------------------------


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
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # our own child that exited: a zombie until reaped
        done, _status = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return Path(f"/proc/{pid}").exists() and not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


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
            _kill_group(pid)
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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _wait_gone(pid: int, timeout: float = GONE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            _kill_group(pid)
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
    return pid if serving and not _zombie(pid) else None


def stop_server(path: Path) -> None:
    """Stop the server at `path` if one runs, and wait until it is gone."""
    pid = server_pid(path)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        _wait_gone(pid, timeout=10.0)


def remove_server(path: Path) -> None:
    """Stop the server at `path` and remove its files (socket, pid, lock and log)."""
    stop_server(path)
    for suffix in ("", ".lock", ".log", ".pid"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


# -- the server ---------------------------------------------------------------------------


class _FrameWriter:
    """A text stream whose writes go to the client as frames of one kind."""

    def __init__(self, sock: socket.socket, kind: str) -> None:
        self.sock = sock
        self.kind = kind

    def write(self, text: str) -> int:
        if text:
            self.sock.sendall(frame({self.kind: text}))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _watch(sock: socket.socket, answered: threading.Event) -> None:
    """The client's end of the connection closing before its answer was sent: the client
    is gone, so must be this analysis, before it writes anything more."""
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass
    if not answered.is_set():
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _serve_one(sock: socket.socket, code: str) -> bool:
    """One request; False when this server should exit after it (stale, or an analysis
    that ended on an unexpected exception: its session may be broken)."""
    from analysis import cli

    sock.settimeout(30.0)
    try:
        with sock.makefile("r", encoding="utf-8") as rfile:
            request = json.loads(rfile.readline())
    except (OSError, ValueError):
        return True  # a client gone before it asked
    sock.settimeout(None)
    if request.get("code") != code:
        with contextlib.suppress(OSError):
            sock.sendall(frame({"stale": True}))
        return False
    answered = threading.Event()
    try:
        sock.sendall(frame({"pid": os.getpid()}))
    except OSError:
        return True  # a client gone while it waited for its turn
    threading.Thread(target=_watch, args=(sock, answered), daemon=True).start()
    parser = argparse.ArgumentParser(prog="harness analyze")
    cli.configure(parser)
    healthy = True
    out, err = _FrameWriter(sock, "out"), _FrameWriter(sock, "err")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            os.chdir(request["cwd"])
            status = cli.run(parser.parse_args(request["argv"]))
        except SystemExit as exc:  # argparse's refusal
            status = exc.code if isinstance(exc.code, int) else 2
        except Exception:  # a crash is reported as `harness analyze` would report it
            traceback.print_exc()
            status, healthy = 1, False
    answered.set()
    with contextlib.suppress(OSError):
        sock.sendall(frame({"exit": status}))
        sock.shutdown(socket.SHUT_RDWR)
    return healthy


def serve(path: Path, idle_s: float = IDLE_S) -> int:
    from analysis.session import build_session, ensure_open_files

    os.environ.pop(SERVER_ENV, None)  # its own analyses run here
    code = fingerprint()
    ensure_open_files()
    spark = build_session(app_name="harness-analyze-server", small=True)
    Path(f"{path}.pid").write_text(str(os.getpid()))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    listener.bind(str(path))
    listener.listen(16)
    listener.settimeout(idle_s)
    print(f"analysis server {os.getpid()} at {path}; exits after {idle_s:.0f} s idle", flush=True)
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                print(f"idle for {idle_s:.0f} s: exiting", flush=True)
                return 0
            with conn:
                keep = _serve_one(conn, code)
            if not keep:
                print("exiting: stale code or a broken analysis", flush=True)
                return 0
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        Path(f"{path}.pid").unlink(missing_ok=True)
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.server",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
    )
    parser.add_argument("--socket", type=Path, required=True, help="the Unix socket to serve on")
    parser.add_argument("--idle", type=float, default=IDLE_S, help="exit after this many idle s")
    parser.add_argument("--stop", action="store_true", help="stop the server at --socket")
    args = parser.parse_args(argv)
    if args.stop:
        stop_server(args.socket)
        return 0
    return serve(args.socket, args.idle)


if __name__ == "__main__":
    sys.exit(main())
