"""Prometheus metrics of the acceptor (names in docs/metrics.md, Kafka's names mapped as the
JMX exporter does).

Why a custom collector: rates and counts live in the quota engine, which belongs to the
event loop's thread; reading them per event would cost the hot path, so a scrape asks the
loop for one `snapshot()` and renders it. Event counters are plain dict increments on the
loop thread, copied on the same hop.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from base.quota.connections import QuotaSnapshot

SSM = "kafka_server_socket_server_metrics_"


def _num(v: float) -> float:
    return float("nan") if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _per_listener(name: str, help_text: str, values: Mapping[str, Any]) -> GaugeMetricFamily:
    """A gauge with one sample per listener."""
    g = GaugeMetricFamily(name, help_text, labels=["listener"])
    for listener, value in values.items():
        g.add_metric([listener], _num(value))
    return g


class AcceptorMetrics(Collector):
    """Receives when the acceptor started and three readers it calls on each scrape (on the
    loop): the engine's snapshot, each listener's time blocked, the limits in force;
    `start()` is told where to serve."""

    def __init__(
        self,
        *,
        started_ns: int,
        snapshot: Callable[[int], QuotaSnapshot],
        blocked_ns: Callable[[], dict[str, int]],
        limits: Callable[[], dict[str, object]],
    ) -> None:
        self.started_ns = started_ns
        self._snapshot = snapshot
        self._blocked_ns = blocked_ns
        self._limits = limits
        self.listener_counts: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.ip_counts: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.request_time: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.throttle_time: defaultdict[tuple[str, str], list[float]] = defaultdict(
            lambda: [0, 0.0]
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.url: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- hot path (loop thread) -----------------------------------------------------------
    def count(self, listener: str, ip: str, outcome: str) -> None:
        self.listener_counts[(listener, outcome)] += 1
        self.ip_counts[(ip, outcome)] += 1

    def request(self, client_id: str | None, latency_ms: float) -> None:
        entry = self.request_time[client_id or ""]
        entry[0] += 1
        entry[1] += latency_ms

    def throttled(self, bucket: tuple[str, str], throttle_ms: int) -> None:
        entry = self.throttle_time[bucket]
        entry[0] += 1
        entry[1] += throttle_ms

    def limits_changed(self) -> None:
        """Limits are read from the config on scrape; nothing to cache."""

    # -- serving --------------------------------------------------------------------------
    def start(self, host: str, port: int) -> None:
        """Serve on `host:port` (`0`: a free port; below 0: not at all)."""
        if port < 0:
            return
        from prometheus_client import start_http_server

        self._loop = asyncio.get_running_loop()
        self.registry.register(self)
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound_host, bound_port = self._server.server_address[:2]
        shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
        self.url = f"http://{shown}:{bound_port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- scrape (HTTP thread) ----------------------------------------------------------------
    def _gather(self) -> dict[str, Any]:
        now_ns = time.monotonic_ns()
        elapsed = max(1, now_ns - self.started_ns)
        blocked_ns = self._blocked_ns()
        return {
            "snap": self._snapshot(now_ns // 1_000_000),
            "blocked": {n: ns / elapsed for n, ns in blocked_ns.items()},
            "blocked_ns": blocked_ns,
            "listener_counts": dict(self.listener_counts),
            "ip_counts": dict(self.ip_counts),
            "limits": self._limits(),
            "request_time": {k: tuple(v) for k, v in self.request_time.items()},
            "throttle_time": {k: tuple(v) for k, v in self.throttle_time.items()},
        }

    def _gather_threadsafe(self) -> dict[str, Any] | None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return self._gather()

        async def _hop() -> dict[str, Any]:
            return self._gather()

        try:
            return asyncio.run_coroutine_threadsafe(_hop(), loop).result(5)
        except Exception:
            return None

    def collect(self) -> Iterator[Any]:
        data = self._gather_threadsafe()
        if data is None:
            return
        snap = data["snap"]
        rate = GaugeMetricFamily(
            SSM + "connection_accept_rate",
            "connection-accept-rate (per listener or per ip)",
            labels=["listener", "ip"],
        )
        for name, value in snap.listener_rates.items():
            rate.add_metric([name, ""], _num(value))
        for ip, value in snap.ip_rates.items():
            rate.add_metric(["", ip], _num(value))
        yield rate
        yield GaugeMetricFamily(
            SSM + "broker_connection_accept_rate",
            "broker-connection-accept-rate",
            value=_num(snap.broker_rate),
        )
        for metric, source, help_text in (
            (
                "connection_accept_throttle_time",
                snap.listener_throttle_avg,
                "connection-accept-throttle-time (avg ms)",
            ),
            (
                "ip_connection_accept_throttle_time",
                snap.ip_throttle_avg,
                "ip-connection-accept-throttle-time (avg ms)",
            ),
        ):
            yield _per_listener(SSM + metric, help_text, source)
        yield _per_listener(SSM + "connection_count", "connection-count", snap.listener_counts)
        yield _per_listener(
            "kafka_network_acceptor_acceptorblockedpercent",
            "AcceptorBlockedPercent (fraction of time blocked, mean rate)",
            data["blocked"],
        )
        # the meter's Count: ns blocked so far (the JMX exporter maps Kafka's the same way);
        # its increase between two scrapes over their distance is the blocked fraction then
        yield _per_listener(
            "kafka_network_acceptor_acceptorblockedpercent_count",
            "AcceptorBlockedPercent Count (ns blocked since start)",
            data["blocked_ns"],
        )
        # Kafka's Selector counters (per processor there; per listener here): connections
        # handed to a processor (accepted, not rejected or throttle-closed) and closed
        created: defaultdict[str, float] = defaultdict(float)
        closed: defaultdict[str, float] = defaultdict(float)
        for (name, outcome), value in data["listener_counts"].items():
            sign = {"accepted": 1.0, "rejected": -1.0, "throttle_closed": -1.0}.get(outcome)
            if sign is not None:
                created[name] += sign * value
            if outcome in ("closed", "evicted"):
                closed[name] += value
        for metric, values in (
            ("connection_creation_total", created),
            ("connection_close_total", closed),
        ):
            yield _per_listener(SSM + metric, metric.replace("_", "-"), values)
        rt = GaugeMetricFamily(
            "kafka_server_request_request_time",
            "mean broker time per request (ms) seen through the acceptor",
            labels=["user", "client_id"],
        )
        for cid, (n, total) in data["request_time"].items():
            rt.add_metric(["", cid], total / n if n else float("nan"))
        yield rt
        tt = GaugeMetricFamily(
            "kafka_server_request_throttle_time",
            "mean request-quota throttle time (ms) per bucket",
            labels=["user", "client_id"],
        )
        for (user, cid), (n, total) in data["throttle_time"].items():
            tt.add_metric([user, cid], total / n if n else float("nan"))
        yield tt
        ct = CounterMetricFamily(
            "harness_acceptor_connections", "connections by outcome", labels=["listener", "outcome"]
        )
        for (name, outcome), value in data["listener_counts"].items():
            ct.add_metric([name, outcome], float(value))
        yield ct
        ci = CounterMetricFamily(
            "harness_acceptor_ip_connections",
            "connections by source ip and outcome",
            labels=["ip", "outcome"],
        )
        for (ip, outcome), value in data["ip_counts"].items():
            ci.add_metric([ip, outcome], float(value))
        yield ci
        lim = GaugeMetricFamily("harness_acceptor_limit", "limit in force", labels=["key"])
        for key, value in data["limits"].items():
            if isinstance(value, bool):
                continue
            if isinstance(value, int | float):
                lim.add_metric([key], float(value))
        for key, value in data["limits"]["ip_quotas"].items():
            lim.add_metric([f"ip.connection_creation_rate.{key}"], float(value))
        yield lim
