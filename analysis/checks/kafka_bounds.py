"""Bounds that hold for every timing consistent with what a client saw (target broker).

On a broker target the harness sees only the client: Kafka's accept (the rate step's
t0), its per-IP step (t1) and its close are known only within intervals of the client's
own instants. These functions give limits that Kafka's meter guarantees for *every*
placement of those instants inside their intervals, so a check built on them never
blames Kafka for the client clock (derivations in docs/kafka-reference.md §2):

- `memory_ms`: how far back every recorded event is surely still in the meter's value
  (n·w − 1 ms on Kafka ≥ 3.8's ring of n+1 samples, (n−1)·w before it): the longest span
  the two bounds below are valid for;
- `rate_span_bound`: connections recorded by a broker/listener rate sensor within any span
  of T < `memory_ms` (over-admission, KIP-612 delay-then-accept);
- `ip_span_bound`: connections that passed an IP's rate step within any such span
  (over-admission, KIP-612 per-IP throttle-then-close);
- `ip_throttle_needs`: how many other kept IP records a per-IP throttle requires
  (over-throttling: an EOF nobody could have caused is Kafka's fault);
- `max_sure_in_span`: the most intervals lying wholly inside one span (the served
  connections whose accept *surely* fell in it).

The rate meter differs by release (`analysis.versions`, switch `sampled_stat_overlap`):
``overlap=True`` is the ring of n+1 samples purged by their last event (Kafka ≥ 3.8.0),
``overlap=False`` the ring of n samples purged by their start (2.7–3.7). With m the ring's
slots (n+1 or n), the window is W < m·w and every event of the last (m−1)·w is in it.

Pure Python, clock-free, in milliseconds; `analysis/` never imports `base.quota`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from analysis.model import INT_MAX

#: Kafka's clock is `time.milliseconds` (truncated): two of its instants ``d`` ms apart can be
#: d - 1 ms apart in real time.
CLOCK_MS = 1.0
#: `QuotaUtils.throttleTime` rounds half-up: the delay waited can be 0.5 ms short of X.
ROUND_MS = 0.5


def slots(n: int, overlap: bool = True) -> int:
    """The samples the meter's ring keeps: n+1 (Kafka ≥ 3.8.0), else n."""
    return n + 1 if overlap else n


def memory_ms(n: int, w_ms: float, overlap: bool = True) -> float:
    """Kafka-clock age up to which every recorded event is surely in the meter's value.

    Ring of n+1 (purged when its last event is n·w old, overwritten after n+1 later
    samples, each starting ≥ w after the one before): an event e is kept while
    t − e < n·w, i.e. up to n·w − 1 ms. Ring of n (purged when its *start*, up to
    w − 1 ms before e, is n·w old): kept while t − e ≤ (n−1)·w."""
    return n * w_ms - CLOCK_MS if overlap else (n - 1) * w_ms


def longest_span_ms(n: int, w_ms: float, overlap: bool = True) -> float:
    """The longest client-clock span the bounds hold for (1 ms of Kafka's clock less)."""
    return memory_ms(n, w_ms, overlap) - CLOCK_MS


def rate_span_bound(
    rate: float, span_ms: float, n: int, w_ms: float, acceptors: int = 1, overlap: bool = True
) -> int:
    """Most connections a broker/listener rate sensor records within a span of ``span_ms``.

    ``rate`` is the bound (connections/s), ``acceptors`` the listeners (acceptor threads)
    feeding the sensor; valid for spans up to `longest_span_ms`. With T the span (+1 ms of
    clock) and m the ring's slots:
        N ≤ r·(m+1)·w + k·(T/(w - 1 ms) + 1)
    r·(m+1)·w: at the last connection whose delay was not capped, everything recorded in
    the span is in the meter's window (< m·w) and its uncapped delay X < w, so
    V = r·(W + X) < r·(m+1)·w; after it every delay is the cap w, one connection per
    w - 1 ms per acceptor thread.
    """
    longest = longest_span_ms(n, w_ms, overlap)
    if span_ms > longest:
        raise ValueError(f"span {span_ms} ms exceeds the meter's memory less 1 ms = {longest} ms")
    span_ms += CLOCK_MS  # a client-clock span holds Kafka instants up to 1 ms wider
    k = max(1, acceptors)
    m = slots(n, overlap)
    value = rate * (m + 1) * w_ms / 1000.0 + k * (span_ms / (w_ms - CLOCK_MS) + 1)
    return math.floor(value + 1e-9)


def ip_span_bound(quota: float, n: int, w_ms: float, overlap: bool = True) -> int:
    """Most connections of one IP that pass its rate step within any span up to
    `longest_span_ms`.

    An IP step that lets a connection through leaves V ≤ q·W with V ≥ every kept record
    of the meter's memory and W < m·w, so N ≤ q·m·w (m = n+1 from 3.8.0, else n).
    """
    return math.floor(quota * slots(n, overlap) * w_ms / 1000.0 + 1e-9)


def ip_throttle_needs(quota: float, n: int, w_ms: float) -> float:
    """A per-IP throttle at t1 needs more than this many *other* kept records of the IP in
    (t1 - m·w, t1] (m the ring's slots; nothing older is in V): the window is at least
    (n-1)·w on either ring, so V = others + 1 > q·(n-1)·w."""
    return quota * (n - 1) * w_ms / 1000.0 - 1.0


def ip_throttle_possible(others: int, quota: float, n: int, w_ms: float) -> bool:
    """Could a throttle have happened with at most ``others`` other kept records?"""
    if quota >= INT_MAX:
        return False
    if quota <= 0:
        return True
    return others > ip_throttle_needs(quota, n, w_ms)


class _Fenwick:
    def __init__(self, size: int) -> None:
        self.tree = [0] * (size + 1)

    def add(self, i: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += 1
            i += i & -i

    def prefix(self, i: int) -> int:
        """Count of added positions < i."""
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


def sure_counts(lo: Sequence[float], hi: Sequence[float], span: float) -> list[tuple[float, int]]:
    """For each distinct right end b = some interval's hi: how many intervals [lo, hi] lie
    wholly inside the span (b - span, b] (hi' ≤ b and lo' > b - span). O(N log N).

    The count in any span is at most the count of the span ending at the largest hi it
    contains, so these spans are the only ones worth judging."""
    if not lo:
        return []
    order = sorted(range(len(hi)), key=lambda i: hi[i])
    los = sorted(set(lo))
    tree = _Fenwick(len(los))
    out: list[tuple[float, int]] = []
    added = 0
    k = 0
    while k < len(order):
        b = hi[order[k]]
        while k < len(order) and hi[order[k]] <= b:
            tree.add(bisect_right(los, lo[order[k]]) - 1)
            added += 1
            k += 1
        out.append((b, added - tree.prefix(bisect_right(los, b - span))))
    return out


def max_sure_in_span(
    lo: Sequence[float], hi: Sequence[float], span: float
) -> tuple[int, float | None]:
    """The most intervals lying wholly inside one span (b - span, b], and that b."""
    best, best_b = 0, None
    for b, count in sure_counts(lo, hi, span):
        if count > best:
            best, best_b = count, b
    return best, best_b


def max_overlap(starts: Sequence[float], ends: Sequence[float]) -> tuple[int, float | None]:
    """Most intervals [start, end) open at one instant (ends before starts at a tie)."""
    events = sorted([(e, 0) for e in ends] + [(s, 1) for s in starts])
    cur = best = 0
    at = None
    for t, kind in events:
        cur += 1 if kind else -1
        if cur > best:
            best, at = cur, t
    return best, at
