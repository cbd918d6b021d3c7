"""Model-free: no wait longer than the quota window, and none on the protected listener.

Kafka caps every connection-rate throttle at w (`boundedThrottleTime`): a broker/listener
rate delay and a per-IP throttle are both ≤ quota.window.size. A per-IP throttled socket
is closed by the acceptor thread's `closeThrottledConnections`, which runs once per turn of
its loop: after `select(500)` returned and the ready connection was admitted (its delay
and slot wait included). So the socket closes at the first turn that ends after its end:
the end of the first admission on its listener that completes after it, if that one
started within 500 ms of the end; else the 500 ms select timeout. A close later than that
turn by more than the slack is a witness, unless the acceptor's heartbeat measured its loop
standing still in between (analysis.checks.stalls): a loop that cannot run cannot close,
and that is the machine's pace, not the rule. The protected
inter-broker listener never records in, nor waits for, the broker-wide rate.
"""

from __future__ import annotations

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
from analysis.checks.stalls import heartbeat_stalls, overlap
from analysis.columns import driver_table
from analysis.frames import MS, acceptor_conns, census, outside, tally
from analysis.model import INT_MAX

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from analysis.load import Run

ACCEPTOR_LOOP_MS = 500.0


def _window_ms(run: Run) -> float:
    return float(max(lim.window_ms for lim in run.timeline.limits))


