"""Model-free: admitted connections open at once never exceed a count limit.

A connection is counted from its `admit` row (Kafka's counts[A]++ after the IP steps) to
its `close`/`evict` row. At equal instants the release is applied before the admission,
so a slot freed and taken in the same nanosecond is not a false violation. The limit is
the one in force at the admission instant (config rows are time-varying).

- broker: connections on non-protected listeners vs `max.connections` (the protected
  inter-broker listener may exceed it; Kafka then evicts on other listeners);
- listener: each listener vs `listener.name.<l>.max.connections`;
- IP: each client IP vs `max.connections.per.ip` / its override.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from analysis.checks.base import (
    FAIL,
    PASS,
    Check,
    CheckResult,
    fmt,
    not_configured,
    not_exercised,
    witness,
)
from analysis.frames import acceptor_conns, census, tally
from analysis.model import INT_MAX, Limits

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from analysis.load import Run


def keyed_limit(
    run: Run,
    ns: Column,
    key: Column,
    per_key: Callable[[Limits], dict[str, float]],
    default: Callable[[Limits], float],
) -> Column:
    """The limit for `key` at `ns`: per-version map lookup with a default."""
    from pyspark.sql import functions as F

    def one(lim: Limits) -> Column:
        mapping = {k: float(v) for k, v in per_key(lim).items()}
        base = F.lit(float(default(lim)))
        if not mapping:
            return base
        lit_map = F.create_map(*[x for k, v in mapping.items() for x in (F.lit(k), F.lit(v))])
        return F.coalesce(F.element_at(lit_map, key), base)

    tl = run.timeline
    expr = one(tl.limits[0])
    for i, lim in enumerate(tl.limits[1:], start=1):
        expr = F.when(ns >= F.lit(tl.starts[i]), one(lim)).otherwise(expr)
    return expr


def _concurrency(
    run: Run,
    key_col: str | None,
    limit: Callable[[Column, Column], Column],
    only_unprotected: bool = False,
) -> DataFrame:
    """Rows (admission events) with the running count per key and the limit then."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    conns = acceptor_conns(run).where(F.col("admit_ns").isNotNull())
    if only_unprotected:
        prot = [
            name for lim in run.timeline.limits for name in lim.listeners if lim.is_protected(name)
        ]
        if prot:
            conns = conns.where(~F.col("listener").isin(*prot))
    key = F.col(key_col) if key_col else F.lit("broker")
    cols = ["conn_id", "client_ip", "client_port", "listener", "admit_ts"]
    ups = conns.select(*cols, key.alias("k"), F.col("admit_ns").alias("ns"), F.lit(1).alias("d"))
    downs = conns.where(F.col("close_ns").isNotNull()).select(
        *cols, key.alias("k"), F.col("close_ns").alias("ns"), F.lit(-1).alias("d")
    )
    w = Window.partitionBy("k").orderBy("ns", "d").rowsBetween(Window.unboundedPreceding, 0)
    ev = ups.unionByName(downs).withColumn("count", F.sum("d").over(w))
    ev = ev.where(F.col("d") == 1).withColumn("limit", limit(F.col("ns"), F.col("k")))
    return ev


def _judge(
    run: Run,
    name: str,
    ev: DataFrame,
    what: str,
    limited: bool,
    hint: str,
    rejects: int = 0,
    configured: float = INT_MAX,
) -> CheckResult:
    """Exercised when some admission brought the count to its limit (or a reject for this
    limit happened); a limit never reached is `unknown` with the closest approach
    (`configured`, the smallest limit set, when nothing was admitted under it at all)."""
    from pyspark.sql import functions as F

    stats = ev.agg(
        F.max("count").alias("max_count"),
        F.sum(F.when(F.col("count") > F.col("limit"), 1).otherwise(0)).alias("violations"),
        F.max_by("limit", "count").alias("peak_limit"),
        F.max_by(F.struct("count", "limit"), F.col("count") - F.col("limit")).alias("closest"),
        F.count(F.lit(1)).alias("admits"),
    ).first()
    assert stats is not None
    max_count = int(stats["max_count"] or 0)
    violations = int(stats["violations"] or 0)
    admits = int(stats["admits"] or 0)
    if not limited:
        res = not_configured(name, run, what)
        res.observed += f"; peak concurrent = {max_count}"
        res.judged = admits
        return res
    closest = stats["closest"]
    peak = float(closest["count"]) if closest is not None else 0.0
    lim_then = float(closest["limit"]) if closest is not None else float(configured)
    if not violations and peak < lim_then and not rejects:
        return not_exercised(
            name,
            what,
            peak,
            lim_then,
            judged=admits,
            unit="concurrent",
            hint=hint,
            expected=f"concurrent admitted connections ≤ {what}, with the load reaching it",
        )
    bad = []
    if violations:  # witnesses cost a second pass; only a failing check needs them
        bad = ev.where(F.col("count") > F.col("limit")).orderBy("ns").limit(10).collect()
    witnesses = [
        witness(
            r.asDict() | {"mono_ns": r["ns"], "ts": r["admit_ts"]},
            f"admitted as #{r['count']} concurrent for {r['k']} while {what} = {fmt(r['limit'])}",
        )
        for r in bad
    ]
    observed = f"peak concurrent = {max_count}"
    if stats["peak_limit"] is not None:
        observed += f" (limit then {fmt(stats['peak_limit'])})"
    observed += f"; {violations} admissions over the limit of {int(stats['admits'] or 0)}"
    return CheckResult(
        name,
        FAIL if violations else PASS,
        observed=observed,
        expected=f"concurrent admitted connections ≤ {what} at every admission",
        tolerance="none (exact count; releases at the same instant count first)",
        witnesses=witnesses,
        explanation=(
            f"{violations} connection(s) were admitted while {what} was already reached"
            if violations
            else f"{what} held at every admission"
        ),
        judged=admits,
        exercised=True,
        peak=peak,
        limit=lim_then,
    )


