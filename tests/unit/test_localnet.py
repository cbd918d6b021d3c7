"""harness.localnet: the free ports it hands out differ and can be listened on."""

from __future__ import annotations

import socket

from harness.localnet import free_port, free_ports


def test_free_ports_differ_and_can_each_be_bound() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    socks = []
    try:
        for port in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", port))
            s.listen(1)
    finally:
        for s in socks:
            s.close()


def test_free_port_on_another_loopback_address() -> None:
    port = free_port("127.0.0.2")
    with socket.socket() as s:
        s.bind(("127.0.0.2", port))
