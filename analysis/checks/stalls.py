"""The acceptor's event-loop stalls, as its heartbeat measured them (`loop_lag` rows,
harness.acceptor.heartbeat): the one excuse a check may give a wait or a close that ran
late because the loop could not run (the process descheduled on a busy machine, a GC),
never because the acceptor chose to wait. A leaf module: `admission_wait_explained`
(strictness) credits stalls overlapping an admission's wait, `ip_throttle_within_window`
(delays) those overlapping a throttled socket's overdue close.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.columns import detail_col
from analysis.frames import MS

if TYPE_CHECKING:
    from analysis.load import Run

#: uvloop's timers and loop clock have millisecond resolution: a tick may fire up to 1 ms
#: after its due time without any stall
TIMER_RESOLUTION_MS = 1.0


def heartbeat_stalls(run: Run) -> tuple[list[tuple[int, int]] | None, dict[str, float]]:
    """Loop stalls the acceptor measured itself (`loop_lag` rows), or None without a heartbeat.

    A heartbeat tick due every `period` ms that fired `late` ms after its due time proves the
    loop could not run callbacks from (at the latest) its due time to when it fired; the tick
    before it fired on time at most one period (plus the timer resolution) earlier, so a stall
    that delayed this tick lies in [due − period − resolution, fired]. That interval is what
    a wait may be credited with. Ticks late by ≤ threshold write no row: an unmeasured stall
    is shorter than threshold + period + resolution (the `blind_ms`), which the slack must
    cover. Older acceptors wrote no heartbeat (no `start` row): None, and the caller falls
    back to stalls inferred from gaps in the rows.
    """

    rows = (
        run.events("loop_lag", source="acceptor")
        .select(
            "mono_ns",
            "reason",
            "delay_ms",
            detail_col("acceptor", "loop_lag", "period_ms").cast("double").alias("period_ms"),
            detail_col("acceptor", "loop_lag", "threshold_ms").cast("double").alias("threshold_ms"),
        )
        .collect()
    )
    starts = [r for r in rows if r["reason"] == "start"]
    if not starts:
        return None, {}
    period = max(float(r["period_ms"] or 0.0) for r in starts)
    threshold = max(float(r["threshold_ms"] or 0.0) for r in starts)
    out: list[tuple[int, int]] = []
    longest = 0.0
    for r in rows:
        if r["reason"] != "stall":
            continue
        fired = int(r["mono_ns"])
        late = float(r["delay_ms"] or 0.0)
        longest = max(longest, late)
        out.append((fired - int((late + period + TIMER_RESOLUTION_MS) * MS), fired))
    out.sort()
    info = {
        "stalls": float(len(out)),
        "max_ms": longest,
        "period_ms": period,
        "threshold_ms": threshold,
        "blind_ms": threshold + period + TIMER_RESOLUTION_MS,
    }
    return merge(out), info


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of sorted intervals (overlapping credits are counted once)."""
    out: list[tuple[int, int]] = []
    for a, b in intervals:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlap(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """ns of [lo, hi] covered by `intervals` (merged: none counted twice)."""
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in intervals)