def check_rate_delay_within_window(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    w = _window_ms(run)
    bound = w + run.slack_ms
    rate_limited = run.timeline.ever(lambda x: x.broker_rate) or any(
        v < INT_MAX for lim in run.timeline.limits for v in lim.listener_rates().values()
    )
    # a delay without a rate limit is judged too
    if not tally(census(run), lambda k: k.delayed):
        if not rate_limited:
            return not_configured(
                "rate_delay_within_window", run, "max.connection.creation.rate (broker or listener)"
            )
        res = nothing_judged(
            "rate_delay_within_window",
            "rate delays",
            f"recorded delay ≤ w = {fmt(w)} ms; wait ≤ w + slack",
        )
        res.raise_hint = "the arrival rate above max.connection.creation.rate"
        return res
    conns = acceptor_conns(run)
    # a recorded throttle is Kafka's number: it must not exceed w itself; the actual wait
    # (accept -> IP step) may also include a slot wait, so only a delayed connection that
    # waited longer than w + slack *without* a count limit in play is a witness.
    count_limited = run.timeline.ever(lambda x: x.max_connections) or any(
        v < INT_MAX for lim in run.timeline.limits for v in lim.listener_maxes().values()
    )
    too_long = F.col("delay_ms") > F.lit(w + 0.5)
    if not count_limited:
        too_long = too_long | (
            (F.col("delay_ms") > 0) & ((F.col("t1_ns") - F.col("accept_ns")) / MS > F.lit(bound))
        )
    stats = conns.agg(
        F.max("delay_ms").alias("max_recorded"),
        F.sum(F.when(F.col("delay_ms") > 0, 1).otherwise(0)).alias("delayed"),
        F.max(F.when(F.col("delay_ms") > 0, (F.col("t1_ns") - F.col("accept_ns")) / MS)).alias(
            "max_wait"
        ),
        F.sum(F.when(too_long, 1).otherwise(0)).alias("bad"),
    ).first()
    assert stats is not None
    n_bad = int(stats["bad"] or 0)
    rows = conns.where(too_long).orderBy("accept_ns").collect() if n_bad else []
    # a wait over the cap by no more than what the acceptor's own loop measurably stood
    # still during it (its heartbeat's stalls, analysis.checks.stalls) is not timed: the
    # sleep could not end while the loop did not run
    stalls = (heartbeat_stalls(run)[0] or []) if rows else []
    credited = 0
    late: list[Any] = []
    for r in rows:
        waited = (r["t1_ns"] or r["accept_ns"]) - r["accept_ns"]
        recorded_over = r["delay_ms"] > w + 0.5
        if not recorded_over and waited - overlap(stalls, r["accept_ns"], r["t1_ns"] or 0) <= (
            bound * MS
        ):
            credited += 1
            continue
        late.append(r)
    n_bad = len(late) if rows else n_bad
    wit = [
        witness(
            r.asDict(),
            f"rate delay {fmt(r['delay_ms'])} ms recorded, waited "
            f"{fmt(((r['t1_ns'] or r['accept_ns']) - r['accept_ns']) / MS)} ms; "
            f"window is {fmt(w)} ms",
        )
        for r in late[:10]
    ]
    delayed = int(stats["delayed"] or 0)
    return CheckResult(
        "rate_delay_within_window",
        FAIL if n_bad else PASS,
        observed=(
            f"{delayed} delayed connections; max recorded delay {fmt(stats['max_recorded'])} ms, "
            f"max wait accept→admit {fmt(stats['max_wait'])} ms; {n_bad} over the cap"
            + (
                f"; {credited} not timed: over it by no more than the acceptor loop's own "
                "measured stalls during the wait"
                if credited
                else ""
            )
        ),
        expected=f"recorded delay ≤ w = {fmt(w)} ms; wait ≤ w + slack = {fmt(bound)} ms",
        tolerance=f"0.5 ms on the recorded value; slack {fmt(run.slack_ms)} ms on the wait, "
        "plus the acceptor loop's stalls its heartbeat measured during it"
        + (" (wait not judged: a count limit may legitimately extend it)" if count_limited else ""),
        witnesses=wit,
        explanation=(
            "broker/listener rate delays are capped at the quota window (boundedThrottleTime)"
            + (f"; {n_bad} connection(s) waited longer" if n_bad else "")
        ),
        judged=delayed,
        exercised=delayed > 0,
    )


def _next_turn_end(run: Run, throttled: DataFrame) -> DataFrame:
    """Each throttled socket with `turn_ns`/`turn_start_ns`: the first admission on its
    listener that completed (t1) at least 1 ms after the socket's end, and when that
    admission's socket was accepted.

    One sort per listener of the ends among the t1s, read backwards: in descending
    (instant, kind) order every admission completing at or after an end + 1 ms comes
    before that end's row, so a running `min((t1, accept))` over the frame from the
    partition's first row to the current one is the first such admission. Spark grows
    that frame one row at a time (n·log n for the sort, linear for the window), where the
    forward frame from the next row to the end of the partition was recomputed for every
    row: quadratic in a listener's connections (issue 34: > 10 min at 120 k).

    Two admissions on one listener completing in the same nanosecond (one accept loop
    cannot do that; a hand-built or synthetic history can) are taken in accept order (the
    forward frame took whichever the sort put first): the earliest accept puts the close
    latest, since the choice matters only when t1 is past end + 500 ms, and then the
    earliest is the likeliest to have started within the select timeout (close at t1,
    not at end + 500 ms). So a tie never makes a witness.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    turns = (
        acceptor_conns(run)
        .where(F.col("t1_ns").isNotNull())
        .select(
            "listener",
            F.col("t1_ns").alias("at"),
            F.lit(1).alias("kind"),
            F.struct(F.col("t1_ns").alias("t1"), F.col("accept_ns").alias("a0")).alias("turn"),
            F.lit(None).cast("string").alias("conn_id"),
        )
    )
    ends = throttled.select(
        "listener",
        (F.col("end_ns") + F.lit(MS)).alias("at"),
        F.lit(0).alias("kind"),
        F.lit(None).cast("struct<t1:bigint,a0:bigint>").alias("turn"),
        "conn_id",
    )
    # descending: the rows before an end's are the admissions at or after it (an admission
    # at the same instant sorts first: kind 1 before 0), the running frame grows by one row
    at_or_after = (
        Window.partitionBy("listener")
        .orderBy(F.col("at").desc(), F.col("kind").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    both = ends.unionByName(turns).withColumn("next", F.min("turn").over(at_or_after))
    found = both.where(F.col("kind") == 0).select(
        "conn_id",
        F.col("next.t1").alias("turn_ns"),
        F.col("next.a0").alias("turn_start_ns"),
    )
    return throttled.join(found, "conn_id", "left")


def _stall_credit(conns: DataFrame, stalls: list[tuple[int, int]]) -> DataFrame:
    """`stall_ns`: how much of [close_by_ns, throttle_close_ns] the acceptor's loop stood
    still, by its heartbeat's measured stalls (merged: none counted twice). A stall before
    the due turn already moved that turn (an admission's t1); one after it held the close."""
    from pyspark.sql import functions as F

    if not stalls:
        return conns.withColumn("stall_ns", F.lit(0).cast("long"))
    st = driver_table(conns.sparkSession, stalls, [("stall_a", "long"), ("stall_b", "long")])
    lo, hi = F.col("close_by_ns"), F.col("throttle_close_ns")
    credit = (
        conns.select("conn_id", "close_by_ns", "throttle_close_ns")
        .join(F.broadcast(st), (F.col("stall_a") < hi) & (F.col("stall_b") > lo))
        .groupBy("conn_id")
        .agg(F.sum(F.least(F.col("stall_b"), hi) - F.greatest(F.col("stall_a"), lo)).alias("s"))
    )
    return (
        conns.join(credit, "conn_id", "left")
        .withColumn("stall_ns", F.coalesce(F.col("s"), F.lit(0)).cast("long"))
        .drop("s")
    )


def _credited(n: Any, max_ns: Any, heartbeat: dict[str, float]) -> str:
    if not heartbeat:
        return "; no heartbeat recorded"
    if not n:
        return ""
    most = fmt(int(max_ns) / MS)
    return f"; {int(n)} close(s) credited with measured loop stalls (at most {most} ms)"


def check_ip_throttle_within_window(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    w = _window_ms(run)
    loop_ns = F.lit(int(ACCEPTOR_LOOP_MS * MS))
    conns = acceptor_conns(run).where(F.col("outcome") == "throttle_close")
    ip_limited = any(
        lim.ip_quota_default < INT_MAX or any(v < INT_MAX for v in lim.ip_quotas.values())
        for lim in run.timeline.limits
    )
    throttle_closes = tally(census(run), lambda k: k.outcome == "throttle_close")
    if not throttle_closes:  # before the loop turns and stalls
        if not ip_limited:
            return not_configured(
                "ip_throttle_within_window", run, "connection_creation_rate (ip quota)"
            )
        res = nothing_judged("ip_throttle_within_window", "throttle-closes")
        res.raise_hint = "the arrival rate of one IP above its connection_creation_rate"
        return res
    conns = conns.withColumn(
        "end_ns", F.col("throttle_start_ns") + (F.col("throttle_ms") * F.lit(MS)).cast("long")
    )
    conns = _next_turn_end(run, conns)
    # Kafka closes it at the end of the first loop turn after its end: an admission that
    # started within the 500 ms select timeout and completed after the end, else the
    # timeout itself
    by_turn = F.col("turn_ns").isNotNull() & (F.col("turn_start_ns") <= F.col("end_ns") + loop_ns)
    conns = conns.withColumn(
        "close_by_ns", F.when(by_turn, F.col("turn_ns")).otherwise(F.col("end_ns") + loop_ns)
    )
    stalls, heartbeat = heartbeat_stalls(run)
    conns = _stall_credit(conns, stalls or [])
    hold = (F.col("throttle_close_ns") - F.col("throttle_start_ns")) / MS
    # late past its turn, less the loop's own measured stalls in between (it could not run)
    late_ms = (F.col("throttle_close_ns") - F.col("close_by_ns") - F.col("stall_ns")) / MS
    is_bad = (
        (F.col("throttle_ms") > F.lit(w + 0.5))
        | (late_ms > F.lit(run.slack_ms))
        | (
            (hold < F.col("throttle_ms") - F.lit(run.slack_ms))
            # the acceptor's shutdown at the end of the run closes parked sockets early
            & (F.coalesce(F.col("throttle_closed_by"), F.lit("")) != "shutdown")
        )
        | (F.col("register_ns").isNotNull())
    )
    stats = conns.agg(
        F.count(F.lit(1)).alias("n"),
        F.max("throttle_ms").alias("max_ms"),
        F.max(hold).alias("max_hold"),
        F.max(late_ms).alias("max_late"),
        F.sum(F.when(is_bad, 1).otherwise(0)).alias("bad"),
        F.sum(F.when(F.col("stall_ns") > 0, 1).otherwise(0)).alias("credited"),
        F.max("stall_ns").alias("max_stall_ns"),
    ).first()
    assert stats is not None
    n_bad = int(stats["bad"] or 0)
    n_thr = int(stats["n"] or 0)
    rows = conns.where(is_bad).orderBy("accept_ns").limit(10).collect() if n_bad else []
    wit = []
    for r in rows:
        held = None
        if r["throttle_start_ns"] is not None and r["throttle_close_ns"] is not None:
            held = (r["throttle_close_ns"] - r["throttle_start_ns"]) / MS
        why = f"IP throttle {fmt(r['throttle_ms'])} ms, socket held {fmt(held)} ms"
        if r["close_by_ns"] is not None and r["throttle_close_ns"] is not None:
            stalled = int(r["stall_ns"] or 0) / MS
            late = (r["throttle_close_ns"] - r["close_by_ns"]) / MS - stalled
            if late > run.slack_ms:
                why += (
                    f"; closed {fmt(late)} ms after the acceptor loop's first turn past its "
                    "end (an admission completing then, or the 500 ms select timeout)"
                    + (f", {fmt(stalled)} ms of measured loop stall credited" if stalled else "")
                )
        if r["register_ns"] is not None:
            why += "; it was registered with a processor (must never be)"
        wit.append(witness(r.asDict(), why))
    return CheckResult(
        "ip_throttle_within_window",
        FAIL if n_bad else PASS,
        observed=(
            f"{int(stats['n'] or 0)} throttle-closes; max throttle {fmt(stats['max_ms'])} ms, "
            f"max hold {fmt(stats['max_hold'])} ms, latest close {fmt(stats['max_late'])} ms "
            f"after the loop's first turn past the end; {n_bad} out of bounds"
            + _credited(stats["credited"], stats["max_stall_ns"], heartbeat)
        ),
        expected=(
            f"throttle ≤ w = {fmt(w)} ms; held ≥ throttle − slack; closed by the acceptor "
            "loop's first turn past its end + slack (an admission on the listener completing "
            f"after the end, if it started within {fmt(ACCEPTOR_LOOP_MS)} ms of it, else the "
            f"{fmt(ACCEPTOR_LOOP_MS)} ms select timeout); never registered"
        ),
        tolerance=(
            f"slack {fmt(run.slack_ms)} ms; a close later than its turn is also credited with "
            "the acceptor loop's stalls that its heartbeat measured between that turn and the "
            "close (loop_lag rows; an unmeasured stall is shorter than "
            f"{fmt(heartbeat.get('blind_ms', 0.0))} ms, inside the slack)"
            if heartbeat
            else f"slack {fmt(run.slack_ms)} ms (no heartbeat recorded: no stall credited)"
        ),
        witnesses=wit,
        explanation="a per-IP throttled socket is parked, closed after its throttle, never served",
        judged=n_thr,
        exercised=True,
    )


def check_protected_not_delayed(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    prot = sorted(
        {name for lim in run.timeline.limits for name in lim.listeners if lim.is_protected(name)}
    )
    if not prot or not run.timeline.ever(lambda x: x.broker_rate):
        res = not_configured(
            "protected_listener_not_delayed",
            run,
            "a protected listener (inter.broker.listener.name, ≥ 2 listeners) "
            "with max.connection.creation.rate",
        )
        return res
    conns = acceptor_conns(run).where(F.col("listener").isin(*prot))
    broker_fired = tally(
        census(run), lambda k: outside(k.listener, prot) and k.delay_reason == "broker_rate"
    )
    is_bad = (F.col("delay_reason") == "broker_rate") | (F.col("delay_broker_ms") > 0)
    stats = conns.agg(
        F.count(F.lit(1)).alias("n"), F.sum(F.when(is_bad, 1).otherwise(0)).alias("bad")
    ).first()
    assert stats is not None
    total, n_bad = int(stats["n"] or 0), int(stats["bad"] or 0)
    if not n_bad and (not total or not broker_fired):
        res = nothing_judged(
            "protected_listener_not_delayed",
            "protected-listener connections while the broker rate was delaying others",
        )
        res.observed = (
            f"{total} connections on {', '.join(prot)}; broker rate "
            + ("fired" if broker_fired else "never fired")
            + ": not exercised"
        )
        res.raise_hint = "the storm above max.connection.creation.rate with inter-broker traffic"
        return res
    rows = conns.where(is_bad).orderBy("accept_ns").limit(10).collect() if n_bad else []
    wit = [
        witness(
            r.asDict(), f"protected listener delayed {fmt(r['delay_ms'])} ms by the broker rate"
        )
        for r in rows
    ]
    return CheckResult(
        "protected_listener_not_delayed",
        FAIL if n_bad else PASS,
        observed=f"{total} connections on {', '.join(prot)}; {n_bad} delayed by the broker rate",
        expected="0 broker-rate delays on the protected listener",
        tolerance="none",
        witnesses=wit,
        explanation="the inter-broker listener is exempt from max.connection.creation.rate",
        judged=total,
        exercised=True,
    )


CHECKS = [
    Check(
        "rate_delay_within_window",
        "delays",
        check_rate_delay_within_window,
        True,
        doc="broker/listener rate delay ≤ quota window (+ slack on the actual wait)",
        judges_limit=True,
        frames=("acceptor_conns", "census"),
    ),
    Check(
        "ip_throttle_within_window",
        "delays",
        check_ip_throttle_within_window,
        True,
        doc="per-IP throttle ≤ window; socket held for the throttle then closed, never served",
        judges_limit=True,
        frames=("acceptor_conns", "census"),
    ),
    Check(
        "protected_listener_not_delayed",
        "delays",
        check_protected_not_delayed,
        True,
        doc="the protected inter-broker listener is never delayed by the broker-wide rate",
        judges_limit=True,
    ),
]
