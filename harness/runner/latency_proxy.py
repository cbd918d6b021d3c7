"""A loopback TCP proxy whose added latency can be changed while traffic flows.

It sits between the acceptor and the broker for scenarios with an
``upstream_latency`` fault: the acceptor's upstream points here, this forwards to the
broker's real port. Each chunk read is released to the other side ``latency`` later,
in order, without blocking further reads, so the fault adds delay, not a throughput
cap (a slow link, not a congested one). It runs its own asyncio loop in a thread, so
the runner's schedule loop just calls :meth:`set_latency`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass


@dataclass
class ProxyStats:
    connections: int = 0
    upstream_failures: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


class LatencyProxy:
    def __init__(
        self, upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if not host.startswith("127."):
            raise ValueError(f"latency proxy host={host!r}: loopback only")
        self.upstream = upstream
        self.host = host
        self.port = port
        self.stats = ProxyStats()
        self._latency_s = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None

    @property
    def latency_ms(self) -> float:
        return self._latency_s * 1000.0

    def set_latency(self, ms: float) -> None:
        """Applies to data read from now on (chunks already queued keep their release time)."""
        if ms < 0:
            raise ValueError(f"latency_ms={ms!r}: must be >= 0")
        self._latency_s = ms / 1000.0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> tuple[str, int]:
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("latency proxy did not start in time")
        if self._error is not None:
            raise RuntimeError(f"latency proxy failed to start: {self._error!r}")
        return self.host, self.port

    def stop(self, timeout: float = 5.0) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        with contextlib.suppress(Exception):
            fut.result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, self.host, self.port)
            )
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:  # report to start(), do not die silently
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- forwarding -----------------------------------------------------------------------
    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.stats.connections += 1
        try:
            if self._latency_s:
                await asyncio.sleep(self._latency_s)
            try:
                u_reader, u_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self.upstream), 10
                )
            except (OSError, TimeoutError):
                self.stats.upstream_failures += 1
                return
            try:
                await asyncio.gather(
                    self._pipe(c_reader, u_writer, up=True),
                    self._pipe(u_reader, c_writer, up=False),
                )
            finally:
                u_writer.close()
        except asyncio.CancelledError:
            pass
        finally:
            c_writer.close()
            self._tasks.discard(task)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def release() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    with contextlib.suppress(OSError):
                        if writer.can_write_eof():
                            writer.write_eof()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(release())
        try:
            while True:
                try:
                    data = await reader.read(65536)
                except (ConnectionError, OSError):
                    data = b""
                if up:
                    self.stats.bytes_up += len(data)
                else:
                    self.stats.bytes_down += len(data)
                queue.put_nowait((time.monotonic() + self._latency_s, data))
                if not data:
                    break
            await sender
        except (ConnectionError, OSError):
            pass
        finally:
            if not sender.done():
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await sender
