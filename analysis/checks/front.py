"""Was the front itself the bottleneck? `front_saturation`.

A verdict must be about the rules the acceptor enforces, never about the acceptor running
out of CPU: a front that cannot take connections as fast as they come admits fewer than
the quotas allow, and every rate it is judged on is then its own pace, not the quota's.

The measure is the front's event loop itself. Every second the runner reads how long the
main thread of each acceptor process (the event loop: one in `single`; the accepting
process's and each processor process's in `split`) spent on a CPU or runnable and waiting
for one (`process_stats.loop_busy`, from the kernel's schedstat). A loop that idles has
caught up with its work at least once in the interval; a loop busy for the whole interval
had more work than time: saturated. Deliberate waits (sleeping out a rate delay, waiting
for a slot) idle the loop, so a quota's own throttling never reads as saturation, while a
loop starved of CPU by its neighbours on a shared machine does (it was runnable and could
not run). The bound is the readings' own: two schedstat reads are placed within their
read spans and the kernel's count lags by at most the lag (analysis.checks.loops), so a
loop busy throughout reads at least 1 - (both spans + lag) / interval, its share counted
with its process's other threads' CPU (a Python loop waiting for the GIL is not idle).

Saturated intervals are judged by no check (`unknown`, naming them with the figures: how
busy, the connections that waited in the accept queue beyond the slack the timing checks
grant the front, `expect.slack_ms`, with no deliberate block of the acceptor explaining
the wait, and the kernel's listen drops), and the run's verdict with them. A check's
failure whose every witness falls inside them is `unknown` too (`verdict.saturated`): it is
about the front's pace. The per-reading busy share is the front's headroom over time
(`series`).

Not judged without readings (a run recorded before they existed): `n/a`. PROXY listeners
are left out of the wait figures (their clients connect to the proxy, whose accept the
front never sees).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.checks.accounting import Reading, kernel_readings
from analysis.checks.base import NA, PASS, UNKNOWN, Check, CheckResult, witness
from analysis.checks.loops import (
    Busy,
    busy_readings,
    cause,
    cores_by_role,
    loop_summary,
    machine_during,
    role_rows,
    saturated_spans,
    saturated_with_wait,
)
from analysis.columns import detail_col, driver_table
from analysis.frames import acceptor_conns, client_conns, match_attempts

if TYPE_CHECKING:
    import pandas as pd

    from analysis.load import Run

NAME = "front_saturation"
MS = 1_000_000
S = 1_000_000_000
#: how many seconds of per-second figures the verdict carries (`series`)
SERIES_MAX = 7_200
#: What one acceptor holds on this machine kind (2 cores it shares with Kafka and the
#: load), in connections accepted per second, by process model: (bare, forwarded). Bare:
#: Trogdor's CONNECT; forwarded: its FETCH_METADATA, and the soak's bootstrap storm.
#: docs/acceptor.md, "The ceiling", gives each figure's bench and run. Printed beside the
#: run's peak, never judged: `front_saturation` reads the loops themselves.
CEILING = {"single": (4_400, 900), "split": (3_400, 800)}


def unexplained_waits(
    ok_ns: np.ndarray, accept_ns: np.ndarray, blocked: list[tuple[int, int]]
) -> np.ndarray:
    """Each connection's wait in the accept queue (`accept - ok`, at least 0) less the part
    of it covered by the listener's deliberate blocks (intervals, possibly overlapping)."""
    wait: np.ndarray = np.maximum(accept_ns - ok_ns, 0)
    if not blocked:
        return wait
    spans = sorted(blocked)
    starts: list[int] = []
    ends: list[int] = []
    for lo, hi in spans:  # their union, as disjoint sorted intervals
        if starts and lo <= ends[-1]:
            ends[-1] = max(ends[-1], hi)
        else:
            starts.append(lo)
            ends.append(hi)
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(e - s)])  # blocked time before interval i

    def blocked_until(t: np.ndarray) -> np.ndarray:
        """Total blocked time in (-inf, t]."""
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        inside = np.where(i > 0, np.clip(t - s[np.maximum(i - 1, 0)], 0, None), 0)
        last = np.where(i > 0, np.minimum(inside, (e - s)[np.maximum(i - 1, 0)]), 0)
        out: np.ndarray = before[np.maximum(i - 1, 0)] * (i > 0) + last
        return out

    lo = np.minimum(ok_ns, accept_ns)
    covered = blocked_until(accept_ns) - blocked_until(lo)
    rest: np.ndarray = np.maximum(wait - covered, 0)
    return rest


