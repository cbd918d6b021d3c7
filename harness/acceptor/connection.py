"""One registered connection: client <-> acceptor <-> upstream broker, byte-for-byte.

Why frames rather than raw chunks: the acceptor must refuse oversized/negative frames the
way the broker's `NetworkReceive` does, answer admin requests itself, and time each request
(forward -> response) for `request` rows. Frames are forwarded exactly as received; only
chunk boundaries change. Every end of a connection goes through `finish(reason)` once,
which releases the counts exactly once and writes the `close` row.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from typing import TYPE_CHECKING

from harness.acceptor import intake
from harness.acceptor.inflight import RequestGate, expects_response
from harness.acceptor.intake import close_reason, take_requests
from harness.acceptor.recorder import ConnInfo
from harness.acceptor.tracker import ResponseOrder
from harness.wire.framing import FrameDecoder, FrameError, correlation_id_of_response

if TYPE_CHECKING:
    from harness.acceptor.processor import Processor
    from harness.acceptor.server import Acceptor

READ_SIZE = 256 * 1024
UPSTREAM_CONNECT_TIMEOUT_S = 10.0
_LINGER_RST = struct.pack("ii", 1, 0)


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST (SO_LINGER 0) so the peer sees a reset, not an orderly EOF."""
    if writer is None:
        return
    with contextlib.suppress(OSError, ValueError):  # ValueError: uvloop, fd already gone
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


