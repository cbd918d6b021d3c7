"""Kafka's ``ConnectionQuotas`` (KIP-402 counts, KIP-612 rates) as a sans-IO state machine.

The acceptor owns the sockets, the clock and the waiting; this module owns the numbers.
One admission is Kafka's ``ConnectionQuotas.inc`` split at its blocking point::

    step = quotas.record_connection_rate(L, t0)         # broker + listener meters, +1 kept
    wait until now >= t0 + step.delay_ms and quotas.slot_available(L)   # acceptor blocked
    adm = quotas.admit(L, ip, t1)                         # IP rate (un-record on throttle),
                                                          # then counts and the per-IP cap
    ... later, for an ADMITTED connection: quotas.release(L, ip)

+--------------------+-----------------------------+-------------------------------------+
| step               | limit hit                   | outcome                             |
+====================+=============================+=====================================+
| rate step          | broker / listener rate      | delay (RateStep.delay_ms), then on  |
| slot wait          | max.connections (broker,    | wait; the inter-broker listener     |
|                    | listener)                   | skips the broker-wide limits        |
| admit: IP rate     | connection_creation_rate    | THROTTLED_IP: hold throttle_ms then |
|                    |                             | close; -1 in IP, listener, broker   |
| admit: IP count    | max.connections.per.ip(.ov) | REJECTED_IP_COUNT: close now;       |
|                    |                             | counts undone, rate meters keep +1  |
+--------------------+-----------------------------+-------------------------------------+
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from base.quota.config import INT_MAX, ConfigError, QuotaConfig
from base.quota.faults import NO_FAULTS, Faults
from base.quota.meter import RateMeter, SampledAvg

__all__ = [
    "IP_SENSOR_EXPIRY_MS",
    "Admission",
    "ConnectionQuotas",
    "Decision",
    "Outcome",
    "QuotaSnapshot",
    "RateStep",
]

#: Kafka's IP connection-rate sensors expire after an hour without a record.
IP_SENSOR_EXPIRY_MS = 3600 * 1000


class Outcome(StrEnum):
    """What happened to an accepted socket; the values are the history ``event`` names."""

    ADMITTED = "admit"
    THROTTLED_IP = "throttle_close"
    REJECTED_IP_COUNT = "reject"


@dataclass(frozen=True, slots=True)
class RateStep:
    """Kafka's ``recordConnectionAndGetThrottleTimeMs``: how long the acceptor must wait.

    ``reason`` names the larger of the two delays (``broker_rate`` on a tie, since Kafka's
    listener step only raises the broker delay when it is strictly larger).
    """

    delay_ms: int
    broker_delay_ms: int
    listener_delay_ms: int
    reason: str  # "none" | "broker_rate" | "listener_rate"


_NO_DELAY = RateStep(0, 0, 0, "none")


@dataclass(frozen=True, slots=True)
class Admission:
    """The IP-rate step and the count step of ``ConnectionQuotas.inc``.

    ``ip_count`` is the IP's count after the step (unchanged when not admitted) and
    ``ip_limit`` the per-IP cap that applied; ``throttle_ms`` > 0 only for THROTTLED_IP.
    ``reason`` is ``"none"``, ``"ip_rate"`` or ``"ip_count"`` (the history reasons).
    """

    outcome: Outcome
    throttle_ms: int
    reason: str
    ip_count: int
    ip_limit: int


_ADMITTED = Outcome.ADMITTED
_CACHE_MAX = 4096  # bound on the shared-result caches
_THROTTLED = Outcome.THROTTLED_IP
_REJECTED = Outcome.REJECTED_IP_COUNT


@dataclass(frozen=True, slots=True)
class Decision:
    """``decide()``: the rate step and, if a slot was free, the admission at ``t0 + delay``."""

    rate: RateStep
    admission: Admission | None
    waits_for_slot: bool

    @property
    def outcome(self) -> Outcome | None:
        return None if self.admission is None else self.admission.outcome


# Frozen dataclasses pay for immutability in __init__ (object.__setattr__ per field); the
# admission path builds its results through the slot descriptors instead, about twice as
# fast, with identical objects.
_new = object.__new__


def _setter(cls: type, name: str) -> Callable[[object, object], None]:
    setter: Callable[[object, object], None] = cls.__dict__[name].__set__
    return setter


_adm_outcome = _setter(Admission, "outcome")
_adm_throttle = _setter(Admission, "throttle_ms")
_adm_reason = _setter(Admission, "reason")
_adm_count = _setter(Admission, "ip_count")
_adm_limit = _setter(Admission, "ip_limit")
_dec_rate = _setter(Decision, "rate")
_dec_adm = _setter(Decision, "admission")
_dec_waits = _setter(Decision, "waits_for_slot")


def _admission(
    outcome: Outcome, throttle_ms: int, reason: str, count: int, limit: int
) -> Admission:
    a: Admission = _new(Admission)
    _adm_outcome(a, outcome)
    _adm_throttle(a, throttle_ms)
    _adm_reason(a, reason)
    _adm_count(a, count)
    _adm_limit(a, limit)
    return a


def _decision(rate: RateStep, admission: Admission | None, waits: bool) -> Decision:
    d: Decision = _new(Decision)
    _dec_rate(d, rate)
    _dec_adm(d, admission)
    _dec_waits(d, waits)
    return d


@dataclass(frozen=True)
class QuotaSnapshot:
    """Rates (per second) and counts at one instant, under Kafka's metric meanings.

    ``*_throttle_avg`` are Kafka's ``connection-accept-throttle-time`` and
    ``ip-connection-accept-throttle-time`` Avgs per listener (NaN without samples).
    """

    now_ms: int
    broker_rate: float
    listener_rates: dict[str, float]
    ip_rates: dict[str, float]
    total: int
    listener_counts: dict[str, int]
    ip_counts: dict[str, int]
    listener_throttle_avg: dict[str, float]
    ip_throttle_avg: dict[str, float]


class ConnectionQuotas:
    """Connection counts and connection-rate meters of one broker (one acceptor process)."""

    def __init__(
        self, config: QuotaConfig, *, legacy_meter: bool = False, faults: Faults = NO_FAULTS
    ) -> None:
        self.config = config
        self.faults = faults
        # The seeded-fault hooks (base.quota.faults) are asked here, once, and become
        # plain attributes: the decisions below read them as they read the limits; all are
        # Kafka's in production.
        self._policy = policy = faults.policy()
        self._legacy = legacy_meter = policy.legacy_ring(legacy_meter)
        self._meter: type[RateMeter] = policy.meter_class(RateMeter)
        #: IP-throttled connections leave the meters they were recorded in (Kafka)
        self._unrecord_throttled = policy.unrecords_ip_throttle()
        self._n = config.quota_window_num
        self._w = config.window_ms
        #: the bound on a connection-rate throttle: one window (Kafka's boundedThrottleTime)
        self._cap = policy.throttle_cap(self._w)
        self._broker = self._meter(
            self._n, self._w, config.max_connection_creation_rate, legacy=legacy_meter
        )
        self._listener_meters = {
            name: self._meter(
                self._n, self._w, self._listener_rate_of(config, name), legacy=legacy_meter
            )
            for name in config.listener_names
        }
        self._listener_counts = dict.fromkeys(config.listener_names, 0)
        self._listener_throttle = {name: SampledAvg() for name in config.listener_names}
        self._ip_throttle = {name: SampledAvg() for name in config.listener_names}
        self._counts: dict[str, int] = {}
        self._total = 0
        self._ip_rate_default = INT_MAX
        self._ip_rate_overrides: dict[str, int] = {}
        self._ip_meters: dict[str, RateMeter] = {}
        self._load_limits(config)

    def _load_limits(self, config: QuotaConfig) -> None:
        # Results are immutable values, so equal ones are shared: the storm path then
        # allocates nothing. Limits are part of the key, so a reconfigure starts afresh.
        self._steps: dict[tuple[int, int], RateStep] = {}
        self._admitted: dict[tuple[int, int], Admission] = {}
        self._decided: dict[tuple[int, int], Decision] = {}
        policy = self._policy
        names = config.listener_names
        self._protected = {name: config.protected(name) for name in names}
        # exempt from the broker-wide rate / from eviction: the protected listener
        self._broker_rate_exempt = {
            name: policy.broker_rate_exempt(p) for name, p in self._protected.items()
        }
        self._evict_exempt = {name: policy.evict_exempt(p) for name, p in self._protected.items()}
        broker_max = policy.max_connections(config.max_connections)
        own_max = config.listener_max_connections
        inherited = policy.inherited(broker_max)  # a listener without its own key
        self._broker_max = policy.max_connections_total(broker_max)
        self._listener_max = {
            name: policy.listener_max(own_max.get(name, inherited)) for name in names
        }
        self._per_ip_default = policy.ip_count_limit(config.max_connections_per_ip)
        self._per_ip_overrides = {
            ip: policy.ip_count_limit(n)
            for ip, n in config.max_connections_per_ip_overrides.items()
        }

    def _listener_rate_of(self, config: QuotaConfig, name: str) -> int:
        """The listener's own rate, else the broker-wide one (Kafka's prefix override)."""
        return config.listener_max_connection_creation_rate.get(
            name, self._policy.inherited(config.max_connection_creation_rate)
        )

    # -- limits -----------------------------------------------------------------------------

    def is_protected(self, listener: str) -> bool:
        return self._protected[listener]

    def reconfigure(self, config: QuotaConfig, now_ms: int) -> None:
        """Swap in new limits; meters keep their history (Kafka swaps the metric config).

        A connection already waiting keeps the delay it was given: that wait is the caller's.
        """
        if config.listener_names != self.config.listener_names:
            raise ValueError(
                f"listeners are static: {self.config.listener_names} -> {config.listener_names}"
            )
        if (config.quota_window_num, config.window_ms) != (self._n, self._w):
            raise ValueError("quota.window.num and quota.window.size.seconds are static")
        self.config = config
        self._broker.bound = float(config.max_connection_creation_rate)
        for name, meter in self._listener_meters.items():
            meter.bound = float(self._listener_rate_of(config, name))
        self._load_limits(config)

    def set_ip_quota(self, ip: str | None, rate: int | None, now_ms: int) -> None:
        """Kafka's ``updateIpConnectionRateQuota``; ``ip=None`` is the default IP entity.

        A new default re-bounds every existing IP meter without an override of its own.
        ``rate=None`` removes the quota (back to ``INT_MAX``, i.e. disabled).
        """
        if rate is not None and not 0 <= rate <= INT_MAX:
            raise ConfigError("connection_creation_rate", str(rate), f"must be in 0..{INT_MAX}")
        if ip is not None:
            try:
                ip = ipaddress.ip_address(ip).compressed
            except ValueError:
                raise ConfigError(
                    "ip",
                    ip,
                    "not an IP address (resolve host names first, e.g. with resolve_host)",
                ) from None
        if ip is None:
            self._ip_rate_default = INT_MAX if rate is None else rate
            for addr, meter in self._policy.ip_meters_rebound(self._ip_meters).items():
                bound = float(self.ip_quota_for(addr))
                if meter.bound != bound:
                    meter.bound = bound
            return
        if rate is None:
            self._ip_rate_overrides.pop(ip, None)
        elif not self._policy.applies_ip_rate_override():
            return
        else:
            self._ip_rate_overrides[ip] = rate
        existing = self._ip_meters.get(ip)
        if existing is not None:
            existing.bound = float(self.ip_quota_for(ip))

    def ip_quotas(self) -> dict[str | None, int]:
        """The configured IP rate quotas; ``None`` is the default (only when set)."""
        result: dict[str | None, int] = {}
        if self._ip_rate_default != INT_MAX:
            result[None] = self._ip_rate_default
        result.update(self._ip_rate_overrides)
        return result

    def ip_quota_for(self, ip: str) -> int:
        return self._ip_rate_overrides.get(ip, self._ip_rate_default)

    def ip_limit_for(self, ip: str) -> int:
        """The per-IP connection count cap (override or ``max.connections.per.ip``)."""
        return self._per_ip_overrides.get(ip, self._per_ip_default)

    # -- admission ----------------------------------------------------------------------------

    def record_connection_rate(self, listener: str, now_ms: int) -> RateStep:
        """Broker (unless protected) and listener rate step; the +1 is always kept."""
        listener_meter = self._listener_meters[listener]
        w = self._cap
        broker_delay = (
            0 if self._broker_rate_exempt[listener] else self._broker.record_bounded(1.0, now_ms, w)
        )
        listener_delay = listener_meter.record_bounded(1.0, now_ms, w)
        if broker_delay == 0 and listener_delay == 0:
            return _NO_DELAY
        if listener_delay > broker_delay:
            delay, reason = listener_delay, "listener_rate"
        else:
            delay, reason = broker_delay, "broker_rate"
        self._listener_throttle[listener].record(float(delay), now_ms)
        key = (broker_delay, listener_delay)
        step = self._steps.get(key)
        if step is None:
            if len(self._steps) >= _CACHE_MAX:
                self._steps.clear()
            step = self._steps[key] = RateStep(delay, broker_delay, listener_delay, reason)
        return step

    def slot_available(self, listener: str) -> bool:
        """Kafka's ``connectionSlotAvailable``: listener cap, then broker cap unless protected."""
        if self._listener_counts[listener] >= self._listener_max[listener]:
            return False
        if self._protected[listener]:
            return True
        return self._total < self._broker_max

    def admit(self, listener: str, ip: str, now_ms: int) -> Admission:
        """The IP rate step, then the counts and the per-IP cap (after the slot wait)."""
        listener_count = self._listener_counts[listener]  # KeyError for an unknown listener
        quota = self._ip_rate_overrides.get(ip, self._ip_rate_default)
        limit = self._per_ip_overrides.get(ip, self._per_ip_default)
        count = self._counts.get(ip, 0)
        if quota != INT_MAX:
            meter = self._ip_meters.get(ip)
            if meter is None:
                meter = self._meter(self._n, self._w, quota, legacy=self._legacy)
                self._ip_meters[ip] = meter
            throttle = meter.record_bounded(1.0, now_ms, self._cap)
            if throttle > 0:
                if self._unrecord_throttled:
                    meter.record(-1.0, now_ms, False)
                    if not self._broker_rate_exempt[listener]:
                        self._broker.record(-1.0, now_ms, False)
                    self._listener_meters[listener].record(-1.0, now_ms, False)
                self._ip_throttle[listener].record(float(throttle), now_ms)
                return _admission(_THROTTLED, throttle, "ip_rate", count, limit)
        if count >= limit:
            # Kafka increments, throws TooManyConnectionsException, and closeChannel decrements.
            return _admission(_REJECTED, 0, "ip_count", count, limit)
        self._counts[ip] = count + 1
        self._total += 1
        self._listener_counts[listener] = listener_count + 1
        count += 1
        if count >= _CACHE_MAX:
            return _admission(_ADMITTED, 0, "none", count, limit)
        key = (count, limit)
        admission = self._admitted.get(key)
        if admission is None:
            admission = self._admitted[key] = _admission(_ADMITTED, 0, "none", count, limit)
        return admission

    def release(self, listener: str, ip: str) -> None:
        """Kafka's ``dec``: an admitted connection closed. A count going negative is a bug."""
        count = self._counts.get(ip)
        if count is None:
            raise ValueError(f"release of {ip} on {listener}: the address has no connections")
        listener_count = self._listener_counts[listener]
        if listener_count <= 0 or self._total <= 0:
            raise ValueError(f"release of {ip} on {listener}: the listener has no connections")
        if count == 1:
            del self._counts[ip]
        else:
            self._counts[ip] = count - 1
        self._total -= 1
        self._listener_counts[listener] = listener_count - 1

    def max_connections_exceeded(self, listener: str) -> bool:
        """Whether a processor of ``listener`` must evict its LRU connection now."""
        return self._total > self._broker_max and not self._evict_exempt[listener]

    def broker_count(self) -> tuple[int, int]:
        """The connections counted broker-wide and the limit eviction compares them with
        (``max_connections_exceeded`` is ``total > limit`` on a listener not exempt)."""
        return self._total, self._broker_max

    def is_evict_exempt(self, listener: str) -> bool:
        return self._evict_exempt[listener]

    def decide(self, listener: str, ip: str, now_ms: int) -> Decision:
        """Rate step at ``now_ms``, then (if a slot is free) admission at ``now_ms + delay``.

        For benchmarks and property tests, where nobody waits; the acceptor uses the steps.
        """
        step = self.record_connection_rate(listener, now_ms)
        if self._listener_counts[listener] >= self._listener_max[listener] or (
            not self._protected[listener] and self._total >= self._broker_max
        ):
            return _decision(step, None, True)
        admission = self.admit(listener, ip, now_ms + step.delay_ms)
        if step is _NO_DELAY and admission.outcome is _ADMITTED:
            count = admission.ip_count
            if count < _CACHE_MAX:
                key = (count, admission.ip_limit)
                decision = self._decided.get(key)
                if decision is None:
                    decision = self._decided[key] = _decision(step, admission, False)
                return decision
        return _decision(step, admission, False)

    # -- state ----------------------------------------------------------------------------------

    def ip_count(self, ip: str) -> int:
        return self._counts.get(ip, 0)

    def listener_count(self, listener: str) -> int:
        return self._listener_counts[listener]

    @property
    def total(self) -> int:
        return self._total

    def expire_idle(self, now_ms: int) -> None:
        """Drop IP meters idle for more than an hour (Kafka's sensor expiry)."""
        stale = [
            ip
            for ip, meter in self._ip_meters.items()
            if meter.last_record_ms is not None
            and now_ms - meter.last_record_ms > IP_SENSOR_EXPIRY_MS
        ]
        for ip in stale:
            del self._ip_meters[ip]

    def has_ip_meter(self, ip: str) -> bool:
        return ip in self._ip_meters

    def ip_rate(self, ip: str, now_ms: int) -> float:
        """``connection-accept-rate{ip}``; 0.0 when the IP has no meter."""
        meter = self._ip_meters.get(ip)
        return 0.0 if meter is None else meter.peek(now_ms)

    def broker_rate(self, now_ms: int) -> float:
        return self._broker.peek(now_ms)

    def listener_rate(self, listener: str, now_ms: int) -> float:
        return self._listener_meters[listener].peek(now_ms)

    def snapshot(self, now_ms: int) -> QuotaSnapshot:
        """Metric values at ``now_ms``; reading them never changes a later decision."""
        return QuotaSnapshot(
            now_ms=now_ms,
            broker_rate=self._broker.peek(now_ms),
            listener_rates={n: m.peek(now_ms) for n, m in self._listener_meters.items()},
            ip_rates={ip: m.peek(now_ms) for ip, m in self._ip_meters.items()},
            total=self._total,
            listener_counts=dict(self._listener_counts),
            ip_counts=dict(self._counts),
            listener_throttle_avg={n: a.peek(now_ms) for n, a in self._listener_throttle.items()},
            ip_throttle_avg={n: a.peek(now_ms) for n, a in self._ip_throttle.items()},
        )
