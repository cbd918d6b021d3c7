"""Free loopback ports: the one helper every part of the harness, its benches and its
tests pick listening ports with.

A port is chosen below the kernel's ephemeral range (`ip_local_port_range`), where no
outgoing connection is ever given a local port: a broker or acceptor restarted on its port
mid-run (a kill, a rolling restart) would otherwise find it taken by a client socket that
the kernel had meanwhile bound to it (every connection to 127.0.0.1 leaves from
127.0.0.1). A free port is one that binds; it is released at once, so the server that binds
it next (a broker, an acceptor, HAProxy) may in rare cases lose it to someone else and then
fails to start with the address in use (the broker launcher names the port: `PortInUse`).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
#: the lowest port chosen: above the registered services most machines run
LOWEST_PORT = 16384
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct free ports on ``host``, below the ephemeral range (held open
    together, so they differ)."""
    low = ephemeral_low()
    candidates = (
        random.sample(range(LOWEST_PORT, low), low - LOWEST_PORT) if low > LOWEST_PORT else []
    )
    socks: list[socket.socket] = []
    try:
        for port in candidates:
            if len(socks) == count:
                break
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
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = LOOPBACK) -> int:
    """One free port on ``host``."""
    return free_ports(1, host)[0]