class Connection:
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
        self.initial = initial
        self.protected = protected
        self.last_active_ns = time.monotonic_ns()
        self.started_ns = self.last_active_ns
        self.closed = False
        self.close_reason: str | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.requests = 0
        self._client_eof = False
        self._upstream_eof = False
        self._order = ResponseOrder()
        self.gate = RequestGate()  # one request in flight (Kafka's KIP-219 mute)
        self._readable = asyncio.Event()
        self._throttle: asyncio.TimerHandle | None = None
        self._cw: asyncio.StreamWriter | None = None
        self._uw: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._done = asyncio.Event()
        self._opening = False
        self.muted_until_ns = 0
        # (reason, detail) of the bad frame the connection is closing after, if any
        self._closing: tuple[str, dict[str, object]] | None = None
        self._grace: asyncio.TimerHandle | None = None

    # -- lifecycle -----------------------------------------------------------------
    async def run(self) -> None:
        spec = self.acceptor.cfg.listener(self.info.listener)
        if self.closed:
            return
        self._opening = True
        try:
            creader, self._cw = await asyncio.open_connection(sock=self.sock, limit=READ_SIZE)
        except OSError:
            self._opening = False
            with contextlib.suppress(OSError):
                self.sock.close()
            self.finish("reset")
            return
        self._opening = False
        if self.closed:  # evicted/shut down while we were setting up
            _reset(self._cw)
            return
        try:
            ureader, self._uw = await asyncio.wait_for(
                asyncio.open_connection(spec.upstream_host, spec.upstream_port, limit=READ_SIZE),
                UPSTREAM_CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as exc:
            self.finish("upstream_unreachable", detail={"error": repr(exc)})
            return
        if self.closed:
            self._uw.close()
            return
        for s in (self._cw, self._uw):
            sk = s.get_extra_info("socket") if s is not None else None
            if sk is not None:
                with contextlib.suppress(OSError):
                    sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._tasks = [
            asyncio.ensure_future(self._client_to_upstream(creader)),
            asyncio.ensure_future(self._upstream_to_client(ureader)),
        ]
        await self._done.wait()

    def touch(self) -> None:
        self.last_active_ns = time.monotonic_ns()
        self.processor.touch(self)

    def mute(self, until_ns: int) -> None:
        """KIP-219: the request in flight is throttled until `until_ns` (called before its
        response is written): nothing more is taken from the client until then."""
        self.muted_until_ns = max(self.muted_until_ns, until_ns)
        self.gate.throttle_started()
        delay = max(0.0, (until_ns - time.monotonic_ns()) / 1e9)
        self._throttle = asyncio.get_running_loop().call_later(delay, self._unmute)

    def _unmute(self) -> None:
        early_ns = self.muted_until_ns - time.monotonic_ns()
        if early_ns > 0:  # timers may fire a little early (ms resolution): wait the rest
            self._throttle = asyncio.get_running_loop().call_later(early_ns / 1e9, self._unmute)
            return
        self.muted_until_ns = 0
        if self.gate.throttle_ended():
            self._readable.set()

    def finish(
        self,
        reason: str,
        *,
        reset: bool = False,
        evicted: bool = False,
        detail: dict[str, object] | None = None,
    ) -> None:
        """End the connection once: close both sides, release counts, write `close`."""
        if self.closed:
            return
        reason, detail = close_reason(self._closing, reason, detail, evicted)
        self.closed = True
        self.close_reason = reason
        for timer in (self._grace, self._throttle):
            if timer is not None:
                timer.cancel()
        self._readable.set()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        if reset:
            _reset(self._cw)
            _reset(self._uw)
        else:
            for w in (self._cw, self._uw):
                if w is not None:
                    w.close()
        if self._cw is None and not self._opening:
            # never handed to the loop; while a transport is being made, run() closes it
            with contextlib.suppress(OSError):
                self.sock.close()
        now = time.monotonic_ns()
        d: dict[str, object] = {
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "requests": self.requests,
            "duration_ms": (now - self.started_ns) / 1e6,
        }
        if detail:
            d.update(detail)
        self.acceptor.connection_closed(self, reason, now, d, evicted=evicted)
        self._done.set()

    # -- pumps -----------------------------------------------------------------------
    async def _client_to_upstream(self, reader: asyncio.StreamReader) -> None:
        assert self._uw is not None and self._cw is not None
        acceptor = self.acceptor
        decoder = FrameDecoder(acceptor.cfg.quota.socket_request_max_bytes)
        uw, cw = self._uw, self._cw
        order, gate = self._order, self.gate
        pending = self.initial
        try:
            while True:
                # Kafka's processor: one request, then the channel is muted until its
                # response is sent and its throttle is over; nothing is read meanwhile
                while not gate.readable and not self.closed:
                    self._readable.clear()
                    await self._readable.wait()
                if self.closed:
                    return
                item = gate.take()
                if isinstance(item, FrameError):  # every request before it is answered
                    self.finish(item.reason)
                    return
                if item is not None:
                    forwarded, stopped = take_requests(
                        acceptor, self, order, [item], time.monotonic_ns(), cw.write
                    )
                    if stopped is not None:  # unreadable header, refused admin request
                        self.finish(stopped.reason, detail={"error": str(stopped)})
                        return
                    if forwarded:
                        uw.write(item)
                        await uw.drain()
                        if expects_response(item):
                            continue  # muted until the broker's response is sent
                    gate.response_sent()  # answered here, or acks=0 (no response)
                    continue
                if pending:
                    data, pending = pending, b""
                else:
                    data = await reader.read(READ_SIZE)
                if not data:
                    self._client_eof = True
                    if self._upstream_eof:
                        self.finish("upstream_eof")
                        return
                    if uw.can_write_eof():
                        uw.write_eof()  # propagate the half-close; upstream's EOF ends it
                    else:
                        self.finish("client_eof")
                    return
                self.bytes_in += len(data)
                self.touch()
                try:
                    frames = decoder.feed(data)
                    bad: FrameError | None = None
                except FrameError as exc:  # whole requests before a bad size still get answers
                    frames, bad = exc.frames, exc
                gate.received(frames, bad)
                if bad is not None:
                    self._close_after_answers(bad)  # nothing more is read: the gate ends it
        except ConnectionResetError:
            self.finish("reset", reset=True)
        except (BrokenPipeError, ConnectionError, OSError) as exc:
            self.finish("upstream_reset", reset=True, detail={"error": repr(exc)})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must end this connection visibly, not leak it
            self.acceptor.log(f"{self.info.conn_id}: internal error {exc!r}")
            self.finish("internal_error", reset=True, detail={"error": repr(exc)})

    async def _upstream_to_client(self, reader: asyncio.StreamReader) -> None:
        assert self._cw is not None
        decoder = FrameDecoder(2**31 - 1)
        cw = self._cw
        order = self._order
        acceptor = self.acceptor
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    self._upstream_eof = True
                    if self._client_eof:
                        self.finish("client_eof")
                        return
                    if cw.can_write_eof():
                        cw.write_eof()
                    # the client's EOF (or the idle timeout) ends it
                    self._idle_after_upstream_eof()
                    return
                self.touch()
                frames = decoder.feed(data)
                if not frames:
                    continue
                now = time.monotonic_ns()
                out: list[bytes] = []
                answered = 0
                for frame in frames:
                    cid = correlation_id_of_response(frame)
                    before, done, after = order.response(cid, len(frame), now)
                    if done is not None:
                        frame = acceptor.request_done(self, done, now, frame)
                        answered += 1
                    out.extend(before)
                    out.append(frame)
                    out.extend(after)
                payload = out[0] if len(out) == 1 else b"".join(out)
                self.bytes_out += len(payload)
                cw.write(payload)
                await cw.drain()
                if answered and self.gate.response_sent():
                    self._readable.set()
        except FrameError as exc:
            self.finish("upstream_" + exc.reason, detail={"error": str(exc)})
        except ConnectionResetError:
            self.finish("upstream_reset", reset=True)
        except (BrokenPipeError, ConnectionError, OSError) as exc:
            self.finish("reset", reset=True, detail={"error": repr(exc)})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.acceptor.log(f"{self.info.conn_id}: internal error {exc!r}")
            self.finish("internal_error", reset=True, detail={"error": repr(exc)})

    def _close_after_answers(self, exc: FrameError) -> None:
        """A bad frame: close once every request read before it is answered (the gate
        reaches it) or after `CLOSE_GRACE_S`, with the frame's reason."""
        self._closing = (exc.reason, {"error": str(exc)})
        loop = asyncio.get_running_loop()
        self._grace = loop.call_later(intake.CLOSE_GRACE_S, self._grace_over)

    def _grace_over(self) -> None:
        self.finish("close_grace_expired", detail={"unanswered": len(self._order)})

    def _idle_after_upstream_eof(self) -> None:
        """The broker is gone: give the client a moment to read and close, then close."""
        loop = asyncio.get_running_loop()
        loop.call_later(1.0, lambda: self.finish("upstream_eof"))
