"""A process role's loops as the runner read them every second (`process_stats.loop_busy`,
harness/runner/proc_stats.py): the readings, the intervals a loop was busy throughout, and
one phrase that says so. A leaf module: `front_saturation` reads the acceptor's loops with
it, `offered_load` the generator's, in the same words.

Bound: two schedstat reads are placed within their read spans (the loops' own read,
`loop_read_mono_ns` / `loop_read_ms`, where recorded), and the kernel's count lags the
thread by its lag (below), so a loop busy throughout an interval reads at least
1 - (both spans + lag) / interval.

The lag: `/proc/<pid>/task/<tid>/schedstat` is the thread's CPU time as of its last
accounting update (at most one scheduler tick ago while it runs: 10 ms at the lowest common
CONFIG_HZ, 100) plus its waits for a CPU that have ended (a wait in progress is counted
when it ends). A reading that lagged makes the next one read over 1 by as much: the
largest such excess in the role's readings is a measured lag, and the allowance is the
larger of it and the tick.

A Python loop that has work but waits for the GIL, held by another thread of its process
(the history writer, gevent's pool), is off a CPU and reads as idle: such a wait is at
most the time the process's other threads ran (`loop_others`), so a loop counts as busy
throughout when its share plus that reaches the bound (lenient: judged by no check, never
a pass on a front that might have been saturated).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.columns import detail_col

if TYPE_CHECKING:
    from analysis.load import Run

MS = 1_000_000
S = 1_000_000_000
#: the longest a running thread's schedstat goes without an update: one tick at HZ=100
TICK_MS = 10.0


@dataclass(frozen=True)
class Busy:
    """One reading of a role's busiest loop: (prev_ns, at_ns] and its share."""

    prev_ns: int
    at_ns: int
    share: float
    pid: int
    bound: float  # the share a loop busy throughout reads at least
    #: the share its process's other threads ran: a Python loop waiting for the GIL one of
    #: them held was off-CPU, not idle (0 where not recorded)
    others: float = 0.0

    @property
    def busy_throughout(self) -> bool:
        """Its loop may have had work the whole interval: its own share, with the time the
        GIL may have been held from it, reaches the bound."""
        return self.share + self.others >= self.bound


def busy_readings(rows: list[tuple[int, float, dict[str, Any]]]) -> list[Busy]:
    """`process_stats` rows of one role (`role_rows`), (mono_ns, read span ms, detail), in time
    order -> its readings with a share, each with the bound its read spans and the lag allow
    (module docstring). A reading whose interval is no longer than its two reads and the
    lag (bound ≤ 0: the last one at the run's stop, taken just after the periodic one)
    cannot tell an idle loop from a busy one and is left out."""
    pairs = []
    for prev, row in itertools.pairwise(rows):
        (t0, span0), (t1, span1), d = _read_span(prev), _read_span(row), row[2]
        share = d.get("loop_busy")
        if share is None or t1 <= t0:
            continue
        pid, others = int(d.get("loop_busy_pid") or 0), float(d.get("loop_others") or 0.0)
        pairs.append((t0, t1, (span0 + span1) * MS, float(share), pid, others))
    lag = max([TICK_MS * MS] + [(share - 1.0) * (t1 - t0) for t0, t1, _, share, _, _ in pairs])
    out: list[Busy] = []
    for t0, t1, spans, share, pid, others in pairs:
        bound = 1.0 - (spans + lag) / (t1 - t0)
        if bound > 0:
            out.append(Busy(t0, t1, share, pid, bound, others))
    return out


def _read_span(row: tuple[int, float, dict[str, Any]]) -> tuple[int, float]:
    """When a reading read the loops, and its span in ms: the loops' own read
    (`loop_read_mono_ns`, `loop_read_ms`: its end and length) where recorded, else the
    whole reading's (its start and `latency_ms`: histories before the loops were read
    apart). The interval between two readings is then end to end, as the share's."""
    t, span, d = row
    if "loop_read_mono_ns" in d:
        return int(d["loop_read_mono_ns"]), float(d.get("loop_read_ms") or 0.0)
    return t, span


def saturated_spans(readings: list[Busy]) -> list[tuple[int, int, float]]:
    """The intervals whose loop was busy throughout, consecutive ones merged: (lo, hi,
    the highest share)."""
    out: list[tuple[int, int, float]] = []
    for r in readings:
        if not r.busy_throughout:
            continue
        if out and r.prev_ns <= out[-1][1]:
            lo, _, top = out[-1]
            out[-1] = (lo, r.at_ns, max(top, r.share))
        else:
            out.append((r.prev_ns, r.at_ns, r.share))
    return out


def role_rows(run: Run, role: str) -> list[tuple[int, float, dict[str, Any]]]:
    """The `process_stats` rows of one role (`acceptor`, `load`), (mono_ns, read span ms,
    detail), in time order."""
    return [
        (int(r["mono_ns"]), float(r["latency_ms"] or 0.0), json.loads(r["detail"] or "{}"))
        for r in run.events("process_stats", source="harness")
        .where(detail_col("harness", "process_stats", "role") == role)
        .select("mono_ns", "latency_ms", "detail")
        .orderBy("mono_ns")
        .collect()
    ]


def loop_summary(readings: list[Busy], t0: int, who: str) -> str:
    """How busy `who`'s busiest loop was, and every interval it was busy throughout: one
    phrase, read alike for the front and the generator."""
    top = max(readings, key=lambda r: r.share)
    text = (
        f"{who}'s busiest loop {top.share:.1%} of an interval (pid {top.pid}, at "
        f"{(top.at_ns - t0) / S:.1f} s, {len(readings)} readings)"
    )
    spans = saturated_spans(readings)
    if spans:
        text += "; " + "; ".join(
            f"{who} saturated {(lo - t0) / S:.1f}–{(hi - t0) / S:.1f} s (busy {share:.0%})"
            for lo, hi, share in spans
        )
    return text
