"""Live admission view: turn the acceptor's Prometheus counters into per-second rates.

Pure (no clock, no sockets): the web UI's poller feeds it ``(text, now_s)`` pairs and
serves what ``snapshot()`` returns. The counters are the harness's own
(docs/metrics.md): ``harness_acceptor_connections_total{listener,outcome}``,
``harness_acceptor_ip_connections_total{ip,outcome}`` and the limits in force
``harness_acceptor_limit{key}``; rates come from counter deltas between polls so
the view shows what the acceptor decided, not what the generator hoped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

OUTCOMES = ("accepted", "delayed", "throttle_closed", "rejected")
CONN_TOTAL = "harness_acceptor_connections_total"
IP_TOTAL = "harness_acceptor_ip_connections_total"
LIMIT = "harness_acceptor_limit"
CONN_COUNT = "kafka_server_socket_server_metrics_connection_count"
#: Kafka's "no limit" (Int.MaxValue); such limits are not drawn
UNLIMITED = 2**31 - 1


@dataclass(frozen=True)
class Scrape:
    """The values of one /metrics poll that the view needs."""

    listeners: dict[tuple[str, str], float] = field(default_factory=dict)
    ips: dict[tuple[str, str], float] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    open_connections: dict[str, float] = field(default_factory=dict)


def parse_metrics(text: str) -> Scrape:
    """Pick the admission counters out of Prometheus text (other metrics are ignored)."""
    scrape = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels, value = sample.labels, float(sample.value)
            if sample.name == CONN_TOTAL:
                scrape.listeners[(labels.get("listener", ""), labels.get("outcome", ""))] = value
            elif sample.name == IP_TOTAL:
                scrape.ips[(labels.get("ip", ""), labels.get("outcome", ""))] = value
            elif sample.name == LIMIT:
                scrape.limits[labels.get("key", "")] = value
            elif sample.name == CONN_COUNT and not labels.get("ip"):
                scrape.open_connections[labels.get("listener", "")] = value
    return scrape


def _rates(
    now: dict[tuple[str, str], float], before: dict[tuple[str, str], float], dt: float
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (name, outcome), value in now.items():
        if outcome not in OUTCOMES:
            continue
        prev = before.get((name, outcome), 0.0)
        delta = value - prev if value >= prev else value  # a restarted acceptor resets
        out.setdefault(name, dict.fromkeys(OUTCOMES, 0.0))[outcome] = delta / dt
    return out


def rate_limits(limits: dict[str, float]) -> dict[str, float]:
    """The connection-rate limits in force (per second), without the unlimited ones."""
    return {
        k: v
        for k, v in limits.items()
        if "connection.creation.rate" in k or "connection_creation_rate" in k
        if 0 < v < UNLIMITED
    }


def count_limits(limits: dict[str, float]) -> dict[str, float]:
    """The connection-count limits in force, without the unlimited ones."""
    return {
        k: v
        for k, v in limits.items()
        if k.endswith("max.connections") or "per.ip" in k
        if 0 <= v < UNLIMITED
    }


class AdmissionView:
    """Rates per listener and per IP over the last ``keep`` polls."""

    def __init__(self, keep: int = 300, top_ips: int = 5) -> None:
        self.points: deque[dict[str, Any]] = deque(maxlen=keep)
        self.top_ips = top_ips
        self._last: Scrape | None = None
        self._last_t = 0.0
        self.limits: dict[str, float] = {}
        self.error = ""
        self.polls = 0

    def ingest(self, text: str, now_s: float) -> None:
        """One poll's text at ``now_s`` (seconds, any monotonic origin)."""
        scrape = parse_metrics(text)
        self.limits = scrape.limits
        self.polls += 1
        self.error = ""
        last, last_t = self._last, self._last_t
        self._last, self._last_t = scrape, now_s
        if last is None or now_s <= last_t:
            return
        dt = now_s - last_t
        ip_rates = _rates(scrape.ips, last.ips, dt)
        busiest = sorted(ip_rates, key=lambda ip: -sum(ip_rates[ip].values()))[: self.top_ips]
        self.points.append(
            {
                "t": now_s,
                "listeners": _rates(scrape.listeners, last.listeners, dt),
                "ips": {ip: ip_rates[ip] for ip in busiest if sum(ip_rates[ip].values()) > 0},
                "open": dict(scrape.open_connections),
            }
        )

    def failed(self, message: str) -> None:
        self.error = message

    def snapshot(self) -> dict[str, Any]:
        """Everything the tab and the chart draw (JSON-ready)."""
        return {
            "points": list(self.points),
            "rate_limits": rate_limits(self.limits),
            "count_limits": count_limits(self.limits),
            "error": self.error,
            "polls": self.polls,
        }

    def table(self) -> list[dict[str, Any]]:
        """Rows of the Locust extended table: the latest rates per listener and top IPs."""
        if not self.points:
            return []
        latest = self.points[-1]
        rl = rate_limits(self.limits)
        rows: list[dict[str, Any]] = []

        def add(scope: str, name: str, rates: dict[str, float], limit: Iterable[str]) -> None:
            row: dict[str, Any] = {"scope": scope, "name": name}
            row.update({o: round(rates.get(o, 0.0), 1) for o in OUTCOMES})
            row["limit"] = ", ".join(f"{k}={rl[k]:g}" for k in limit if k in rl) or "-"
            rows.append(row)

        for listener, rates in sorted(latest["listeners"].items()):
            keys = ["max.connection.creation.rate"]
            keys.append(f"listener.name.{listener.lower()}.max.connection.creation.rate")
            add("listener", listener, rates, keys)
        for ip, rates in latest["ips"].items():
            keys = [f"ip.connection_creation_rate.{ip}", "ip.connection_creation_rate.default"]
            add("ip", ip, rates, [k for k in keys if k in rl][:1])
        return rows
