"""The registered connections: opened for the processors, charged per request, ended once.

Why one object: every end of a registered connection (either side hangs up, eviction, idle
expiry, shutdown) must release its counts in the engine exactly once, wake the admissions
waiting for a slot, and write the `evict`/`close` rows and the metrics; every broker
response must be charged to the request quotas (KIP-124) and, when throttled, mute its
channel (KIP-219). Processors and connections reach this through `ports.ProcessorHost` and
`ports.ConnectionHost`; it receives the engines, the history rows, the metrics counters, the
admin answers and the slot signal, never the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from harness.acceptor.broker_charge import LoggedRequest, RequestLog, network_estimate
from harness.acceptor.config import AcceptorConfig
from harness.acceptor.connection import Connection
from harness.acceptor.forwarding import AsyncioWire
from harness.acceptor.request_quotas import with_throttle_time
from harness.acceptor.tls import ListenerTls, listener_tls
from harness.history import events
from harness.quota.requests import RequestQuotas

if TYPE_CHECKING:
    from harness.acceptor.ports import (
        Channel,
        ChannelSlot,
        Counted,
        Counts,
        LocalAnswers,
        NewConnection,
        RemoteCharge,
    )
    from harness.acceptor.recorder import ConnInfo, Recorder
    from harness.acceptor.tracker import Completed


#: the acceptor property naming the broker's request log file (harness.broker's
#: `request_log_path`): charge Kafka's own handler time per request (broker_charge)
REQUEST_LOG_KEY = "upstream.request.log"


class SlotSignal:
    """Wakes the admissions waiting for a connection slot (`max.connections`, per listener)
    when one may have been freed: a release, or a limit raised at run time."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def start(self) -> None:
        """On the loop, before the first admission."""
        self._event = asyncio.Event()

    def freed(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)


