"""Model-free: processor hand-off queues and per-IP count rejections.

Each processor's new-connection queue is an ArrayBlockingQueue(20): a queue depth above
20 at hand-off cannot happen in Kafka. A per-IP count rejection is accept-then-close-now:
the connection is never registered nor served, and the client sees EOF right away (the
storm engine within the slack; a kafka-python client at its next poll of that socket). A
client that closed the connection itself within the slack of the reject, before it read a
response or the EOF (a kafka-python consumer's own close at its phase's end), saw nothing
of the close either way: not judged, neither a failure nor evidence of a pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    Part,
    fmt,
    not_configured,
    nothing_judged,
    witness,
)
from analysis.checks.clients import OWN_CLOSE, closed_unread
from analysis.checks.stalls import client_stalls
from analysis.columns import detail_col, driver_table
from analysis.frames import MS, acceptor_conns, attempt_join, census, tally
from analysis.model import INT_MAX

if TYPE_CHECKING:
    from analysis.load import Run

QUEUE_SIZE = 20


def check_queue_depth(run: Run) -> CheckResult:
    """Never more than 20 queued per processor, never more than 20 registered per iteration.

    Each `register` row carries `detail.queue_depth` (sockets in the processor's queue when
    it took this one, this one included) and `detail.in_iteration` (its position among the
    registrations of that processor loop iteration). Judged are the registrations made
    while the queue was at its bound (depth or position ≥ 20): only a processor that fell
    behind (a stalled network thread, `processor_stall` rows) ever gets there. A run whose
    queues never reached 20 says nothing about the bound: unknown, not pass.
    """
    from pyspark.sql import functions as F

    name = "processor_queue_depth"
    regs = run.events("register", source="acceptor").select(
        "conn_id", "client_ip", "client_port", "listener", "processor", "mono_ns", "ts",
        detail_col("acceptor", "register", "queue_depth").cast("int").alias("queue_depth"),
        detail_col("acceptor", "register", "in_iteration").cast("int").alias("in_iteration"),
    )  # fmt: skip
    at_bound = (F.col("queue_depth") >= QUEUE_SIZE) | (F.col("in_iteration") >= QUEUE_SIZE)
    over = (F.col("queue_depth") > QUEUE_SIZE) | (F.col("in_iteration") > QUEUE_SIZE)
    stats = regs.agg(
        F.count(F.lit(1)).alias("n"),
        F.max("queue_depth").alias("max"),
        F.max("in_iteration").alias("max_iter"),
        F.sum(F.when(at_bound, 1).otherwise(0)).alias("judged"),
        F.sum(F.when(over, 1).otherwise(0)).alias("bad"),
    ).first()
    assert stats is not None
    n = int(stats["n"] or 0)
    expected = (
        f"queue_depth ≤ {QUEUE_SIZE} (Processor.ConnectionQueueSize) and ≤ {QUEUE_SIZE} "
        "registrations per processor iteration"
    )
    if not n:
        return CheckResult(
            name,
            UNKNOWN,
            observed="no register rows",
            expected=expected,
            explanation="no connection was handed to a processor, so nothing can be said",
        )
    stalls = run.events("processor_stall", source="acceptor").where(F.col("reason") == "start")
    n_stalls = stalls.count()
    observed = (
        f"{n} registrations; max queue depth {fmt(stats['max'])}, max per iteration "
        f"{fmt(stats['max_iter'])}; {int(stats['judged'] or 0)} at the bound of {QUEUE_SIZE}, "
        f"{int(stats['bad'] or 0)} over; {n_stalls} processor stall(s)"
    )
    n_bad = int(stats["bad"] or 0)
    judged = int(stats["judged"] or 0)
    if not n_bad and not judged:
        return CheckResult(
            name,
            UNKNOWN,
            observed=observed,
            expected=expected,
            tolerance="none",
            explanation=(
                f"no processor queue ever held {QUEUE_SIZE} sockets, so the bound was never "
                "tested (a processor must fall behind the acceptor: processor_stall)"
            ),
            judged=0,
            exercised=False,
        )
    wit = []
    for r in regs.where(over).orderBy("mono_ns").limit(10).collect() if n_bad else []:
        what = (
            f"queue depth {r['queue_depth']} at hand-off (> {QUEUE_SIZE})"
            if (r["queue_depth"] or 0) > QUEUE_SIZE
            else f"registration #{r['in_iteration']} of one processor iteration (> {QUEUE_SIZE})"
        )
        wit.append(witness(r.asDict(), f"{what} on processor {r['processor']}"))
    return CheckResult(
        name,
        FAIL if n_bad else PASS,
        observed=observed,
        expected=expected,
        tolerance="none (counts)",
        witnesses=wit,
        explanation="a processor's new-connection queue holds at most 20 sockets and a processor "
        "configures at most 20 new connections per iteration",
        judged=judged + n_bad,
        exercised=True,
    )


def _closed_unread(run: Run, rows: list[Any], slack_ns: int) -> set[tuple[str, int, int]]:
    """The (client_ip, client_port, closed_ns) of the rejected connections' client attempts
    (`rows`, collected; the address is both ends', as `attempt_join` joined them) that read
    nothing (no response, no EOF) and closed within the slack of the reject, by themselves
    (`closed_unread`): each saw nothing of the close either way. No job when no row is
    such a candidate."""
    cand = [
        (r["client_ip"], r["client_port"], r["closed_ns"])
        for r in rows
        if r["ready_ns"] is None
        and r["eof_ns"] is None
        and r["closed_ns"] is not None
        and r["closed_ns"] - r["reject_ns"] <= slack_ns
    ]
    if not cand:
        return set()
    table = driver_table(
        run.spark, cand, [("client_ip", "string"), ("client_port", "int"), ("closed_ns", "long")]
    )
    return {
        (r["client_ip"], r["client_port"], r["closed_ns"])
        for r in closed_unread(run, table).collect()
    }


def _unread_note(k: int) -> str:
    return (
        f"; {k} not judged: the client closed the connection itself within the slack of the "
        "reject, having read nothing (it saw nothing of the close either way)"
        if k
        else ""
    )


def check_reject_closes_at_once(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    kinds = census(run)
    n = tally(kinds, lambda k: k.outcome == "reject")
    if n == 0:  # from the census (a list): no DataFrame planned on the way to n/a
        limited = any(
            lim.max_connections_per_ip < INT_MAX or lim.per_ip_overrides
            for lim in run.timeline.limits
        )
        if not limited:
            return not_configured(
                "ip_count_reject_closes_at_once", run, "max.connections.per.ip (or overrides)"
            )
        res = nothing_judged(
            "ip_count_reject_closes_at_once",
            "per-IP count rejections",
            "each reject closed at once, never served",
        )
        res.raise_hint = "the connections one IP holds open at once above max.connections.per.ip"
        return res
    rejects = acceptor_conns(run).where(F.col("outcome") == "reject")
    served = rejects.where(F.col("register_ns").isNotNull())
    slack_ns = int(run.slack_ms * MS)
    n_served = tally(kinds, lambda k: k.outcome == "reject" and k.registered)
    wit = [
        witness(r.asDict(), "rejected for per-IP count but registered with a processor")
        for r in (served.limit(5).collect() if n_served else [])
    ]
    n_late = unwatched = n_unread = unread_timed = 0
    n_joined = n_timed = 0
    client_note = "no client rows"
    if run.has_source("client"):
        j = attempt_join(run).where(F.col("a.outcome") == "reject")
        # the storm engine reads every socket in its epoll loop, so its EOF time is prompt;
        # kafka-python (the steady profile) notices a closed socket at its next poll of that
        # connection, so its EOF time bounds nothing: there, only "never served, EOF seen"
        watching = F.coalesce(F.col("c.profile"), F.lit("")) != F.lit("steady")
        counts = j.agg(
            F.count(F.lit(1)).alias("joined"),
            F.sum(F.when(watching, 1).otherwise(0)).alias("timed"),
        ).first()
        assert counts is not None
        n_joined, n_timed = int(counts["joined"] or 0), int(counts["timed"] or 0)
        late = j.where(
            F.col("c.ready_ns").isNotNull()
            | F.col("c.eof_ns").isNull()
            | (watching & (F.col("c.eof_ns") - F.col("a.reject_ns") > F.lit(slack_ns)))
        )
        stalls = client_stalls(run)
        cols = ["a.*", "c.eof_ns", "c.ready_ns", "c.profile", "c.c_conn_id", "c.closed_ns"]
        late_rows = late.select(*cols).collect()
        own = _closed_unread(run, late_rows, slack_ns)
        for r in late_rows:
            if r["ready_ns"] is not None:
                why = "client was served after a per-IP count reject"
            elif (r["client_ip"], r["client_port"], r["closed_ns"]) in own:
                n_unread += 1  # it closed the connection itself before reading: not judged
                unread_timed += r["profile"] != "steady"
                continue
            elif r["eof_ns"] is None:
                why = "client saw no EOF after the reject"
            elif stalls.covers(r["c_conn_id"], r["profile"], r["eof_ns"]):
                unwatched += 1  # its observer measurably could not look: not timed
                continue
            else:
                why = (
                    f"client saw EOF {(r['eof_ns'] - r['reject_ns']) / MS:.1f} ms after the "
                    f"reject (> slack {fmt(run.slack_ms)} ms)"
                )
            n_late += 1
            if len(wit) < 10:
                wit.append(witness(r.asDict(), why))
        client_note = f"{n_late} without a prompt client EOF" + (
            f", {n_unread} closed by the client itself before reading (not judged)"
            if n_unread
            else ""
        )
    parts = [
        Part("never registered", n),
        Part(
            "client EOF, never served",
            n_joined - n_unread,
            ("" if n_joined else "no reject matched a client attempt") + _unread_note(n_unread),
            "client rows for the rejected connections",
        ),
        Part(
            "close timing",
            n_timed - unwatched - unread_timed,
            ("engine clients" if n_timed else "steady clients only (their EOF time bounds nothing)")
            + (
                f"; {unwatched} not timed: seen while their engine measurably could not look "
                f"({stalls.describe()})"
                if unwatched
                else ""
            )
            + _unread_note(unread_timed),
            "engine (storm) clients held open at the per-IP count limit (--hold-ms)",
        ),
    ]
    n_bad = n_served + n_late
    return CheckResult(
        "ip_count_reject_closes_at_once",
        FAIL if n_bad else PASS,
        observed=f"{n} per-IP count rejects; {n_served} registered; {client_note} ("
        + "; ".join(p.describe() for p in parts)
        + ")",
        expected="reject → closed at once: never registered; client EOF within slack of the reject",
        tolerance=f"slack {fmt(run.slack_ms)} ms; EOF time of engine clients only (a steady "
        "kafka-python client sees the close at its next poll), and not of an EOF the engine saw "
        "inside a stall it measured itself (its heartbeat's loop_lag rows, or an arrival of it "
        "due by then that started after): its observation then bounds nothing (not timed); a "
        f"client that closed the connection itself (reason {OWN_CLOSE}) within the slack of the "
        "reject, before it read a response or the EOF, is not judged",
        witnesses=wit,
        explanation="max.connections.per.ip is enforced by accept-then-close, the client reads EOF",
        judged=n,
        exercised=True,
        parts=parts,
    )


CHECKS = [
    Check(
        "processor_queue_depth",
        "processors",
        check_queue_depth,
        False,
        doc="no processor queue deeper than 20 at hand-off",
    ),
    Check(
        "ip_count_reject_closes_at_once",
        "processors",
        check_reject_closes_at_once,
        True,
        doc="per-IP count rejects are closed at once (client EOF), never served",
        judges_limit=True,
        frames=("acceptor_conns", "census"),
    ),
]
