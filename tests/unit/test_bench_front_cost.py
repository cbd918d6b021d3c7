"""bench.toolkit.front_load's stand-in broker and frames: every whole request frame gets one answer
carrying its correlation id, however the bytes are cut, and the load reads it whole."""

from __future__ import annotations

import socket
import struct
from typing import Any

from bench.front_cost import LOOP_OWN, STAGES, stage_shares
from bench.toolkit.front_load import (
    BODY,
    METADATA,
    FrameReader,
    _Answerer,
    _FloorClient,
    bare_load,
    frame,
    paired_ratios,
)


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


def answers_to(chunks: list[bytes], body: bytes = BODY) -> list[int]:
    """The correlation ids of the stand-in's answers to `chunks`, in order."""
    proto, transport = _Answerer(body), _Transport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    for chunk in chunks:
        proto.data_received(chunk)
    data = b"".join(transport.written)
    ids = []
    while data:
        (size,) = struct.unpack_from(">i", data)
        assert size == 4 + len(body)
        ids.append(struct.unpack_from(">i", data, 4)[0])
        data = data[4 + size :]
    return ids


def test_each_whole_frame_is_answered_with_its_correlation_id() -> None:
    a, b, c = frame(18, 3, 7, bytes(20)), frame(0, 3, 8, bytes(3000)), frame(3, 1, 9, b"")
    stream = a + b + c
    assert answers_to([stream]) == [7, 8, 9]
    assert answers_to([stream[i : i + 5] for i in range(0, len(stream), 5)]) == [7, 8, 9]
    assert answers_to([stream[:-1]]) == [7, 8]  # the last frame is not whole yet
    assert answers_to([stream], bytes(70_000)) == [7, 8, 9]  # --response-bytes: a fetch's size


def test_frame_reader_returns_whole_frames_one_at_a_time() -> None:
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(5)
        reader = FrameReader(right)
        left.sendall(METADATA[:3])
        left.sendall(METADATA[3:] + METADATA + METADATA[:2])
        assert reader.next() == METADATA
        assert reader.next() == METADATA
        left.close()
        try:
            reader.next()
        except ConnectionError:
            pass
        else:
            raise AssertionError("EOF before a whole frame must raise")


def test_a_bare_connection_is_a_connect_and_a_close_with_nothing_sent() -> None:
    srv = socket.create_server(("127.0.0.1", 0), backlog=50)
    with srv:
        srv.settimeout(5)
        bare_load(srv.getsockname()[1], 3)
        for _ in range(3):
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(5)
                assert conn.recv(1) == b""  # the client's FIN, no byte before it


def test_paired_ratios_are_taken_within_each_round() -> None:
    def row(r: int, path: str, us: float) -> dict[str, Any]:
        return {"round": r, "path": path, "conn": {"cpu_us": us}}

    # the machine ran twice as slow in round 2: per round the acceptor is 0.9x, 0.8x, 1.0x
    rows = [row(1, "acceptor", 90), row(1, "ref", 100), row(2, "ref", 200)]
    rows += [row(2, "acceptor", 160), row(3, "acceptor", 100), row(3, "ref", 100)]
    got = paired_ratios(rows, "acceptor", "ref", "conn")
    assert got == {"median": 0.9, "low": 0.8, "high": 1.0}
    rows.append(row(4, "acceptor", 50))  # a round without the other path: not a pair
    assert paired_ratios(rows, "acceptor", "ref", "conn") == got
    assert (
        paired_ratios([row(1, "acceptor", 5), row(1, "ref", 0)], "acceptor", "ref", "conn") is None
    )


def test_stage_shares_split_the_event_loops_samples_by_the_first_stage_in_each_stack() -> None:
    loop = "main (harness/cli.py:55);run_forever (loop.c:1);Loop__run (loop.c:2)"
    raw = "\n".join(
        [
            f"{loop};ListenerAcceptor._turn (acceptor/listener.py:270);accept4 (libc) 3",
            # a callback nested in another stage's frame counts for the outer stage
            f"{loop};Processor._run (acceptor/processor.py:1);data_received (x.py:1) 2",
            f"{loop};_Side.data_received (acceptor/forwarding.py:80);write (libc) 4",
            f"{loop};uv__io_poll (linux.c:1);epoll_pwait (libc) 1",
            # another thread's samples (history's writer) are not the loop's
            "thread (0x1);HistoryWriter._run (base/history/writer.py:1) 50",
            "not a stack line",
        ]
    )
    shares = stage_shares(raw)
    assert shares["accept and admission"] == 0.3
    assert shares["hand-off and registration"] == 0.2
    assert shares["bytes and requests"] == 0.4
    assert shares[LOOP_OWN] == 0.1
    assert sum(shares.values()) == 1.0
    assert stage_shares("thread (0x1);x (y.py:1) 5") == {}


def test_the_stages_name_frames_that_exist() -> None:
    """A renamed method would silently move its samples to the loop's own work."""
    from acceptor import forwarding, listener, processor

    owners = {
        "ListenerAcceptor": listener.ListenerAcceptor,
        "Processor": processor.Processor,
        "AsyncioWire": forwarding.AsyncioWire,
        "_FloorClient": _FloorClient,
    }
    for _, keys in STAGES:
        for key in keys:
            owner, _, method = key.partition(".")
            if owner in owners:
                assert hasattr(owners[owner], method), key
    for method in ("data_received", "connection_made", "eof_received", "connection_lost"):
        assert hasattr(forwarding._Side, method) and hasattr(_FloorClient, method)
