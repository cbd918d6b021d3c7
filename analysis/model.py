"""The checker's own model of Kafka's connection quotas (KIP-402, KIP-612).

Written from the behavioural reference (kafka-quota-model.md §0, §2, §3, §7), not from
the enforcer: a bug in `base.quota` must not be able to certify itself (Jepsen).
Pure and clock-free: every call takes the time in milliseconds, the way the acceptor
fed its engine (`now_ms = mono_ns // 1_000_000`).

Semantics follow Kafka trunk (3.8+; the release's own where it differs, analysis.versions):
a ring of n+1 samples, purge by last event, a
window padded to (n-1)·w with a 1 ms floor, record-then-check, violation iff
rate > bound, throttle X = round((rate-bound)/bound · W) half-up, bounded by w.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analysis.hosts import resolve_overrides
from analysis.versions import Semantics, semantics_for

INT_MAX = 2_147_483_647
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_MS = 1000


def java_round(x: float) -> int:
    """Java's Math.round: half-up on the double; +inf saturates (bound 0 → capped at w)."""
    if math.isinf(x) or math.isnan(x):
        return 2**63 - 1 if x > 0 else 0
    return math.floor(x + 0.5)


class RateMeter:
    """One Kafka quota `Sensor` holding `Rate(WindowedSum)`: the state every rate limit uses.

    Kept as a ring of n+1 samples exactly like SampledStat; a running total, the oldest
    start and a lower bound of the oldest last-event spare the replay a scan of the ring
    on every record (values are ±1 counts, so the running total is exact).
    """

    __slots__ = ("bound", "cur", "lasts", "min_last", "min_start", "n", "overlap", "slots",
                 "starts", "total", "values", "w")  # fmt: skip

    def __init__(
        self,
        bound: float,
        n: int = DEFAULT_WINDOW_NUM,
        w_ms: int = DEFAULT_WINDOW_MS,
        *,
        overlap: bool = True,
    ):
        """`overlap` (Kafka >= 3.8, analysis.versions): n+1 samples, purged by last event;
        False: the ring before 3.8, n samples purged by their start."""
        if n < 1 or w_ms < 1:
            raise ValueError(f"quota.window.num={n}, window={w_ms} ms: both must be >= 1")
        self.bound = float(bound)
        self.n = n
        self.w = w_ms
        self.overlap = overlap
        self.slots = n + 1 if overlap else n
        self.starts: list[int] = []
        self.lasts: list[int] = []
        self.values: list[float] = []
        self.cur = 0
        self.total = 0.0
        self.min_start = 0
        self.min_last = 0  # a lower bound of min(lasts): lasts only grow

    def _first(self, t: int) -> None:
        self.starts.append(t)
        self.lasts.append(t)
        self.values.append(0.0)
        self.cur = 0
        self.min_start = self.min_last = t

    # -- SampledStat ----------------------------------------------------------------
    def record(self, value: float, t: int) -> None:
        """Record without a quota check (Kafka's `record(v, t, false)`; used to un-record)."""
        if not self.starts:
            self._first(t)
        cur = self.cur
        starts = self.starts
        if t - starts[cur] >= self.w:  # isComplete -> advance over the ring
            cur = (cur + 1) % self.slots
            self.cur = cur
            if cur >= len(starts):
                starts.append(t)
                self.lasts.append(t)
                self.values.append(0.0)
            else:
                old_start = starts[cur]
                self.total -= self.values[cur]
                starts[cur] = t
                self.values[cur] = 0.0
                if old_start <= self.min_start:
                    self.min_start = min(starts)
        self.values[cur] += value
        self.total += value
        self.lasts[cur] = t

    def _purge(self, t: int) -> None:
        """Reset every sample whose last event (before 3.8: whose start) is n·w old or
        more."""
        expire = self.n * self.w
        if t - (self.min_last if self.overlap else self.min_start) < expire:
            return
        lasts, starts, values = self.lasts, self.starts, self.values
        refs = lasts if self.overlap else starts
        for i in range(len(lasts)):
            if t - refs[i] >= expire:
                self.total -= values[i]
                starts[i] = t
                lasts[i] = t
                values[i] = 0.0
        self.min_last = min(lasts)
        self.min_start = min(starts)

    def window_ms(self, t: int) -> int:
        """Rate.windowSize: elapsed since the oldest sample, padded to n-1 full windows."""
        if not self.starts:
            self._first(t)
        self._purge(t)
        elapsed = t - self.min_start
        full = int(elapsed / self.w)  # Java truncation towards zero
        if full < self.n - 1:
            elapsed += (self.n - 1 - full) * self.w
        return max(elapsed, 1)

    def measure(self, t: int) -> tuple[float, int]:
        """(rate per second, window ms) at `t`, as `Rate.measure` computes it."""
        ws = self.window_ms(t)
        return self.total / (ws / 1000.0), ws

    # -- Sensor.record with a quota check ---------------------------------------------
    def record_bounded(self, t: int) -> int:
        """Record +1 then check: 0 when within quota, else the throttle min(X, w) in ms."""
        self.record(1.0, t)
        rate, ws = self.measure(t)
        if not rate > self.bound:
            return 0
        if self.bound == 0:
            return self.w
        x = java_round((rate - self.bound) / self.bound * ws)
        return min(x, self.w)


