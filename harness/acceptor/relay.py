"""What a registered connection decides, apart from how its bytes move (that is
`forwarding.ProtoConnection`, the thin asyncio adapter): the connection's record and
counters, opening the client side then the upstream, one request in flight
(`inflight.RequestGate`) with its KIP-219 throttle timer, the step that handles one request
the gate releases, the answers to the broker's responses, the close after a bad frame, and
the one `finish()` that releases the counts and writes the `close` row.

Why a base class: the adapter only moves bytes, so every decision about requests, throttles
and ends reads here without the transports in the way. The adapter supplies how each side is
opened (`_open_client`, `_open_upstream`, `_started`), its two sides and how to reset one
(`_sides`, `_abort`), `forward` and `_readable_again` (what to do when the gate lets the
next request through).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from harness.acceptor import intake
from harness.acceptor.broker_charge import network_estimate
from harness.acceptor.inflight import RequestGate
from harness.acceptor.intake import close_reason, take_requests
from harness.acceptor.recorder import ConnInfo
from harness.acceptor.tracker import ResponseOrder
from harness.wire.framing import FrameDecoder, FrameError, correlation_id_of_response

if TYPE_CHECKING:
    from harness.acceptor.broker_charge import LoggedRequest, RequestLog
    from harness.acceptor.ports import ChannelSlot, ConnectionHost

UPSTREAM_CONNECT_TIMEOUT_S = 10.0
#: after the broker's EOF, how long the client has to read what it was sent and close
UPSTREAM_EOF_GRACE_S = 1.0
LINGER_RST = struct.pack("ii", 1, 0)


def _charge_late(
    charge: Callable[[LoggedRequest | None], None], log: RequestLog, addr: str, cid: int
) -> None:
    charge(log.take(addr, cid))


class Closable(Protocol):
    def close(self) -> None: ...


def set_rst_on_close(sock: socket.socket | None) -> None:
    """SO_LINGER 0: the close that follows sends a reset, not an orderly FIN."""
    if sock is None:
        return
    with contextlib.suppress(OSError, ValueError):  # ValueError: uvloop, fd already gone
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)


class Relay:
    """Receives what it calls back (`host`: admin answers, the request charge, the end) and
    its processor (`processor`: LRU order, removal); satisfies `ports.Channel`."""

    def __init__(
        self,
        host: ConnectionHost,
        processor: ChannelSlot,
        info: ConnInfo,
        sock: socket.socket,
        initial: bytes,
        protected: bool,
    ) -> None:
        self.host = host
        self.processor = processor
        self.last_active_ns = time.monotonic_ns()
        self.started_ns = self.last_active_ns
        # the connection's record, as admitted
        self.info = info
        self.sock = sock
        self.initial = initial  # read with the PROXY header, before the upstream is up
        self.protected = protected
        self.closed = False
        self.close_reason: str | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.requests = 0
        self.muted_until_ns = 0
        self.gate = RequestGate()  # one request in flight (Kafka's KIP-219 mute)
        #: the broker's request log (handler times to charge), if the acceptor reads one
        self.charges: RequestLog | None = None
        #: the upstream socket's own address as the broker's connection id names it
        self.upstream_addr: str | None = None
        self._order = ResponseOrder()
        #: charges asked of another process (the split model), by correlation id: the
        #: instant the meters there recorded it (its `request` row carries it, so the
        #: checker replays the meters as they ran) and, with the broker's log read, what
        #: the log said (handler ns or None, network ns, held ns: `RequestGate.logged`)
        self.asked: dict[int, tuple[int, tuple[int | None, int, int] | None]] | None = None
        #: an admin answer is being built in another process (`deferred_answer`): nothing
        #: more is taken from the client until it is sent
        self.awaiting_answer = False
        self._client_eof = False
        self._upstream_eof = False
        self._timers: list[asyncio.TimerHandle] = []
        #: while run() waits for the client's first bytes before opening the upstream
        self._first_bytes: asyncio.Future[None] | None = None
        self._opening = False  # the client transport is being made (run() closes it)
        self._reset = False  # finish() asked for a reset (SO_LINGER 0) rather than a FIN
        # (reason, detail) of the bad frame the connection is closing after, if any
        self._closing: tuple[str, dict[str, Any]] | None = None

    # -- what a flavour supplies ------------------------------------------------------------
    async def _open_client(self) -> None:
        """Hand the client socket to the loop (the flavour keeps what it gets)."""
        raise NotImplementedError

    async def _open_upstream(self, host: str, port: int) -> Closable:
        """Connect to the broker; returns what to close if the connection ended meanwhile."""
        raise NotImplementedError

    def _started(self, upstream: Closable) -> None:
        """Both sides are up: start moving bytes (`upstream` is what `_open_upstream` made)."""
        raise NotImplementedError

    def _sides(self) -> tuple[Closable | None, Closable | None]:
        """The client side and the upstream side, once made."""
        raise NotImplementedError

    def _abort(self, side: Any) -> None:
        """Close one side with a reset (SO_LINGER 0), not an orderly FIN."""
        raise NotImplementedError

    def _transport_made(self) -> bool:
        """Whether the client socket was handed to a transport (which then closes it)."""
        return self._sides()[0] is not None

    def _close_transports(self, reset: bool) -> None:
        for side in self._sides():
            if side is None:
                continue
            if reset:
                self._abort(side)
            else:
                side.close()

    def _readable_again(self) -> None:
        """The gate lets the next request through (its response was sent, its throttle
        is over)."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------
    def start(self) -> Coroutine[Any, Any, None] | None:
        """What the processor runs for the newly registered connection: `run()`, or None
        when it has already ended. A client that closed (or reset) before sending a byte is
        closed here, as Kafka's processor closes it at its first poll, without a transport
        or a task: a connect-and-close storm (Trogdor's CONNECT, a TCP health check) costs
        one peek per connection."""
        if not self.initial:
            try:
                if self.sock.recv(1, socket.MSG_PEEK) == b"":
                    self.finish("client_eof")
                    return None
            except (BlockingIOError, InterruptedError):
                pass  # connected and silent so far: the usual case
            except OSError as exc:
                self.finish("reset", reset=True, detail={"error": repr(exc)})
                return None
        return self.run()

    async def run(self) -> None:
        """Open the client side; once the client has sent its first bytes, the upstream;
        then hand over to the transports' callbacks, which move bytes until `finish`. A
        client that closes (or is evicted, or expires) without a byte never reaches the
        broker, as none of its bytes would have: Trogdor's CONNECT storm costs the broker
        nothing it would not see directly."""
        if self.closed:
            return
        self._opening = True
        try:
            await self._open_client()
        except OSError:
            self._opening = False
            with contextlib.suppress(OSError):
                self.sock.close()
            self.finish("reset")
            return
        self._opening = False
        if self.closed:  # ended while the transport was made (a client EOF: a FIN, as Kafka)
            self._close_transports(self._reset)
            return
        if not self.initial:
            self._first_bytes = asyncio.get_running_loop().create_future()
            await self._first_bytes  # the client's first bytes, or finish()
            self._first_bytes = None
            if self.closed:
                return
        upstream_host, upstream_port = self.host.upstream(self.info.listener)
        try:
            async with asyncio.timeout(UPSTREAM_CONNECT_TIMEOUT_S):
                upstream = await self._open_upstream(upstream_host, upstream_port)
        except (OSError, TimeoutError) as exc:
            self.finish("upstream_unreachable", detail={"error": repr(exc)})
            return
        if self.closed:
            upstream.close()
            return
        self._started(upstream)  # from here on the transports' callbacks move the bytes

    def upstream_wanted(self) -> None:
        """The client sent its first bytes: run() opens the upstream now."""
        first = self._first_bytes
        if first is not None and not first.done():
            first.set_result(None)

    def received(self, decoder: FrameDecoder, data: bytes) -> bool:
        """Client bytes, cut into requests, into the gate. True when a bad frame ends the
        reading: the whole requests before it are still answered, then the connection
        closes with its reason (`close_after_answers`)."""
        try:
            frames = decoder.feed(data)
        except FrameError as exc:  # whole requests before a bad size still get answers
            self.gate.received(exc.frames, exc)
            self.close_after_answers(exc)
            return True
        self.gate.received(frames, None)
        return False

    def internal_error(self, exc: Exception) -> None:
        """A bug must end this connection visibly, not leak it."""
        self.host.log(f"{self.info.conn_id}: internal error {exc!r}")
        self.finish("internal_error", reset=True, detail={"error": repr(exc)})

    def touch(self) -> None:
        self.last_active_ns = time.monotonic_ns()
        self.processor.touch(self)

    def later(self, delay_s: float, fn: Callable[..., object], *args: Any) -> None:
        """A timer that `finish()` cancels."""
        self._timers.append(asyncio.get_running_loop().call_later(delay_s, fn, *args))

    def mute(self, until_ns: int) -> None:
        """KIP-219: the request in flight is throttled until `until_ns` (called before its
        response is written): nothing more is taken from the client until then."""
        self.muted_until_ns = max(self.muted_until_ns, until_ns)
        self.gate.throttle_started()
        self.later(max(0.0, (self.muted_until_ns - time.monotonic_ns()) / 1e9), self._unmute)

    def _unmute(self) -> None:
        if self.closed or not self.muted_until_ns:  # an earlier timer already ended it
            return
        early_ns = self.muted_until_ns - time.monotonic_ns()
        if early_ns > 0:  # timers may fire a little early (ms resolution): wait the rest
            self.later(early_ns / 1e9, self._unmute)
            return
        self.muted_until_ns = 0
        if self.gate.throttle_ended():
            self._readable_again()

    def may_pipeline(self) -> bool:
        """Whether requests may pass the gate as they come: none can be throttled (no
        request quota was ever set) and no broker request log is read for their charges
        (`inflight`, "pipelined")."""
        return self.charges is None and not self.host.request_quotas_enabled()

    def step(self, item: bytes | FrameError, to_client: Callable[[bytes], None]) -> bool:
        """Handle one item the gate released; False once the connection is finished. A
        request forwarded with `forward` whose response is owed holds the gate (muted, or
        outstanding while pipelined) until its response is sent; one answered here, or a
        Produce with acks=0 (the broker's no-op response), releases it at once."""
        if isinstance(item, FrameError):  # every request before it is answered
            self.finish(item.reason)
            return False
        forwarded, owed, deferred, stopped = take_requests(
            self.host.admin,
            self,
            self._order,
            [item],
            time.monotonic_ns(),
            to_client,
        )
        if stopped is not None:  # unreadable header, refused admin request: Kafka closes
            self.finish(stopped.reason, detail={"error": str(stopped)})
            return False
        if deferred:  # answered once built elsewhere: the gate waits for it
            self.awaiting_answer = True
            return True
        if not forwarded:  # answered here: the answer is written
            self.gate.response_sent()
            return True
        self.forward(item)
        if not owed:
            self.gate.response_sent()  # acks=0: the broker's no-op response
        return True

    def forward(self, frame: bytes) -> None:
        raise NotImplementedError

    def write_client(self, data: bytes) -> None:
        """Send bytes the acceptor built to the client."""
        raise NotImplementedError

    def deferred_answer(
        self, correlation_id: int, response: bytes | None, error: tuple[str, str] | None = None
    ) -> None:
        """The answer built in another process for the request awaiting it (`step`): sent
        in its turn, then requests are taken again; or the close it asked for (`error`:
        reason and message, as a refused admin request closes a connection)."""
        if self.closed or not self.awaiting_answer:
            return
        self.awaiting_answer = False
        if response is None:
            reason, message = error or ("admin_error", "no answer")
            self.finish(reason, detail={"error": message})
            return
        out = self._order.ready(correlation_id, response)
        if out:
            self.write_client(out[0] if len(out) == 1 else b"".join(out))
        self.gate.response_sent()
        self._readable_again()

    def answers(self, frames: list[bytes], arrived_ns: int | None = None) -> tuple[bytes, int]:
        """The broker's responses as sent to the client (`request` rows, request-quota
        charge, throttle_time_ms raised), and how many answered a request (one in flight;
        several, pipelined).

        `arrived_ns`: when they were read, if they were held for the broker's log line
        (latency is measured to then; the charge and the throttle are made now)."""
        now = time.monotonic_ns()
        read_ns = now if arrived_ns is None else arrived_ns
        out: list[bytes] = []
        answered = 0
        charges, addr = self.charges, self.upstream_addr
        for frame in frames:
            cid = correlation_id_of_response(frame)
            before, done, after = self._order.response(cid, len(frame), read_ns)
            if done is not None:
                gate = self.gate
                asked = self.asked.pop(cid, None) if self.asked else None
                if asked is not None and asked[1] is not None:  # the log was read for it
                    gate.logged(*asked[1])
                elif charges is not None and addr is not None and gate.charge_source != "late":
                    gate.logged(*self.log_line(charges, addr, cid, done.latency_ns, now - read_ns))
                at = now if asked is None else asked[0]
                frame = self.host.request_done(self, done, at, frame)
                late = gate.on_logged  # the charge waits for the line (request_done set it)
                if late is not None and charges is not None and addr is not None:
                    gate.on_logged = None
                    charges.wait(
                        addr, cid, partial(_charge_late, late, charges, addr, cid), late=True
                    )
                answered += 1
            out.extend(before)
            out.append(frame)
            out.extend(after)
        payload = out[0] if len(out) == 1 else b"".join(out)
        self.bytes_out += len(payload)
        return payload, answered

    @staticmethod
    def log_line(
        charges: RequestLog, addr: str, cid: int, broker_ns: int, held_ns: int
    ) -> tuple[int | None, int, int]:
        """What the broker's log said of request `cid` (taken once), as `RequestGate.logged`
        takes it: its handler time (None: no line) and network-thread estimate, and how
        long its response was held."""
        logged = charges.take(addr, cid)
        if logged is None:
            return None, 0, held_ns
        return logged.local_ns, network_estimate(logged, broker_ns), held_ns

    def close_after_answers(self, exc: FrameError) -> None:
        """A bad frame: nothing more is read from the client; the connection closes with
        the frame's reason once the gate reaches it (every request before it answered), or
        after `CLOSE_GRACE_S`."""
        self._closing = (exc.reason, {"error": str(exc)})
        self.later(intake.CLOSE_GRACE_S, self._grace_over)

    def _grace_over(self) -> None:
        self.finish("close_grace_expired", detail={"unanswered": len(self._order)})

    def finish(
        self,
        reason: str,
        *,
        reset: bool = False,
        evicted: bool = False,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """End the connection once: close both sides, release counts, write `close`."""
        if self.closed:
            return
        reason, detail = close_reason(self._closing, reason, detail, evicted)
        self.closed = True
        self.close_reason = reason
        self._reset = reset
        if self.charges is not None and self.upstream_addr is not None:
            self.charges.unregister(self.upstream_addr)
        for timer in self._timers:
            timer.cancel()
        self.upstream_wanted()  # run() stops waiting for first bytes that will not come
        self._close_transports(reset)
        if not self._transport_made() and not self._opening:
            with contextlib.suppress(OSError):  # never handed to the loop
                self.sock.close()
        now = time.monotonic_ns()
        d: dict[str, Any] = {
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "requests": self.requests,
            "duration_ms": (now - self.started_ns) / 1e6,
        }
        if detail:
            d.update(detail)
        self.host.connection_closed(self, reason, now, d, evicted=evicted)
