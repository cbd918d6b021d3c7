"""bench.accept_floor: the floor fronts really accept and close on real sockets (each counts
what it accepted), the front specs are checked, and the summary pairs rounds with direct."""

from __future__ import annotations

import os
import socket
import time

import pytest

from base import procfs
from base.localnet import free_port
from bench.accept_floor import FloorFront, parse_front, summarize


def wait_for(cond, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("close", ("close", 1)),
        ("close:4", ("close", 4)),
        ("loop:1", ("loop", 1)),
        ("handoff:3", ("handoff", 3)),
        ("kafka:3", ("kafka", 3)),
    ],
)
def test_front_specs(spec: str, want: tuple[str, int]) -> None:
    assert parse_front(spec) == want


@pytest.mark.parametrize(
    "spec", ["accept:1", "close:0", "close:x", "loop:2", "handoff:0", "kafka:0", ""]
)
def test_bad_front_specs_are_refused_with_the_spec(spec: str) -> None:
    with pytest.raises(ValueError, match=repr(spec)):
        parse_front(spec)


def test_close_front_accepts_in_several_processes_and_closes_each_at_once() -> None:
    front = FloorFront.start("close:3", free_port(), life_s=60)
    pgid = front.leader.pid
    assert pgid is not None
    try:
        for _ in range(30):
            with socket.create_connection(("127.0.0.1", front.port), timeout=5) as c:
                assert c.recv(1) == b""  # closed by the front without a word
        assert wait_for(lambda: front.accepted() == 30)
        # the leader and the two it forks (from a big pytest process a fork can take longer
        # than thirty connections served by the first child)
        assert wait_for(lambda: len(group_pids(pgid)) == 3)
    finally:
        front.stop()
    # every process of the front is gone: none left running (one the kernel keeps as a zombie
    # until a reaper this test does not own collects it has ended all the same)
    assert wait_for(lambda: not group_pids(pgid))


def group_pids(pgid: int) -> list[int]:
    pids = []
    for pid in (int(e.name) for e in procfs.PROC.iterdir() if e.name.isdigit()):
        try:
            stat = procfs.read_stat(pid)
        except OSError:
            continue
        if stat.pgrp == pgid and stat.state != "Z":
            pids.append(pid)
    return pids


@pytest.mark.parametrize(("own", "same_session"), [(True, False), (False, True)])
def test_a_front_has_a_session_of_its_own_unless_asked_to_share_the_loads(
    own: bool, same_session: bool
) -> None:
    front = FloorFront.start("close:1", free_port(), life_s=60, own_session=own)
    try:
        pid = front.leader.pid
        assert pid is not None
        # setsid/setpgid run first thing in the child: wait until its group is its own
        assert wait_for(lambda: os.getpgid(pid) == pid)
        assert (os.getsid(pid) == os.getsid(0)) is same_session
    finally:
        front.stop()


@pytest.mark.parametrize("spec", ["loop:1", "handoff:2", "kafka:2"])
def test_loop_handoff_kafka_fronts_close_on_the_clients_eof_only(spec: str) -> None:
    front = FloorFront.start(spec, free_port(), life_s=60)
    pgid = front.leader.pid
    assert pgid is not None
    try:
        for _ in range(3):  # handoff, kafka: both processors get one (kafka: each close is
            # released in the accepting process's engine, which raises on an unknown address)
            with socket.create_connection(("127.0.0.1", front.port), timeout=5) as c:
                c.settimeout(0.3)
                with pytest.raises(TimeoutError):  # open while the client is
                    c.recv(1)
                c.settimeout(5)
                c.shutdown(socket.SHUT_WR)
                assert c.recv(1) == b""
        assert wait_for(lambda: front.accepted() == 3)
        with socket.create_connection(("127.0.0.1", front.port), timeout=5) as c:
            c.shutdown(socket.SHUT_WR)  # still accepting after the releases
            assert c.recv(1) == b""
    finally:
        front.stop()
    assert wait_for(lambda: not group_pids(pgid))  # none of its processes left running


def row(path: str, rnd: int, conn: float | None, overflows: int = 0) -> dict[str, object]:
    r: dict[str, object] = {
        "path": path,
        "round": rnd,
        "ListenOverflows": overflows,
        "TCPSynRetrans": 1,
        "OutRsts": 2,
    }
    if conn is not None:
        r["conn_per_s"] = conn
    return r


def test_summary_ratios_pair_each_round_with_direct() -> None:
    rows = [
        row("direct", 1, 1000, overflows=3),
        row("close:1", 1, 500, overflows=100),
        row("close:1", 2, 900, overflows=20),
        row("direct", 2, 3000, overflows=0),
    ]
    s = summarize(rows)
    assert s["direct"]["ratio"] == 1.0
    assert s["close:1"]["conn_per_s"] == 700
    assert s["close:1"]["ratio"] == 700 / 2000
    assert s["close:1"]["ratio_per_round"] == [0.5, 0.3]
    assert s["close:1"]["ListenOverflows"] == 120
    assert s["direct"]["ListenOverflows"] == 3
    assert s["close:1"]["OutRsts"] == 4


def test_summary_without_a_counted_direct_round_gives_no_ratio() -> None:
    s = summarize([row("direct", 1, None), row("loop:1", 1, 400)])
    assert s["loop:1"]["ratio"] is None
    assert s["loop:1"]["ratio_per_round"] == []
    assert s["direct"]["conn_per_s"] is None
