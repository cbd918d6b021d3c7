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
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from harness.acceptor.admin import AdminHandler
from harness.acceptor.admission import ListenerAcceptor
from harness.acceptor.config import AcceptorConfig, parse_acceptor_config
from harness.acceptor.heartbeat import Heartbeat
from harness.acceptor.metrics import AcceptorMetrics
from harness.acceptor.processor import Channel
from harness.acceptor.recorder import Recorder
from harness.acceptor.request_quotas import (
    PRINCIPAL,
    entity_key,
    parse_entity_key,
    with_throttle_time,
)
from harness.acceptor.stall import parse_stalls, schedule_stalls
from harness.acceptor.state import load_state, save_state
from harness.acceptor.tracker import Completed
from harness.history import HistoryWriter
from harness.quota.client_quota_admin import enforced_ip_quotas, ip_entity_address
from harness.quota.config import QuotaConfig, apply_dynamic_update, layered_update
from harness.quota.connections import ConnectionQuotas
from harness.quota.faults import FAULT_KEY, FAULTS, Faults
from harness.quota.requests import EntityName, RequestQuotas

log = logging.getLogger("harness.acceptor")

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


class Acceptor:
    def __init__(
        self,
        cfg: AcceptorConfig,
        *,
        history_dir: str | os.PathLike[str] | None = None,
        run_id: str = "adhoc",
        out: Any = None,
    ) -> None:
        self.cfg = cfg
        self.quota_cfg: QuotaConfig = cfg.quota
        self.quotas = ConnectionQuotas(cfg.quota, faults=cfg.faults)
        self.request_quotas = RequestQuotas(
            cfg.quota.quota_window_num, cfg.quota.quota_window_size_seconds, faults=cfg.faults
        )
        self.run_id = run_id
        self.history_dir = Path(history_dir) if history_dir is not None else None
        self.out = out
        self.state = load_state(cfg.state_dir)
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
        #: measures the event loop's own stalls (`loop_lag` rows; harness.acceptor.heartbeat)
        self.heartbeat = Heartbeat(self.rec)
        #: test-scheduled processor stalls (harness.test.processor.stall; none in production)
        self._stalls = parse_stalls(cfg)
        self._stall_timers: list[asyncio.TimerHandle] = []
        self.listeners: dict[str, ListenerAcceptor] = {}
        self.admin = AdminHandler(self)
        self.metrics = AcceptorMetrics(self)
        self._conn_seq = 0
        self._requests_seen = 0
        self._sample_detail = f'{{"sample": {cfg.request_sample}}}'
        self._slot_event: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.connections: set[Channel] = set()
        self.stopped = False
        if cfg.skip_ip_rate_check:
            self.log(SKIP_IP_RATE_WARNING)
        if cfg.faults:
            self.log(fault_warning(cfg.faults))
        self._restore_state()

    # -- helpers -----------------------------------------------------------------------------
    def log(self, message: str) -> None:
        log.warning(message)
        if self.out is not None:
            print(message, file=self.out, flush=True)

    def next_conn_id(self, listener: str) -> str:
        self._conn_seq += 1
        return f"{listener}-{os.getpid()}-{self._conn_seq}"

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def count(self, listener: str, ip: str, outcome: str) -> None:
        self.metrics.count(listener, ip, outcome)

    def slot_freed(self) -> None:
        if self._slot_event is not None:
            self._slot_event.set()
            self._slot_event = asyncio.Event()

    async def wait_slot_freed(self, timeout: float) -> None:
        if self._slot_event is None:
            self._slot_event = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._slot_event.wait(), timeout)

    # -- start / stop ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._slot_event = asyncio.Event()
        for spec in self.cfg.listeners:
            la = ListenerAcceptor(self, spec)
            la.bind()
            self.listeners[spec.name] = la
        self.metrics.start()
        self.write_config_row("start")
        self.heartbeat.start()
        for la in self.listeners.values():
            la.start()
        if self._stalls:
            self._stall_timers = schedule_stalls(self, self._stalls)

    async def stop(self) -> None:
        """Stop accepting, close parked and queued sockets, close connections, flush."""
        if self.stopped:
            return
        self.stopped = True
        for h in self._stall_timers:
            h.cancel()
        for la in self.listeners.values():
            la.stop_accepting()
            for proc in la.processors:
                proc.resume()  # a stall cut short by the stop
        await asyncio.sleep(0.05)  # let cancelled accept/admission/header tasks clean up
        for la in self.listeners.values():
            la.close_parked()
            for proc in la.processors:
                proc.stop()
                for item in proc.drain_unregistered():
                    self.quotas.release(la.name, item.info.client_ip)
                    with contextlib.suppress(OSError):
                        item.sock.close()
                    self.rec.conn(
                        "close",
                        item.info,
                        time.monotonic_ns(),
                        reason="shutdown",
                        detail={"registered": False},
                    )
        for conn in list(self.connections):
            conn.finish("shutdown")
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=5)
        for t in pending:
            t.cancel()
        internal = [t for la in self.listeners.values() for t in la.tasks()]
        if internal:  # cancelled accept/admission/processor tasks: let them finish unwinding
            await asyncio.wait(internal, timeout=5)
        self.metrics.stop()
        self.heartbeat.stop()
        self.rec.close()
        if self.config_writer is not None:
            self.config_writer.close()

    def address(self, listener: str) -> tuple[str, int]:
        la = self.listeners[listener.upper()]
        return la.host, la.port

    # -- connection events ------------------------------------------------------------------------
    def connection_started(self, conn: Channel) -> None:
        self.connections.add(conn)

    def connection_closed(
        self,
        conn: Channel,
        reason: str,
        now_ns: int,
        detail: dict[str, object],
        *,
        evicted: bool,
    ) -> None:
        info = conn.info
        self.connections.discard(conn)
        conn.processor.remove(conn)
        self.quotas.release(info.listener, info.client_ip)
        self.slot_freed()
        if evicted:
            self.rec.conn(
                "evict", info, now_ns, reason="max_connections", processor=conn.processor.index
            )
            self.count(info.listener, info.client_ip, "evicted")
        self.rec.conn(
            "close",
            info,
            now_ns,
            reason=reason,
            processor=conn.processor.index,
            bytes=conn.bytes_in + conn.bytes_out,
            detail=detail,
        )
        self.count(info.listener, info.client_ip, "closed")

    def request_done(self, conn: Channel, done: Completed, now_ns: int, frame: bytes) -> bytes:
        """A broker response: the `request` row, the request-quota charge (KIP-124/219).

        Returns the frame to send (with throttle_time_ms raised when throttled).
        """
        latency_ms = done.latency_ns / 1e6
        client_id = done.client_id or ""
        self.metrics.request(client_id, latency_ms)
        sample = self.cfg.request_sample
        self._requests_seen += 1
        charged_ns = conn.gate.charged_ns(done.latency_ns)  # no purgatory wait, as Kafka
        if sample == 1 or (sample > 1 and self._requests_seen % sample == 0):
            detail: str | dict[str, float] | None = None if sample == 1 else self._sample_detail
            if charged_ns != done.latency_ns:  # a long poll's wait: not charged
                detail = {
                    "charged_ms": charged_ns / 1e6,
                    **({"sample": sample} if sample > 1 else {}),
                }
            self.rec.conn(
                "request",
                conn.info,
                now_ns,
                api_key=done.api_key,
                client_id=done.client_id,
                principal=PRINCIPAL,
                latency_ms=latency_ms,
                bytes=done.request_bytes + done.response_bytes,
                processor=conn.processor.index,
                detail=detail,
            )
        rq = self.request_quotas
        charge = rq.record_request(
            PRINCIPAL, client_id, done.api_key, charged_ns, now_ns // 1_000_000
        )
        if charge.throttle_ms <= 0:
            return frame
        throttle = charge.throttle_ms
        conn.mute(now_ns + throttle * 1_000_000)
        self.metrics.throttled(charge.bucket, throttle)
        self.rec.conn(
            "request_throttle",
            conn.info,
            now_ns,
            delay_ms=float(throttle),
            api_key=done.api_key,
            client_id=done.client_id,
            principal=PRINCIPAL,
            processor=conn.processor.index,
            detail={
                "bucket": {"user": charge.bucket[0], "client-id": charge.bucket[1]},
                "quota": charge.quota,
                "rate": charge.rate,
                "broker_time_ms": latency_ms,
                "charged_ms": charged_ns / 1e6,
            },
        )
        return with_throttle_time(frame, done.api_key, done.api_version, throttle)

    def set_request_quota(
        self, user: EntityName, client_id: EntityName, key: str, value: float | None
    ) -> None:
        self.request_quotas.set_quota(user, client_id, key, value)
        ek = entity_key(user, client_id)
        values = self.state.request_quotas.setdefault(ek, {})
        if value is None:
            values.pop(key, None)
            if not values:
                self.state.request_quotas.pop(ek, None)
        else:
            values[key] = float(value)
        save_state(self.cfg.state_dir, self.state)

    # -- dynamic configuration (admin path) ------------------------------------------------
    def _restore_state(self) -> None:
        st = self.state
        if st.broker_config or st.node_config:
            layers = {**st.broker_config, **st.node_config}  # per-broker wins
            self.quota_cfg = apply_dynamic_update(self.quota_cfg, layers)
            self.quotas.reconfigure(self.quota_cfg, time.monotonic_ns() // 1_000_000)
        for ek, values in st.request_quotas.items():
            user, client = parse_entity_key(ek)
            for key, value in values.items():
                self.request_quotas.set_quota(user, client, key, value)
        now = time.monotonic_ns() // 1_000_000
        for key, rate in st.ip_quotas.items():
            ip = None if key == "default" else key
            if not self.cfg.skip_ip_rate_check:
                self.quotas.set_ip_quota(ip_entity_address(ip), rate, now)

    def ip_quotas(self) -> dict[str, int]:
        """The IP quotas in force ("default" for the default entity): the admin truth."""
        return dict(self.state.ip_quotas)

    def set_ip_quota(self, ip: str | None, rate: int | None) -> None:
        now_ns = time.monotonic_ns()
        key = "default" if ip is None else ip  # the entity name as given (Kafka's image)
        if not self.cfg.skip_ip_rate_check:
            self.quotas.set_ip_quota(ip_entity_address(ip), rate, now_ns // 1_000_000)
        if rate is None:
            self.state.ip_quotas.pop(key, None)
        else:
            self.state.ip_quotas[key] = rate
        save_state(self.cfg.state_dir, self.state)

    def alter_broker_config(
        self, changes: Mapping[str, str | None], *, per_broker: bool = False
    ) -> None:
        """Apply dynamic broker keys to the cluster-default or (per_broker) this broker's
        layer (raises ConfigError and changes nothing on bad input)."""
        effective, cluster, node = layered_update(
            self.state.broker_config, self.state.node_config, changes, per_broker=per_broker
        )
        new_cfg = apply_dynamic_update(self.quota_cfg, effective)
        now_ms = time.monotonic_ns() // 1_000_000
        self.quotas.reconfigure(new_cfg, now_ms)
        self.quota_cfg = new_cfg
        self.state.broker_config, self.state.node_config = cluster, node
        save_state(self.cfg.state_dir, self.state)
        self.slot_freed()

    def effective_limits(self) -> dict[str, object]:
        limits = dict(self.quota_cfg.to_properties())
        limits["listeners"] = limits.get("listeners")
        limits["ip_quotas"] = enforced_ip_quotas(self.ip_quotas())  # by address
        limits["request_quotas"] = dict(self.state.request_quotas)
        limits["harness.test.skip.ip.rate.check"] = self.cfg.skip_ip_rate_check
        limits[FAULT_KEY] = self.cfg.faults.names()
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

    def write_config_row(self, cause: str) -> None:
        if self.config_writer is not None:
            detail = self.effective_limits()
            detail["cause"] = cause
            self.config_writer.record("config", detail=detail, reason=cause)
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


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    if kind in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            if kind == "uvloop":
                raise
    return asyncio.new_event_loop()


def start_in_thread(
    props: Mapping[str, str] | AcceptorConfig,
    *,
    history_dir: str | os.PathLike[str] | None = None,
    run_id: str = "adhoc",
    loop_kind: str = "auto",
) -> AcceptorHandle:
    """Start an acceptor on a daemon thread; returns once every listener is listening."""
    cfg = props if isinstance(props, AcceptorConfig) else parse_acceptor_config(props)
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
