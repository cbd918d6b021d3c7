"""Bounds that hold for every timing consistent with what a client saw (target broker).

On a broker target the harness sees only the client: Kafka's accept (the rate step's
t0), its per-IP step (t1) and its close are known only within intervals of the client's
own instants. These functions give limits that Kafka's meter guarantees for *every*
placement of those instants inside their intervals, so a check built on them never
blames Kafka for the client clock (derivations in docs/kafka-reference.md §2):

- `rate_span_bound`: connections recorded by a broker/listener rate sensor within any span
  of T ≤ n·w (over-admission, KIP-612 delay-then-accept);
- `ip_span_bound`: connections that passed an IP's rate step within any span of T ≤ n·w
  (over-admission, KIP-612 per-IP throttle-then-close);
- `ip_throttle_needs`: how many other kept IP records a per-IP throttle requires
  (over-throttling: an EOF nobody could have caused is Kafka's fault);
- `max_sure_in_span`: the most intervals lying wholly inside one span (the served
  connections whose accept *surely* fell in it).

Pure Python, clock-free, in milliseconds; `analysis/` never imports `harness.quota`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

#: Kafka's clock is `time.milliseconds` (truncated): two of its instants ``d`` ms apart can be
#: d - 1 ms apart in real time.
CLOCK_MS = 1.0
#: `QuotaUtils.throttleTime` rounds half-up: the delay waited can be 0.5 ms short of X.
ROUND_MS = 0.5


def rate_span_bound(rate: float, span_ms: float, n: int, w_ms: float, acceptors: int = 1) -> int:
    """Most connections a broker/listener rate sensor records within a span of ``span_ms``.

    ``rate`` is the bound (connections/s), ``acceptors`` the listeners (acceptor threads)
    feeding the sensor; valid for spans shorter than n·w. With T the span (+1 ms of clock):
        N ≤ r·(n+2)·w + k·(T/(w - 1 ms) + 1)
    r·(n+2)·w: at the last connection whose delay was not capped, everything recorded in
    the span is in the meter's window (< (n+1)·w) and its uncapped delay X < w, so
    V = r·(W + X) < r·(n+2)·w; after it every delay is the cap w, one connection per
    w - 1 ms per acceptor thread.
    """
    if span_ms > n * w_ms - CLOCK_MS:
        raise ValueError(f"span {span_ms} ms exceeds n·w - 1 ms = {n * w_ms - CLOCK_MS} ms")
    span_ms += CLOCK_MS  # a client-clock span holds Kafka instants up to 1 ms wider
    k = max(1, acceptors)
    value = rate * (n + 2) * w_ms / 1000.0 + k * (span_ms / (w_ms - CLOCK_MS) + 1)
    return math.floor(value + 1e-9)


def ip_span_bound(quota: float, n: int, w_ms: float) -> int:
    """Most connections of one IP that pass its rate step within any span of ≤ n·w.

    An IP step that lets a connection through leaves V ≤ q·W with V ≥ every kept record
    of the last n·w and W < (n+1)·w, so N ≤ q·(n+1)·w.
    """
    return math.floor(quota * (n + 1) * w_ms / 1000.0 + 1e-9)


def ip_throttle_needs(quota: float, n: int, w_ms: float) -> float:
    """A per-IP throttle at t1 needs more than this many *other* kept records of the IP in
    (t1 - (n+1)·w, t1]: the window is at least (n-1)·w, so V = others + 1 > q·(n-1)·w."""
    return quota * (n - 1) * w_ms / 1000.0 - 1.0


def ip_throttle_possible(others: int, quota: float, n: int, w_ms: float) -> bool:
    """Could a throttle have happened with at most ``others`` other kept records?"""
    if quota >= 2_147_483_647:
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
