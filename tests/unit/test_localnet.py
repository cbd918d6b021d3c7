"""base.localnet: the free ports it hands out differ, lie below the kernel's ephemeral
range (no outgoing connection can hold one when a server restarts on it), and can be
listened on at the address they were asked for, and are not handed out again while their
picker lives; a listening socket's accept queue is read from the socket as from
/proc/net/tcp (`local`: real sockets)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from base import localnet, procfs
from base.localnet import LOWEST_PORT, RESERVE_S, free_port, free_ports


def ephemeral_range() -> tuple[int, int]:
    """The range the kernel picks a port from for a bind to port 0 (Linux)."""
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_free_ports_differ_and_can_each_be_bound() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    low, _high = ephemeral_range()
    assert all(LOWEST_PORT <= port < low for port in ports), ports
    socks = []
    try:
        for port in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", port))
            s.listen(1)
            assert s.getsockname() == ("127.0.0.1", port)
    finally:
        for s in socks:
            s.close()


def test_free_port_on_another_loopback_address() -> None:
    port = free_port("127.0.0.2")
    low, _high = ephemeral_range()
    assert LOWEST_PORT <= port < low, port  # below the ephemeral range, never 0
    with socket.socket() as server:
        server.bind(("127.0.0.2", port))
        server.listen(1)
        assert server.getsockname() == ("127.0.0.2", port)
        # a client reaches it at that address, and the accepted side is that address too
        with socket.create_connection(("127.0.0.2", port), timeout=5) as client:
            conn, _ = server.accept()
            with conn:
                assert client.getpeername() == ("127.0.0.2", port)
                assert conn.getsockname() == ("127.0.0.2", port)
    ports = free_ports(4, "127.0.0.2")
    assert len(set(ports)) == 4 and all(LOWEST_PORT <= p < low for p in ports), ports


@pytest.fixture
def in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates in ascending order, not shuffled: every pick tries the same ports first."""
    monkeypatch.setattr(localnet.random, "sample", lambda population, k: list(population)[:k])


def test_a_port_handed_out_is_not_handed_out_again_while_its_picker_lives(
    tmp_path: Path, in_order: None
) -> None:
    """A port picked but not yet bound (a broker's JVM binds it seconds later) still binds,
    so without the reservations a second pick trying the same candidates gets it again."""
    book = tmp_path / "reservations"
    first = free_ports(3, reservations=book)
    second = free_ports(3, reservations=book)
    assert not set(first) & set(second), (first, second)
    third = free_port(reservations=book)
    assert third not in {*first, *second}
    # the same candidates with no reservations made: the very ports of the first pick
    assert free_ports(3, reservations=tmp_path / "another") == first
    assert {int(p.name) for p in book.iterdir() if p.name.isdigit()} == {*first, *second, third}


def test_a_reservation_holds_only_while_its_picker_lives_and_not_past_its_time(
    tmp_path: Path, in_order: None
) -> None:
    book = tmp_path / "reservations"
    (port,) = free_ports(1, reservations=tmp_path / "probe")  # the first candidate that binds
    book.mkdir()
    reservation = book / str(port)

    reservation.write_text(f"{os.getpid()} {procfs.start_time(os.getpid())}")
    assert free_ports(1, reservations=book) != [port]  # held: this process lives

    old = time.time() - RESERVE_S - 1
    os.utime(reservation, (old, old))
    assert free_ports(1, reservations=book) == [port]  # past its time

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    reservation.write_text(f"{gone.stdout.strip()} 1")
    assert free_ports(1, reservations=book) == [port]  # its picker has exited

    reservation.write_text(f"{os.getpid()} 1")  # this pid, but another process's start
    assert free_ports(1, reservations=book) == [port]


def test_a_listening_sockets_accept_queue_is_read_from_the_socket() -> None:
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        port = lsock.getsockname()[1]
        assert procfs.accept_queue(lsock) == 0
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            assert procfs.accept_queue(lsock) == 3
            assert [s.accept_queue for s in procfs.listen_sockets() if s.port == port] == [3]
            lsock.accept()[0].close()
            assert procfs.accept_queue(lsock) == 2
            # a connected socket is not a listening one: no queue to read
            assert procfs.accept_queue(clients[0]) is None
        finally:
            for c in clients:
                c.close()
