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
import json
import os
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path

from analysis.remote import SERVER_ENV, fingerprint, frame, stop_server

#: How long a server waits for the next request before it exits.
IDLE_S = 600.0


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
