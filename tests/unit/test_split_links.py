"""The pieces of the split process model that need no processes: the shared counts, what a
processor process reads of them, and the link's messages (a real socketpair, one loop)."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

from acceptor.messages import Conn, Count, Ready, Release, Request, Took
from acceptor.ports import NewConnection
from acceptor.recorder import ConnInfo
from acceptor.split import BATCH_MAX, LAZY_S, Link, SharedCounts, hand_off_op
from acceptor.worker import RemoteCounts


def test_shared_counts_are_read_back_by_another_mapping_of_the_same_memory() -> None:
    writer = SharedCounts(3)
    reader = SharedCounts(3, os.dup(writer.fd))
    writer.publish(7, 5)
    assert reader.read() == (7, 5, 0)
    assert not reader.requests_enabled()
    reader.released(1, 4)  # processor process 1 made four releases; none counted yet
    assert writer.read() == (7, 5, 4)
    writer.publish(3, 5, True, 1, 4)  # the accepting process counted them
    assert reader.read() == (3, 5, 0)
    assert reader.requests_enabled()  # a request quota exists (set once, never unset)
    reader.close()
    writer.close()


class _Ops:
    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []

    def queue(self, op: tuple[Any, ...]) -> None:
        self.ops.append(op)


def test_a_release_on_its_way_is_not_evicted_for_twice() -> None:
    """Over the limit by one: the processor evicts one; until the accepting process has
    counted that release, the shared total still says over, but the release is counted."""
    shared = SharedCounts(2)
    link = _Ops()
    counts = RemoteCounts(link, shared, 1, {"CLIENT": False, "INTERNAL": True})  # type: ignore[arg-type]
    shared.publish(4, 3)
    assert counts.max_connections_exceeded("CLIENT")
    assert not counts.max_connections_exceeded("INTERNAL")  # exempt (protected)
    counts.release("CLIENT", "127.0.0.2")
    assert link.ops == [Release("CLIENT", "127.0.0.2")]
    assert not counts.max_connections_exceeded("CLIENT")  # 4 - 1 on its way = 3
    shared.publish(3, 3, False, 1, 1)  # counted: nothing on its way any more
    assert not counts.max_connections_exceeded("CLIENT")
    shared.publish(4, 3, False, 0, 0)  # another admission (another process's count unchanged)
    assert counts.max_connections_exceeded("CLIENT")
    shared.close()


def test_another_processs_release_on_its_way_ends_the_excess_for_every_process() -> None:
    """Kafka's processors share one count that `dec` lowers at once: a connection another
    processor process closed is no excess to evict for, even before the accepting
    process has its release (a clean `eviction-order` run in `split` evicted one too many
    without this)."""
    shared = SharedCounts(2)
    theirs, ours = _Ops(), _Ops()
    other = RemoteCounts(theirs, shared, 0, {"CLIENT": False})  # type: ignore[arg-type]
    mine = RemoteCounts(ours, shared, 1, {"CLIENT": False})  # type: ignore[arg-type]
    shared.publish(9, 8)
    assert mine.max_connections_exceeded("CLIENT")
    other.release("CLIENT", "127.0.0.3")  # its client closed: 8 open
    assert not mine.max_connections_exceeded("CLIENT")
    shared.publish(8, 8, False, 0, 1)  # the accepting process counted it
    assert not mine.max_connections_exceeded("CLIENT")
    assert not other.max_connections_exceeded("CLIENT")
    shared.close()


def test_the_link_carries_ops_in_batches_and_a_socket_with_its_op() -> None:
    async def run() -> tuple[list[Any], bytes, list[str]]:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        got: list[Any] = []
        fds: list[int] = []
        events: list[str] = []
        done = asyncio.Event()

        def on_ops(ops: list[Any], new_fds: list[int]) -> None:
            got.extend(ops)
            fds.extend(new_fds)
            if Ready() in ops:
                done.set()

        ours = Link(a, loop, lambda ops, fds: None, lambda: events.append("a eof"))
        theirs = Link(b, loop, on_ops, lambda: events.append("b eof"))
        x, y = socket.socketpair()
        info = ConnInfo("CLIENT-1-1", "CLIENT", "127.0.0.2", 4000, "127.0.0.1", 4001)
        item = NewConnection(info, x, 11, initial=b"rest", proxied=True, admitted_ns=12)
        ours.send([hand_off_op(item, 2)], x)
        assert x.fileno() == -1  # sent: the local copy is closed
        for i in range(BATCH_MAX + 5):
            ours.queue(Count("CLIENT", "127.0.0.2", str(i)))
        ours.queue(Ready())
        await asyncio.wait_for(done.wait(), 5)
        received = socket.socket(fileno=fds[0])
        y.sendall(b"ping")
        data = received.recv(4)
        received.close()
        y.close()
        ours.close()
        await asyncio.sleep(0.05)
        theirs.close()
        return got, data, events

    got, data, events = asyncio.run(run())
    assert got[0] == Conn(
        2, "CLIENT", "CLIENT-1-1", "127.0.0.2", 4000, "127.0.0.1", 4001, 11, 12, False,
        True, b"rest", int(socket.AF_UNIX),
    )  # fmt: skip
    assert got[0].initial == b"rest" and got[0].family == socket.AF_UNIX  # read by name
    counts = [op for op in got if isinstance(op, Count)]
    assert [op.outcome for op in counts] == [str(i) for i in range(BATCH_MAX + 5)]  # in order
    assert data == b"ping"  # the socket that crossed is the same connection
    assert events == ["b eof"]  # the peer's end is heard once, by the other side


def test_a_full_kernel_buffer_keeps_messages_in_order_until_the_peer_reads() -> None:
    async def run() -> list[int]:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        ours = Link(a, loop, lambda ops, fds: None, lambda: None)
        got: list[int] = []
        for i in range(2000):
            ours.send([Took("x" * 200, i, 0)])
        assert ours.pending() > 0  # the kernel's buffer filled: the rest waits, in order
        theirs = Link(
            b, loop, lambda ops, fds: got.extend(op.processor for op in ops), lambda: None
        )
        for _ in range(500):
            if len(got) == 2000:
                break
            await asyncio.sleep(0.01)
        ours.close()
        theirs.close()
        return got

    assert asyncio.run(run()) == list(range(2000))


def test_lazy_ops_ride_with_the_next_batch_or_go_alone_after_lazy_s() -> None:
    """The metrics' counters never cost a message of their own while releases flow, and
    never wait longer than `LAZY_S` when none do."""

    async def run() -> list[tuple[float, list[Any]]]:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        messages: list[tuple[float, list[Any]]] = []
        ours = Link(a, loop, lambda ops, fds: None, lambda: None)
        theirs = Link(b, loop, lambda ops, fds: messages.append((loop.time(), ops)), lambda: None)
        t0 = loop.time()
        ours.queue_lazy(Request("c", 1.0))
        ours.queue_lazy(Count("CLIENT", "127.0.0.2", "closed"))
        ours.queue(Release("CLIENT", "127.0.0.2"))  # this turn's batch takes them along
        await asyncio.sleep(0.02)
        assert [m[1] for m in messages] == [
            [Request("c", 1.0), Count("CLIENT", "127.0.0.2", "closed"),
             Release("CLIENT", "127.0.0.2")]
        ]  # fmt: skip
        ours.queue_lazy(Request("c", 2.0))  # alone: sent when LAZY_S is over
        t1 = loop.time()
        await asyncio.sleep(LAZY_S + 0.2)
        ours.queue_lazy(Request("c", 3.0))
        assert ours.pending() == 1
        ours.flush()  # a shutdown's last flush takes the lazy ones too
        await asyncio.sleep(0.02)
        ours.close()
        theirs.close()
        return [(t0, []), (t1, []), *messages]

    (_, _), (t1, _), _first, second, third = asyncio.run(run())
    assert second[1] == [Request("c", 2.0)]
    assert LAZY_S * 0.9 <= second[0] - t1  # not sent with nothing to ride on before LAZY_S
    assert third[1] == [Request("c", 3.0)]


@pytest.mark.parametrize("processes", [1, 3])
def test_shared_counts_size_follows_the_processes(processes: int) -> None:
    shared = SharedCounts(processes)
    shared.released(processes - 1, 9)
    shared.publish(1, 2, False, processes - 1, 9)
    assert shared.read() == (1, 2, 0)
    with pytest.raises(IndexError):
        shared.released(processes, 1)
    with pytest.raises(IndexError):
        shared.publish(1, 2, False, processes, 1)
    shared.close()
