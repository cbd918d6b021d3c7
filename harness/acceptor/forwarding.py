"""One registered connection as two asyncio Protocols (client side, upstream side).

Why callbacks rather than streams: per new connection, streams cost two StreamReader/
StreamWriter pairs and two pump tasks, and every read wakes a future; with Protocols the
bytes go from `data_received` to the other transport's `write` synchronously. Semantics are
those of `connection.Connection` (frames checked and forwarded unchanged, admin answered
locally, responses matched for `request` rows, half-closes and resets propagated, one
request in flight with Kafka's KIP-219 mute (`inflight.RequestGate`), one `finish()` per
connection); `acceptor.io=streams` keeps the stream version.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from typing import TYPE_CHECKING, Any

from harness.acceptor import intake
from harness.acceptor.inflight import RequestGate, expects_response
from harness.acceptor.intake import close_reason, take_requests
from harness.acceptor.recorder import ConnInfo
from harness.acceptor.tracker import ResponseOrder
from harness.wire.framing import FrameDecoder, FrameError, correlation_id_of_response

if TYPE_CHECKING:
    from harness.acceptor.processor import Processor
    from harness.acceptor.server import Acceptor

UPSTREAM_CONNECT_TIMEOUT_S = 10.0
UPSTREAM_EOF_GRACE_S = 1.0
_LINGER_RST = struct.pack("ii", 1, 0)


def _abort_with_rst(transport: asyncio.BaseTransport | None) -> None:
    if transport is None:
        return
    with contextlib.suppress(OSError, ValueError):
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


def _nowhere(data: bytes) -> None:
    """No client transport (never happens once data flows): local answers have nowhere to go."""


class _Side(asyncio.Protocol):
    def __init__(self, conn: ProtoConnection, client: bool) -> None:
        self.conn = conn
        self.client = client

    def data_received(self, data: bytes) -> None:
        if self.client:
            self.conn.on_client_data(data)
        else:
            self.conn.on_upstream_data(data)

    def eof_received(self) -> bool:
        return self.conn.on_eof(self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.on_lost(self.client, exc)

    def pause_writing(self) -> None:  # our write buffer towards this side is full
        self.conn.pause_reading(not self.client, "backpressure")

    def resume_writing(self) -> None:
        self.conn.resume_reading(not self.client, "backpressure")


class ProtoConnection:
    def __init__(
        self,
        acceptor: Acceptor,
        processor: Processor,
        info: ConnInfo,
        sock: socket.socket,
        initial: bytes,
        protected: bool,
    ) -> None:
        self.acceptor = acceptor
        self.processor = processor
        self.info = info
        self.sock = sock
        self.protected = protected
        self.last_active_ns = time.monotonic_ns()
        self.started_ns = self.last_active_ns
        self.closed = False
        self.close_reason: str | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.requests = 0
        self.muted_until_ns = 0
        self._client_eof = False
        self._upstream_eof = False
        self._order = ResponseOrder()
        self.gate = RequestGate()
        self._initial = initial  # read with the PROXY header, before the upstream is up
        self._req_decoder = FrameDecoder(acceptor.cfg.quota.socket_request_max_bytes)
        self._resp_decoder = FrameDecoder(2**31 - 1)
        self._ct: asyncio.Transport | None = None
        self._ut: asyncio.Transport | None = None
        self._paused: dict[bool, set[str]] = {True: set(), False: set()}
        self._timers: list[asyncio.TimerHandle] = []
        self._done = asyncio.Event()
        self._opening = False
        # (reason, detail) of the bad frame the connection is closing after, if any
        self._closing: tuple[str, dict[str, Any]] | None = None

    # -- lifecycle -----------------------------------------------------------------------
    async def run(self) -> None:
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        spec = self.acceptor.cfg.listener(self.info.listener)
        self._opening = True
        try:
            ct, _ = await loop.connect_accepted_socket(lambda: _Side(self, True), self.sock)
        except OSError:
            self._opening = False
            with contextlib.suppress(OSError):
                self.sock.close()
            self.finish("reset")
            return
        self._opening = False
        self._ct = ct
        if self.closed:
            _abort_with_rst(ct)
            return
        try:
            ut, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Side(self, False), spec.upstream_host, spec.upstream_port
                ),
                UPSTREAM_CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as exc:
            self.finish("upstream_unreachable", detail={"error": repr(exc)})
            return
        if self.closed:
            ut.close()
            return
        self._ut = ut
        for t in (ct, ut):
            with contextlib.suppress(OSError, ValueError):
                t.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._initial:
            initial, self._initial = self._initial, b""
            self.on_client_data(initial, counted=True)
        self._pump()
        await self._done.wait()

    def touch(self) -> None:
        self.last_active_ns = time.monotonic_ns()
        self.processor.touch(self)

    # -- flow control --------------------------------------------------------------------
    def _transport(self, client: bool) -> asyncio.Transport | None:
        return self._ct if client else self._ut

    def pause_reading(self, client: bool, why: str) -> None:
        reasons = self._paused[client]
        if not reasons:
            t = self._transport(client)
            if t is not None and not t.is_closing():
                t.pause_reading()
        reasons.add(why)

    def resume_reading(self, client: bool, why: str) -> None:
        reasons = self._paused[client]
        reasons.discard(why)
        if not reasons and not self.closed:
            t = self._transport(client)
            if t is not None and not t.is_closing():
                t.resume_reading()

    def mute(self, until_ns: int) -> None:
        """KIP-219: the request in flight is throttled until `until_ns` (called before its
        response is written): nothing more is taken from the client until then."""
        self.muted_until_ns = max(self.muted_until_ns, until_ns)
        self.gate.throttle_started()
        delay = max(0.0, (self.muted_until_ns - time.monotonic_ns()) / 1e9)
        self._timers.append(asyncio.get_running_loop().call_later(delay, self._unmute))

    def _unmute(self) -> None:
        if self.closed:
            return
        early_ns = self.muted_until_ns - time.monotonic_ns()
        if early_ns > 0:  # timers may fire a little early (ms resolution): wait the rest
            loop = asyncio.get_running_loop()
            self._timers.append(loop.call_later(early_ns / 1e9, self._unmute))
            return
        self.muted_until_ns = 0
        if self.gate.throttle_ended():
            self._pump()

    # -- data ----------------------------------------------------------------------------
    def on_client_data(self, data: bytes, counted: bool = False) -> None:
        if self.closed or self._closing is not None:  # closing: nothing more is read
            return
        if not counted:
            self.bytes_in += len(data)
            self.touch()
        if self._initial:  # the upstream is not up yet: keep the order of the bytes
            self._initial += data
            return
        try:
            try:
                frames = self._req_decoder.feed(data)
                bad: FrameError | None = None
            except FrameError as exc:  # whole requests before a bad size still get answers
                frames, bad = exc.frames, exc
            self.gate.received(frames, bad)
            if bad is not None:
                self._close_after_answers(bad)
            self._pump()
        except Exception as exc:  # a bug must end this connection visibly, not leak it
            self.acceptor.log(f"{self.info.conn_id}: internal error {exc!r}")
            self.finish("internal_error", reset=True, detail={"error": repr(exc)})

    def _pump(self) -> None:
        """Take requests one at a time while the channel is readable (Kafka's processor:
        one request, then muted until its response is sent and its throttle is over)."""
        ut, ct, gate = self._ut, self._ct, self.gate
        if ut is None or self.closed:
            return
        while not self.closed:
            item = gate.take()
            if item is None:
                break
            if isinstance(item, FrameError):  # every request before it is answered
                self.finish(item.reason)
                return
            forwarded, stopped = take_requests(
                self.acceptor,
                self,
                self._order,
                [item],
                time.monotonic_ns(),
                ct.write if ct is not None else _nowhere,
            )
            if stopped is not None:  # unreadable header, refused admin request: Kafka closes
                self.finish(stopped.reason, detail={"error": str(stopped)})
                return
            if forwarded:
                ut.write(item)
                if expects_response(item):
                    break  # muted until the broker's response is sent
            gate.response_sent()  # answered here, or acks=0 (the broker's no-op response)
        # what the client pipelined stays unread (in the kernel) while a request is in
        # flight, as on Kafka's muted channel; one read's worth of frames waits in the gate
        held = "in_flight" in self._paused[True]
        if len(gate) and not gate.readable:
            if not held:
                self.pause_reading(True, "in_flight")
        elif held:
            self.resume_reading(True, "in_flight")

    def _close_after_answers(self, exc: FrameError) -> None:
        """A bad frame: read nothing more from the client, close once every request read
        before it is answered (the gate reaches it), or after `CLOSE_GRACE_S`."""
        detail: dict[str, Any] = {"error": str(exc)}
        self._closing = (exc.reason, detail)
        self.pause_reading(True, "closing")
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(intake.CLOSE_GRACE_S, self._grace_over))

    def _grace_over(self) -> None:
        self.finish("close_grace_expired", detail={"unanswered": len(self._order)})

    def on_upstream_data(self, data: bytes) -> None:
        if self.closed:
            return
        self.touch()
        ct = self._ct
        acceptor = self.acceptor
        try:
            frames = self._resp_decoder.feed(data)
            if not frames or ct is None:
                return
            now = time.monotonic_ns()
            out: list[bytes] = []
            answered = 0
            for frame in frames:
                cid = correlation_id_of_response(frame)
                before, done, after = self._order.response(cid, len(frame), now)
                if done is not None:
                    frame = acceptor.request_done(self, done, now, frame)
                    answered += 1
                out.extend(before)
                out.append(frame)
                out.extend(after)
            payload = out[0] if len(out) == 1 else b"".join(out)
            self.bytes_out += len(payload)
            ct.write(payload)
            if answered:
                self.gate.response_sent()
                self._pump()
        except FrameError as exc:
            self.finish("upstream_" + exc.reason, detail={"error": str(exc)})
        except Exception as exc:
            acceptor.log(f"{self.info.conn_id}: internal error {exc!r}")
            self.finish("internal_error", reset=True, detail={"error": repr(exc)})

    def on_eof(self, client: bool) -> bool:
        """Half-close: propagate it; the other side's EOF (or a grace period) ends it."""
        if self.closed:
            return False
        if client:
            self._client_eof = True
            if self._upstream_eof:
                self.finish("upstream_eof")
                return False
            ut = self._ut
            if ut is not None and ut.can_write_eof() and not ut.is_closing():
                ut.write_eof()
                return True
            self.finish("client_eof")
            return False
        self._upstream_eof = True
        if self._client_eof:
            self.finish("client_eof")
            return False
        ct = self._ct
        if ct is not None and ct.can_write_eof() and not ct.is_closing():
            ct.write_eof()
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(UPSTREAM_EOF_GRACE_S, self.finish, "upstream_eof"))
        return True

    def on_lost(self, client: bool, exc: Exception | None) -> None:
        if self.closed:
            return
        if client:
            if exc is None:
                self.finish("client_eof")
            else:
                self.finish("reset", reset=True, detail={"error": repr(exc)})
        elif exc is None:
            self.finish("upstream_eof")
        else:
            self.finish("upstream_reset", reset=True, detail={"error": repr(exc)})

    # -- the end -------------------------------------------------------------------------
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
        for timer in self._timers:
            timer.cancel()
        if reset:
            _abort_with_rst(self._ct)
            _abort_with_rst(self._ut)
        else:
            for t in (self._ct, self._ut):
                if t is not None:
                    t.close()
        if self._ct is None and not self._opening:
            with contextlib.suppress(OSError):
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
        self.acceptor.connection_closed(self, reason, now, d, evicted=evicted)
        self._done.set()
