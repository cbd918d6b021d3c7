"""The accept queue HAProxy listens with is the one asked for (`loadprofiles.haproxy`'s
``backlog``): `bench/acceptor.py --haproxy-path` gives it Kafka's 50, so the C relay it
measures overflows under the same queue as the broker and the acceptor (HAProxy's default
is the frontend's ``maxconn``, capped by the kernel's ``somaxconn``: thousands)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from loadprofiles.haproxy import HAPROXY, start_haproxy

pytestmark = pytest.mark.skipif(
    not Path(HAPROXY).exists() or shutil.which("ss") is None, reason="needs haproxy and ss"
)


def listen_queue_limit(port: int) -> int:
    """The listening socket's accept-queue limit on 127.0.0.1:`port` (`ss`'s Send-Q for a
    LISTEN socket: the kernel's sk_max_ack_backlog)."""
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert len(rows) == 1, out
    return int(rows[0][2])


@pytest.mark.parametrize("backlog", [50, None])
def test_haproxy_listens_with_the_backlog_asked_for(tmp_path: Path, backlog: int | None) -> None:
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        relay = start_haproxy(
            upstream=("127.0.0.1", upstream.getsockname()[1]),
            send_proxy="off",
            source_ip="127.0.0.1",
            maxconn=200,
            threads=1,
            backlog=backlog,
            workdir=tmp_path,
        )
        with relay:
            limit = listen_queue_limit(relay.address[1])
    if backlog is None:  # HAProxy's default: the frontend's maxconn
        assert limit == 200
    else:
        assert limit == backlog
