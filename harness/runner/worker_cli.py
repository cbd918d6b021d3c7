"""One worker machine of a run from many hosts: ``harness worker --master HOST:PORT``.

Runs a Locust worker (``locust -f - --worker``) that takes the load profile and every
option from the master `harness run --workers N` started, so the machine needs only the
installed package. It connects from this machine's own address (the address the
per-IP limits see), records its history in a folder of its own and sends it home to the
master over Locust's channel when the phase ends (`loadprofiles.workers`). That folder
is removed with its phase, also when the run stops the worker (SIGTERM).

A run has one master per load phase, one after another on the same port: the worker
joins each in turn, and stops once no master answered for ``--idle-timeout`` seconds (or
after ``--phases`` phases). Exit 0 when it served at least one phase; 3 when no master
ever answered.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: a phase longer than this is cut (every load loop bounded): the run's own limit
MAX_PHASE_S = 4 * 3600 + 600


def master_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` of a Locust master (`--master` here, `--master-bind` of `harness run`;
    argparse names the option in its error)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        type=master_address,
        required=True,
        metavar="HOST:PORT",
        help="the Locust master `harness run --workers N` started (its --master-bind)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="K",
        help="Locust processes on this machine (each one worker of the N)",
    )
    parser.add_argument(
        "--phases", type=int, default=100, help="stop after this many phases (default 100)"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=120.0,
        help="stop once no master answered for this long (seconds, default 120)",
    )


def locust_worker_argv(host: str, port: int, processes: int | None) -> list[str]:
    locust = str(Path(sys.executable).with_name("locust"))
    argv = [locust, "-f", "-", "--worker", "--master-host", host, "--master-port", str(port)]
    if processes:
        argv += ["--processes", str(processes)]
    return argv


def _leave(signum: int, _frame: object) -> None:
    """Stopped (its run ends, SIGTERM): leave through the phase's clean-up, not around it."""
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    host, port = args.master
    signal.signal(signal.SIGTERM, _leave)
    if args.processes is not None and args.processes < 1:
        print(f"harness worker: --processes {args.processes}: must be >= 1")
        return 3
    import tempfile

    from loadprofiles.workers import JOINED_ENV

    served = 0
    idle_since = time.monotonic()
    for _phase in range(max(1, args.phases)):
        print(f"harness worker: joining the master at {host}:{port}", flush=True)
        # a folder of its own: Locust writes the profile it takes from the master there
        # (several workers on one machine must not share it), the history waits there
        # until it went home; removed with the phase
        with tempfile.TemporaryDirectory(
            prefix="harness-worker-", ignore_cleanup_errors=True
        ) as own:
            # the load process touches this file once it joined a phase (never log text)
            joined = os.path.join(own, "joined")
            try:
                subprocess.run(
                    locust_worker_argv(host, port, args.processes),
                    timeout=MAX_PHASE_S,
                    check=False,
                    env={**os.environ, JOINED_ENV: joined, "TMPDIR": own},
                )
            except subprocess.TimeoutExpired:
                print(f"harness worker: a phase ran over {MAX_PHASE_S} s; stopped it")
            reached = os.path.exists(joined)
        if reached:
            served += 1
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > args.idle_timeout:
            break
        else:
            time.sleep(1.0)
    print(f"harness worker: served {served} phase(s); no master answered, stopping", flush=True)
    return 0 if served else 3
