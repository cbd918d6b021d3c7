"""The asyncio adapter of a registered connection: two Protocols (client side, upstream
side) feeding `connection.Connection`, and the `Wire` it acts through.

Why callbacks rather than streams: per new connection, streams cost two StreamReader/
StreamWriter pairs and two pump tasks, and every read wakes a future; with Protocols the
bytes go from `data_received` to the other transport's `write` synchronously (the streams
flavour, ~20 % more CPU per connection, was removed in issue 14). Every decision is the
connection's; this module only moves bytes, makes the transports and arms the timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from typing import TYPE_CHECKING, Any

from acceptor.broker_charge import kafka_address
from acceptor.connection import Connection, Side, State, Timer
from acceptor.tls import kafka_principal

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from acceptor.tls import ListenerTls

UPSTREAM_CONNECT_TIMEOUT_S = 10.0
LINGER_RST = struct.pack("ii", 1, 0)
#: read on every write (a member read through its enum class is slow on CPython 3.11)
_CLIENT = Side.CLIENT
#: a connection's end, tested on each transport's make and loss (not `Connection.closed`:
#: a property is a call)
_CLOSED = State.CLOSED


def set_rst_on_close(sock: socket.socket | None) -> None:
    """SO_LINGER 0: the close that follows sends a reset, not an orderly FIN."""
    if sock is None:
        return
    with contextlib.suppress(OSError, ValueError):  # ValueError: uvloop, fd already gone
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)


def _close(transport: asyncio.BaseTransport | None, reset: bool) -> None:
    if transport is None:
        return
    if not reset:
        transport.close()
        return
    set_rst_on_close(transport.get_extra_info("socket"))
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


def _peer_principal(transport: asyncio.BaseTransport, written_order: bool) -> str | None:
    """The client certificate's principal, as Kafka maps it (None: no certificate)."""
    obj = transport.get_extra_info("ssl_object")
    if not isinstance(obj, ssl.SSLObject):
        return None
    return kafka_principal(obj.getpeercert(binary_form=True), written_order=written_order)


