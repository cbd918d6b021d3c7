"""One registered connection with asyncio streams (`acceptor.io=streams`): two pump tasks.

The default is the Protocols flavour (`forwarding.ProtoConnection`, ~20 % less CPU per
connection); this one is kept as a second, independently scheduled implementation of the
same behaviour, and both are tested alike. Every decision about requests, throttles and ends
is `relay.Relay`'s; this module only moves the bytes: the client pump takes one request at a
time from the gate (nothing is read while one is in flight, as on Kafka's muted channel),
the upstream pump writes the broker's answers.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from harness.acceptor.relay import (
    STOP,
    UPSTREAM_EOF_GRACE_S,
    Closable,
    Relay,
    set_nodelay,
    set_rst_on_close,
)
from harness.wire.framing import FrameDecoder, FrameError

READ_SIZE = 256 * 1024


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST (SO_LINGER 0) so the peer sees a reset, not an orderly EOF."""
    if writer is None:
        return
    set_rst_on_close(writer.get_extra_info("socket"))
    writer.transport.abort()


class Connection(Relay):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._readable = asyncio.Event()  # the gate lets the next request through
        self._cw: asyncio.StreamWriter | None = None
        self._uw: asyncio.StreamWriter | None = None
        self._creader: asyncio.StreamReader | None = None
        self._ureader: asyncio.StreamReader | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle -----------------------------------------------------------------
    async def _open_client(self) -> None:
        self._creader, self._cw = await asyncio.open_connection(sock=self.sock, limit=READ_SIZE)

    async def _open_upstream(self, host: str, port: int) -> asyncio.StreamWriter:
        self._ureader, uw = await asyncio.open_connection(host, port, limit=READ_SIZE)
        return uw

    def _started(self, upstream: Closable) -> None:
        assert self._creader is not None and self._ureader is not None
        self._uw = uw = cast(asyncio.StreamWriter, upstream)
        set_nodelay(self._cw, uw)
        self._tasks = [
            asyncio.ensure_future(self._client_to_upstream(self._creader)),
            asyncio.ensure_future(self._upstream_to_client(self._ureader)),
        ]

    def _readable_again(self) -> None:
        self._readable.set()

    def forward(self, frame: bytes) -> None:
        if self._uw is not None:
            self._uw.write(frame)

    def _sides(self) -> tuple[asyncio.StreamWriter | None, asyncio.StreamWriter | None]:
        return self._cw, self._uw

    def _abort(self, side: Any) -> None:
        _reset(side)

    def _close_transports(self, reset: bool) -> None:
        self._readable.set()  # the client pump wakes and sees `closed`
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        super()._close_transports(reset)

    # -- pumps -----------------------------------------------------------------------
    async def _client_to_upstream(self, reader: asyncio.StreamReader) -> None:
        assert self._uw is not None and self._cw is not None
        decoder = FrameDecoder(self.host.request_max_bytes)
        uw, cw, gate = self._uw, self._cw, self.gate
        pending, self.initial = self.initial, b""
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
                if item is not None:
                    outcome = self.step(item, cw.write)
                    if outcome == STOP:
                        return
                    await uw.drain()  # WAIT: the gate holds the next one until answered
                    continue
                if pending:
                    data, pending = pending, b""
                else:
                    data = await reader.read(READ_SIZE)
                if not data:
                    self._eof(client=True)
                    return
                self.bytes_in += len(data)
                self.touch()
                self.received(decoder, data)  # after a bad frame, the gate ends it
        except Exception as exc:  # (a cancellation is not an Exception: it propagates)
            self._pump_failed(exc, client=True)

    async def _upstream_to_client(self, reader: asyncio.StreamReader) -> None:
        assert self._cw is not None
        decoder = FrameDecoder(2**31 - 1)
        cw = self._cw
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    self._eof(client=False)
                    return
                self.touch()
                frames = decoder.feed(data)
                if not frames:
                    continue
                payload, answered = self.answers(frames)
                cw.write(payload)
                await cw.drain()
                if answered and self.gate.response_sent():
                    self._readable.set()
        except Exception as exc:
            self._pump_failed(exc, client=False)

    def _eof(self, client: bool) -> None:
        """A side's EOF, read by its pump (which then stops). After the other side's EOF the
        connection ends, with the reason of the side that hung up first; else the half-close
        is passed on: the client's upstream (the connection ends where the upstream cannot
        take one), the upstream's to the client, who has `UPSTREAM_EOF_GRACE_S` to read what
        it was sent and close."""
        if client:
            self._client_eof = True
        else:
            self._upstream_eof = True
        if self._client_eof and self._upstream_eof:
            self.finish("upstream_eof" if client else "client_eof")
            return
        other = self._uw if client else self._cw
        if other is not None and other.can_write_eof():
            other.write_eof()
        elif client:
            self.finish("client_eof")
        if not client:
            self.later(UPSTREAM_EOF_GRACE_S, self.finish, "upstream_eof")

    def _pump_failed(self, exc: Exception, client: bool) -> None:
        """A pump (`client`: the one reading the client) ended by an exception: a reset of
        the side it reads is that side's reset, any other socket error the other side's
        (where it wrote), a bad response frame the upstream's, anything else a bug."""
        near, far = ("reset", "upstream_reset") if client else ("upstream_reset", "reset")
        if isinstance(exc, FrameError) and not client:
            self.finish("upstream_" + exc.reason, detail={"error": str(exc)})
        elif isinstance(exc, ConnectionResetError):
            self.finish(near, reset=True)
        elif isinstance(exc, OSError):  # BrokenPipeError, other ConnectionErrors
            self.finish(far, reset=True, detail={"error": repr(exc)})
        else:
            self.internal_error(exc)
