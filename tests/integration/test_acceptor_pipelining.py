"""Pipelined requests pass the acceptor as they come while no request can be throttled, and
go one at a time (Kafka's muted channel) once a request quota exists.

Without any request quota, Kafka's processor still reads one request at a time, but nothing
the client sees depends on it (no throttle can delay a later request), so the acceptor
forwards what a client pipelines at once and the broker behind reads it one at a time
itself (a producer's batches then cost one upstream write each, not one round trip). A
stand-in upstream that answers only once it holds `expect` requests (or after
`HOLD_S`) shows which: with pipelining it holds all three before its first answer; with a
request quota set (for another client: Kafka's `quotasEnabled` is global), it holds one.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptor import AcceptorHandle, start_in_thread
from acceptor.testing import (
    StandInUpstream,
    api_versions_frame,
    history_rows,
    wait_until,
)
from base.wire.framing import FrameDecoder

HOLD_S = 2.0


class HoldingUpstream(StandInUpstream):
    """Answers each request frame with its correlation id, but the first answer waits until
    `expect` requests arrived (or `HOLD_S` passed); records how many it held then."""

    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.held_at_first_answer: list[int] = []
        super().__init__(self._answer)

    def _answer(self, conn: socket.socket) -> None:
        decoder = FrameDecoder(1 << 20)
        pending: list[bytes] = []
        deadline = time.monotonic() + HOLD_S
        first = True
        with conn:
            while True:
                conn.settimeout(max(deadline - time.monotonic(), 0.01) if first else None)
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    data = None
                except OSError:
                    return
                if data == b"":
                    return
                if data:
                    pending.extend(decoder.feed(data))
                if first and len(pending) < self.expect and time.monotonic() < deadline:
                    continue
                if first:
                    self.held_at_first_answer.append(len(pending))
                    first = False
                for frame in pending:
                    conn.sendall(struct.pack(">i", 4) + frame[8:12])  # correlation id only
                pending = []


@pytest.fixture
def upstream() -> Iterator[HoldingUpstream]:
    up = HoldingUpstream(expect=3)
    yield up
    up.close()


@pytest.fixture
def acceptor(upstream: HoldingUpstream, tmp_path: Path) -> Iterator[AcceptorHandle]:
    handle = start_in_thread(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": f"127.0.0.1:{upstream.port}",
            "metrics.port": "-1",
        },
        history_dir=tmp_path / "history",
        run_id="pipelining",
    )
    yield handle
    handle.stop()


def three_pipelined(addr: tuple[str, int]) -> list[int]:
    """Send three requests in one write; the correlation ids of the three answers."""
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(b"".join(api_versions_frame(i) for i in (1, 2, 3)))
        decoder = FrameDecoder(1 << 20)
        frames: list[bytes] = []
        while len(frames) < 3:
            data = s.recv(65536)
            assert data, "the acceptor closed the connection"
            frames.extend(decoder.feed(data))
    return [struct.unpack_from(">i", f, 4)[0] for f in frames]


def test_pipelined_requests_pass_at_once_while_no_request_quota_exists(
    acceptor: AcceptorHandle, upstream: HoldingUpstream
) -> None:
    assert three_pipelined(acceptor.address("CLIENT")) == [1, 2, 3]
    assert upstream.held_at_first_answer == [3]  # all three reached it before any answer
    wait_until(lambda: len(history_rows(acceptor, "request")) == 3, 10, what="request rows")


def test_one_request_in_flight_once_a_request_quota_exists(
    acceptor: AcceptorHandle, upstream: HoldingUpstream
) -> None:
    # what AlterClientQuotas does (its wire path needs a real broker for the client's own
    # ApiVersions): a quota for another client enables quotas for all (`quotasEnabled`)
    dynamic = acceptor.acceptor.dynamic
    acceptor.call(dynamic.set_request_quota, None, "someone-else", "request_percentage", 50.0)
    assert three_pipelined(acceptor.address("CLIENT")) == [1, 2, 3]
    # the second is read only once the first was answered, which the upstream held: it had
    # one request when it gave up waiting for three (after HOLD_S)
    assert upstream.held_at_first_answer == [1]