def burst_allowance(
    bound: float, n: int = DEFAULT_WINDOW_NUM, w_ms: int = DEFAULT_WINDOW_MS
) -> float:
    """Units a fresh meter accepts at one instant before the first violation: bound·(n-1)·w."""
    return bound * (n - 1) * w_ms / 1000.0


# ---------------------------------------------------------------------------------------
# Limits in force (parsed from a `config` row's detail or run.json "limits")
# ---------------------------------------------------------------------------------------


def _num(key: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"config: {key}={value!r}: not a number") from None


def _listener_names(value: Any) -> list[str]:
    """`listeners` as Kafka writes it ("CLIENT://h:p,INTERNAL://h:p") or as a list of names."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    names = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        names.append(text.split("://", 1)[0].strip().lower())
    return names


def _overrides(value: Any) -> dict[str, int]:
    if not value:
        return {}
    if isinstance(value, Mapping):
        return {str(k): int(_num("max.connections.per.ip.overrides", v)) for k, v in value.items()}
    out: dict[str, int] = {}
    for part in str(value).split(","):
        part = part.strip()
        if not part:
            continue
        host, sep, num = part.rpartition(":")
        if not sep:
            raise ValueError(
                f"config: max.connections.per.ip.overrides={value!r}: entry {part!r} is not host:n"
            )
        out[host.strip()] = int(_num("max.connections.per.ip.overrides", num))
    return out


@dataclass(frozen=True)
class Limits:
    """Every connection limit in force at one instant, under Kafka's own names."""

    window_num: int = DEFAULT_WINDOW_NUM
    window_ms: int = DEFAULT_WINDOW_MS
    max_connections: float = INT_MAX
    max_connections_per_ip: float = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    broker_rate: float = INT_MAX
    listener_max: Mapping[str, float] = field(default_factory=dict)
    listener_rate: Mapping[str, float] = field(default_factory=dict)
    ip_quota_default: float = INT_MAX
    ip_quotas: Mapping[str, float] = field(default_factory=dict)
    listeners: tuple[str, ...] = ()
    inter_broker_listener: str | None = None
    #: `kafka.version`: the release whose semantics this run is judged by (None: current)
    kafka_version: str | None = None
    #: `kafka.metadata`: its metadata mode, kraft or zookeeper (None: the release's default)
    kafka_metadata: str | None = None

    @classmethod
    def from_config(cls, detail: Mapping[str, Any] | str | None) -> Limits:
        """Parse a `config` row's detail (Kafka keys); unknown keys are ignored."""
        if detail is None:
            return cls()
        if isinstance(detail, str):
            text = detail
            try:
                detail = json.loads(text) if text.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"config: detail={text[:80]!r}: not JSON ({exc})") from None
        assert isinstance(detail, Mapping)
        listener_max: dict[str, float] = {}
        listener_rate: dict[str, float] = {}
        for key, value in detail.items():
            if key.startswith("listener.name.") and value is not None:
                rest = key[len("listener.name.") :]
                name, _, sub = rest.partition(".")
                if sub == "max.connections":
                    listener_max[name.lower()] = _num(key, value)
                elif sub == "max.connection.creation.rate":
                    listener_rate[name.lower()] = _num(key, value)
        ipq = detail.get("ip_quotas") or {}
        if not isinstance(ipq, Mapping):
            raise ValueError(f"config: ip_quotas={ipq!r}: expected an object")
        ip_default = INT_MAX if ipq.get("default") is None else _num("ip_quotas", ipq["default"])
        ip_quotas = {
            str(k): _num(f"ip_quotas.{k}", v)
            for k, v in ipq.items()
            if k != "default" and v is not None
        }

        def get(key: str, default: float) -> float:
            value = detail.get(key)
            return default if value is None else _num(key, value)

        window_num = int(get("quota.window.num", DEFAULT_WINDOW_NUM))
        window_s = get("quota.window.size.seconds", DEFAULT_WINDOW_MS / 1000)
        if window_num < 1 or window_s <= 0:
            raise ValueError(
                f"config: quota.window.num={window_num}, quota.window.size.seconds={window_s}: "
                "both must be >= 1"
            )
        # Kafka's inter-broker listener: `inter.broker.listener.name`, else the listener named
        # for `security.inter.broker.protocol` (PLAINTEXT unless set), as
        # KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol derives it
        ibl = detail.get("inter.broker.listener.name") or (
            detail.get("security.inter.broker.protocol") or "PLAINTEXT"
        )
        return cls(
            window_num=window_num,
            window_ms=round(window_s * 1000),
            max_connections=get("max.connections", INT_MAX),
            max_connections_per_ip=get("max.connections.per.ip", INT_MAX),
            per_ip_overrides=resolve_overrides(
                _overrides(detail.get("max.connections.per.ip.overrides"))
            ),
            broker_rate=get("max.connection.creation.rate", INT_MAX),
            listener_max=listener_max,
            listener_rate=listener_rate,
            ip_quota_default=ip_default,
            ip_quotas=ip_quotas,
            listeners=tuple(_listener_names(detail.get("listeners"))),
            inter_broker_listener=str(ibl).lower() if ibl else None,
            kafka_version=str(detail["kafka.version"]) if detail.get("kafka.version") else None,
            kafka_metadata=(
                str(detail["kafka.metadata"]) if detail.get("kafka.metadata") else None
            ),
        )

    def is_protected(self, listener: str | None) -> bool:
        """Inter-broker listener, and only when more than one listener exists."""
        return (
            listener is not None
            and self.inter_broker_listener is not None
            and listener.lower() == self.inter_broker_listener
            and len(self.listeners) > 1
        )

    def max_for_ip(self, ip: str | None) -> float:
        return float(self.per_ip_overrides.get(ip or "", self.max_connections_per_ip))

    def ip_quota(self, ip: str | None) -> float:
        return float(self.ip_quotas.get(ip or "", self.ip_quota_default))

    def listener_rate_for(self, listener: str | None) -> float:
        """The listener's own ``max.connection.creation.rate``, else the broker-wide one.

        Kafka 4.3.1 configures each listener's quota from ``valuesWithPrefixOverride`` of
        its prefix, so an unset listener key takes the unprefixed broker-wide value
        (SocketServer.scala 1395, 1675-1677), also after a dynamic change."""
        return float(self.listener_rate.get((listener or "").lower(), self.broker_rate))

    def listener_max_for(self, listener: str | None) -> float:
        """The listener's own ``max.connections``, else the broker-wide one (as the rate):
        even the protected inter-broker listener is capped by ``max.connections`` unless it
        sets its own (measured on Kafka 4.3.1: docs/kafka-reference.md 10.4)."""
        return float(self.listener_max.get((listener or "").lower(), self.max_connections))

    def listener_names(self) -> list[str]:
        """Every listener named in `listeners` or by a listener key (lower case, sorted)."""
        return sorted({*self.listeners, *self.listener_max, *self.listener_rate})

    def listener_maxes(self) -> dict[str, float]:
        """Each listener's effective `max.connections` (own value, else broker-wide)."""
        return {name: self.listener_max_for(name) for name in self.listener_names()}

    def listener_rates(self) -> dict[str, float]:
        """Each listener's effective `max.connection.creation.rate` (own, else broker-wide)."""
        return {name: self.listener_rate_for(name) for name in self.listener_names()}


