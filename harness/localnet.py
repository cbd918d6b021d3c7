"""Free loopback ports: the one helper every part of the harness, its benches and its
tests pick listening ports with.

A port is free when the kernel hands it out for a bind to port 0; it is released at once,
so the server that binds it next (a broker, an acceptor, HAProxy) may in rare cases lose it
to someone else and then fails to start with the address in use (the broker launcher names
the port: `PortInUse`).
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct free ports on ``host`` (held open together, so they differ)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
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
