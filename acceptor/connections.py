"""The registered connections: opened for the processors, charged per request, ended once.

Why one object: every end of a registered connection (either side hangs up, eviction, idle
expiry, shutdown) must release its counts in the engine exactly once, wake the admissions
waiting for a slot, and write the `evict`/`close` rows and the metrics; every broker
response's request-quota charge (KIP-124), decided by its connection (`charge.decide`),
must be recorded on the one set of meters and its `request` / `request_throttle` rows
written. Processors and connections reach this through `ports.ProcessorHost` and
`ports.ConnectionHost`; it receives the engines, the history rows, the metrics counters, the
admin answers and the slot signal, never the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from acceptor.broker_charge import RequestLog
from acceptor.charge import request_detail, throttle_detail
from acceptor.config import AcceptorConfig
from acceptor.connection import Connection
from acceptor.forwarding import AsyncioWire
from acceptor.tls import ListenerTls, listener_tls
from base.history.rows import AcceptorEvict, AcceptorRequest, AcceptorRequestThrottle
from base.quota.requests import RequestQuotas

if TYPE_CHECKING:
    from acceptor.charge import Charge
    from acceptor.ports import (
        Channel,
        ChannelSlot,
        Counted,
        Counts,
        LocalAnswers,
        NewConnection,
        RemoteCharge,
    )
    from acceptor.recorder import Recorder
    from acceptor.tracker import Completed
    from base.quota.requests import RequestCharge


#: the acceptor property naming the broker's request log file (broker's
#: `request_log_path`): charge Kafka's own handler time per request (broker_charge)
REQUEST_LOG_KEY = "upstream.request.log"


class SlotSignal:
    """Wakes the admissions waiting for a connection slot (`max.connections`, per listener)
    when one may have been freed: a release, or a limit raised at run time."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None
        #: admissions waiting now (a release with none waiting wakes nobody: no new event)
        self._waiting = 0

    def start(self) -> None:
        """On the loop, before the first admission."""
        self._event = asyncio.Event()

    def freed(self) -> None:
        if self._event is not None and self._waiting:
            self._event.set()
            self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        self._waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)
        finally:
            self._waiting -= 1


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
        # the seeded-fault hooks (base.quota.faults), asked once: Kafka's in production
        faults = cfg.faults.policy()
        #: a throttled connection is muted until its throttle ends (KIP-219)
        self.mutes_throttled = faults.mutes_throttled()
        #: the windows a charge of at most some ns is judged over (a response is held if it
        #: could throttle)
        self._claim_windows = faults.claim_windows(request_quotas.claim_windows)
        #: every registered connection not yet finished (shutdown closes them)
        self.open: set[Channel] = set()
        #: the connections' own tasks (`run()`), awaited at shutdown
        self.tasks: set[asyncio.Task[Any]] = set()
        # request charging (KIP-124)
        self._request_quotas = request_quotas
        #: `ports.ConnectionHost.request_quotas_enabled` and
        #: `ports.ProcessorHost.max_connections_exceeded`: the engines' own methods, bound
        #: here (asked on every take of a request and every read: no call through this)
        self.request_quotas_enabled: Callable[[], bool] = (
            request_quotas_enabled or request_quotas.enabled
        )
        self.max_connections_exceeded: Callable[[str], bool] = quotas.max_connections_exceeded
        #: a processor process's: where each response's request-quota charge is decided
        #: (the accepting process, which owns the meters), asked before the response goes
        #: out (`connection.Connection`)
        self.remote_charge = remote_charge
        self._requests_seen = 0
        #: the broker's request log, whose handler times are charged instead of the time the
        #: acceptor sees (`upstream.request.log`; acceptor.broker_charge)
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
            principal, client_id, api_key, at_most_ns, now_ms, windows=self._claim_windows
        )

    # -- ports.ProcessorHost ---------------------------------------------------------------
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
            self.rec.write(
                AcceptorEvict(
                    now_ns, info, processor=conn.processor.index, reason="max_connections"
                )
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

    def answered(self, done: Completed) -> bool:
        """A broker response answered a request: counted; whether its `request` row is
        written (one in `history.request.sample`)."""
        self._counts.request(done.client_id or "", done.latency_ns / 1e6)
        sample = self.cfg.request_sample
        self._requests_seen += 1
        return sample == 1 or (sample > 1 and self._requests_seen % sample == 0)

    def charge(self, charge: Charge) -> RequestCharge:
        """Record a charge the connection decided, with the quota check; its network time
        after, unchecked (as Kafka records its network thread's time)."""
        meters = self._request_quotas
        now_ms = charge.at_ns // 1_000_000
        done = charge.done
        client_id = done.client_id or ""  # `Charge.client_id`, without its call
        outcome = meters.record_request(
            charge.principal, client_id, done.api_key, charge.handler_ns, now_ms
        )
        if charge.network_ns:
            meters.record_no_throttle(
                charge.principal, client_id, charge.network_ns, now_ms, exempt=outcome.exempt
            )
        return outcome

    def charge_unchecked(self, charge: Charge) -> None:
        """Record a late charge (it could not throttle): all of it, without a check."""
        meters = self._request_quotas
        meters.record_no_throttle(
            charge.principal,
            charge.client_id,
            charge.handler_ns + charge.network_ns,
            charge.recorded_ns // 1_000_000,
            exempt=charge.done.api_key in meters.exempt_api_keys,
        )

    def request_row(self, conn: Channel, charge: Charge) -> None:
        done = charge.done
        self.rec.write(
            AcceptorRequest(
                charge.at_ns,
                conn.info,
                processor=conn.processor.index,
                api_key=done.api_key,
                client_id=done.client_id,
                principal=charge.principal,
                latency_ms=done.latency_ns / 1e6,
                bytes=done.request_bytes + done.response_bytes,
                detail=request_detail(charge, self.cfg.request_sample),
            )
        )

    def throttle_row(self, conn: Channel, charge: Charge, outcome: RequestCharge) -> None:
        self._counts.throttled(outcome.bucket, outcome.throttle_ms)
        done = charge.done
        self.rec.write(
            AcceptorRequestThrottle(
                charge.at_ns,
                conn.info,
                processor=conn.processor.index,
                delay_ms=float(outcome.throttle_ms),
                api_key=done.api_key,
                client_id=done.client_id,
                principal=charge.principal,
                detail=throttle_detail(charge, outcome),
            )
        )