def max_connections_set(run: Run) -> str | None:
    """None when max.connections is set at some time of the run, else what is not."""
    return None if run.timeline.ever(lambda x: x.max_connections) else "max.connections"


def listener_max_set(run: Run) -> str | None:
    """None when some listener.name.<l>.max.connections is set at some time of the run."""
    if any(v < INT_MAX for lim in run.timeline.limits for v in lim.listener_maxes().values()):
        return None
    return "listener.name.<l>.max.connections"


def per_ip_max_set(run: Run) -> str | None:
    """None when max.connections.per.ip (or an override) is set at some time of the run."""
    if any(
        lim.max_connections_per_ip < INT_MAX or bool(lim.per_ip_overrides)
        for lim in run.timeline.limits
    ):
        return None
    return "max.connections.per.ip (or its override)"


def check_max_connections(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    def lim(ns: Column, _k: Column) -> Column:
        return run.timeline.value_col(ns, lambda x: x.max_connections).cast("double")

    ev = _concurrency(run, None, lim, only_unprotected=True)
    limited = max_connections_set(run) is None
    return _judge(
        run,
        "max_connections",
        ev.withColumn("limit", F.col("limit")),
        "max.connections",
        limited,
        "the number of connections held open at once (longer hold or more clients)",
        configured=min(lim.max_connections for lim in run.timeline.limits),
    )


def check_listener_max_connections(run: Run) -> CheckResult:
    def lim(ns: Column, k: Column) -> Column:
        return keyed_limit(run, ns, k, lambda x: x.listener_maxes(), lambda x: x.max_connections)

    ev = _concurrency(run, "listener", lim)
    limited = listener_max_set(run) is None
    return _judge(
        run,
        "listener_max_connections",
        ev,
        "listener.name.<l>.max.connections",
        limited,
        "the connections held open at once on the limited listener",
        configured=min(
            (v for lim in run.timeline.limits for v in lim.listener_maxes().values()),
            default=INT_MAX,
        ),
    )


def check_max_connections_per_ip(run: Run) -> CheckResult:
    def lim(ns: Column, k: Column) -> Column:
        return keyed_limit(
            run,
            ns,
            k,
            lambda x: {k2: float(v) for k2, v in x.per_ip_overrides.items()},
            lambda x: x.max_connections_per_ip,
        )

    ev = _concurrency(run, "client_ip", lim)
    limited = per_ip_max_set(run) is None
    rejects = tally(census(run), lambda k: k.outcome == "reject") if limited else 0
    return _judge(
        run,
        "max_connections_per_ip",
        ev,
        "max.connections.per.ip (or its override)",
        limited,
        "the connections one IP holds open at once (a single-IP flood with longer holds)",
        rejects,
    )


CHECKS = [
    Check(
        "max_connections",
        "concurrency",
        check_max_connections,
        True,
        doc="non-protected connections open at once ≤ max.connections",
        judges_limit=True,
        applies=max_connections_set,
        frames=("acceptor_conns",),
    ),
    Check(
        "listener_max_connections",
        "concurrency",
        check_listener_max_connections,
        True,
        doc="connections open at once on a listener ≤ listener.name.<l>.max.connections",
        judges_limit=True,
        applies=listener_max_set,
        frames=("acceptor_conns",),
    ),
    Check(
        "max_connections_per_ip",
        "concurrency",
        check_max_connections_per_ip,
        True,
        doc="connections open at once from one IP ≤ max.connections.per.ip / override",
        judges_limit=True,
        applies=per_ip_max_set,
        frames=("acceptor_conns", "census"),
    ),
]
