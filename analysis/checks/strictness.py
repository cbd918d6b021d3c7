"""Over-strict enforcement is a failure too: waits and evictions must be explained.

Admission wait (per connection, accept → IP step at t1; Kafka's acceptor thread does
nothing else meanwhile, reference §0.3): with d the recorded rate delay,
- t1 − accept ≥ d − 1 ms (the delay is timed from t0 truncated to the ms: a wait shorter
  than that is a delay recorded but not served);
- t1 − accept ≤ d + slack, unless a slot wait explains the rest: at accept + d the slot
  was unavailable (listener count ≥ its max, or, off the protected listener, the total
  ≥ max.connections) and t1 ≤ the first instant a slot was free again + slack. A slot
  wait while slots were free, or longer than the release that freed one, is a witness.
  A slot that another listener's admission took within the slack (the protected listener
  admits past the total; on Kafka its acceptor thread races the waiter) was not free
  for this waiter.
  The only other excuse is a stall of the acceptor's own event loop, and only one its
  heartbeat measured (`loop_lag` rows, acceptor.heartbeat: a 10 ms timer whose
  lateness > 5 ms is written down): each stall row is credited from its tick's due time
  − period − 1 ms timer resolution to when it fired, and only where it overlaps the wait.
  An unmeasured stall is shorter than threshold + period + resolution (16 ms), inside the
  slack. An admission decided at once (no delay, a slot free: no await from its accept to
  its IP step) that took longer is written as such a row too (`Heartbeat.held`): nothing
  but the process standing still (descheduled on a saturated machine, a GC) can hold a
  callback that long. A deliberate over-sleep leaves the loop free, so the heartbeat
  ticks on time and nothing excuses it (the seeded fault `delay_doubled`). Recordings
  without a heartbeat `start` row (older acceptors) fall back to stalls inferred from
  gaps in the rows.
Counts are the admitted connections (admit → close/evict), releases first at an instant.
And each `blocked` row of reason `slot` or `rate+slot` says the acceptor found no slot: if
the counts were below every maximum (listener max, and off the protected listener
max.connections) at every instant from slack before the block's start to its end, the
slot wait was the acceptor's own choice: a witness. The slack margin covers the few
instants between the acceptor's release and its `close` row; no stall can explain a wait
that the acceptor itself labelled as waiting for a slot.

Eviction (`closeExcessConnections`, reference §0.3, §1.2): an `evict` happens only while
the total of admitted connections exceeds max.connections (the protected listener pushed
it over), at most as many evictions as the excess at that instant, never a connection of
the protected listener, and the victim is its processor's least recently used channel:
no other open non-protected connection on that processor was idle longer by more than the
slack. Last activity: its register, or its last `request` row. Kafka's LRU
(`Selector.lruConnections`) is refreshed on every read and on every completed send, and
the acceptor `touch()`es a channel on client data and on upstream data; a `request` row is
written when the response arrives (its `mono_ns`), `latency_ms` after the request was read,
so the later of the two, the row's `mono_ns`, is the last activity it shows. (A consumer's
long-poll fetch read before another channel's request but answered after it was used more
recently in Kafka's sense.) With sampled request rows (`history.request.sample` > 1) an
unsampled answer can be later still; the slack does not cover that.
And over the limit, Kafka evicts one channel per processor loop turn, and a turn comes at
least every 300 ms (the poll timeout, §0.4; sooner on I/O): so with idle channels an
excess of E on P processors takes ⌈E/P⌉ turns (measured on Kafka 4.3.1: 6 on 3
processors shed at ~180 and ~480 ms, bench.eviction_pace). While over the limit, a stretch
longer than the slack + 300 ms without the count coming down is a witness.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    PASS,
    Check,
    CheckResult,
    fmt,
    not_configured,
    nothing_judged,
    witness,
)
from analysis.checks.concurrency import max_connections_set
from analysis.checks.stalls import TIMER_RESOLUTION_MS, heartbeat_stalls, overlap
from analysis.columns import detail_col
from analysis.frames import MS, acceptor_conns
from analysis.model import INT_MAX

if TYPE_CHECKING:
    from analysis.load import Run

TRUNCATION_MS = 1.0  # t0 is taken in whole ms when the delay is timed
PROCESSOR_POLL_MS = 300.0  # a processor's poll timeout: the eviction pace at worst


class Counts:
    """Admitted connections open at any instant, total and per listener."""

    def __init__(self, rows: list[dict[str, Any]]):
        ev: list[tuple[int, int, str]] = []
        for r in rows:
            if r["admit_ns"] is None:
                continue
            ev.append((int(r["admit_ns"]), 1, r["listener"]))
            if r["close_ns"] is not None:
                ev.append((int(r["close_ns"]), -1, r["listener"]))
        ev.sort(key=lambda e: (e[0], e[1]))  # releases first at one instant
        self.ns = [e[0] for e in ev]
        self.delta = [e[1] for e in ev]
        self.listener = [e[2] for e in ev]
        self.total: list[int] = []
        self.per: list[dict[str, int]] = []
        running: dict[str, int] = defaultdict(int)
        total = 0
        for d, lst in zip(self.delta, self.listener, strict=True):
            total += d
            running[lst] += d
            self.total.append(total)
            self.per.append(dict(running))  # fine at the sizes a count-limited run has

    def at(self, ns: int) -> tuple[int, dict[str, int]]:
        """State after every event at or before `ns`."""
        i = bisect_right(self.ns, ns) - 1
        if i < 0:
            return 0, {}
        return self.total[i], self.per[i]

    def next_change(self, ns: int) -> int | None:
        i = bisect_right(self.ns, ns)
        return self.ns[i] if i < len(self.ns) else None


def _slot_free(run: Run, counts: Counts, listener: str, ns: int) -> bool:
    lim = run.timeline.at(ns)
    total, per = counts.at(ns)
    if per.get(listener, 0) >= lim.listener_max_for(listener):
        return False
    return lim.is_protected(listener) or total < lim.max_connections


def _taken_within(
    run: Run,
    counts: Counts,
    listener: str,
    freed: int,
    until: int,
    slack: float,
    stalls: list[tuple[int, int]],
) -> int | None:
    """The first instant within `slack` ms of `freed` (and before `until`; the loop's
    measured stalls in between credited) at which no slot is free for `listener` any
    more, or None: the slots freed were taken by others."""
    x = freed
    while True:
        nxt = counts.next_change(x)
        if nxt is None or nxt >= until or nxt - freed - overlap(stalls, freed, nxt) > slack * MS:
            return None
        if not _slot_free(run, counts, listener, nxt):
            return nxt
        x = nxt


def _count_limited(run: Run) -> bool:
    return run.timeline.ever(lambda x: x.max_connections) or any(
        v < INT_MAX for lim in run.timeline.limits for v in lim.listener_maxes().values()
    )


def check_admission_wait(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    name = "admission_wait_explained"
    slack = run.slack_ms
    conns = acceptor_conns(run).where(F.col("accept_ns").isNotNull() & F.col("t1_ns").isNotNull())
    wait_ms = (F.col("t1_ns") - F.col("accept_ns")) / MS
    d = F.coalesce(F.col("delay_ms"), F.lit(0.0))
    short = (d > 0) & (wait_ms < d - F.lit(TRUNCATION_MS))
    long_ = wait_ms > d + F.lit(slack)
    stats = conns.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.when(short, 1).otherwise(0)).alias("short"),
        F.sum(F.when(long_, 1).otherwise(0)).alias("long"),
        F.max(wait_ms - d).alias("max_extra"),
        F.percentile_approx(wait_ms - d, 0.99, 1000).alias("p99_extra"),
        F.sum(F.when(d > 0, 1).otherwise(0)).alias("delayed"),
    ).first()
    assert stats is not None
    n = int(stats["n"] or 0)
    if not n:
        return nothing_judged(name, "admissions", "every wait explained by a delay or a slot")
    wit: list[dict[str, Any]] = []
    cols = ["conn_id", "client_ip", "client_port", "listener", "accept_ts", "accept_ns",
            "t1_ns", "delay_ms", "outcome"]  # fmt: skip
    for r in conns.where(short).orderBy("accept_ns").limit(10).collect() if stats["short"] else []:
        waited = (r["t1_ns"] - r["accept_ns"]) / MS
        wit.append(
            witness(
                r.asDict(),
                f"rate delay {fmt(r['delay_ms'])} ms recorded but the IP step came after "
                f"{fmt(waited, 2)} ms: the delay was not served",
            )
        )
    n_slot_ok = 0
    n_long_bad = 0
    n_stalled = 0
    measured, hb = heartbeat_stalls(run)
    if stats["long"]:
        candidates = conns.where(long_).select(*cols).orderBy("accept_ns").limit(5000).collect()
        counts = None
        if _count_limited(run):
            rows = acceptor_conns(run).select("listener", "admit_ns", "close_ns").collect()
            counts = Counts([r.asDict() for r in rows])
        stalls = measured if measured is not None else _loop_stalls(run, candidates)
        # on the slot path only stalls the heartbeat measured are credited: the stalls
        # inferred from row gaps (recordings without a heartbeat) cannot tell a slot another
        # listener took from a stall
        slot_stalls = measured if measured is not None else []
        for r in candidates:
            delay = float(r["delay_ms"] or 0.0)
            ready = int(r["accept_ns"] + delay * MS)
            waited = (r["t1_ns"] - r["accept_ns"]) / MS
            lst = r["listener"]
            why = None
            stalled = overlap(stalls, ready, int(r["t1_ns"]))
            if (r["t1_ns"] - ready - stalled) / MS <= slack:
                n_stalled += 1  # the acceptor's own loop stood still: not a decision
                continue
            if counts is None:
                why = (
                    f"waited {fmt(waited, 1)} ms for a rate delay of {fmt(delay)} ms with no "
                    "count limit configured: nothing explains the rest"
                )
            elif _slot_free(run, counts, lst, ready):
                why = (
                    f"waited {fmt(waited, 1)} ms (delay {fmt(delay)} ms) although a slot was "
                    f"free when the delay ended"
                )
            else:
                free_at = None
                t = ready
                while True:
                    nxt = counts.next_change(t)
                    if nxt is None or nxt > r["t1_ns"]:
                        break
                    if _slot_free(run, counts, lst, nxt):
                        # taken within the slack by other listeners' admissions (a
                        # protected one may run first; on Kafka every listener's acceptor
                        # thread races the waiter, and several releases at once may all be
                        # taken by one listener): those slots were never this waiter's
                        taken_at = _taken_within(
                            run, counts, lst, nxt, r["t1_ns"], slack, slot_stalls
                        )
                        if taken_at is None:
                            free_at = nxt
                            break
                        nxt = taken_at
                    t = nxt
                # a stall of the loop after the slot freed delays the waiter as it does
                # the delay: it is credited here too
                if (
                    free_at is not None
                    and r["t1_ns"] - free_at - overlap(slot_stalls, free_at, int(r["t1_ns"]))
                    > slack * MS
                ):
                    why = (
                        f"slot freed {fmt((free_at - r['accept_ns']) / MS, 1)} ms after accept, "
                        f"admitted only after {fmt(waited, 1)} ms"
                    )
            if why is None:
                n_slot_ok += 1
            else:
                n_long_bad += 1
                if len(wit) < 10:
                    wit.append(witness(r.asDict(), why))
    n_slot_blocks, slot_wit = _slot_blocks_while_free(run, slack)
    n_long_bad += len(slot_wit)
    wit.extend(slot_wit[: max(0, 10 - len(wit))])
    n_bad = int(stats["short"] or 0) + n_long_bad
    waits = int(stats["delayed"] or 0) + n_slot_ok + n_slot_blocks
    return CheckResult(
        name,
        FAIL if n_bad else PASS,
        observed=(
            f"{n} admissions judged; {int(stats['short'] or 0)} shorter than their delay, "
            f"{int(stats['long'] or 0)} longer than delay + slack ({n_slot_ok} explained by a "
            f"slot wait at the limit, {n_stalled} by a stall of the acceptor's loop); "
            f"{n_slot_blocks} slot waits (`blocked` slot / rate+slot), {len(slot_wit)} while "
            "every count was below its maximum; "
            f"extra wait p99 {fmt(stats['p99_extra'], 2)} ms, "
            f"max {fmt(stats['max_extra'], 1)} ms"
        ),
        expected=(
            "accept → IP step = the recorded rate delay (≥ d − 1 ms, ≤ d + slack), longer only "
            "while waiting for a slot at the count limit"
        ),
        tolerance=(
            f"−{fmt(TRUNCATION_MS)} ms (t0 in whole ms); +{fmt(slack)} ms event-loop lateness "
            "(expect.slack_ms), plus "
            + (
                f"the stalls of the acceptor's loop its heartbeat measured ({int(hb['stalls'])} "
                f"`loop_lag` rows, longest {fmt(hb['max_ms'], 1)} ms; each credited from its "
                f"tick's due time − period {fmt(hb['period_ms'])} ms − timer resolution "
                f"{fmt(TIMER_RESOLUTION_MS)} ms to when it fired; an unmeasured stall is < "
                f"threshold {fmt(hb['threshold_ms'])} + period + resolution = "
                f"{fmt(hb['blind_ms'])} ms, within the slack)"
                if measured is not None
                else "any stall of the acceptor's loop inferred from the history (no heartbeat: "
                f"a gap in its rows > {fmt(STALL_MIN_MS)} ms ended by ≥ {STALL_BURST} catch-up "
                f"rows within {fmt(STALL_BURST_MS)} ms)"
            )
        ),
        witnesses=wit,
        explanation=(
            "an admission held longer than its rate delay with a slot free is over-strict "
            "enforcement; shorter than its delay, the delay was not served"
        ),
        judged=n,
        # exercised only when something made admissions wait (a rate delay or a slot wait)
        exercised=bool(waits),
        judges_limit=True,
    )


def _slot_blocks_while_free(run: Run, slack: float) -> tuple[int, list[dict[str, Any]]]:
    """`blocked` rows of reason slot / rate+slot during which a slot was free throughout.

    The acceptor writes such a row when, its delay over, it found the listener or the
    broker at its maximum (`waitForConnectionSlot`). Judged from slack before the block's
    start (the release may precede its `close` row) to its end: at every instant the
    counts were below every maximum, so there was nothing to wait for.
    """
    from pyspark.sql import functions as F

    blocks = (
        run.events("blocked", source="acceptor")
        .where(F.col("reason").isin("slot", "rate+slot"))
        .select(
            "listener",
            "mono_ns",
            "ts",
            "reason",
            "delay_ms",
            detail_col("acceptor", "blocked", "start_mono_ns").cast("long").alias("start_ns"),
        )
        .orderBy("mono_ns")
        .collect()
    )
    if not blocks:
        return 0, []
    rows = [
        r.asDict()
        for r in acceptor_conns(run)
        .select("conn_id", "client_ip", "client_port", "listener", "accept_ns", "admit_ns",
                "close_ns")
        .collect()
    ]  # fmt: skip
    counts = Counts(rows)
    # the connection being admitted: the listener's last accept before the block began
    # (one admission at a time per listener)
    accepts: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for r in rows:
        if r["accept_ns"] is not None:
            accepts[r["listener"] or ""].append((int(r["accept_ns"]), r))
    for v in accepts.values():
        v.sort(key=lambda x: x[0])
    out: list[dict[str, Any]] = []
    for b in blocks:
        end = int(b["mono_ns"])
        start = int(b["start_ns"]) if b["start_ns"] is not None else end - int(b["delay_ms"] * MS)
        t = start - int(slack * MS)
        lst = (b["listener"] or "").lower()  # acceptor_conns lower-cases listener names
        free = _slot_free(run, counts, lst, t)
        while free:
            nxt = counts.next_change(t)
            if nxt is None or nxt > end:
                break
            t = nxt
            free = _slot_free(run, counts, lst, t)
        if free:
            total, per = counts.at(start)
            lim = run.timeline.at(start)
            acc = accepts.get(lst, [])
            i = bisect_right([a for a, _ in acc], start) - 1
            who = {k: v for k, v in acc[i][1].items() if k != "accept_ns"} if i >= 0 else {}
            out.append(
                witness(
                    {**b.asDict(), **who},
                    f"blocked {fmt(b['delay_ms'], 1)} ms waiting for a slot ({b['reason']}) "
                    f"while slots were free throughout: {per.get(lst, 0)} open on {lst} "
                    f"(max {fmt(lim.listener_max_for(lst))}), {total} in all "
                    f"(max.connections {fmt(lim.max_connections)})",
                )
            )
    return len(blocks), out


STALL_MIN_MS = 10.0
STALL_BURST = 3
STALL_BURST_MS = 1.0


def _loop_stalls(run: Run, candidates: list[Any]) -> list[tuple[int, int]]:
    """Intervals in which the acceptor's event loop stood still, measured from its rows.

    A single-threaded loop that stalls (GC, CPU starvation on a shared machine) writes no
    row at all, then runs its overdue callbacks at once: a gap of ≥ STALL_MIN_MS in the
    acceptor's rows followed by ≥ STALL_BURST rows within STALL_BURST_MS. A deliberate
    wait (an over-strict sleep) leaves the rest of the loop running, so no such gap; a
    gap with no catch-up is just an idle acceptor, not a stall.
    """
    from pyspark.sql import functions as F

    if not candidates:
        return []
    lo = min(int(r["accept_ns"]) for r in candidates)
    hi = max(int(r["t1_ns"]) for r in candidates) + int(STALL_BURST_MS * MS)
    rows = (
        run.events(source="acceptor")
        .where((F.col("mono_ns") >= lo) & (F.col("mono_ns") <= hi))
        .select("mono_ns")
        .collect()
    )
    ns = sorted(int(r["mono_ns"]) for r in rows)
    out: list[tuple[int, int]] = []
    burst_ns = int(STALL_BURST_MS * MS)
    for a, b in itertools.pairwise(ns):
        if b - a < STALL_MIN_MS * MS:
            continue
        j = bisect_right(ns, b + burst_ns)
        if j - bisect_right(ns, b - 1) >= STALL_BURST:
            out.append((a, b))
    return out


def _evictions(run: Run) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    rows = (
        run.events("evict", source="acceptor")
        .select("conn_id", "listener", "client_ip", "client_port", "mono_ns", "ts", "processor")
        .orderBy("mono_ns")
        .collect()
    )
    _ = F
    return [r.asDict() for r in rows]


def check_eviction(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    name = "eviction_rule"
    if (unset := max_connections_set(run)) is not None:
        return not_configured(name, run, unset)
    slack = run.slack_ms
    evicts = _evictions(run)
    conns = (
        acceptor_conns(run)
        .select("conn_id", "listener", "admit_ns", "close_ns", "register_ns")
        .where(F.col("admit_ns").isNotNull())
        .collect()
    )
    crow = {r["conn_id"]: r.asDict() for r in conns}
    counts = Counts(list(crow.values()))
    procs: dict[str, int] = {}
    for r in (
        run.events("register", "close", "evict", source="acceptor")
        .where(F.col("processor").isNotNull())
        .select("conn_id", "processor")
        .distinct()
        .collect()
    ):
        procs[r["conn_id"]] = int(r["processor"])
    activity: dict[str, list[int]] = defaultdict(list)
    for r in (
        run.events("request", source="acceptor")
        .select("conn_id", "mono_ns", "latency_ms")
        .collect()
    ):
        # both the request's receive (mono_ns − latency) and the response (mono_ns) refresh
        # the LRU order; a request read before an eviction and answered after it counts
        # from its receive (a long-poll fetch in flight is recent use, as on Kafka)
        activity[r["conn_id"]].append(int(r["mono_ns"]))
        if r["latency_ms"] is not None:
            activity[r["conn_id"]].append(int(r["mono_ns"] - float(r["latency_ms"]) * MS))
    for v in activity.values():
        v.sort()

    def last_active(cid: str, before: int) -> int:
        base = crow.get(cid, {}).get("register_ns") or crow.get(cid, {}).get("admit_ns") or 0
        acts = activity.get(cid, [])
        i = bisect_right(acts, before) - 1
        return max(int(base), acts[i] if i >= 0 else 0)

    wit: list[dict[str, Any]] = []
    # every evict: over the limit, within the excess, never protected, the LRU one
    for e in evicts:
        ns = int(e["mono_ns"])
        lim = run.timeline.at(ns)
        total_before, _ = counts.at(ns - 1)
        excess = total_before - lim.max_connections
        lst = (e["listener"] or "").lower()
        why = None
        if lim.is_protected(lst):
            why = "evicted a connection of the protected listener"
        elif excess <= 0:
            why = (
                f"evicted while {total_before} connections were open, not over "
                f"max.connections = {fmt(lim.max_connections)}"
            )
        else:
            proc = procs.get(e["conn_id"])
            mine = last_active(e["conn_id"], ns)
            older = [
                cid
                for cid, c in crow.items()
                if cid != e["conn_id"]
                and procs.get(cid) == proc
                and c["admit_ns"] < ns
                and (c["close_ns"] is None or c["close_ns"] > ns)
                and not lim.is_protected((c["listener"] or "").lower())
                and last_active(cid, ns) < mine - slack * MS
            ]
            if proc is not None and older:
                why = (
                    f"evicted a connection active {fmt((ns - mine) / MS, 1)} ms ago while "
                    f"{older[0]} on processor {proc} had been idle for "
                    f"{fmt((ns - last_active(older[0], ns)) / MS, 1)} ms (not the LRU)"
                )
        if why:
            wit.append(witness(e, why))
    # over the limit, the count must come down (evictions or closes) at least once a turn
    pace_ns = int((slack + PROCESSOR_POLL_MS) * MS)
    for i, ns in enumerate(counts.ns):
        lim = run.timeline.at(ns)
        if counts.total[i] <= lim.max_connections:
            continue
        if i > 0 and counts.total[i - 1] > run.timeline.at(counts.ns[i - 1]).max_connections:
            continue  # only where an excess starts
        k = i + 1
        while (
            k < len(counts.ns) and counts.total[k] > run.timeline.at(counts.ns[k]).max_connections
        ):
            k += 1
        until = counts.ns[k] if k < len(counts.ns) else run.span_ns()[1]
        evictable = any(
            not lim.is_protected((c["listener"] or "").lower())
            and c["admit_ns"] <= ns
            and (c["close_ns"] is None or c["close_ns"] > ns)
            for c in crow.values()
        )
        if not evictable:
            continue
        # the instants the count came down while over (the last one ends the excess)
        downs = [counts.ns[j] for j in range(i + 1, k) if counts.total[j] < counts.total[j - 1]]
        prev = ns
        for at in [*downs, until]:
            if at - prev > pace_ns:
                wit.append(
                    witness(
                        {"mono_ns": prev, "ts": run.wall(prev)},
                        f"over max.connections = {fmt(lim.max_connections)} (from "
                        f"{counts.total[i]} open) for {fmt((at - prev) / MS, 1)} ms without "
                        f"an eviction (pace {fmt(slack + PROCESSOR_POLL_MS)} ms: one per "
                        "processor loop turn)",
                    )
                )
                break
            prev = at
    over = sum(
        1 for i, ns in enumerate(counts.ns) if counts.total[i] > run.timeline.at(ns).max_connections
    )
    if not evicts and not over:
        res = nothing_judged(name, "evictions or excess over max.connections")
        res.raise_hint = (
            "inter-broker (protected) connections while the others hold max.connections"
        )
        return res
    return CheckResult(
        name,
        FAIL if wit else PASS,
        observed=f"{len(evicts)} evictions; {over} instants over max.connections; "
        f"{len(wit)} violation(s)",
        expected=(
            "evict only while over max.connections, at most the excess, never the protected "
            "listener, the processor's LRU channel; over the limit an eviction follows"
        ),
        tolerance=(
            f"slack {fmt(slack)} ms on activity order and pace (+ {fmt(PROCESSOR_POLL_MS)} ms "
            "processor poll)"
        ),
        witnesses=wit[:10],
        explanation="Kafka's closeExcessConnections, one LRU channel per processor loop",
        judged=len(evicts) + over,
        exercised=True,
        judges_limit=True,
    )


CHECKS = [
    Check(
        "admission_wait_explained",
        "strictness",
        check_admission_wait,
        True,
        doc="accept → admit explained by the rate delay or a slot wait at the limit",
        judges_limit=True,
        frames=("acceptor_conns",),
    ),
    Check(
        "eviction_rule",
        "strictness",
        check_eviction,
        True,
        doc="evictions only over max.connections, as many as the excess, LRU, never protected",
        judges_limit=True,
        applies=max_connections_set,
        frames=("acceptor_conns",),
    ),
]
