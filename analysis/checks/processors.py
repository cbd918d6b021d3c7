"""Model-free: processor hand-off queues and per-IP count rejections.

Each processor's new-connection queue is an ArrayBlockingQueue(20): a queue depth above
20 at hand-off cannot happen in Kafka. A per-IP count rejection is accept-then-close-now:
the connection is never registered nor served, and the client sees EOF right away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.checks.base import (
    FAIL,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    fmt,
    not_configured,
    nothing_judged,
    witness,
)
from analysis.frames import MS, acceptor_conns, client_conns, match_attempts

if TYPE_CHECKING:
    from analysis.load import Run

QUEUE_SIZE = 20


def check_queue_depth(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    conns = acceptor_conns(run).where(F.col("register_ns").isNotNull())
    stats = conns.agg(
        F.count(F.lit(1)).alias("n"),
        F.max("queue_depth").alias("max"),
        F.sum(F.when(F.col("queue_depth") > QUEUE_SIZE, 1).otherwise(0)).alias("bad"),
    ).first()
    assert stats is not None
    if not stats["n"]:
        return CheckResult(
            "processor_queue_depth",
            UNKNOWN,
            observed="no register rows",
            expected=f"queue_depth ≤ {QUEUE_SIZE}",
            explanation="no connection was handed to a processor, so nothing can be said",
        )
    bad = conns.where(F.col("queue_depth") > QUEUE_SIZE)
    n_bad = int(stats["bad"] or 0)
    wit = [
        witness(r.asDict(), f"queue depth {r['queue_depth']} at hand-off (> {QUEUE_SIZE})")
        for r in (bad.orderBy("register_ns").limit(10).collect() if n_bad else [])
    ]
    return CheckResult(
        "processor_queue_depth",
        FAIL if n_bad else PASS,
        observed=f"{stats['n']} registrations; max queue depth {fmt(stats['max'])}; {n_bad} over",
        expected=f"queue_depth ≤ {QUEUE_SIZE} (Processor.ConnectionQueueSize)",
        tolerance="none",
        witnesses=wit,
        explanation="a processor's new-connection queue holds at most 20 sockets",
        judged=int(stats["n"] or 0),
    )


def check_reject_closes_at_once(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    rejects = acceptor_conns(run).where(F.col("outcome") == "reject")
    n = rejects.count()
    if n == 0:
        limited = any(
            lim.max_connections_per_ip < 2_147_483_647 or lim.per_ip_overrides
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
    served = rejects.where(F.col("register_ns").isNotNull())
    slack_ns = int(run.slack_ms * MS)
    wit = [
        witness(r.asDict(), "rejected for per-IP count but registered with a processor")
        for r in served.limit(5).collect()
    ]
    n_served = served.count()
    client_note = "no client rows to confirm EOF"
    n_late = 0
    if run.has_source("client"):
        j = match_attempts(rejects, client_conns(run))
        late = j.where(
            F.col("c.ready_ns").isNotNull()
            | F.col("c.eof_ns").isNull()
            | (F.col("c.eof_ns") - F.col("a.reject_ns") > F.lit(slack_ns))
        )
        n_late = late.count()
        for r in late.select("a.*", "c.eof_ns", "c.ready_ns").limit(5).collect():
            why = (
                "client was served after a per-IP count reject"
                if r["ready_ns"] is not None
                else "client saw no EOF within slack after the reject"
            )
            wit.append(witness(r.asDict(), why))
        client_note = f"{n_late} without a prompt client EOF"
    n_bad = n_served + n_late
    return CheckResult(
        "ip_count_reject_closes_at_once",
        FAIL if n_bad else PASS,
        observed=f"{n} per-IP count rejects; {n_served} registered; {client_note}",
        expected="reject → closed at once: never registered; client EOF within slack of the reject",
        tolerance=f"slack {fmt(run.slack_ms)} ms",
        witnesses=wit,
        explanation="max.connections.per.ip is enforced by accept-then-close, the client reads EOF",
        judged=n,
        exercised=True,
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
    ),
]