# ---------------------------------------------------------------------------------------
# Admission (SocketServer.ConnectionQuotas), one step at a time
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateStep:
    broker_ms: int
    listener_ms: int

    @property
    def delay_ms(self) -> int:
        return max(self.broker_ms, self.listener_ms)


@dataclass(frozen=True)
class IpStep:
    outcome: str  # "admit" | "throttle_close" | "reject"
    throttle_ms: int = 0
    count: int = 0
    max: float = INT_MAX


class AdmissionModel:
    """Kafka's ConnectionQuotas for one broker: meters and counts, fed recorded times.

    `rate_step` is t0 (accept), `ip_step` is t1 (after the wait), `release` is a close.
    Broker and listener meters are created eagerly; an IP meter only once the IP's quota
    is not Int.MaxValue (Kafka creates it lazily and keeps it when the quota changes).
    """

    def __init__(self, limits: Limits, semantics: Semantics | None = None):
        self.limits = limits
        self.n = limits.window_num
        self.w = limits.window_ms
        #: the release's meter (analysis.versions): n+1 samples by last event from 3.8
        self.overlap = (semantics or semantics_for(limits.kafka_version)).sampled_stat_overlap
        self.broker = self._meter(limits.broker_rate)
        self.listeners: dict[str, RateMeter] = {}
        self.ips: dict[str, RateMeter] = {}
        self.ip_counts: dict[str, int] = {}
        self.listener_counts: dict[str, int] = {}
        self.total = 0
        self._protected: dict[str, bool] = {}

    def _meter(self, bound: float) -> RateMeter:
        return RateMeter(bound, self.n, self.w, overlap=self.overlap)

    def protected(self, listener: str) -> bool:
        p = self._protected.get(listener)
        if p is None:
            p = self._protected[listener] = self.limits.is_protected(listener)
        return p

    def _listener_meter(self, listener: str) -> RateMeter:
        meter = self.listeners.get(listener)
        if meter is None:
            meter = self._meter(self.limits.listener_rate_for(listener))
            self.listeners[listener] = meter
        return meter

    def reconfigure(self, limits: Limits) -> None:
        """A dynamic change swaps the bounds; the samples stay (Kafka swaps MetricConfig)."""
        self.limits = limits
        self._protected = {}
        self.broker.bound = float(limits.broker_rate)
        for name, meter in self.listeners.items():
            meter.bound = limits.listener_rate_for(name)
        for ip, meter in self.ips.items():
            meter.bound = limits.ip_quota(ip)

    def rate_step(self, listener: str, t0_ms: int) -> RateStep:
        return RateStep(*self.rate_delays(listener.lower(), t0_ms))

    def rate_delays(self, listener: str, t0_ms: int) -> tuple[int, int]:
        """(broker ms, listener ms) of the rate step; `listener` already lower-case."""
        broker_ms = 0 if self.protected(listener) else self.broker.record_bounded(t0_ms)
        meter = self.listeners.get(listener)
        if meter is None:
            meter = self._listener_meter(listener)
        return broker_ms, meter.record_bounded(t0_ms)

    def ip_rate_step(self, listener: str, ip: str, t1_ms: int) -> int:
        """Per-IP rate step at t1: the throttle in ms (un-recorded everywhere) or 0."""
        listener = listener.lower()
        quota = self.limits.ip_quota(ip)
        if quota == INT_MAX:
            return 0
        meter = self.ips.get(ip)
        if meter is None:
            meter = self._meter(quota)
            self.ips[ip] = meter
        throttle = meter.record_bounded(t1_ms)
        if throttle > 0:
            meter.record(-1.0, t1_ms)
            if not self.protected(listener):
                self.broker.record(-1.0, t1_ms)
            self._listener_meter(listener).record(-1.0, t1_ms)
        return throttle

    def admit_count(self, listener: str, ip: str) -> int:
        """counts[A]++, listener and total; returns the IP's new count."""
        listener = listener.lower()
        count = self.ip_counts.get(ip, 0) + 1
        self.ip_counts[ip] = count
        self.listener_counts[listener] = self.listener_counts.get(listener, 0) + 1
        self.total += 1
        return count

    def ip_step(self, listener: str, ip: str, t1_ms: int) -> IpStep:
        """IP rate step, then the per-IP count check (rejects keep their rate +1)."""
        throttle = self.ip_rate_step(listener, ip, t1_ms)
        if throttle > 0:
            return IpStep("throttle_close", throttle)
        count = self.ip_counts.get(ip, 0)
        cap = self.limits.max_for_ip(ip)
        if count >= cap:
            return IpStep("reject", 0, count, cap)
        return IpStep("admit", 0, self.admit_count(listener, ip), cap)

    def slot_available(self, listener: str) -> bool:
        listener = listener.lower()
        if self.listener_counts.get(listener, 0) >= self.limits.listener_max_for(listener):
            return False
        if self.limits.is_protected(listener):
            return True
        return self.total < self.limits.max_connections

    def release(self, listener: str, ip: str) -> None:
        listener = listener.lower()
        count = self.ip_counts.get(ip, 0)
        if count > 0:
            self.ip_counts[ip] = count - 1
        lc = self.listener_counts.get(listener, 0)
        if lc > 0:
            self.listener_counts[listener] = lc - 1
        if self.total > 0:
            self.total -= 1
