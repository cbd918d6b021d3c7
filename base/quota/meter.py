"""Kafka's windowed rate meter: one ``Sensor`` holding one ``Rate(WindowedSum)`` with a quota.

Every Kafka quota (connection rate, request percentage, byte rate) is this meter, so the
engine and its throttle numbers stand or fall with it. It follows
``org.apache.kafka.common.metrics.stats.{SampledStat,Rate}`` and
``org.apache.kafka.server.quota.QuotaUtils`` line by line (reference §0.2, §3):

* the sample ring has ``n + 1`` slots and purges by a sample's last event (Kafka >= 3.8);
  ``legacy=True`` selects the 2.x-3.7 ring of ``n`` slots purged by sample start, which
  only differs for sparse traffic at window boundaries;
* samples are created lazily, as Kafka's ``ArrayList`` grows, because the oldest *existing*
  sample decides the window;
* the window is padded to ``n - 1`` full windows and floored at 1 ms;
* the value is recorded first and then checked; a violation is ``rate > bound``;
* throttle time is Java's ``Math.round((rate - bound) / bound * window)``.

The hot path avoids per-call allocation: parallel lists instead of sample objects, a
lower bound on the next purge time so most calls skip the purge loop, and C-level
``min``/``reduce`` over the slots. The summation order is Kafka's (slot order, naive
addition), so fractional values give bit-identical rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from operator import add

__all__ = [
    "JAVA_LONG_MAX",
    "QuotaCheck",
    "RateMeter",
    "SampledAvg",
    "java_round",
    "throttle_time_ms",
]

JAVA_LONG_MAX = 2**63 - 1


def java_round(x: float) -> int:
    """Java's ``Math.round(double)``: nearest, ties towards +inf, inf clamped, NaN -> 0.

    ``floor(x + 0.5)`` would be wrong for 0.49999999999999994; ``x - floor(x)`` is exact.
    """
    if math.isnan(x):
        return 0
    if x >= 9.223372036854775807e18:
        return JAVA_LONG_MAX
    if x <= -9.223372036854775808e18:
        return -JAVA_LONG_MAX - 1
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


def throttle_time_ms(rate: float, bound: float, window_ms: int, max_ms: int | None) -> int:
    """``QuotaUtils.throttleTime`` (``max_ms=None``) or ``boundedThrottleTime``.

    ``X = (O - T) / T * W`` is the delay that brings the observed rate O down to the target
    T over the measured window W; a bound of 0 makes X infinite, i.e. exactly ``max_ms``.
    """
    if bound == 0.0:
        x = math.inf if rate > 0 else math.nan
    else:
        x = (rate - bound) / bound * window_ms
    t = java_round(x)
    return t if max_ms is None else min(t, max_ms)


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    """A quota violation (Kafka's ``QuotaViolationException``): the value stays recorded."""

    rate: float
    bound: float
    window_ms: int

    def throttle_ms(self, max_ms: int | None) -> int:
        return throttle_time_ms(self.rate, self.bound, self.window_ms, max_ms)


class _Ring:
    """Kafka's ``SampledStat`` sample list; subclasses combine the samples.

    Besides the samples it caches ``min(start)`` and (while every recorded value is an
    integer, as for connection counts) the running sum, so a check is O(1) between ring
    advances and purges. Both caches are exact, not approximations.
    """

    __slots__ = (
        "_count",
        "_cur",
        "_exact",
        "_expire_ms",
        "_last",
        "_legacy",
        "_min_start",
        "_n",
        "_next_purge_ms",
        "_pad_ms",
        "_size",
        "_slots",
        "_start",
        "_total",
        "_value",
        "_w",
        "last_record_ms",
    )

    def __init__(self, samples: int, window_ms: int, *, legacy: bool = False) -> None:
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        if window_ms < 1:
            raise ValueError(f"window_ms must be >= 1, got {window_ms}")
        self._n = samples
        self._w = window_ms
        self._pad_ms = (samples - 1) * window_ms
        self._legacy = legacy
        self._slots = samples if legacy else samples + 1
        self._expire_ms = samples * window_ms
        self._start = [0] * self._slots
        self._last = [0] * self._slots
        self._value = [0.0] * self._slots
        self._count = [0] * self._slots
        self._size = 0  # samples that exist (Kafka's list grows lazily)
        self._cur = 0
        # A lower bound on the earliest time any sample can expire; purge is a no-op before it.
        self._next_purge_ms = 0
        self._min_start = 0
        self._total = 0.0
        self._exact = True  # all values integral: _total equals Kafka's slot-order sum
        self.last_record_ms: int | None = None

    @property
    def samples(self) -> int:
        return self._n

    @property
    def window_ms(self) -> int:
        return self._w

    @property
    def legacy(self) -> bool:
        return self._legacy

    def _new_first(self, now_ms: int) -> None:
        self._start[0] = now_ms
        self._last[0] = now_ms
        self._value[0] = 0.0
        self._count[0] = 0
        self._size = 1
        self._cur = 0
        self._next_purge_ms = now_ms + self._expire_ms
        self._min_start = now_ms
        self._total = 0.0

    def _advance(self, now_ms: int) -> int:
        """``SampledStat.advance``: move to the next slot and reset it (or create it)."""
        cur = self._cur + 1
        if cur == self._slots:
            cur = 0
        start = self._start
        if cur == self._size:
            self._size += 1
            if now_ms < self._min_start:
                self._min_start = now_ms
        else:
            old_start = start[cur]
            self._total -= self._value[cur]
            start[cur] = now_ms
            if old_start == self._min_start or now_ms < self._min_start:
                size = self._size
                self._min_start = min(start) if size == self._slots else min(start[:size])
        start[cur] = now_ms
        self._last[cur] = now_ms
        self._value[cur] = 0.0
        self._count[cur] = 0
        self._cur = cur
        return cur

    def _add(self, value: float, now_ms: int) -> None:
        value = float(value)
        if self._size == 0:
            self._new_first(now_ms)
        cur = self._cur
        if now_ms - self._start[cur] >= self._w:  # Sample.isComplete
            cur = self._advance(now_ms)
        self._value[cur] += value
        self._count[cur] += 1
        self._last[cur] = now_ms
        self.last_record_ms = now_ms
        if self._exact:
            if value == 1.0 or value == -1.0 or (value.is_integer() and abs(value) < 2.0**31):
                self._total += value
            else:
                self._exact = False

    def _purge(self, now_ms: int) -> None:
        """``purgeObsoleteSamples``: reset every sample with ``now - ref >= n*w``.

        Expired samples are found oldest first with C-level ``min``/``index`` (usually one
        per call) instead of a Python loop over the ring.
        """
        size = self._size
        if now_ms < self._next_purge_ms or size == 0:
            return
        threshold = now_ms - self._expire_ms
        full = size == self._slots
        start, last, value, count = self._start, self._last, self._value, self._count
        ref = start if self._legacy else last
        min_start = self._min_start
        stale_min = False
        while True:
            view = ref if full else ref[:size]
            oldest = min(view)
            if oldest > threshold:
                break
            i = view.index(oldest)
            self._total -= value[i]
            if start[i] == min_start:
                stale_min = True
            start[i] = now_ms
            last[i] = now_ms
            value[i] = 0.0
            count[i] = 0
        self._next_purge_ms = oldest + self._expire_ms
        if stale_min:
            self._min_start = min(start) if full else min(start[:size])
        elif now_ms < min_start:
            self._min_start = now_ms

    def _window_size_purged(self, now_ms: int) -> int:
        if self._size == 0:  # SampledStat.oldest creates a sample when there is none
            self._new_first(now_ms)
        elapsed = now_ms - self._min_start
        if elapsed < 0:  # a clock going backwards: Java's truncating division
            full = -((-elapsed) // self._w)
            elapsed += (self._n - 1 - full) * self._w
        elif elapsed < self._pad_ms:  # fewer than n-1 full windows: pad
            elapsed = self._pad_ms + elapsed % self._w
        return elapsed if elapsed > 1 else 1

    def _peek(self, now_ms: int) -> tuple[float, int]:
        """(sum, window) as ``measure`` would see them at ``now_ms``, changing nothing."""
        size = self._size
        if size == 0:
            return 0.0, max(self._pad_ms, 1)
        ref = self._start if self._legacy else self._last
        threshold = now_ms - self._expire_ms
        total = 0.0
        oldest = now_ms
        for i in range(size):
            if ref[i] <= threshold:  # purge would reset it to an empty sample at now
                total += 0.0
                start = now_ms
            else:
                total += self._value[i]
                start = self._start[i]
            if start < oldest:
                oldest = start
        elapsed = now_ms - oldest
        w = self._w
        full = elapsed // w if elapsed >= 0 else -((-elapsed) // w)
        if full < self._n - 1:
            elapsed += (self._n - 1 - full) * w
        return total, elapsed if elapsed > 1 else 1

    def _sum(self) -> float:
        if self._exact:
            return self._total
        size = self._size
        if size == self._slots:
            return reduce(add, self._value, 0.0)
        return reduce(add, self._value[:size], 0.0)


class RateMeter(_Ring):
    """A quota-checked ``Rate`` (per second) over ``samples`` windows of ``window_ms``.

    ``bound`` may be changed in place (Kafka swaps the metric config on a quota update;
    the history is kept).
    """

    __slots__ = ("_bound", "_safe_total")

    def __init__(self, samples: int, window_ms: int, bound: float, *, legacy: bool = False):
        super().__init__(samples, window_ms, legacy=legacy)
        self.bound = float(bound)

    @property
    def bound(self) -> float:
        return self._bound

    @bound.setter
    def bound(self, value: float) -> None:
        self._bound = float(value)
        # The window is never shorter than the padding (n >= 2), so a sum below
        # bound * padding cannot violate; the 1e-9 margin keeps float rounding out of it.
        pad_s = self._pad_ms / 1000.0
        self._safe_total = self._bound * pad_s * (1 - 1e-9) if self._n >= 2 else -1.0

    def record(self, value: float, now_ms: int, check: bool = True) -> QuotaCheck | None:
        """Record ``value`` at ``now_ms``; with ``check``, return the violation if any.

        The value stays recorded on a violation, as in Kafka; un-record with
        ``record(-value, now_ms, check=False)``.
        """
        self._add(float(value), now_ms)
        if not check:
            return None
        self._purge(now_ms)
        window = self._window_size_purged(now_ms)
        rate = self._sum() / (window / 1000.0)
        if rate > self.bound:
            return QuotaCheck(rate, self.bound, window)
        return None

    def record_bounded(self, value: float, now_ms: int, max_ms: int) -> int:
        """Record and return ``min(X, max_ms)`` on violation, else 0.

        The hot path of every admission: the same steps as ``record`` followed by the
        bounded ``QuotaUtils`` throttle, inlined for the common case (a +-1 record into an
        existing ring). For ``x > 0``, ``int(x)`` is ``floor(x)`` and ``x - int(x)`` is
        exact, so the rounding is Java's ``Math.round``.
        """
        if self._size == 0 or not (self._exact and (value == 1.0 or value == -1.0)):
            self._add(value, now_ms)
            self._purge(now_ms)
            window = self._window_size_purged(now_ms)
            rate = self._sum() / (window / 1000.0)
            if rate > self.bound:
                return throttle_time_ms(rate, self.bound, window, max_ms)
            return 0
        cur = self._cur
        if now_ms - self._start[cur] >= self._w:  # Sample.isComplete
            cur = self._advance(now_ms)
        self._value[cur] += value
        self._last[cur] = now_ms
        self.last_record_ms = now_ms
        total = self._total + value
        self._total = total
        if now_ms >= self._next_purge_ms:
            self._purge(now_ms)
            total = self._total
        if total < self._safe_total and now_ms >= self._min_start:
            return 0
        elapsed = now_ms - self._min_start
        pad = self._pad_ms
        if elapsed >= pad:
            window = elapsed if elapsed > 1 else 1
        elif elapsed >= 0:
            window = pad + elapsed % self._w
        else:
            window = self._window_size_purged(now_ms)
        rate = total / (window / 1000.0)
        bound = self._bound
        if rate <= bound:
            return 0
        if bound == 0.0:
            return max_ms
        x = (rate - bound) / bound * window
        if x >= max_ms:
            return max_ms
        r = int(x)
        return r + 1 if x - r >= 0.5 else r

    def measure(self, now_ms: int) -> float:
        """``Rate.measure``: the recorded sum over the (padded) window, per second."""
        self._purge(now_ms)
        window = self._window_size_purged(now_ms)
        return self._sum() / (window / 1000.0)

    def peek(self, now_ms: int) -> float:
        """The rate ``measure`` would return, without its side effects.

        Kafka's ``measure`` purges (and creates a first sample), so in Kafka a JMX scrape
        can shift later window sizes. Metrics read through ``peek`` instead, so that the
        enforcer's decisions depend only on the arrivals and stay replayable.
        """
        total, window = self._peek(now_ms)
        return total / (window / 1000.0)

    def peek_sum(self, now_ms: int) -> float:
        """The sum ``measure`` would see at ``now_ms`` (expired samples count 0), without
        its side effects."""
        return self._peek(now_ms)[0]

    def window_size(self, now_ms: int) -> int:
        """``Rate.windowSize`` in ms: purge, elapsed since the oldest sample, padded, >= 1."""
        self._purge(now_ms)
        return self._window_size_purged(now_ms)

    def throttle_ms(self, now_ms: int, bounded: bool, max_ms: int) -> int:
        """Throttle time for the current rate (0 if within the bound), as Kafka computes it."""
        rate = self.measure(now_ms)
        if not rate > self.bound:
            return 0
        return throttle_time_ms(
            rate, self.bound, self._window_size_purged(now_ms), max_ms if bounded else None
        )


class SampledAvg(_Ring):
    """Kafka's ``Avg`` stat: mean of recorded values in unexpired samples, NaN when none.

    Used for the ``*-throttle-time`` metrics, which Kafka registers with the broker's
    metric config (``metrics.num.samples=2``, ``metrics.sample.window.ms=30000``).
    """

    __slots__ = ()

    def __init__(self, samples: int = 2, window_ms: int = 30_000, *, legacy: bool = False):
        super().__init__(samples, window_ms, legacy=legacy)

    def record(self, value: float, now_ms: int) -> None:
        if self._size == 0:
            self._new_first(now_ms)
        cur = self._cur
        if now_ms - self._start[cur] >= self._w:
            cur = self._advance(now_ms)
        self._value[cur] += value
        self._count[cur] += 1
        self._last[cur] = now_ms
        self.last_record_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """Kafka's ``Avg.measure``: purges expired samples first."""
        self._purge(now_ms)
        return self.peek(now_ms)

    def peek(self, now_ms: int) -> float:
        """The mean over samples that are not expired at ``now_ms``, changing nothing."""
        size = self._size
        ref = self._start if self._legacy else self._last
        threshold = now_ms - self._expire_ms
        live = [i for i in range(size) if ref[i] > threshold]
        count = sum(self._count[i] for i in live)
        if count == 0:
            return math.nan
        return reduce(add, (self._value[i] for i in live), 0.0) / count