class _Side(asyncio.Protocol):
    __slots__ = ("conn", "data", "side", "wire")

    def __init__(self, wire: AsyncioWire, side: Side) -> None:
        self.wire = wire
        self.conn = conn = wire.conn
        self.side = side
        #: the connection's input for this side's bytes
        self.data = conn.client_data if side is _CLIENT else conn.upstream_data

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # before any other callback of this side: the connection learns of it first
        self.wire.made(self.side, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.data(data)
        except Exception as exc:  # a bug must end this connection visibly, not leak it
            self.conn.internal_error(exc)

    def eof_received(self) -> bool:
        try:
            return self.conn.eof(self.side)
        except Exception as exc:
            self.conn.internal_error(exc)
            return False

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.conn.lost(self.side, None if exc is None else repr(exc))
        except Exception as error:
            self.conn.internal_error(error)
        self.wire.lost()

    def pause_writing(self) -> None:  # our write buffer towards this side is full
        try:
            self.conn.backpressure(self.side, True)
        except Exception as exc:
            self.conn.internal_error(exc)

    def resume_writing(self) -> None:
        try:
            self.conn.backpressure(self.side, False)
        except Exception as exc:
            self.conn.internal_error(exc)


class AsyncioWire:
    """`connection.Wire` over the running loop, for one accepted socket; receives the
    connection it drives (and attaches itself to it)."""

    __slots__ = (
        "_ct",
        "_live",
        "_opening",
        "_running",
        "_timers",
        "_ut",
        "_want",
        "_woken",
        "conn",
        "reset",
        "sock",
        "tls",
    )

    def __init__(
        self, conn: Connection, sock: socket.socket, tls: ListenerTls | None = None
    ) -> None:
        self.conn = conn
        self.sock = sock
        #: a terminating listener's TLS (the client's ends here, the broker's starts here)
        self.tls = tls
        conn.wire = self
        self._ct: asyncio.Transport | None = None
        self._ut: asyncio.Transport | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._opening = False  # the client transport is being made (run() closes it)
        #: where the connection asked the upstream to be opened, and run() waiting for it
        self._want: tuple[str, int] | None = None
        self._woken: asyncio.Future[None] | None = None
        self.reset = False
        self._running = False  # run() has not returned
        self._live = 0  # transports made and not yet lost

    # -- the processor's start ------------------------------------------------------------
    def start(self) -> Coroutine[Any, Any, None] | None:
        """`run()`, or None when the connection has already ended. A client that closed (or
        reset) before sending a byte is closed here, as Kafka's processor closes it at its
        first poll, without a transport or a task: a connect-and-close storm (Trogdor's
        CONNECT, a TCP health check) costs one peek per connection."""
        conn = self.conn
        if not conn.pending:
            try:
                if self.sock.recv(1, socket.MSG_PEEK) == b"":
                    conn.eof(_CLIENT)
                    self._release()
                    return None
            except (BlockingIOError, InterruptedError):
                pass  # connected and silent so far: the usual case
            except OSError as exc:
                conn.lost(_CLIENT, repr(exc))
                self._release()
                return None
        self._running = True
        return self.run()

    def lost(self) -> None:
        """A side's transport is gone (after its Protocol told the connection)."""
        self._live -= 1
        if not self._running and not self._live and self.conn.state is _CLOSED:
            self._release()

    def _release(self) -> None:
        """Nothing will call this wire again (the connection ended, no transport is left,
        run() returned): it lets go of the connection and the transports. They hold each
        other; left as a cycle, every connection would wait for the garbage collector,
        which cost a connect-and-close about a fifth of its CPU (`bench.front_cost`)."""
        self._ct = self._ut = None
        del self.conn

    async def run(self) -> None:
        """Make the client transport; once the connection asks for it (its client's first
        bytes), the upstream; then the Protocols' callbacks move the bytes until the end."""
        try:
            await self._run()
        finally:
            self._running = False
            if not self._live and self.conn.state is _CLOSED:
                self._release()

    async def _run(self) -> None:
        conn = self.conn
        if conn.state is _CLOSED:
            return
        loop = asyncio.get_running_loop()
        self._opening = True
        tls = self.tls
        client_tls: dict[str, Any] = (  # the handshake, then `made`
            {}
            if tls is None
            else {"ssl": tls.server, "ssl_handshake_timeout": tls.handshake_timeout_s}
        )
        try:
            await loop.connect_accepted_socket(
                lambda: _Side(self, _CLIENT), self.sock, **client_tls
            )
        except OSError as exc:
            self._opening = False
            with contextlib.suppress(OSError):
                self.sock.close()
            if tls is not None and conn.state is not _CLOSED:
                conn.tls_failed(repr(exc))
            else:
                conn.lost(_CLIENT, repr(exc))
            return
        self._opening = False
        if conn.state is _CLOSED:  # ended while the transport was made (a client EOF: a FIN)
            _close(self._ct, self.reset)
            return
        if self._want is None:
            self._woken = loop.create_future()
            await self._woken  # the client's first bytes, or the end
            self._woken = None
            if conn.state is _CLOSED or self._want is None:
                return
        host, port = self._want
        upstream_tls: dict[str, Any] = (
            {} if tls is None else {"ssl": tls.upstream, "server_hostname": host}
        )
        try:
            async with asyncio.timeout(UPSTREAM_CONNECT_TIMEOUT_S):
                await loop.create_connection(
                    lambda: _Side(self, Side.UPSTREAM), host, port, **upstream_tls
                )
        except (OSError, TimeoutError) as exc:
            conn.upstream_failed(repr(exc))

    def made(self, side: Side, transport: asyncio.BaseTransport) -> None:
        """A side's transport is up (its Protocol's `connection_made`)."""
        conn = self.conn
        t: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop's: no subclass
        self._live += 1
        if side is _CLIENT:
            self._ct = t
            if self.tls is not None and self.tls.reads_certificate:
                conn.tls_principal = _peer_principal(t, self.tls.written_order)
            if conn.state is not _CLOSED:
                conn.opened()
            return
        # TCP_NODELAY: admission set it on the client's socket (as Kafka's acceptor does);
        # both loops' create_connection set it on the upstream's. A connection that ended
        # while this was made closes it (`Connection.upstream_up`).
        self._ut = t
        addr = None
        if conn.charges is not None and conn.state is not _CLOSED:  # the request log's name
            sockname = t.get_extra_info("sockname")
            addr = kafka_address(sockname) if isinstance(sockname, tuple) else None
        conn.upstream_up(addr)

    def transports(self) -> tuple[asyncio.Transport | None, asyncio.Transport | None]:
        """The client side's transport and the upstream's, once made."""
        return self._ct, self._ut

    # -- connection.Wire ------------------------------------------------------------------
    def send(self, side: Side, data: bytes) -> None:
        t = self._ct if side is _CLIENT else self._ut
        if t is not None:
            t.write(data)

    def send_eof(self, side: Side) -> bool:
        t = self._ct if side is _CLIENT else self._ut
        if t is None or t.is_closing() or not t.can_write_eof():
            return False
        t.write_eof()
        return True

    def pause(self, side: Side) -> None:
        t = self._ct if side is _CLIENT else self._ut
        if t is not None and not t.is_closing():
            t.pause_reading()

    def resume(self, side: Side) -> None:
        t = self._ct if side is _CLIENT else self._ut
        if t is not None and not t.is_closing():
            t.resume_reading()

    def open_upstream(self, host: str, port: int) -> None:
        self._want = (host, port)
        woken = self._woken
        if woken is not None and not woken.done():
            woken.set_result(None)

    def arm(self, timer: Timer, at_ns: int) -> None:
        delay_s = max(0.0, (at_ns - self.conn.clock()) / 1e9)  # on the connection's clock
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(delay_s, self.conn.timer, timer))

    def close(self, reset: bool) -> None:
        self.reset = reset
        if self._timers:
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
        woken = self._woken
        if woken is not None and not woken.done():  # run() stops waiting for first bytes
            woken.set_result(None)
        if self._ct is not None:
            _close(self._ct, reset)
        elif not self._opening:
            try:  # never handed to the loop (the connect-and-close storm's path)
                self.sock.close()
            except OSError:
                pass
        if self._ut is not None:
            _close(self._ut, reset)
