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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from analysis.frames import StatsRow, process_stats_rows

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
    #: of `share`, the part the loop was runnable and waiting for a CPU (schedstat's
    #: run-queue wait): starved by other processes (None where not recorded)
    wait: float | None = None

    @property
    def busy_throughout(self) -> bool:
        """Its loop may have had work the whole interval: its own share, with the time the
        GIL may have been held from it, reaches the bound."""
        return self.share + self.others >= self.bound


def busy_readings(rows: list[StatsRow]) -> list[Busy]:
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
        wait = d.get("loop_wait")
        wait = None if wait is None else float(wait)
        pairs.append((t0, t1, (span0 + span1) * MS, float(share), pid, others, wait))
    lag = max([TICK_MS * MS] + [(p[3] - 1.0) * (p[1] - p[0]) for p in pairs])
    out: list[Busy] = []
    for t0, t1, spans, share, pid, others, wait in pairs:
        bound = 1.0 - (spans + lag) / (t1 - t0)
        if bound > 0:
            out.append(Busy(t0, t1, share, pid, bound, others, wait))
    return out


def _read_span(row: StatsRow) -> tuple[int, float]:
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
    return [(lo, hi, share) for lo, hi, share, _ in saturated_with_wait(readings)]


def saturated_with_wait(readings: list[Busy]) -> list[tuple[int, int, float, float | None]]:
    """`saturated_spans` with the span's mean run-queue wait share (None where not
    recorded): how much of being busy throughout was waiting for a CPU."""
    runs: list[list[Busy]] = []  # consecutive readings busy throughout
    for r in readings:
        if not r.busy_throughout:
            continue
        if runs and r.prev_ns <= runs[-1][-1].at_ns:
            runs[-1].append(r)
        else:
            runs.append([r])
    out: list[tuple[int, int, float, float | None]] = []
    for span in runs:
        waits = [r.wait for r in span if r.wait is not None]
        mean_wait = sum(waits) / len(waits) if waits else None
        out.append((span[0].prev_ns, span[-1].at_ns, max(r.share for r in span), mean_wait))
    return out


def cause(share: float, wait: float | None) -> str:
    """What a loop busy throughout was doing, as the kernel measured it: starved (most of
    its busy time runnable but waiting for a CPU the machine's other processes held) or its
    own work (on a CPU)."""
    if wait is None:
        return f"busy {share:.0%}"
    on_cpu = max(0.0, share - wait)
    why = "starved: waiting for a CPU" if wait >= on_cpu else "its own work: on a CPU"
    return f"busy {share:.0%}: on a CPU {on_cpu:.0%}, waiting for one {wait:.0%}; {why}"


def _key(name: str) -> str:
    """`process_stats`' detail key, checked against the event's one definition."""
    from base.history.events import event as definition

    return definition("harness", "process_stats").key(name)


def role_rows(run: Run, role: str) -> list[StatsRow]:
    """The `process_stats` rows of one role (`acceptor`, `load`), (mono_ns, read span ms,
    detail), in time order (the run's readings, read once: `frames.process_stats_rows`)."""
    key = _key("role")
    return [row for row in process_stats_rows(run) if row[2].get(key) == role]


def loop_summary(readings: list[Busy], t0: int, who: str) -> str:
    """How busy `who`'s busiest loop was, and every interval it was busy throughout: one
    phrase, read alike for the front and the generator."""
    top = max(readings, key=lambda r: r.share)
    text = (
        f"{who}'s busiest loop {top.share:.1%} of an interval (pid {top.pid}, at "
        f"{(top.at_ns - t0) / S:.1f} s, {len(readings)} readings)"
    )
    spans = saturated_with_wait(readings)
    if spans:
        text += "; " + "; ".join(
            f"{who} saturated {(lo - t0) / S:.1f}–{(hi - t0) / S:.1f} s ({cause(share, wait)})"
            for lo, hi, share, wait in spans
        )
    return text


def cores_by_role(run: Run) -> dict[str, list[tuple[int, float]]]:
    """Every process role's cumulative CPU seconds as the runner read them (`process_stats`
    ``cpu_s``: the acceptor, brokers, load, and the noise asked for), (mono_ns, cpu_s) in
    time order: what shared the machine with the front."""
    role, cpu_s = _key("role"), _key("cpu_s")
    out: dict[str, list[tuple[int, float]]] = {}
    for ns, _span, d in process_stats_rows(run):
        cpu = d.get(cpu_s)
        if isinstance(cpu, int | float) and not isinstance(cpu, bool):
            out.setdefault(str(d.get(role)), []).append((ns, float(cpu)))
    return out


def machine_during(cores: dict[str, list[tuple[int, float]]], lo: int, hi: int) -> str:
    """Each role's mean CPU use (cores) over the readings that cover [lo, hi], busiest first:
    the neighbours of a starved loop, named with their measured share; with the machine's
    own reading (role ``machine``), what none of the run's processes used is named too
    ("other processes": a neighbour the run did not start)."""
    used: list[tuple[float, str]] = []
    machine: float | None = None
    for role, series in cores.items():
        inside = [(t, c) for t, c in series if lo - S <= t <= hi + S]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            continue
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        n = max(0.0, c1 - c0) / ((t1 - t0) / S)
        if role == "machine":  # every process's, the run's own included
            machine = n
        else:
            used.append((n, role))
    if machine is not None:  # what the run's own processes did not use: a neighbour's
        used.append((max(0.0, machine - sum(n for n, _ in used)), "other processes"))
    return ", ".join(f"{role} {n:.2f} cores" for n, role in sorted(used, reverse=True))
