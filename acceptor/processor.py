"""Kafka's network processor, as far as it is observable from outside (KIP-402).

Why model it at all when asyncio serves every socket from one loop: the queue of 20 per
processor, the round-robin hand-off that skips full queues, the cap of 20 registrations per
iteration and the one-LRU-eviction-per-iteration rule decide *when* a storm's connections
start being served and *which* ones are shed; the history must show the same shape a broker
would. Each processor is a task with its own new-connection queue and LRU of channels.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from base.history import events
from base.history.rows import AcceptorRegister

if TYPE_CHECKING:
    from collections.abc import Callable

    from acceptor.ports import Channel, NewConnection, ProcessorHost

CONNECTION_QUEUE_SIZE = 20  # Processor.ConnectionQueueSize
#: the `register` row's detail, built once: in_iteration, iteration, queue_depth
_REGISTER_DETAIL = events.detail_template(
    "acceptor", "register", slots=("in_iteration", "iteration", "queue_depth")
)
#: poll timeout when no new connections are queued. An iteration ends with
#: `closeExcessConnections` (one LRU channel), and Kafka's poll returns early on any I/O of
#: the processor's own channels: with idle channels the excess is shed one per processor
#: per 300 ms (measured on Kafka 4.3.1: bench.eviction_pace), under traffic sooner.
POLL_TIMEOUT_S = 0.3


def _resolve(poll: asyncio.Future[None]) -> None:
    if not poll.done():
        poll.set_result(None)


class Processor:
    """Receives `host` (`ports.ProcessorHost`): it opens the channel of a queued socket, says
    whether the broker is over `max.connections`, and carries the configuration (faults,
    idle time) and the history rows. `taken(n)`, if given, hears how many queued sockets an
    iteration registered (a processor in a process of its own returns that much room to the
    accepting process: `acceptor.worker`)."""

    def __init__(
        self,
        host: ProcessorHost,
        listener: str,
        index: int,
        protected: bool,
        taken: Callable[[int], None] | None = None,
    ) -> None:
        self.host = host
        self._taken = taken
        self.listener = listener
        self.index = index
        self.protected = protected
        # the seeded-fault hooks (base.quota.faults): asked once; Kafka's in production
        self._faults = faults = host.cfg.faults.policy()
        self.queue_size = faults.queue_size(CONNECTION_QUEUE_SIZE)
        #: never evicts (the protected listener)
        self.evict_exempt = faults.evict_exempt(protected)
        self.queue: asyncio.Queue[NewConnection] = asyncio.Queue(self.queue_size)
        self.channels: OrderedDict[str, Channel] = OrderedDict()  # LRU order
        self.iteration = 0
        #: the poll in progress (None while an iteration runs): resolved by `wake`
        self._poll: asyncio.Future[None] | None = None
        self._running = asyncio.Event()
        self._running.set()
        self.task: asyncio.Task[None] | None = None

    # -- hand-off from the acceptor ------------------------------------------------------
    def offer(self, item: NewConnection) -> bool:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        self.wake()
        return True

    async def put(self, item: NewConnection) -> None:
        await self.queue.put(item)
        self.wake()

    def wake(self) -> None:
        """Run an iteration now (a new connection queued, a test's resume)."""
        if self._poll is not None:
            _resolve(self._poll)

    # -- test hooks ----------------------------------------------------------------------
    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()
        self.wake()

    def queued(self) -> int:
        """Admitted sockets waiting in the queue (not yet registered)."""
        return self.queue.qsize()

    # -- loop ----------------------------------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()  # once: on CPython 3.11 each call is a getpid()
        while True:
            await self._running.wait()
            self.iteration += 1
            processed = 0
            while processed < self.queue_size:
                try:
                    item = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                self._register(item, processed)
                processed += 1
            if processed and self._taken is not None:
                self._taken(processed)
            self._close_excess()
            self._expire_idle()
            if self.queue.empty():
                await self._wait_for_io(loop)
            else:
                await asyncio.sleep(0)

    async def _wait_for_io(self, loop: asyncio.AbstractEventLoop) -> None:
        """Kafka's `poll(300)`: until `wake` (a queued connection, I/O that matters) or the
        timeout. One future and one timer handle per poll (`asyncio.wait_for` would add a
        task per iteration: the profile's hot spot under a connection storm)."""
        poll: asyncio.Future[None] = loop.create_future()
        self._poll = poll
        timer = loop.call_later(POLL_TIMEOUT_S, _resolve, poll)
        try:
            await poll
        finally:
            timer.cancel()
            self._poll = None

    def _register(self, item: NewConnection, processed: int) -> None:
        host = self.host
        conn = host.open_channel(self, item)
        self.channels[item.info.conn_id] = conn
        now = time.monotonic_ns()
        host.rec.write(
            AcceptorRegister(
                now,
                item.info,
                processor=self.index,
                delay_ms=(now - item.admitted_ns) / 1e6,
                detail=_REGISTER_DETAIL % (processed + 1, self.iteration, self.queue.qsize() + 1),
            )
        )
        run = conn.start()
        if run is not None:
            host.spawn(run)

    def touch(self, conn: Channel) -> None:
        """I/O on one of this processor's channels: it becomes the most recently used, and
        Kafka's poll would return now. An iteration run for it can only matter when there
        is an excess to shed (registrations wake it themselves, idle expiry is coarse), so
        only then is the loop woken."""
        try:
            self.channels.move_to_end(conn.info.conn_id)
        except KeyError:
            pass
        poll = self._poll
        if (
            poll is not None
            and not poll.done()
            and self.host.max_connections_exceeded(self.listener)
        ):
            poll.set_result(None)

    def remove(self, conn: Channel) -> None:
        self.channels.pop(conn.info.conn_id, None)

    def _close_excess(self) -> bool:
        """`closeExcessConnections`: one LRU channel per iteration while over max.connections.

        True when it evicted one.
        """
        if self.evict_exempt or not self.host.max_connections_exceeded(self.listener):
            return False
        # the LRU head (closed ones are already gone)
        for conn in self._faults.eviction_order(self.channels.values()):
            conn.finish("max_connections", evicted=True)
            return True
        return False

    def _expire_idle(self) -> None:
        idle_ms = self.host.cfg.idle_ms
        if idle_ms < 0 or not self.channels:
            return
        deadline = time.monotonic_ns() - idle_ms * 1_000_000
        expired = []
        for conn in self.channels.values():
            if conn.last_active_ns > deadline:
                break
            expired.append(conn)
        for conn in expired:
            conn.finish("idle_timeout")

    # -- shutdown ------------------------------------------------------------------------
    def drain_unregistered(self) -> list[NewConnection]:
        items = []
        while True:
            try:
                items.append(self.queue.get_nowait())
            except asyncio.QueueEmpty:
                return items

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
