"""The observers' own stalls, as they measured them: the one excuse a timing check may
give a wait, a close or an observation that ran late because an observer could not run
(the process descheduled on a busy machine, a GC), never because the enforcer chose to
wait. A leaf module.

- The acceptor's event loop (`loop_lag` rows of source acceptor, acceptor.heartbeat):
  `admission_wait_explained` (strictness) credits stalls overlapping an admission's wait,
  `ip_throttle_within_window` (delays) those overlapping a throttled socket's overdue close.
- The storm engine's loop (`loop_lag` rows of source client, loadprofiles/engine.py) and its
  late arrivals (`ClientStalls`): a client-side witness observed inside a stall of its own
  engine is "not timed" (counted and named in the check's parts, never a FAIL, never a
  PASS): `ip_count_reject_closes_at_once`, `client_failed_login_delay`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from analysis.checks.base import fmt
from analysis.columns import detail_col
from analysis.frames import MS

if TYPE_CHECKING:
    from analysis.load import Run

#: uvloop's timers and loop clock have millisecond resolution: a tick may fire up to 1 ms
#: after its due time without any stall
TIMER_RESOLUTION_MS = 1.0


def heartbeat_stalls(run: Run) -> tuple[list[tuple[int, int]] | None, dict[str, float]]:
    """`measured_heartbeat_stalls`, read once per run (several checks ask)."""
    return run.cached("heartbeat_stalls", lambda: measured_heartbeat_stalls(run))  # type: ignore[no-any-return]


def client_stalls(run: Run) -> ClientStalls:
    """Every client observer's measured stalls (`ClientStalls`), read once per run."""
    return run.cached("client_stalls", lambda: measured_client_stalls(run))  # type: ignore[no-any-return]


def measured_heartbeat_stalls(run: Run) -> tuple[list[tuple[int, int]] | None, dict[str, float]]:
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


@dataclass(frozen=True)
class ClientStalls:
    """The stretches in which a client observer (one storm engine's loop) measurably did not
    look at its sockets, for the "not timed" rule: a client-side witness whose observation
    instant lies inside one of its own observer's stretches (ends included) was perhaps
    observed late because its observer could not look, so it is counted "not timed" and
    named in the check's parts, never a FAIL and never a PASS. Outside them, a check's slack
    stays what it is.

    Two measures, both the observer's own:
    - ``by_engine``: the engine's heartbeat (`loop_lag` rows of source client, reason
      `stall`: [from, until], `loadprofiles/engine.py`), keyed by the engine's connection-id
      prefix (``c<pid>-``); an unmeasured stall delays an observation by at most
      ``blind_ms`` (2 × (period + threshold));
    - ``by_profile``: an arrival of the profile due at `intended_mono_ns` that started
      later (its `connect_invoke`): the loop was behind its own schedule from due to start
      (histories before the heartbeat have only this)."""

    by_engine: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    by_profile: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    #: engines whose heartbeat ran (a `start` row): no stall row from them means none
    heartbeats: frozenset[str] = frozenset()
    blind_ms: float | None = None

    def covers(self, conn_id: str | None, profile: str | None, at_ns: int) -> bool:
        """Whether the observer of connection `conn_id` (of `profile`) was measurably
        stalled at `at_ns`."""
        spans = self.by_engine.get(engine_of(conn_id), ()) if conn_id else ()
        late = self.by_profile.get(profile or "", ())
        return any(a <= at_ns <= b for a, b in spans) or any(a <= at_ns <= b for a, b in late)

    def describe(self) -> str:
        n = sum(len(v) for v in self.by_engine.values())
        if not self.heartbeats:
            return "no engine heartbeat recorded (stalls from late arrivals only)"
        return (
            f"{n} stalls measured by {len(self.heartbeats)} engine heartbeat(s); an unmeasured "
            f"one delays an observation by at most {fmt(self.blind_ms)} ms"
        )


def engine_of(conn_id: str | None) -> str:
    """The storm engine that made a connection: its id's prefix (``c<pid>-`` of ``c<pid>-<k>``)."""
    if not conn_id:
        return ""
    return conn_id[: conn_id.rfind("-") + 1]


def measured_client_stalls(run: Run) -> ClientStalls:
    """Every client observer's measured stalls (`ClientStalls`)."""
    from pyspark.sql import functions as F

    rows = (
        run.events("loop_lag", source="client")
        .select(
            "reason",
            detail_col("client", "loop_lag", "engine").alias("engine"),
            detail_col("client", "loop_lag", "from_mono_ns").cast("long").alias("lo"),
            detail_col("client", "loop_lag", "until_mono_ns").cast("long").alias("hi"),
            detail_col("client", "loop_lag", "period_ms").cast("double").alias("period_ms"),
            detail_col("client", "loop_lag", "threshold_ms").cast("double").alias("threshold_ms"),
        )
        .collect()
    )
    by_engine: dict[str, list[tuple[int, int]]] = {}
    starts = [r for r in rows if r["reason"] == "start"]
    for r in rows:
        if r["reason"] == "stall" and r["lo"] is not None and r["hi"] is not None:
            by_engine.setdefault(str(r["engine"] or ""), []).append((int(r["lo"]), int(r["hi"])))
    blind = (
        max(2 * (float(r["period_ms"] or 0) + float(r["threshold_ms"] or 0)) for r in starts)
        if starts
        else None
    )
    intended = detail_col("client", "connect_invoke", "intended_mono_ns").cast("long")
    late = (
        run.events("connect_invoke", source="client")
        .select(
            detail_col("client", "connect_invoke", "profile").alias("profile"),
            intended.alias("due"),
            "mono_ns",
        )
        .where(F.col("due").isNotNull() & (F.col("mono_ns") - F.col("due") > MS))
        .collect()
    )
    by_profile: dict[str, list[tuple[int, int]]] = {}
    for r in late:
        by_profile.setdefault(str(r["profile"] or ""), []).append(
            (int(r["due"]), int(r["mono_ns"]))
        )
    return ClientStalls(
        {k: merge(sorted(v)) for k, v in by_engine.items()},
        {k: merge(sorted(v)) for k, v in by_profile.items()},
        frozenset(str(r["engine"] or "") for r in starts),
        blind,
    )


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
