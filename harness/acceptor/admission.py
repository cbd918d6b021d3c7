"""One listener's acceptor: the accept loop and Kafka's admission steps (reference §0.3).

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

States of one accepted socket (the table of §0.3):

    accepted --proxy header?--> read header (timeout) --bad--> closed (bad_proxy_header)
    accepted --rate step------> delay (acceptor sleeps, listener stalls)
             --slot wait------> blocked until a release frees a slot
             --IP rate--------> parked (never counted) --turn of the loop, now > end--> closed
             --IP count-------> closed at once (reject; client sees EOF)
             --else-----------> counted -> processor queue (blocking on the last one) -> register
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import socket
import time
from collections.abc import Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from harness import procfs
from harness.acceptor.config import ListenerSettings
from harness.acceptor.ports import NewConnection
from harness.acceptor.recorder import ConnInfo, Recorder
from harness.acceptor.tls import listener_tls
from harness.history import events
from harness.quota.connections import Outcome
from harness.wire.proxy import ProxyError, ProxyHeaderReader

if TYPE_CHECKING:
    from collections.abc import Callable

    from harness.acceptor.config import AcceptorConfig
    from harness.acceptor.connections import SlotSignal
    from harness.acceptor.heartbeat import Heartbeat
    from harness.acceptor.ports import Counts, HandOff
    from harness.quota.connections import ConnectionQuotas

SLOT_WAIT_POLL_S = 0.5
#: Kafka's acceptor loop: `select(500)`, then the ready connection, then
#: `closeThrottledConnections` (SocketServer.scala Acceptor.run / acceptNewConnections)
SELECT_TIMEOUT_S = 0.5
#: PROXY listeners: sockets accepted whose header is being read or waits for the hand-off.
#: Accepting stops at this many, so a stalled admission leaves new connections in the
#: kernel backlog as on Kafka's blocking acceptor (without a header: the one hand-off slot
#: plus the one socket waiting for it). Two, so that one silent peer alone cannot stop the
#: listener for `proxy.header.timeout.ms`.
PROXY_PENDING_MAX = 2
#: the seeded fault `ip_count_reject_close_late`: how late a rejected socket is closed
REJECT_LATE_S = 0.4


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _peer(addr: tuple[str, int] | tuple[str, int, int, int]) -> tuple[str, int]:
    return str(addr[0]), int(addr[1])


def _settle(
    rest: Coroutine[Any, Any, None], item: NewConnection | None, task: asyncio.Future[None]
) -> None:
    """A stalled admission's task is done. Cancelled at shutdown before it ever ran, its
    admission never started: close that coroutine (never awaited, it would warn when
    collected) and the socket it was admitting. Otherwise both are finished already."""
    rest.close()
    if task.cancelled() and item is not None:
        with contextlib.suppress(OSError):
            item.sock.close()


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
        new_processor: Callable[[str, int, bool], HandOff],
    ) -> None:
        self.settings = settings
        self.name = settings.name
        self.host = settings.host or "0.0.0.0"
        self.port = settings.port
        self.protected = quotas.is_protected(settings.name)
        self._accept_detail = events.detail("acceptor", "accept", protected=self.protected)
        self._backlog = cfg.backlog
        self._proxy_timeout_s = cfg.proxy_timeout_ms / 1000
        # admission: the engine, the slot waiters, the loop's heartbeat, every processor
        self.quotas = quotas
        self.slots = slots
        self.heartbeat = heartbeat
        faults = cfg.faults
        # Seeded faults (harness.quota.faults): read once; False in production.
        self._f_no_wait = "rate_delay_not_waited" in faults
        self._f_double = "delay_doubled" in faults
        self._f_slot_wait = "slot_wait_while_free" in faults
        self._f_reject_late = "ip_count_reject_close_late" in faults
        self._f_proxy_ignored = "proxy_source_ignored" in faults
        self._f_unrecorded = "accept_unrecorded" in faults
        #: SEEDED FAULT `tls_before_quota`: the TLS a throttled socket is handshaken with
        #: first (None in production: a quota's close never reads a TLS byte)
        self._f_tls = listener_tls(cfg, settings) if "tls_before_quota" in faults else None
        self._f_tls_transports: dict[int, asyncio.Transport] = {}
        self._admissions = 0  # sockets taken, for the seeded fault above
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
        #: IP-throttled sockets by (end ms, arrival order)
        self._parked: list[tuple[int, int, NewConnection]] = []
        self._park_seq = itertools.count()
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
            self.rec.row(
                "listener_close",
                time.monotonic_ns(),
                listener=self.name,
                detail={} if queued is None else {"queued": queued},
            )
            self._lsock.close()
            self._lsock = None

    def close_parked(self) -> None:
        while self._parked:
            self._close_parked_one(heapq.heappop(self._parked), "shutdown")
        while not self._handoff.empty():  # header read, admission not begun: as a refusal
            item = self._handoff.get_nowait()
            self._refuse(
                item.sock, item.info, item.tcp_accept_ns, "shutdown", "stopped before admission"
            )

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
        if self._parked:
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
        for _ in range(self._backlog):
            try:
                sock, addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # EMFILE and friends: back off, as Kafka's acceptor does
                self._stop_listening(self._accept_failed(exc), None)
                return
            sock.setblocking(False)
            ip, port = _peer(addr)
            info = ConnInfo(self.next_conn_id(name), name, ip, port, ip, port)
            item = NewConnection(info, sock, time.monotonic_ns())
            rest = self._admit_guarded(item)
            if rest is not None:
                self._stop_listening(rest, item)
                return
            if self._parked:
                self._close_due_parked()
        self._listen()

    def _stop_listening(self, rest: Coroutine[Any, Any, None], item: NewConnection | None) -> None:
        """Stop watching the listening socket while `rest` (an admission's wait, or the
        back-off after a failed accept) runs; then close what is due and turn again."""
        self._unwatch()
        self._stall = task = asyncio.ensure_future(self._stalled(rest, item))
        task.add_done_callback(partial(_settle, rest, item))

    async def _stalled(self, rest: Coroutine[Any, Any, None], item: NewConnection | None) -> None:
        try:
            await self._finish_admission(rest, item)
        finally:
            self._stall = None
        if self._parked:
            self._close_due_parked()
        if not self._stopped:
            self._turn()

    async def _accept_failed(self, exc: OSError) -> None:
        self.log(f"accept on {self.name} failed: {exc!r}; retrying")
        await asyncio.sleep(0.1)

    async def _finish_admission(
        self, rest: Coroutine[Any, Any, None], item: NewConnection | None
    ) -> None:
        """Await the rest of an admission; a shutdown or a bug closes its socket."""
        try:
            await rest
        except asyncio.CancelledError:  # shutdown mid-admission: do not leak it
            if item is not None:
                with contextlib.suppress(OSError):
                    item.sock.close()
            raise
        except Exception as exc:  # the acceptor must outlive one bad socket
            if item is None:
                raise
            self._admission_failed(item, exc)

    def _admit_guarded(self, item: NewConnection) -> Coroutine[Any, Any, None] | None:
        """`_admit`, except that a bug closes this one socket (the acceptor outlives it)."""
        try:
            return self._admit(item)
        except Exception as exc:
            self._admission_failed(item, exc)
            return None

    def _admission_failed(self, item: NewConnection, exc: Exception) -> None:
        self.log(f"admission of {item.info.conn_id} failed: {exc!r}")
        with contextlib.suppress(OSError):
            item.sock.close()

    # -- accepting with a PROXY header ------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._lsock is not None
        lsock = self._lsock
        mode = self.settings.proxy
        pending = self._proxy_pending
        while True:
            await self._not_blocked.wait()
            if mode != "off":
                await pending.acquire()  # released once the header's socket is handed off
            try:
                sock, addr = await loop.sock_accept(lsock)
            except OSError as exc:  # EMFILE and friends: back off, as Kafka's acceptor does
                if mode != "off":
                    pending.release()
                self.log(f"accept on {self.name} failed: {exc!r}; retrying")
                await asyncio.sleep(0.1)
                continue
            now = time.monotonic_ns()
            ip, port = _peer(addr)
            info = ConnInfo(self.next_conn_id(self.name), self.name, ip, port, ip, port)
            if mode == "off":
                await self._handoff.put(NewConnection(info, sock, now))
            else:
                task = asyncio.ensure_future(self._read_proxy_header(sock, info, now))
                self._header_tasks.add(task)
                task.add_done_callback(self._header_tasks.discard)

    async def _read_proxy_header(self, sock: socket.socket, info: ConnInfo, tcp_ns: int) -> None:
        try:
            await self._proxy_then_hand_off(sock, info, tcp_ns)
        finally:
            self._proxy_pending.release()

    async def _proxy_then_hand_off(self, sock: socket.socket, info: ConnInfo, tcp_ns: int) -> None:
        loop = asyncio.get_running_loop()
        reader = ProxyHeaderReader(optional=self.settings.proxy == "optional")
        deadline = loop.time() + self._proxy_timeout_s
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                data = await asyncio.wait_for(loop.sock_recv(sock, 512), remaining)
                if not data:
                    self._refuse(sock, info, tcp_ns, "client_eof", "EOF before a PROXY header")
                    return
                result = reader.feed(data)
                if result is not None:
                    break
        except TimeoutError:
            if self.settings.proxy == "optional" and not reader.done:
                result = (None, b"")  # a silent client without a header: admit as is
            else:
                self._refuse(sock, info, tcp_ns, "proxy_timeout", "no PROXY header in time")
                return
        except ProxyError as exc:
            self._refuse(sock, info, tcp_ns, "bad_proxy_header", str(exc))
            return
        except OSError as exc:
            self._refuse(sock, info, tcp_ns, "reset", repr(exc))
            return
        except asyncio.CancelledError:  # shutdown while waiting for the header
            self._refuse(sock, info, tcp_ns, "shutdown", "stopped before a PROXY header")
            raise
        header, rest = result
        if (
            header is not None
            and header.src_ip is not None
            and header.src_port is not None
            and not self._f_proxy_ignored  # SEEDED FAULT: keyed by the proxy's address
        ):
            info.client_ip, info.client_port = header.src_ip, header.src_port
        try:
            await self._handoff.put(NewConnection(info, sock, tcp_ns, rest, header is not None))
        except asyncio.CancelledError:  # shutdown while the hand-off slot was taken
            self._refuse(sock, info, tcp_ns, "shutdown", "stopped before admission")
            raise

    def _refuse(
        self, sock: socket.socket, info: ConnInfo, tcp_ns: int, reason: str, why: str
    ) -> None:
        """A socket that never reached admission: closed, never counted."""
        with contextlib.suppress(OSError):
            sock.close()
        self.rec.closed(
            info, time.monotonic_ns(), reason, error=why, counted=False, tcp_accept_mono_ns=tcp_ns
        )
        self.counts.count(self.name, info.client_ip, "closed")

    # -- admission (Kafka's acceptor thread) -----------------------------------------------
    async def _admission_loop(self) -> None:
        """One turn per accepted socket, as Kafka's acceptor thread: wait for a socket (at
        most `SELECT_TIMEOUT_S` while throttled sockets are parked: its `select(500)`),
        admit it (delays and slot waits included), then close the parked sockets whose
        throttle has ended. So a throttled socket closes at the first turn strictly after
        its end: on an idle listener at the 500 ms timeout, never during a delay or slot
        wait (measured on Kafka 4.3.1: bench.throttle_close)."""
        handoff = self._handoff
        while True:
            if self._parked:
                try:
                    item: NewConnection | None = await asyncio.wait_for(
                        handoff.get(), SELECT_TIMEOUT_S
                    )
                except TimeoutError:
                    item = None
            else:
                item = await handoff.get()
            if item is not None:
                rest = self._admit_guarded(item)
                if rest is not None:
                    await self._finish_admission(rest, item)
            if self._parked:
                self._close_due_parked()

    def _admit(self, item: NewConnection) -> Coroutine[Any, Any, None] | None:
        """Kafka's admission steps for one socket, as far as they need no wait; the rest is
        returned as a coroutine when they do (a rate delay, a slot, full processor queues),
        None when the socket is decided."""
        quotas = self.quotas
        rec = self.rec
        info = item.info
        name = self.name
        if self._f_unrecorded:  # SEEDED FAULT: one socket in 100 closed with no row
            self._admissions += 1
            if self._admissions % 100 == 0:
                with contextlib.suppress(OSError):
                    item.sock.close()
                return None
        t0_ns = time.monotonic_ns()
        t0 = t0_ns // 1_000_000
        if self.settings.proxy != "off":
            detail: dict[str, object] | str = {
                "protected": self.protected,
                "tcp_accept_mono_ns": item.tcp_accept_ns,
                "proxy_header": item.proxied,
            }
        else:
            detail = self._accept_detail  # the hot path: built once
        rec.conn("accept", info, t0_ns, detail=detail)
        self.counts.count(name, info.client_ip, "accepted")

        step = quotas.record_connection_rate(name, t0)
        if step.delay_ms > 0:
            rec.conn(
                "delay",
                info,
                t0_ns,
                delay_ms=float(step.delay_ms),
                reason=step.reason,
                detail={
                    "broker_delay_ms": step.broker_delay_ms,
                    "listener_delay_ms": step.listener_delay_ms,
                },
            )
            self.counts.count(name, info.client_ip, "delayed")
            wait_ms = step.delay_ms
            if self._f_no_wait:  # SEEDED FAULT: recorded, not waited
                wait_ms = 0
            elif self._f_double:  # SEEDED FAULT: twice the delay
                wait_ms = 2 * wait_ms
            if wait_ms > 0 or not quotas.slot_available(name):
                return self._admit_after_wait(item, t0_ns, wait_ms)
        elif not quotas.slot_available(name):
            return self._admit_after_wait(item, t0_ns, 0)
        return self._decide(item, t0_ns, at_once=True)

    async def _admit_after_wait(self, item: NewConnection, t0_ns: int, wait_ms: int) -> None:
        await self._wait_for_slot(t0_ns, wait_ms)
        rest = self._decide(item, t0_ns)
        if rest is not None:
            await rest

    def _decide(
        self, item: NewConnection, t0_ns: int, *, at_once: bool = False
    ) -> Coroutine[Any, Any, None] | None:
        """After the delay and the slot: the IP rate and count steps, then counted and
        handed to a processor (the returned coroutine blocks on a full queue). `at_once`:
        no wait since the accept, so any time since is the process's own stall."""
        quotas = self.quotas
        rec = self.rec
        info = item.info
        name = self.name
        t1_ns = time.monotonic_ns()
        if at_once:
            self.heartbeat.held(t0_ns, t1_ns)
        t1 = t1_ns // 1_000_000
        adm = quotas.admit(name, info.client_ip, t1)
        if adm.outcome is Outcome.THROTTLED_IP:
            item.throttle_ms, item.throttled_ns = adm.throttle_ms, t1_ns
            self._park(item, t1)
            return None
        if adm.outcome is Outcome.REJECTED_IP_COUNT:
            if self._f_reject_late:  # SEEDED FAULT: the close comes 400 ms late
                asyncio.get_running_loop().call_later(REJECT_LATE_S, _close_quietly, item.sock)
            else:
                with contextlib.suppress(OSError):
                    item.sock.close()  # the client reads EOF
            rec.conn(
                "reject",
                info,
                t1_ns,
                reason="ip_count",
                detail={"count": adm.ip_count, "max": adm.ip_limit},
            )
            self.counts.count(name, info.client_ip, "rejected")
            return None
        rec.conn("admit", info, t1_ns, delay_ms=(t1_ns - t0_ns) / 1e6)
        try:
            item.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            quotas.release(name, info.client_ip)
            self.slots.freed()
            with contextlib.suppress(OSError):
                item.sock.close()
            rec.closed(info, time.monotonic_ns(), "reset", registered=False)
            return None
        item.protected, item.admitted_ns = self.protected, t1_ns
        return self._hand_off(item)

    async def _wait_for_slot(self, t0_ns: int, delay_ms: int) -> None:
        """`waitForConnectionSlot`: sleep out the delay, then wait for a free slot."""
        quotas = self.quotas
        t0_ms = t0_ns // 1_000_000
        start = time.monotonic_ns()
        reason = "rate" if delay_ms > 0 else "slot"
        end_ms = t0_ms + delay_ms
        self._not_blocked.clear()
        missed_free_slot = self._f_slot_wait
        heartbeat = self.heartbeat
        heartbeat.arm(t0_ns)  # measure the loop's stalls while this admission waits
        try:
            while True:
                remaining = end_ms - time.monotonic_ns() // 1_000_000
                if remaining > 0:
                    await asyncio.sleep(remaining / 1000)
                    continue
                if missed_free_slot:  # SEEDED FAULT: wait for a release before looking
                    missed_free_slot = False
                    reason = "rate+slot" if reason == "rate" else reason
                    await self.slots.wait(SLOT_WAIT_POLL_S)
                    continue
                if quotas.slot_available(self.name):
                    break
                if reason == "rate":
                    reason = "rate+slot"
                await self.slots.wait(SLOT_WAIT_POLL_S)
        finally:
            heartbeat.disarm()
            self._not_blocked.set()
        self._blocked(start, reason)

    def _blocked(self, start_ns: int, reason: str) -> None:
        end = time.monotonic_ns()
        self.blocked_ns += end - start_ns
        self.rec.row(
            "blocked",
            end,
            listener=self.name,
            reason=reason,
            delay_ms=(end - start_ns) / 1e6,
            detail={"start_mono_ns": start_ns},
        )

    def _hand_off(self, item: NewConnection) -> Coroutine[Any, Any, None] | None:
        """Round-robin from `current_processor`, skipping full queues; when every queue is
        full, the returned coroutine blocks on the last one tried."""
        procs = self.processors
        for _ in procs:
            proc = procs[self.current_processor % len(procs)]
            self.current_processor = (self.current_processor + 1) % len(procs)
            if proc.offer(item):
                return None
        return self._block_on(proc, item)

    async def _block_on(self, proc: HandOff, item: NewConnection) -> None:
        start = time.monotonic_ns()
        self._not_blocked.clear()
        try:
            await proc.put(item)
        finally:
            self._not_blocked.set()
        self._blocked(start, "queue_full")

    # -- IP-rate throttled sockets ---------------------------------------------------------
    def _park(self, item: NewConnection, t1_ms: int) -> None:
        if not self._parked:  # its close is timed by the loop: measure the loop's stalls
            self.heartbeat.arm()
        heapq.heappush(self._parked, (t1_ms + item.throttle_ms, next(self._park_seq), item))
        if self._f_tls is not None:  # SEEDED FAULT: the handshake before the quota's close
            task = asyncio.ensure_future(self._handshake_anyway(item))
            self._header_tasks.add(task)
            task.add_done_callback(self._header_tasks.discard)

    async def _handshake_anyway(self, item: NewConnection) -> None:
        assert self._f_tls is not None
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            transport, _ = await loop.connect_accepted_socket(
                asyncio.Protocol, item.sock, ssl=self._f_tls.server
            )
            self._f_tls_transports[id(item)] = transport

    def _close_due_parked(self) -> None:
        """Kafka's `closeThrottledConnections`: every parked socket with end < now."""
        now_ms = time.monotonic_ns() // 1_000_000
        while self._parked and self._parked[0][0] < now_ms:
            self._close_parked_one(heapq.heappop(self._parked), "ip_rate")

    def _close_parked_one(self, entry: tuple[int, int, NewConnection], reason: str) -> None:
        end_ms, _, item = entry
        if not self._parked:  # the last one: nothing left whose close the loop times
            self.heartbeat.disarm()
        transport = self._f_tls_transports.pop(id(item), None)  # the seeded fault's
        if transport is not None:
            transport.abort()
        with contextlib.suppress(OSError):
            item.sock.close()
        self.rec.conn(
            "throttle_close",
            item.info,
            time.monotonic_ns(),
            reason="ip_rate",
            delay_ms=float(item.throttle_ms),
            detail={
                "throttle_start_mono_ns": item.throttled_ns,
                "end_ms": end_ms,
                "closed_by": reason,
            },
        )
        self.counts.count(self.name, item.info.client_ip, "throttle_closed")
