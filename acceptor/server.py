"""The acceptor process: listeners, processors, quotas, admin, history, metrics, state.

Why one object owns all of it: Kafka's `ConnectionQuotas` is shared by every listener
(`max.connections` is broker-wide), a release on one listener can unblock another, and a
quota change from the admin path must reach the engine, the state file, the `config` rows
and the metrics at once. All of it runs on one asyncio loop (one thread), so the engine is
only ever touched from that loop and needs no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from acceptor.admin import AdminHandler
from acceptor.config import AcceptorConfig, parse_acceptor_config, quota_engines
from acceptor.connections import Connections, SlotSignal
from acceptor.dynamic import DynamicConfig
from acceptor.eventloop import new_event_loop
from acceptor.heartbeat import Heartbeat
from acceptor.listener import ListenerAcceptor
from acceptor.metrics import AcceptorMetrics
from acceptor.ports import Channel, HandOff
from acceptor.processor import Processor
from acceptor.recorder import Recorder
from acceptor.split import Owned, SplitProcessors, check_split
from acceptor.stall import parse_stalls, schedule_stalls
from base.history import HistoryWriter
from base.history.rows import HarnessConfig, HarnessConfigDetail
from base.quota.config import ConfigError, QuotaConfig
from base.quota.faults import FAULT_KEY, FAULTS, Faults

log = logging.getLogger("acceptor")

SKIP_IP_RATE_WARNING = (
    "WARNING: harness.test.skip.ip.rate.check=true: the per-IP connection_creation_rate step "
    "is SKIPPED. This acceptor is deliberately broken (to prove the CI gate can fail); "
    "never use it to certify anything."
)


def fault_warning(faults: Faults) -> str:
    """The loud start-up line of an acceptor with seeded faults (one line per fault)."""
    lines = [
        f"WARNING: {FAULT_KEY}={faults.to_property()}: this acceptor is DELIBERATELY BROKEN "
        "(seeded enforcement faults, to prove the gate can fail); never use it to certify "
        "anything."
    ]
    for f in FAULTS:
        if f.name in faults.enabled:
            lines.append(f"WARNING:   fault {f.name}: {f.does} (breaks: {f.rule})")
    return "\n".join(lines)


#: how often a front reads what the other fronts of its cluster committed (a stat of the
#: log file when nothing changed: ~2 µs, 50 times a second). Kafka's brokers learn a
#: committed record by a long-polling fetch from the controller, within milliseconds.
METADATA_POLL_S = 0.02


class Acceptor:
    """Builds every component and hands each the few things it needs (`ports`); owns the
    listeners, the writers and start/stop. Nothing but the entry points (`cli`, tests, the
    scenario runner) holds it."""

    def __init__(
        self,
        cfg: AcceptorConfig,
        *,
        history_dir: str | os.PathLike[str] | None = None,
        run_id: str = "adhoc",
        out: Any = None,
    ) -> None:
        self.cfg = cfg
        self.quotas, self.request_quotas = quota_engines(cfg)
        self.run_id = run_id
        self.history_dir = Path(history_dir) if history_dir is not None else None
        self.out = out
        self.slots = SlotSignal()
        #: run-time quota changes (admin path), the state file, the limits in force
        self.dynamic = DynamicConfig(
            cfg, self.quotas, self.request_quotas, self.slots.freed, log=self.log
        )
        self._metadata_poll: asyncio.TimerHandle | None = None
        self.started_ns = time.monotonic_ns()
        writer = None
        self.config_writer: HistoryWriter | None = None
        if self.history_dir is not None:
            flush_s = cfg.history_flush_ms / 1000
            writer = HistoryWriter(
                self.history_dir,
                "acceptor",
                run_id,
                name=f"acceptor-{os.getpid()}",
                flush_interval_s=flush_s,
            )
            self.config_writer = HistoryWriter(
                self.history_dir,
                "harness",
                run_id,
                name=f"acceptor-config-{os.getpid()}",
                flush_interval_s=flush_s,
            )
        self.rec = Recorder(writer)
        #: measures the event loop's own stalls (`loop_lag` rows; acceptor.heartbeat)
        self.heartbeat = Heartbeat(self.rec)
        #: test-scheduled processor stalls (harness.test.processor.stall; none in production)
        self._stalls = parse_stalls(cfg)
        self._stall_timers: list[asyncio.TimerHandle] = []
        self.listeners: dict[str, ListenerAcceptor] = {}
        self.admin = AdminHandler(
            cfg,
            self.dynamic,
            self.rec,
            log=self.log,
            address=self.address,
            config_changed=self.write_config_row,
        )
        self.metrics = AcceptorMetrics(
            started_ns=self.started_ns,
            snapshot=self.quotas.snapshot,
            blocked_ns=self._blocked_ns,
            limits=self.effective_limits,
        )
        #: the registered connections (what processors and connections call back into)
        self.conns = Connections(
            cfg,
            self.quotas,
            self.request_quotas,
            self.rec,
            self.metrics,
            self.admin,
            self.slots.freed,
            self.log,
        )
        #: the processor processes (`acceptor.process.model=split`), else None
        self.split: SplitProcessors | None = None
        if cfg.process_model == "split":
            check_split(cfg)
            owned = Owned(
                self.quotas,
                self.request_quotas,
                self.metrics,
                self.admin,
                self.slots.freed,
                self._failed,
            )
            self.split = SplitProcessors(cfg, owned)
        #: why the acceptor stopped on its own (a processor process ended), else None
        self.failure: str | None = None
        #: called once on such a failure (the CLI stops); without it the acceptor stops
        self.on_failure: Callable[[], None] | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._conn_seq = 0
        #: this process's id, in every connection id (read once: each `os.getpid()` is a
        #: system call)
        self._pid = os.getpid()
        self.stopped = False
        if cfg.skip_ip_rate_check:
            self.log(SKIP_IP_RATE_WARNING)
        if cfg.faults:
            self.log(fault_warning(cfg.faults))
        self.dynamic.restore()

    # -- what tests and the runner read ------------------------------------------------------
    @property
    def connections(self) -> set[Channel]:
        """The registered connections not yet finished."""
        return self.conns.open

    @property
    def quota_cfg(self) -> QuotaConfig:
        """The connection limits in force (static with the run-time changes applied)."""
        return self.dynamic.quota_cfg

    def ip_quotas(self) -> dict[str, int]:
        """The IP quotas in force ("default" for the default entity): the admin truth."""
        return self.dynamic.ip_quotas()

    def set_ip_quota(self, ip: str | None, rate: int | None) -> None:
        self.dynamic.set_ip_quota(ip, rate)

    # -- helpers -----------------------------------------------------------------------------
    def log(self, message: str) -> None:
        log.warning(message)
        if self.out is not None:
            print(message, file=self.out, flush=True)

    def next_conn_id(self, listener: str) -> str:
        self._conn_seq += 1
        return f"{listener}-{self._pid}-{self._conn_seq}"

    def _processor(self, listener: str, index: int) -> Processor:
        return self.listeners[listener].processors[index]  # type: ignore[return-value]

    def _new_processor(self, listener: str, index: int, protected: bool) -> HandOff:
        if self.split is not None:
            return self.split.processor(listener, index, protected)
        return Processor(self.conns, listener, index, protected)

    def _failed(self, reason: str) -> None:
        if self.failure is not None or self.stopped:
            return
        self.failure = reason
        self.log(f"ERROR: {reason}; stopping")
        if self.on_failure is not None:
            self.on_failure()
        else:
            self._stopping = asyncio.ensure_future(self.stop())

    def _blocked_ns(self) -> dict[str, int]:
        return {name: la.blocked_ns for name, la in self.listeners.items()}

    # -- start / stop ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.slots.start()
        for spec in self.cfg.listeners:
            la = ListenerAcceptor(
                spec,
                cfg=self.cfg,
                quotas=self.quotas,
                rec=self.rec,
                counts=self.metrics,
                slots=self.slots,
                heartbeat=self.heartbeat,
                log=self.log,
                next_conn_id=self.next_conn_id,
                new_processor=self._new_processor,
            )
            la.bind()
            self.listeners[spec.name] = la
        if self.split is not None:
            addresses = {name: (la.host, la.port) for name, la in self.listeners.items()}
            try:
                await self.split.start(addresses, self.history_dir, self.run_id)
            except BaseException:
                for la in self.listeners.values():
                    la.stop_accepting()
                raise
            self.split.publish()  # the limits restored from state.dir
        self.metrics.start(self.cfg.metrics_host, self.cfg.metrics_port)
        self.write_config_row("start")
        self.heartbeat.start()
        if self.dynamic.metadata is not None:
            self._poll_metadata()
        for la in self.listeners.values():
            la.start()
        if self._stalls and self.split is not None:  # each in its processor's process
            self.split.schedule_stalls(self._stalls)
        elif self._stalls:
            self._stall_timers = schedule_stalls(self._stalls, self._processor, self.rec)

    async def stop(self) -> None:
        """Stop accepting, close parked and queued sockets, close connections, flush."""
        if self.stopped:
            return
        self.stopped = True
        if self._metadata_poll is not None:
            self._metadata_poll.cancel()
        for h in self._stall_timers:
            h.cancel()
        for la in self.listeners.values():
            la.stop_accepting()
            for proc in la.processors:
                proc.resume()  # a stall cut short by the stop
        await asyncio.sleep(0.05)  # let cancelled accept/admission/header tasks clean up
        for la in self.listeners.values():
            la.close_parked()
        if self.split is not None:
            await self.split.stop()
        for la in self.listeners.values():
            for proc in la.processors:
                proc.stop()
                for item in proc.drain_unregistered():
                    self.quotas.release(la.name, item.info.client_ip)
                    with contextlib.suppress(OSError):
                        item.sock.close()
                    self.rec.closed(item.info, time.monotonic_ns(), "shutdown", registered=False)
        for conn in list(self.conns.open):
            conn.finish("shutdown")
        pending = [t for t in self.conns.tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=5)
        for t in pending:
            t.cancel()
        internal = [t for la in self.listeners.values() for t in la.tasks()]
        if internal:  # cancelled accept/admission/processor tasks: let them finish unwinding
            await asyncio.wait(internal, timeout=5)
        self.conns.stop()  # the broker's request log, if read
        self.metrics.stop()
        self.heartbeat.stop()
        self.rec.close()
        if self.config_writer is not None:
            self.config_writer.close()

    def address(self, listener: str) -> tuple[str, int]:
        la = self.listeners[listener.upper()]
        return la.host, la.port

    # -- limits in force ----------------------------------------------------------------------
    def effective_limits(self) -> dict[str, object]:
        limits = self.dynamic.limits()
        limits["acceptor.listeners"] = {
            name: {
                "host": la.host,
                "port": la.port,
                "upstream": f"{la.settings.upstream_host}:{la.settings.upstream_port}",
                "proxy.protocol": la.settings.proxy,
                "protected": la.protected,
            }
            for name, la in self.listeners.items()
        }
        return limits

    def _poll_metadata(self) -> None:
        """Apply the changes other fronts of the cluster committed to the shared metadata
        log (acceptor.state), every METADATA_POLL_S; each front testifies with its
        own `config` row when it applied them."""
        if self.dynamic.poll():
            if self.split is not None:
                self.split.publish()
            self.write_config_row("metadata_log")
        self._metadata_poll = asyncio.get_running_loop().call_later(
            METADATA_POLL_S, self._poll_metadata
        )

    def write_config_row(self, cause: str) -> None:
        if self.config_writer is not None:
            detail: HarnessConfigDetail = self.effective_limits()
            detail["cause"] = cause
            self.config_writer.append(
                HarnessConfig(time.monotonic_ns(), reason=cause, detail=detail)
            )
        self.metrics.limits_changed()


class AcceptorHandle:
    """A running acceptor on its own thread and loop (for tests and the scenario runner)."""

    def __init__(
        self, acceptor: Acceptor, loop: asyncio.AbstractEventLoop, thread: threading.Thread
    ) -> None:
        self.acceptor = acceptor
        self.loop = loop
        self.thread = thread

    def address(self, listener: str) -> tuple[str, int]:
        return self.acceptor.address(listener)

    def bootstrap(self, listener: str) -> str:
        host, port = self.address(listener)
        return f"{host}:{port}"

    @property
    def metrics_url(self) -> str | None:
        return self.acceptor.metrics.url

    def call(self, fn: Any, *args: Any, timeout: float = 30) -> Any:
        """Run `fn(*args)` on the acceptor's loop and return its result (test hook)."""

        async def _run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(_run(), self.loop).result(timeout)

    def pause_processor(self, listener: str, index: int) -> None:
        self.call(lambda: self.acceptor.listeners[listener.upper()].processors[index].pause())

    def resume_processor(self, listener: str, index: int) -> None:
        self.call(lambda: self.acceptor.listeners[listener.upper()].processors[index].resume())

    def stop(self, timeout: float = 30) -> None:
        if not self.thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self.acceptor.stop(), self.loop)
        with contextlib.suppress(Exception):
            fut.result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)

    def __enter__(self) -> AcceptorHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_thread(
    props: Mapping[str, str] | AcceptorConfig,
    *,
    history_dir: str | os.PathLike[str] | None = None,
    run_id: str = "adhoc",
    loop_kind: str = "auto",
) -> AcceptorHandle:
    """Start an acceptor on a daemon thread; returns once every listener is listening.

    `acceptor.nice` is refused here: it is a process's priority, and this thread shares
    its caller's process (`harness acceptor` applies it)."""
    cfg = props if isinstance(props, AcceptorConfig) else parse_acceptor_config(props)
    if cfg.nice:
        raise ConfigError(
            "acceptor.nice", str(cfg.nice), "applies to a `harness acceptor` process, not a thread"
        )
    loop = new_event_loop(loop_kind)
    acceptor = Acceptor(cfg, history_dir=history_dir, run_id=run_id, out=sys.stderr)
    ready = threading.Event()
    failure: list[BaseException] = []

    def _main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(acceptor.start())
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=_main, name="acceptor", daemon=True)
    thread.start()
    ready.wait(60)
    if failure:
        thread.join(5)
        raise failure[0]
    return AcceptorHandle(acceptor, loop, thread)
