"""A stalled admission cancelled at shutdown before its task ever ran: its coroutine is
closed (never awaited, it would warn when collected, and a `filterwarnings = error` run
blames whichever test collects it) and the socket it was admitting is closed."""

from __future__ import annotations

import asyncio
import gc
import inspect
import socket

from acceptor.listener import _settle
from acceptor.ports import NewConnection
from acceptor.recorder import ConnInfo


async def _admission() -> None:  # stands for ListenerAcceptor._admit_after_wait
    await asyncio.sleep(0)


def test_a_cancelled_stall_closes_its_admission_and_socket() -> None:
    loop = asyncio.new_event_loop()
    a, b = socket.socketpair()
    try:
        rest = _admission()
        item = NewConnection(ConnInfo("c1", "client", "127.0.0.1", 1, "127.0.0.1", 1), a, 0)
        task: asyncio.Future[None] = loop.create_future()
        task.cancel()
        _settle(rest, item, task)
        assert inspect.getcoroutinestate(rest) == inspect.CORO_CLOSED  # collecting it: no warning
        del rest
        gc.collect()
        assert a.fileno() == -1
    finally:
        b.close()
        a.close()
        loop.close()


def test_a_finished_stall_leaves_its_socket_to_the_connection() -> None:
    loop = asyncio.new_event_loop()
    a, b = socket.socketpair()
    try:
        rest = _admission()
        rest.close()
        item = NewConnection(ConnInfo("c2", "client", "127.0.0.1", 1, "127.0.0.1", 1), a, 0)
        task: asyncio.Future[None] = loop.create_future()
        task.set_result(None)
        _settle(rest, item, task)
        assert a.fileno() != -1  # admitted: the processor owns it now
    finally:
        a.close()
        b.close()
        loop.close()