def check_front_saturation(run: Run) -> CheckResult:
    rows = role_rows(run, "acceptor")
    readings, starting = _serving(run, busy_readings(rows))
    readings, idle = _at_stake(run, readings)
    expected = (
        "the acceptor's event loops idle at least once in every reading's interval (a loop "
        "busy throughout had more work than time)"
    )
    if not readings:
        return CheckResult(
            NAME,
            NA,
            observed="no reading of the acceptor's loops (process_stats.loop_busy)",
            expected=expected,
            explanation="nothing to judge: the run recorded no loop readings",
        )
    t0 = run.scenario_t0_ns()
    spans = saturated_spans(readings)
    startup = (
        f"; {starting} reading(s) of an acceptor process's own start-up (before its listeners "
        "were bound) left out: no client could reach it"
        if starting
        else ""
    ) + (
        f"; {idle} reading(s) busy throughout with no client attempt and no accept in them "
        "(before the load, or the run's stop) left out: nothing judged was at stake"
        if idle
        else ""
    )
    model = "split" if max(int(d.get("processes") or 1) for _, _, d in rows) > 1 else "single"
    peak = _peak_accepts(run, t0)
    headroom = against_ceiling(peak, model)
    series = {
        "t_s": [round((r.at_ns - t0) / S, 1) for r in readings[:SERIES_MAX]],
        "loop_busy": [r.share for r in readings[:SERIES_MAX]],
    }
    tolerance = (
        "a reading counts as busy throughout at 1 - (its and the previous reading's loop "
        "read spans + the schedstat lag: the larger of a 10 ms tick and the largest excess "
        f"over 1 measured) / interval: {min(r.bound for r in readings):.4f} at the lowest; "
        "the loop's share counted with its process's other threads' CPU (its GIL waits)"
    )
    if not spans:
        return CheckResult(
            NAME,
            PASS,
            observed=f"{headroom}; {loop_summary(readings, t0, 'the front')}{startup}",
            expected=expected,
            tolerance=tolerance,
            judged=len(readings),
            family="faults",
            data={"series": series, "peak_accepts": peak, "model": model},
        )
    lines = []
    wit: list[dict[str, Any]] = []
    proxied, blocked = _proxied_listeners(run), _blocked(run)
    kernel, kernel_problems = kernel_readings(run)
    machine = cores_by_role(run)
    for lo, hi, share, wait in saturated_with_wait(readings):
        late, worst, worst_row = _late_in(run, lo, hi, proxied, blocked)
        drops = None if kernel_problems else _drops(kernel, lo, hi)
        parts = [f"its loop {cause(share, wait)}"]
        beside = machine_during(machine, lo, hi)
        if beside:
            parts.append(f"the machine meanwhile: {beside}")
        if late:
            parts.append(
                f"{late} connections waited in its accept queue, with the acceptor not "
                f"blocked on purpose, more than the {run.slack_ms:g} ms slack (the worst "
                f"{worst:.1f} ms)"
            )
        if drops is not None:
            parts.append(f"{drops} listen drops")
        lines.append(
            f"front saturated {(lo - t0) / S:.1f}–{(hi - t0) / S:.1f} s: " + "; ".join(parts)
        )
        if worst_row is not None:
            wit.append(witness(worst_row, f"waited {worst:.1f} ms in the accept queue"))
    return CheckResult(
        NAME,
        UNKNOWN,
        observed="; ".join([*lines, headroom]) + startup,
        expected=expected,
        tolerance=tolerance,
        witnesses=wit[:10],
        explanation=(
            "where the front could not keep up, what it admitted is its own pace, not a "
            "quota's: those windows are judged by no check (never a fail, never a pass)"
        ),
        judged=len(readings),
        family="faults",
        data={
            "series": series,
            "outage": lines,
            "windows_ns": [(lo, hi) for lo, hi, _ in spans],
            "peak_accepts": peak,
            "model": model,
        },
    )


def _serving(run: Run, readings: list[Busy]) -> tuple[list[Busy], int]:
    """The readings of loops that were a front, and how many were not: a reading that ended
    before its process's first history row (an acceptor writes none before its listeners
    are bound: its config, then its heartbeat's `start`) measured the process's own
    start-up (imports, its processors, a restarted front coming back), when no client
    could reach it; its busy share is not the front's pace."""
    from analysis.load import acceptor_spans

    first = {int(pid): lo for pid, (lo, _hi) in acceptor_spans(run).items()}
    serving = [r for r in readings if r.at_ns > first.get(r.pid, r.at_ns - 1)]
    return serving, len(readings) - len(serving)


def _at_stake(run: Run, readings: list[Busy]) -> tuple[list[Busy], int]:
    """The readings that could bear on a verdict, and how many could not: a loop busy
    throughout an interval in which no client attempted a connection and the front accepted
    none (the run's last reading, taken as it stops; a front busy before the load) left no
    connection to be judged at its pace. One Spark job for all the busy readings."""
    from pyspark.sql import functions as F

    busy = [r for r in readings if r.busy_throughout]
    if not busy:
        return readings, 0
    spark = run.history.sparkSession
    spans = driver_table(
        spark, [(r.prev_ns, r.at_ns) for r in busy], [("lo", "long"), ("hi", "long")]
    )
    events = run.history.where(
        ((F.col("source") == "client") & (F.col("event") == "connect_invoke"))
        | ((F.col("source") == "acceptor") & (F.col("event") == "accept"))
    ).select("mono_ns")
    hit = {
        (int(r["lo"]), int(r["hi"]))
        for r in F.broadcast(spans)
        .join(events, (events.mono_ns > spans.lo) & (events.mono_ns <= spans.hi))
        .select("lo", "hi")
        .distinct()
        .collect()
    }
    idle = [r for r in busy if (r.prev_ns, r.at_ns) not in hit]
    return [r for r in readings if r not in idle], len(idle)


