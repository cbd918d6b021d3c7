"""Free loopback ports: the one helper every part of the harness, its benches and its
tests pick listening ports with.

A port is chosen below the kernel's ephemeral range (`ip_local_port_range`), where no
outgoing connection is ever given a local port: a broker or acceptor restarted on its port
mid-run (a kill, a rolling restart) would otherwise find it taken by a client socket that
the kernel had meanwhile bound to it (every connection to 127.0.0.1 leaves from
127.0.0.1). A free port is one that binds; it is released at once, so the server that binds
it next (a broker, an acceptor, HAProxy) may in rare cases lose it to someone else and then
fails to start with the address in use (the broker launchers then start again on fresh
ports: `PortInUse`).

A port handed out is also reserved on this machine (a file named for it in `RESERVATIONS`,
holding the picker's pid and start time) until its picker has exited or `RESERVE_S` has
passed, and no picker hands out a reserved port. Between a port's choice and its server's
bind lie seconds (a broker's JVM, a container) or longer (an acceptor's ports are chosen
before the broker that advertises them starts), and without the reservation another picker
(a parallel test, another run, the same process's next call) found such a port free. The
reservations are read and written under one lock file, so two pickers never hand out the
same port; where the folder cannot be used, ports are picked without reservations.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from base import procfs

LOOPBACK = "127.0.0.1"
#: the lowest port chosen: above the registered services most machines run
LOWEST_PORT = 16384
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: where the ports handed out are reserved (one file per port), shared by every process
RESERVATIONS = Path(tempfile.gettempdir()) / "kafka-connection-harness-ports"
#: how long a reservation holds while its picker lives: longer than any wait between a
#: port's choice and its bind (a broker's ready timeout is 180 s), short enough that a
#: long-lived picker (a test worker) never holds a noticeable share of the range
RESERVE_S = 600.0


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, host: str = LOOPBACK, *, reservations: Path | None = None) -> list[int]:
    """``count`` distinct free ports on ``host``, below the ephemeral range (held open
    together, so they differ), none reserved by another pick, each reserved for this
    process (``reservations``: the folder, default `RESERVATIONS`)."""
    low = ephemeral_low()
    candidates = (
        random.sample(range(LOWEST_PORT, low), low - LOWEST_PORT) if low > LOWEST_PORT else []
    )
    socks: list[socket.socket] = []
    with _reserving(RESERVATIONS if reservations is None else reservations) as book:
        try:
            for port in candidates:
                if len(socks) == count:
                    break
                if book is not None and book.taken(port):
                    continue
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    s.bind((host, port))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
            while len(socks) < count:  # no range below the ephemeral one: the kernel's choice
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((host, 0))
            ports = [int(s.getsockname()[1]) for s in socks]
        finally:
            for s in socks:
                s.close()
        if book is not None:
            for port in ports:
                book.reserve(port)
    return ports


class _Book:
    """The reservation files, read and written while the lock is held."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pid = os.getpid()
        self.me = f"{self.pid} {procfs.start_time(self.pid)}"

    def taken(self, port: int) -> bool:
        """Whether a live pick (this process's too) holds ``port``."""
        path = self.folder / str(port)
        try:
            age_s = time.time() - path.stat().st_mtime
            pid_text, _, started = path.read_text().partition(" ")
        except (OSError, ValueError):
            return False  # no reservation (or one unreadable: not ours to honour)
        if age_s > RESERVE_S or not pid_text.isdigit():
            return False
        return procfs.alive(int(pid_text), started.strip())

    def reserve(self, port: int) -> None:
        with contextlib.suppress(OSError):
            (self.folder / str(port)).write_text(self.me)


@contextlib.contextmanager
def _reserving(folder: Path) -> Iterator[_Book | None]:
    """The reservations under their lock, or None where the folder cannot be used."""
    try:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # every user's pickers share it, as /tmp
                folder.chmod(0o1777)
        lock = open(folder / ".lock", "a")
    except OSError:
        yield None
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield _Book(folder)
    finally:
        lock.close()  # releases the lock


def free_port(host: str = LOOPBACK, *, reservations: Path | None = None) -> int:
    """One free port on ``host`` (`free_ports`)."""
    return free_ports(1, host, reservations=reservations)[0]
