"""A deliberately literal transcription of Kafka's metrics code, used as a test oracle.

``SampledStat``/``Rate``/``Sensor.checkQuotas``/``QuotaUtils`` as in reference §3, with
sample objects and a lazily growing list, no caching and no shortcuts, so that the
optimised ``base.quota.meter.RateMeter`` can be compared against it on arbitrary
sequences. ``legacy`` selects the pre-3.8 ring (``n`` slots, purge by window start).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Sample:
    start: int
    last_event: int
    value: float = 0.0
    event_count: int = 0

    def reset(self, now: int) -> None:
        self.event_count = 0
        self.start = now
        self.last_event = now
        self.value = 0.0


class KafkaRate:
    def __init__(self, samples: int, window_ms: int, bound: float, legacy: bool = False):
        self.n = samples
        self.w = window_ms
        self.bound = bound
        self.legacy = legacy
        self.samples: list[Sample] = []
        self.current = 0

    # SampledStat
    def _current(self, t: int) -> Sample:
        if not self.samples:
            self.samples.append(Sample(t, t))
        return self.samples[self.current]

    def _advance(self, t: int) -> Sample:
        max_samples = self.n if self.legacy else self.n + 1
        self.current = (self.current + 1) % max_samples
        if self.current >= len(self.samples):
            s = Sample(t, t)
            self.samples.append(s)
            return s
        s = self._current(t)
        s.reset(t)
        return s

    def stat_record(self, value: float, t: int) -> None:
        s = self._current(t)
        if t - s.start >= self.w:
            s = self._advance(t)
        s.value += value
        s.event_count += 1
        s.last_event = t

    def purge(self, now: int) -> None:
        expire_age = self.n * self.w
        for s in self.samples:
            ref = s.start if self.legacy else s.last_event
            if now - ref >= expire_age:
                s.reset(now)

    def oldest(self, now: int) -> Sample:
        if not self.samples:
            self.samples.append(Sample(now, now))
        oldest = self.samples[0]
        for s in self.samples[1:]:
            if s.start < oldest.start:
                oldest = s
        return oldest

    # Rate
    def window_size(self, now: int) -> int:
        self.purge(now)
        total = now - self.oldest(now).start
        full = int(total / self.w)  # Java truncation
        min_full = self.n - 1
        if full < min_full:
            total += (min_full - full) * self.w
        return max(total, 1)

    def measure(self, now: int) -> float:
        self.purge(now)
        total = 0.0
        for s in self.samples:
            total += s.value
        return total / (self.window_size(now) / 1000.0)

    # Sensor.record(value, t, checkQuotas) -> violation (rate, bound) or None
    def record(self, value: float, t: int, check: bool = True) -> tuple[float, float] | None:
        self.stat_record(value, t)
        if check:
            rate = self.measure(t)
            if not rate <= self.bound:
                return rate, self.bound
        return None

    # QuotaUtils
    def throttle_time(self, violation: tuple[float, float], t: int, cap: int | None) -> int:
        rate, bound = violation
        x = (rate - bound) / bound * self.window_size(t) if bound != 0 else math.inf
        if math.isinf(x):
            r = 2**63 - 1
        else:
            r = math.floor(x)
            if x - r >= 0.5:
                r += 1
        return r if cap is None else min(r, cap)


INT_MAX = 2147483647


class KafkaConnectionQuotas:
    """``ConnectionQuotas.inc``/``dec`` transcribed with the literal ``KafkaRate`` sensors.

    ``inc`` returns what Kafka does at each step: (rate delay, outcome, ip throttle), with
    the wait skipped (the caller passes the time the IP step runs).
    """

    def __init__(
        self,
        listeners: list[str],
        inter_broker: str | None,
        broker_rate: int,
        listener_rates: dict[str, int],
        broker_max: int,
        listener_max: dict[str, int],
        per_ip: int,
        n: int = 11,
        w: int = 1000,
        legacy: bool = False,
    ) -> None:
        self.n, self.w, self.legacy = n, w, legacy
        self.listeners = listeners
        self.inter = inter_broker
        self.broker_sensor = KafkaRate(n, w, broker_rate, legacy)
        # ListenerConnectionQuota.configure(config.valuesWithPrefixOverride(prefix)): a
        # listener without its own key reads the unprefixed broker-wide value
        # (SocketServer.scala 1395, 1671-1677)
        self.listener_sensors = {
            name: KafkaRate(n, w, listener_rates.get(name, broker_rate), legacy)
            for name in listeners
        }
        self.broker_max = broker_max
        self.listener_max = {name: listener_max.get(name, broker_max) for name in listeners}
        self.per_ip = per_ip
        self.counts: dict[str, int] = {}
        self.listener_counts = dict.fromkeys(listeners, 0)
        self.total = 0
        self.ip_rate_default = INT_MAX
        self.ip_rates: dict[str, int] = {}
        self.ip_sensors: dict[str, KafkaRate] = {}

    def protected(self, listener: str) -> bool:
        return self.inter == listener and len(self.listener_counts) > 1

    def _record_and_get_throttle(self, sensor: KafkaRate, t: int) -> int:
        v = sensor.record(1.0, t)
        return 0 if v is None else sensor.throttle_time(v, t, self.w)

    def rate_step(self, listener: str, t: int) -> int:
        broker = (
            0 if self.protected(listener) else self._record_and_get_throttle(self.broker_sensor, t)
        )
        return max(broker, self._record_and_get_throttle(self.listener_sensors[listener], t))

    def slot_available(self, listener: str) -> bool:
        if self.listener_counts[listener] >= self.listener_max[listener]:
            return False
        if self.protected(listener):
            return True
        return self.total < self.broker_max

    def ip_step_and_count(self, listener: str, ip: str, t: int) -> tuple[str, int]:
        quota = self.ip_rates.get(ip, self.ip_rate_default)
        if quota != INT_MAX:
            sensor = self.ip_sensors.setdefault(ip, KafkaRate(self.n, self.w, quota, self.legacy))
            sensor.bound = quota
            throttle = self._record_and_get_throttle(sensor, t)
            if throttle > 0:
                sensor.record(-1.0, t, False)
                if not self.protected(listener):
                    self.broker_sensor.record(-1.0, t, False)
                self.listener_sensors[listener].record(-1.0, t, False)
                return "throttle_close", throttle
        count = self.counts.get(ip, 0)
        self.counts[ip] = count + 1
        self.total += 1
        self.listener_counts[listener] += 1
        if count >= self.per_ip:
            self.dec(listener, ip)
            return "reject", 0
        return "admit", 0

    def dec(self, listener: str, ip: str) -> None:
        count = self.counts[ip]
        if count == 1:
            del self.counts[ip]
        else:
            self.counts[ip] = count - 1
        self.total -= 1
        self.listener_counts[listener] -= 1