def against_ceiling(peak: tuple[int, float] | None, model: str) -> str:
    """The run's peak accept rate beside what the front holds here (`CEILING`)."""
    bare, forwarded = CEILING[model]
    ceiling = f"of ~{forwarded:,} forwarded or ~{bare:,} bare/s held here ({model})"
    if peak is None:
        return f"none accepted, {ceiling}"
    count, at_s = peak
    return f"peak {count:,} accepted/s (at {at_s:.0f} s) {ceiling}"


def _peak_accepts(run: Run, t0: int) -> tuple[int, float] | None:
    """The most connections the front accepted in one second of the run, and when."""
    from pyspark.sql import functions as F

    top = (
        run.events("accept", source="acceptor")
        .groupBy(F.floor((F.col("mono_ns") - F.lit(t0)) / F.lit(S)).alias("second"))
        .count()
        .orderBy(F.col("count").desc(), "second")
        .first()
    )
    return None if top is None else (int(top["count"]), float(top["second"]))


def _proxied_listeners(run: Run) -> set[str]:
    """Listeners whose connections came with a PROXY header: their clients connected to the
    proxy, whose accept the front never sees."""
    return {
        str(r["listener"]).lower()
        for r in run.events("accept", source="acceptor")
        .where(detail_col("acceptor", "accept", "proxy_header").isNotNull())
        .select("listener")
        .distinct()
        .collect()
    }


def _blocked(run: Run) -> dict[str, list[tuple[int, int]]]:
    """Each listener's deliberate blocks of its acceptor (`blocked` rows): (start, end)."""
    from pyspark.sql import functions as F

    out: dict[str, list[tuple[int, int]]] = {}
    for r in (
        run.events("blocked", source="acceptor")
        .select(
            F.lower("listener").alias("listener"),
            detail_col("acceptor", "blocked", "start_mono_ns").cast("long").alias("start"),
            "mono_ns",
        )
        .collect()
    ):
        start = r["start"] if r["start"] is not None else r["mono_ns"]
        out.setdefault(r["listener"], []).append((int(start), int(r["mono_ns"])))
    return out


def _late_in(
    run: Run, lo: int, hi: int, proxied: set[str], blocked: dict[str, list[tuple[int, int]]]
) -> tuple[int, float, dict[str, Any] | None]:
    """Connections the front took in (lo, hi] that waited in its accept queue more than
    the slack beyond what its deliberate blocks explain: how many, the worst (ms), and
    the worst one's identity."""
    from pyspark.sql import functions as F

    conns = acceptor_conns(run).where(
        (F.col("accept_ns") > lo) & (F.col("accept_ns") <= hi) & F.col("client_ip").isNotNull()
    )
    attempts = client_conns(run).where(F.col("connect_ok_ns").isNotNull())
    pairs: pd.DataFrame = (
        match_attempts(conns, attempts, run)
        .select(
            F.col("a.listener").alias("listener"),
            F.col("c.connect_ok_ns").alias("ok_ns"),
            F.col("a.accept_ns").alias("accept_ns"),
            F.col("a.client_ip").alias("client_ip"),
            F.col("a.client_port").alias("client_port"),
        )
        .where(~F.col("listener").isin(*proxied) if proxied else F.lit(True))
        .toPandas()
    )
    if pairs.empty:
        return 0, 0.0, None
    ok = pairs["ok_ns"].to_numpy(np.int64)
    acc = pairs["accept_ns"].to_numpy(np.int64)
    names = pairs["listener"].to_numpy()
    waits = np.zeros(len(pairs), dtype=np.int64)
    for name in set(names.tolist()):
        at = names == name
        waits[at] = unexplained_waits(ok[at], acc[at], blocked.get(name, []))
    bound = int(run.slack_ms * MS) + run.clock_error_ns
    late = int((waits > bound).sum())
    i = int(np.argmax(waits))
    row = {
        "listener": str(names[i]),
        "client_ip": str(pairs["client_ip"].iat[i]),
        "client_port": int(pairs["client_port"].iat[i]),
        "mono_ns": int(acc[i]),
    }
    return late, float(waits[i] / MS), row if late else None


def _drops(readings: list[Reading], lo: int, hi: int) -> int | None:
    """The listen drops the kernel counted between the readings around (lo, hi]."""
    before = [r.drops for r in readings if r.t1 <= lo]
    after = [r.drops for r in readings if r.t0 >= hi]
    if not before or not after:
        return None
    return after[0] - before[-1]


CHECKS = [
    Check(
        NAME,
        "faults",
        check_front_saturation,
        False,
        ("acceptor",),
        doc="the front took connections as fast as its acceptor was free to (else unknown)",
        frames=("process_stats",),
    ),
]