class Connections:
    """Receives the configuration, the connection engine's counts (`ports.Counted`), the
    request-quota engine, where rows and metrics counts go, the admin answers, what wakes
    the admissions waiting for a slot, and a log; implements `ports.ProcessorHost` and
    `ports.ConnectionHost`."""

    def __init__(
        self,
        cfg: AcceptorConfig,
        quotas: Counted,
        request_quotas: RequestQuotas,
        rec: Recorder,
        counts: Counts,
        admin: LocalAnswers,
        slot_freed: Callable[[], None],
        log: Callable[[str], None],
        *,
        remote_charge: RemoteCharge | None = None,
        request_quotas_enabled: Callable[[], bool] | None = None,
    ) -> None:
        self.cfg = cfg
        self.rec = rec
        self.admin = admin
        # what an end releases and tells
        self._quotas = quotas
        self._slot_freed = slot_freed
        self._counts = counts
        self._log = log
        #: the seeded fault `request_mute_skipped` (harness.quota.faults); False in production
        self._f_mute_skipped = "request_mute_skipped" in cfg.faults
        #: every registered connection not yet finished (shutdown closes them)
        self.open: set[Channel] = set()
        #: the connections' own tasks (`run()`), awaited at shutdown
        self.tasks: set[asyncio.Task[Any]] = set()
        # request charging (KIP-124)
        self._request_quotas = request_quotas
        self._quotas_enabled = request_quotas_enabled or request_quotas.enabled
        #: a processor process's: where each response's request-quota charge is decided
        #: (the accepting process, which owns the meters), asked before the response goes
        #: out (`connection.Connection`)
        self.remote_charge = remote_charge
        self._requests_seen = 0
        self._sample_detail = events.detail("acceptor", "request", sample=cfg.request_sample)
        #: a request of a SASL login (answered by Kafka's authenticator): charged nothing
        self._login_detail = events.detail(
            "acceptor", "request", charged_ms=0.0, charge_source="login"
        )
        #: the broker's request log, whose handler times are charged instead of the time the
        #: acceptor sees (`upstream.request.log`; harness.acceptor.broker_charge)
        log_path = cfg.properties.get(REQUEST_LOG_KEY, "").strip()
        #: the TLS of every listener the acceptor terminates (made once, at the start)
        self._tls = {
            spec.name: t for spec in cfg.listeners if (t := listener_tls(cfg, spec)) is not None
        }
        #: per listener, what its connections are made with: opaque, SASL, its TLS (read
        #: once: a bare connection's whole cost is a few such lookups)
        self._kinds: dict[str, tuple[bool, bool, ListenerTls | None]] = {
            spec.name: (spec.opaque, spec.sasl, self._tls.get(spec.name)) for spec in cfg.listeners
        }
        self.request_log: RequestLog | None = (
            RequestLog(log_path, hold_when=self._could_throttle) if log_path else None
        )
        if log_path and not os.path.exists(log_path):
            log(
                f"{REQUEST_LOG_KEY}={log_path} does not exist (yet): requests are charged "
                "the broker time the acceptor sees until it does"
            )

    def stop(self) -> None:
        """At shutdown, after the connections ended: stop reading the request log (charges
        still waiting for their lines, the last ~20 ms of responses, are not made)."""
        if self.request_log is not None:
            self.request_log.close()

    def _could_throttle(
        self, principal: str, client_id: str, api_key: int, at_most_ns: int
    ) -> bool:
        """Whether a charge of at most `at_most_ns` could throttle this client now."""
        now_ms = time.monotonic_ns() // 1_000_000
        return self._request_quotas.could_throttle(
            principal, client_id, api_key, at_most_ns, now_ms
        )

    # -- ports.ProcessorHost ---------------------------------------------------------------
    def max_connections_exceeded(self, listener: str) -> bool:
        return self._quotas.max_connections_exceeded(listener)

    def open_channel(self, processor: ChannelSlot, item: NewConnection) -> Channel:
        opaque, sasl, tls = self._kinds[item.info.listener]
        conn = Connection(
            self,
            processor,
            item.info,
            item.initial,
            item.protected,
            charges=self.request_log,
            clock=time.monotonic_ns,
            opaque=opaque,
            sasl=sasl,
        )
        AsyncioWire(conn, item.sock, tls)
        self.open.add(conn)
        return conn

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- ports.ConnectionHost --------------------------------------------------------------
    def request_quotas_enabled(self) -> bool:
        return self._quotas_enabled()

    @property
    def request_max_bytes(self) -> int:
        return self.cfg.quota.socket_request_max_bytes

    def upstream(self, listener: str) -> tuple[str, int]:
        spec = self.cfg.listener(listener)
        return spec.upstream_host, spec.upstream_port

    def log(self, message: str) -> None:
        self._log(message)

    def connection_closed(
        self, conn: Channel, reason: str, now_ns: int, detail: dict[str, object], *, evicted: bool
    ) -> None:
        info = conn.info
        self.open.discard(conn)
        conn.processor.remove(conn)
        self._quotas.release(info.listener, info.client_ip)
        self._slot_freed()
        if evicted:
            self.rec.conn(
                "evict", info, now_ns, reason="max_connections", processor=conn.processor.index
            )
            self._counts.count(info.listener, info.client_ip, "evicted")
        self.rec.closed(
            info,
            now_ns,
            reason,
            processor=conn.processor.index,
            bytes=conn.bytes_in + conn.bytes_out,
            **detail,
        )
        self._counts.count(info.listener, info.client_ip, "closed")

    def request_done(self, conn: Channel, done: Completed, now_ns: int, frame: bytes) -> bytes:
        """A broker response: the `request` row, the request-quota charge (KIP-124/219).

        Returns the frame to send (with throttle_time_ms raised when throttled).
        """
        latency_ms = done.latency_ns / 1e6
        client_id = done.client_id or ""
        self._counts.request(client_id, latency_ms)
        sample = self.cfg.request_sample
        self._requests_seen += 1
        gate = conn.gate
        # handler time, or the broker time without a purgatory wait
        charged_ns = gate.charged_ns(done.latency_ns, done.allowance_ns)
        source = gate.charge_source
        sampled = sample == 1 or (sample > 1 and self._requests_seen % sample == 0)
        principal = conn.principal
        login = conn.uncharged(done.correlation_id)  # a SASL login's request: never charged
        if login:
            gate.decided.pop(done.correlation_id, None)
        elif source == "late":  # no throttle whatever the charge: made when the line comes
            gate.on_logged = partial(
                self._late_charge,
                conn.info,
                principal,
                conn.processor.index,
                done,
                now_ns,
                charged_ns,
                sampled,
            )
            return frame
        if sampled:
            detail: str | dict[str, Any] | None = None if sample == 1 else self._sample_detail
            if login:
                detail = self._login_detail
            elif charged_ns != done.latency_ns or source is not None:
                detail = {"charged_ms": charged_ns / 1e6}
                if source is not None:  # a request log is read: which charge this is
                    detail["charge_source"] = source
                    if gate.network_ns:
                        detail["network_ms"] = gate.network_ns / 1e6
                    if gate.held_ns:
                        detail["held_ms"] = gate.held_ns / 1e6
                if sample > 1:
                    detail["sample"] = sample
            self.rec.conn(
                "request",
                conn.info,
                now_ns,
                api_key=done.api_key,
                client_id=done.client_id,
                principal=principal,
                latency_ms=latency_ms,
                bytes=done.request_bytes + done.response_bytes,
                processor=conn.processor.index,
                detail=detail,
            )
        if login:
            return frame
        now_ms = now_ns // 1_000_000
        charge = gate.decided.pop(done.correlation_id, None)  # decided in another process
        if charge is None:
            charge = self._request_quotas.record_request(
                principal, client_id, done.api_key, charged_ns, now_ms
            )
        if gate.network_ns:  # as Kafka records its network thread's time: after, unthrottled
            self._request_quotas.record_no_throttle(
                principal, client_id, gate.network_ns, now_ms, exempt=charge.exempt
            )
        if charge.throttle_ms <= 0:
            return frame
        throttle = charge.throttle_ms
        if not self._f_mute_skipped:  # SEEDED FAULT when skipped: the throttle is only told
            conn.mute(now_ns + throttle * 1_000_000)
        self._counts.throttled(charge.bucket, throttle)
        self.rec.conn(
            "request_throttle",
            conn.info,
            now_ns,
            delay_ms=float(throttle),
            api_key=done.api_key,
            client_id=done.client_id,
            principal=principal,
            processor=conn.processor.index,
            detail={
                "bucket": {"user": charge.bucket[0], "client-id": charge.bucket[1]},
                "quota": charge.quota,
                "rate": charge.rate,
                "broker_time_ms": latency_ms,
                "charged_ms": charged_ns / 1e6,
                **({"charge_source": source} if source is not None else {}),
                **({"network_ms": gate.network_ns / 1e6} if gate.network_ns else {}),
            },
        )
        return with_throttle_time(frame, done.api_key, done.api_version, throttle)

    def _late_charge(
        self,
        info: ConnInfo,
        principal: str,
        processor: int,
        done: Completed,
        sent_ns: int,
        wall_ns: int,
        sampled: bool,
        logged: LoggedRequest | None,
    ) -> None:
        """The charge of a response that could not be throttled, once its log line is read
        (or not, in time: the wall charge): recorded without a check, as its throttle was 0
        whatever the charge; its `request` row is written now, with the response's time."""
        now_ns = time.monotonic_ns()
        if logged is not None:
            handler_ns = logged.local_ns
            network_ns = network_estimate(logged, done.latency_ns)
            source = "broker_log_late"
        else:
            handler_ns, network_ns, source = wall_ns, 0, "wall_late"
        client_id = done.client_id or ""
        self._request_quotas.record_no_throttle(
            principal,
            client_id,
            handler_ns + network_ns,
            now_ns // 1_000_000,
            exempt=done.api_key in self._request_quotas.exempt_api_keys,
        )
        if not sampled:
            return
        detail: dict[str, Any] = {
            "charged_ms": handler_ns / 1e6,
            "charge_source": source,
            "late_ms": (now_ns - sent_ns) / 1e6,
        }
        if network_ns:
            detail["network_ms"] = network_ns / 1e6
        if self.cfg.request_sample > 1:
            detail["sample"] = self.cfg.request_sample
        self.rec.conn(
            "request",
            info,
            sent_ns,
            api_key=done.api_key,
            client_id=done.client_id,
            principal=principal,
            latency_ms=done.latency_ns / 1e6,
            bytes=done.request_bytes + done.response_bytes,
            processor=processor,
            detail=detail,
        )
