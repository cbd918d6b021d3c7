"""One listener's accept loop: the thin asyncio adapter of `admission.Admission`.

Why we own the accept loop on a raw listening socket instead of `asyncio.start_server`:
`start_server` accepts eagerly, so a rate delay would never stall accepting and the kernel
backlog (`socket.listen.backlog.size`) would never fill, unlike Kafka's single acceptor
thread that sleeps through the delay. Here the admission of one socket runs to completion
(rate step -> delay -> slot wait -> IP rate step -> count check -> hand-off) before the
next socket is taken. Without PROXY headers, a reader callback on the listening socket
accepts and admits socket after socket synchronously (`_turn`); only an admission that must
wait becomes a task, and the listening socket is not watched until it is done. With PROXY
headers, an accept task reads headers (at most `PROXY_PENDING_MAX` at once) and hands each
socket to an admission task (one socket between the two).

Every decision is `Admission`'s (its table is admission's docstring); this module moves
sockets, sleeps, waits for slots and queues, and carries out the actions it is given:
rows, counts, closes, the heartbeat, the hand-off to the processors.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from acceptor.admission import (
    Action,
    Admission,
    AwaitSlot,
    Blocked,
    Close,
    CloseRow,
    ConnRow,
    Count,
    HandOff,
    Held,
    Parked,
    Sleep,
    SlotFreed,
    Stage,
    Stall,
    Unwatch,
    Watch,
)
from acceptor.config import ListenerSettings
from acceptor.ports import NewConnection
from acceptor.recorder import ConnInfo, Recorder
from acceptor.tls import ListenerTls, listener_tls
from base import procfs
from base.history.rows import AcceptorBlocked, AcceptorListenerClose, AcceptorListenerCloseDetail
from base.wire.proxy import ProxyError, ProxyHeaderReader

if TYPE_CHECKING:
    from collections.abc import Callable

    from acceptor.config import AcceptorConfig
    from acceptor.connections import SlotSignal
    from acceptor.heartbeat import Heartbeat
    from acceptor.ports import Counts
    from acceptor.ports import HandOff as Processor
    from base.quota.connections import ConnectionQuotas

    #: an admission's wait: a sleep, a slot wait, or the processor whose full queue it
    #: blocks on
    _Pending = Sleep | AwaitSlot | Processor

#: Kafka's acceptor loop: `select(500)`, then the ready connection, then
#: `closeThrottledConnections` (SocketServer.scala Acceptor.run / acceptNewConnections)
SELECT_TIMEOUT_S = 0.5
#: PROXY listeners: sockets accepted whose header is being read or waits for the hand-off.
#: Accepting stops at this many, so a stalled admission leaves new connections in the
#: kernel backlog as on Kafka's blocking acceptor (without a header: the one hand-off slot
#: plus the one socket waiting for it). Two, so that one silent peer alone cannot stop the
#: listener for `proxy.header.timeout.ms`.
PROXY_PENDING_MAX = 2
_WAITS = (Stage.WAITING, Stage.QUEUE_WAIT)


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _peer(addr: tuple[str, int] | tuple[str, int, int, int]) -> tuple[str, int]:
    return str(addr[0]), int(addr[1])


def _settle(
    rest: Coroutine[Any, Any, None],
    item: NewConnection | None,
    task: asyncio.Future[None],
    abandon: Callable[[NewConnection], None] | None = None,
) -> None:
    """A stalled admission's task is done. Cancelled at shutdown before it ever ran, its
    admission never finished: close that coroutine (never awaited, it would warn when
    collected) and abandon the socket it was admitting (`abandon`, else closed).
    Otherwise both are finished already."""
    rest.close()
    if task.cancelled() and item is not None:
        if abandon is not None:
            abandon(item)
        else:
            _close_quietly(item.sock)


class ListenerAcceptor:
    """Receives its listener's settings and, for every listener alike: the configuration
    (backlog, PROXY timeout, faults), the connection engine, where rows and counts go, the
    slot signal, the loop's heartbeat, a log, the connection ids, and how to make its
    processors (`new_processor(listener, index, protected)`: a `ports.HandOff`)."""

    def __init__(
        self,
        settings: ListenerSettings,
        *,
        cfg: AcceptorConfig,
        quotas: ConnectionQuotas,
        rec: Recorder,
        counts: Counts,
        slots: SlotSignal,
        heartbeat: Heartbeat,
        log: Callable[[str], None],
        next_conn_id: Callable[[str], str],
        new_processor: Callable[[str, int, bool], Processor],
    ) -> None:
        self.settings = settings
        self.name = settings.name
        self.host = settings.host or "0.0.0.0"
        self.port = settings.port
        self.protected = quotas.is_protected(settings.name)
        self._backlog = cfg.backlog
        self._proxy_timeout_s = cfg.proxy_timeout_ms / 1000
        faults = cfg.faults.policy()
        #: every decision: Kafka's admission steps, the parked sockets
        self.admission = Admission(
            settings.name,
            protected=self.protected,
            proxy=settings.proxy,
            quotas=quotas,
            faults=faults,
            clock=time.monotonic_ns,
        )
        # the slot waiters, the loop's heartbeat, every processor
        self.quotas = quotas
        self.slots = slots
        self.heartbeat = heartbeat
        #: the TLS an IP-throttled socket is handshaken with before its close: None (a
        #: quota's close reads no TLS byte) unless a fault hook says otherwise
        self._parked_tls: ListenerTls | None = faults.parked_tls(
            partial(listener_tls, cfg, settings)
        )
        self._parked_transports: dict[int, asyncio.Transport] = {}
        # accepting, and what it records
        self.next_conn_id = next_conn_id
        self.log = log
        self.rec = rec
        self.counts = counts
        self.processors = [
            new_processor(settings.name, i, self.protected)
            for i in range(cfg.quota.num_network_threads)
        ]
        self.current_processor = 0
        self.blocked_ns = 0
        self._lsock: socket.socket | None = None
        self._handoff: asyncio.Queue[NewConnection] = asyncio.Queue(1)
        self._not_blocked = asyncio.Event()
        self._not_blocked.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._header_tasks: set[asyncio.Task[None]] = set()
        # the turn driver (listeners without PROXY headers): the loop, whether it watches
        # the listening socket, the admission waiting out a delay/slot/full queue, the
        # select timeout while sockets are parked
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._stall: asyncio.Task[None] | None = None
        self._select_timer: asyncio.TimerHandle | None = None
        self._stopped = False
        self._proxy_pending = asyncio.Semaphore(PROXY_PENDING_MAX)
        #: what each action does here, but rows and counts (`_run`)
        self._do: dict[type, Callable[[Any], _Pending | None]] = {
            CloseRow: self._close_row,
            Blocked: self._blocked,
            Close: self._close,
            Sleep: _pending,
            AwaitSlot: _pending,
            Stall: self._set_stalled,
            Watch: self._watch,
            Unwatch: self._unwatch_loop,
            HandOff: self._hand_off,
            Parked: self._parked,
            SlotFreed: self._slot_freed,
        }

    # -- start / stop --------------------------------------------------------------------
    def bind(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(self._backlog)
        sock.setblocking(False)
        self._lsock = sock
        self.port = sock.getsockname()[1]

    def start(self) -> None:
        for p in self.processors:
            p.start()
        if self.settings.proxy == "off":
            self._loop = asyncio.get_running_loop()
            self._listen()
        else:
            self._tasks = [
                asyncio.ensure_future(self._accept_loop()),
                asyncio.ensure_future(self._admission_loop()),
            ]

    def tasks(self) -> list[asyncio.Task[None]]:
        """Every task this listener runs (accept, admission, a stalled admission, header
        reads, processors)."""
        out = [*self._tasks, *self._header_tasks]
        if self._stall is not None:
            out.append(self._stall)
        out += [p.task for p in self.processors if p.task is not None]
        return out

    def stop_accepting(self) -> None:
        self._stopped = True
        for t in self._tasks:
            t.cancel()
        for t in list(self._header_tasks):
            t.cancel()
        if self._stall is not None:
            self._stall.cancel()
        self._unwatch()
        if self._lsock is not None:
            # what the close resets: connections the kernel completed that were never
            # accepted (behind a blocked acceptor, a full backlog), for `accounting`
            queued = procfs.accept_queue(self._lsock)
            detail: AcceptorListenerCloseDetail = {} if queued is None else {"queued": queued}
            self.rec.write(
                AcceptorListenerClose(time.monotonic_ns(), listener=self.name, detail=detail)
            )
            self._lsock.close()
            self._lsock = None

    def close_parked(self) -> None:
        self._run(self.admission.close_parked())
        while not self._handoff.empty():  # header read, admission not begun: as a refusal
            self._run(self.admission.stopped(self._handoff.get_nowait()))

    # -- the actions -------------------------------------------------------------------------
    def _run(self, actions: list[Action]) -> _Pending | None:
        """Carry out `actions` in order; a wait, if any, is the last: returned. The
        actions of every admission (rows, counts, the heartbeat's `held`) are carried out
        here, the others by their methods."""
        pending = None
        for action in actions:
            cls = action.__class__  # an identity test: `isinstance` is a call per action
            if cls is Held:  # one per admitted socket
                if TYPE_CHECKING:
                    assert isinstance(action, Held)
                self.heartbeat.held(action.start_ns, action.end_ns)
            elif cls is ConnRow:
                if TYPE_CHECKING:
                    assert isinstance(action, ConnRow)
                self.rec.write(action.row)
            elif cls is Count:
                if TYPE_CHECKING:
                    assert isinstance(action, Count)
                self.counts.count(self.name, action.ip, action.outcome)
            else:
                pending = self._do[cls](action)
        return pending

    def _close_row(self, a: CloseRow) -> None:
        self.rec.closed(a.info, a.mono_ns, a.reason, **a.fields)

    def _blocked(self, a: Blocked) -> None:
        self.blocked_ns += a.end_ns - a.start_ns
        self.rec.write(
            AcceptorBlocked(
                a.end_ns,
                listener=self.name,
                reason=a.reason,
                delay_ms=(a.end_ns - a.start_ns) / 1e6,
                detail={"start_mono_ns": a.start_ns},
            )
        )

    def _close(self, a: Close) -> None:
        sock = a.item.sock
        transport = self._parked_transports.pop(id(a.item), None)
        if transport is not None:
            transport.abort()
        if a.after_s > 0:
            asyncio.get_running_loop().call_later(a.after_s, _close_quietly, sock)
        else:
            _close_quietly(sock)  # the client reads EOF

    def _set_stalled(self, a: Stall) -> None:
        if a.stalled:
            self._not_blocked.clear()
        else:
            self._not_blocked.set()

    def _watch(self, a: Watch) -> None:
        self.heartbeat.arm(a.since_ns)

    def _unwatch_loop(self, a: Unwatch) -> None:
        self.heartbeat.disarm()

    def _slot_freed(self, a: SlotFreed) -> None:
        self.slots.freed()

    def _hand_off(self, a: HandOff) -> _Pending | None:
        """Round-robin from `current_processor`, skipping full queues; when every queue is
        full, the admission blocks on the last one tried (returned)."""
        item = a.item
        try:
            item.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            return self._run(self.admission.unusable(item))
        procs = self.processors
        for _ in procs:
            proc = procs[self.current_processor % len(procs)]
            self.current_processor = (self.current_processor + 1) % len(procs)
            if proc.offer(item):
                return None
        self._run(self.admission.queue_full(item))
        return proc

    def _parked(self, a: Parked) -> None:
        if self._parked_tls is not None:  # a fault hook's: the handshake before the close
            task = asyncio.ensure_future(self._handshake_anyway(a.item, self._parked_tls))
            self._header_tasks.add(task)
            task.add_done_callback(self._header_tasks.discard)

    async def _handshake_anyway(self, item: NewConnection, tls: ListenerTls) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            transport, _ = await loop.connect_accepted_socket(
                asyncio.Protocol, item.sock, ssl=tls.server
            )
            self._parked_transports[id(item)] = transport

    # -- an admission that waits ---------------------------------------------------------------
    async def _drive(self, item: NewConnection, pending: _Pending) -> None:
        """Wait as told until the admission is decided: a sleep, a slot, a full queue."""
        admission = self.admission
        next_: _Pending | None = pending
        try:
            while next_ is not None:
                if isinstance(next_, Sleep):
                    await asyncio.sleep(next_.seconds)
                    next_ = self._run(admission.woken(item))
                elif isinstance(next_, AwaitSlot):
                    await self.slots.wait(next_.timeout_s)
                    next_ = self._run(admission.woken(item))
                else:
                    await next_.put(item)
                    next_ = self._run(admission.queued(item))
        except asyncio.CancelledError:  # shutdown mid-admission: do not leak it
            self._abandon(item)
            raise

    def _abandon(self, item: NewConnection) -> None:
        """The socket in admission will not be admitted (shutdown, a bug): it is closed,
        and the listener and the heartbeat no longer wait for it."""
        admission = self.admission
        if admission.current is item and admission.stage in _WAITS:
            with contextlib.suppress(Exception):
                self._run(admission.stopped(item))
                return
        _close_quietly(item.sock)
        self._not_blocked.set()

    def _admit_guarded(self, item: NewConnection) -> _Pending | None:
        """`Admission.admit`, except that a bug closes this one socket (the acceptor
        outlives it)."""
        try:
            return self._run(self.admission.admit(item))
        except Exception as exc:
            self._admission_failed(item, exc)
            return None

    def _admission_failed(self, item: NewConnection, exc: Exception) -> None:
        self.log(f"admission of {item.info.conn_id} failed: {exc!r}")
        self._abandon(item)

    async def _finish_admission(
        self, rest: Coroutine[Any, Any, None], item: NewConnection | None
    ) -> None:
        """Await the rest of an admission; a bug closes its socket."""
        try:
            await rest
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the acceptor must outlive one bad socket
            if item is None:
                raise
            self._admission_failed(item, exc)

    # -- accepting without a PROXY header: Kafka's acceptor loop, on readiness -------------
    def _listen(self) -> None:
        """Kafka's `select(500)`: watch the listening socket, and while throttled sockets are
        parked, time the select out after `SELECT_TIMEOUT_S`."""
        if self._stopped or self._lsock is None or self._loop is None:
            return
        if not self._reading:
            self._loop.add_reader(self._lsock.fileno(), self._turn)
            self._reading = True
        if self._select_timer is not None:
            self._select_timer.cancel()
            self._select_timer = None
        if self.admission.parked:
            self._select_timer = self._loop.call_later(SELECT_TIMEOUT_S, self._select_timed_out)

    def _unwatch(self) -> None:
        """No reader on the listening socket, no select timeout."""
        if self._reading and self._loop is not None and self._lsock is not None:
            self._loop.remove_reader(self._lsock.fileno())
            self._reading = False
        if self._select_timer is not None:
            self._select_timer.cancel()
            self._select_timer = None

    def _select_timed_out(self) -> None:
        self._select_timer = None
        self._close_due_parked()
        self._listen()

    def _close_due_parked(self) -> None:
        """Kafka's `closeThrottledConnections`: every parked socket with end < now."""
        self._run(self.admission.due())

    def _turn(self) -> None:
        """The listening socket is readable: accept what the kernel has queued, one socket
        at a time, each admitted before the next is taken and followed by
        `closeThrottledConnections` (Kafka's acceptor loop). At most one backlog's worth per
        turn, so the loop's other work interleaves. An admission that must wait (rate
        delay, slot, full processor queues) stops the watching until it is done: new
        connections stay in the kernel backlog, as behind Kafka's blocked acceptor thread.
        No future, task or hand-off per socket: a storm is drained in one callback."""
        lsock = self._lsock
        if lsock is None:
            return
        name = self.name
        admission = self.admission
        family = lsock.family
        for _ in range(self._backlog):
            try:
                # `socket.accept` without its wrapper, which reads the listening socket's
                # family and type back as enums (four Python calls a socket)
                fd, addr = lsock._accept()  # type: ignore[attr-defined]
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # EMFILE and friends: back off, as Kafka's acceptor does
                self._stop_listening(self._accept_failed(exc), None)
                return
            sock = socket.socket(family, socket.SOCK_STREAM, 0, fd)
            sock.setblocking(False)
            ip, port = addr[0], addr[1]  # `_peer`, read in place (an IPv6 scope dropped)
            info = ConnInfo(self.next_conn_id(name), name, ip, port, ip, port)
            item = NewConnection(info, sock, time.monotonic_ns())
            pending = self._admit_guarded(item)
            if pending is not None:
                self._stop_listening(self._drive(item, pending), item)
                return
            if admission.parked:
                self._close_due_parked()
        self._listen()

    def _stop_listening(self, rest: Coroutine[Any, Any, None], item: NewConnection | None) -> None:
        """Stop watching the listening socket while `rest` (an admission's wait, or the
        back-off after a failed accept) runs; then close what is due and turn again."""
        self._unwatch()
        self._stall = task = asyncio.ensure_future(self._stalled(rest, item))
        task.add_done_callback(partial(_settle, rest, item, abandon=self._abandon))

    async def _stalled(self, rest: Coroutine[Any, Any, None], item: NewConnection | None) -> None:
        try:
            await self._finish_admission(rest, item)
        finally:
            self._stall = None
        if self.admission.parked:
            self._close_due_parked()
        if not self._stopped:
            self._turn()

    async def _accept_failed(self, exc: OSError) -> None:
        self.log(f"accept on {self.name} failed: {exc!r}; retrying")
        await asyncio.sleep(0.1)

    # -- accepting with a PROXY header ------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._lsock is not None
        lsock = self._lsock
        pending = self._proxy_pending
        while True:
            await self._not_blocked.wait()
            await pending.acquire()  # released once the header's socket is handed off
            try:
                sock, addr = await loop.sock_accept(lsock)
            except OSError as exc:  # EMFILE and friends: back off, as Kafka's acceptor does
                pending.release()
                self.log(f"accept on {self.name} failed: {exc!r}; retrying")
                await asyncio.sleep(0.1)
                continue
            now = time.monotonic_ns()
            ip, port = _peer(addr)
            info = ConnInfo(self.next_conn_id(self.name), self.name, ip, port, ip, port)
            task = asyncio.ensure_future(self._read_proxy_header(NewConnection(info, sock, now)))
            self._header_tasks.add(task)
            task.add_done_callback(self._header_tasks.discard)

    async def _read_proxy_header(self, item: NewConnection) -> None:
        try:
            await self._proxy_then_hand_off(item)
        finally:
            self._proxy_pending.release()

    async def _proxy_then_hand_off(self, item: NewConnection) -> None:
        loop = asyncio.get_running_loop()
        admission = self.admission
        sock = item.sock
        reader = ProxyHeaderReader(optional=self.settings.proxy == "optional")
        deadline = loop.time() + self._proxy_timeout_s
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                data = await asyncio.wait_for(loop.sock_recv(sock, 512), remaining)
                if not data:
                    why = ("client_eof", "EOF before a PROXY header")
                    self._run(admission.header_failed(item, *why))
                    return
                result = reader.feed(data)
                if result is not None:
                    break
        except TimeoutError:
            admitted, actions = admission.header_timed_out(item, reader.done)
            self._run(actions)  # an optional header that never began: admitted as is
            if not admitted:
                return
        except ProxyError as exc:
            self._run(admission.header_failed(item, "bad_proxy_header", str(exc)))
            return
        except OSError as exc:
            self._run(admission.header_failed(item, "reset", repr(exc)))
            return
        except asyncio.CancelledError:  # shutdown while waiting for the header
            why = ("shutdown", "stopped before a PROXY header")
            self._run(admission.header_failed(item, *why))
            raise
        else:
            header, item.initial = result
            item.proxied = header is not None
            self._run(admission.header_read(item, header))
        try:
            await self._handoff.put(item)
        except asyncio.CancelledError:  # shutdown while the hand-off slot was taken
            self._run(admission.stopped(item))
            raise

    # -- admission (Kafka's acceptor thread) -----------------------------------------------
    async def _admission_loop(self) -> None:
        """One turn per accepted socket, as Kafka's acceptor thread: wait for a socket (at
        most `SELECT_TIMEOUT_S` while throttled sockets are parked: its `select(500)`),
        admit it (delays and slot waits included), then close the parked sockets whose
        throttle has ended. So a throttled socket closes at the first turn strictly after
        its end: on an idle listener at the 500 ms timeout, never during a delay or slot
        wait (measured on Kafka 4.3.1: bench.throttle_close)."""
        handoff = self._handoff
        admission = self.admission
        while True:
            if admission.parked:
                try:
                    item: NewConnection | None = await asyncio.wait_for(
                        handoff.get(), SELECT_TIMEOUT_S
                    )
                except TimeoutError:
                    item = None
            else:
                item = await handoff.get()
            if item is not None:
                pending = self._admit_guarded(item)
                if pending is not None:
                    await self._finish_admission(self._drive(item, pending), item)
            if admission.parked:
                self._close_due_parked()


def _pending(a: Sleep | AwaitSlot) -> Sleep | AwaitSlot:
    return a
