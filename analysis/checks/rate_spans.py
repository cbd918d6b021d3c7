"""Model-free: connections recorded by a rate meter stay within its bound over any span.

For a meter with bound r (connections/s), n samples of w ms, span S = n·w:

    count(t − S, t] ≤ r·S/1000 + B + k·S/w,   B = r·(n−1)·w/1000 (the burst a fresh meter takes)

The last term is Kafka's cap: a delay is at most w, so each of the k acceptors feeding the
meter can still take one connection per w when the excess is huge (and with r = 0).
What a meter counts (Kafka un-records per-IP throttles): broker — accepts on non-protected
listeners, at the accept instant, minus IP-throttled ones; listener — the same per
listener; IP — IP steps that were not throttled (admits and count rejects) at t1.
Where the bound changed within the span, the larger bound is used.

Exercised: the meter must have fired, i.e. some span held more than B = r·(n−1)·w
connections (a rate above r over the shortest window Kafka measures), or the enforcer
recorded a delay/throttle for this meter. Otherwise `unknown`, with the peak span count
against B.
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
from analysis.frames import MS, Kind, acceptor_conns, census, outside, tally
from analysis.model import INT_MAX, Limits

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from analysis.load import Run


def _bound_col(
    run: Run, ns: Column, key: Column | None, pick: Callable[[Limits, str], float]
) -> Column:
    """Bound at `ns` for `key` (a listener or IP): per-version map with its default."""
    from pyspark.sql import functions as F

    tl = run.timeline

    def one(lim: Limits) -> Column:
        if key is None:
            return F.lit(float(pick(lim, "")))
        names: set[str] = set(lim.listener_rate) | set(lim.ip_quotas) | set(lim.listeners)
        default = float(pick(lim, "\x00"))
        mapping = {n: float(pick(lim, n)) for n in names if float(pick(lim, n)) != default}
        if not mapping:
            return F.lit(default)
        m = F.create_map(*[x for k, v in mapping.items() for x in (F.lit(k), F.lit(v))])
        return F.coalesce(F.element_at(m, key), F.lit(default))

    expr = one(tl.limits[0])
    for i, lim in enumerate(tl.limits[1:], start=1):
        expr = F.when(ns >= F.lit(tl.starts[i]), one(lim)).otherwise(expr)
    return expr


def _span_check(
    run: Run,
    name: str,
    what: str,
    ev: DataFrame,
    key: str | None,
    pick: Callable[[Limits, str], float],
    feeders: int,
    fired: int = 0,
    hint: str = "",
) -> CheckResult:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lim0 = run.timeline.limits[0]
    n, w = lim0.window_num, lim0.window_ms
    span_ms = n * w
    ev = ev.withColumn("ms", (F.col("ns") / MS).cast("long"))
    kcol = F.col(key) if key else None
    b_now = _bound_col(run, F.col("ns"), kcol, pick)
    b_then = _bound_col(run, F.col("ns") - F.lit(span_ms * MS), kcol, pick)
    ev = ev.withColumn("bound", F.greatest(b_now, b_then))
    ev = ev.where(F.col("bound") < F.lit(float(INT_MAX)))
    part = [key] if key else []
    # One row per (key, millisecond, bound) with its number of connections, and the count
    # in (t − S, t] as a difference of two prefix sums: the running count up to t minus the
    # one up to t − S. Spark grows a frame that starts at the partition's first row
    # incrementally, but recomputes a sliding frame whenever rows leave it (quadratic
    # in the connections per span: 10× slower on a storm).
    per_ms = ev.groupBy(*part, "ms", "bound").agg(F.count(F.lit(1)).alias("n"))
    by_ms = Window.partitionBy(*part).orderBy("ms")
    upto_now = by_ms.rangeBetween(Window.unboundedPreceding, 0)
    upto_then = by_ms.rangeBetween(Window.unboundedPreceding, -span_ms)
    per_ms = per_ms.withColumn(
        "in_span", F.sum("n").over(upto_now) - F.coalesce(F.sum("n").over(upto_then), F.lit(0))
    )
    allowed = (
        F.col("bound") * F.lit(span_ms / 1000.0)
        + F.col("bound") * F.lit((n - 1) * w / 1000.0)
        + F.lit(feeders * span_ms / w)
    )
    per_ms = per_ms.withColumn("allowed", allowed)
    per_ms = per_ms.withColumn("excess", F.col("in_span") - F.col("allowed"))
    burst = F.col("bound") * F.lit((n - 1) * w / 1000.0)
    worst_cols = ["in_span", "allowed", *([key] if key else [])]
    stats = per_ms.agg(
        F.sum("n").alias("events"),
        F.max("in_span").alias("peak"),
        F.max_by(F.struct(*worst_cols), "excess").alias("worst"),
        F.max_by(F.struct(F.col("in_span"), burst.alias("burst")), F.col("in_span") - burst).alias(
            "closest"
        ),
        F.sum(F.when(F.col("excess") > 0, F.col("n")).otherwise(0)).alias("violations"),
    ).first()
    assert stats is not None
    events = int(stats["events"] or 0)
    violations = int(stats["violations"] or 0)
    closest = stats["closest"]
    peak = float(closest["in_span"]) if closest is not None else 0.0
    burst_then = float(closest["burst"]) if closest is not None else 0.0
    if not violations and not fired and peak <= burst_then:
        return not_exercised(
            name,
            what,
            peak,
            burst_then,
            judged=events,
            unit=f"per {span_ms} ms span",
            hint=hint or f"the arrival rate above {what}",
            expected=f"a span above r·(n−1)·w connections (the meter fires), within {what}",
        )
    bad = []
    if violations:  # the connections of the first milliseconds over: only a failure pays
        over = per_ms.where(F.col("excess") > 0).select(*part, "ms", "bound", "in_span", "allowed")
        bad = ev.join(over, [*part, "ms", "bound"]).orderBy("ns").limit(10).collect()
    wit = [
        witness(
            r.asDict() | {"mono_ns": r["ns"]},
            f"{r['in_span']} connections in the {span_ms} ms span ending here"
            + (f" for {r[key]}" if key else "")
            + f", allowed {fmt(r['allowed'])} (bound {fmt(r['bound'])}/s)",
        )
        for r in bad
    ]
    worst = stats["worst"]
    observed = f"peak {stats['peak']} per {span_ms} ms span"
    if worst is not None:
        observed += (
            f"; closest to the limit: {worst['in_span']} vs allowed {fmt(worst['allowed'])}"
            + (f" ({worst[key]})" if key else "")
        )
    observed += f"; {violations} span(s) over"
    return CheckResult(
        name,
        FAIL if violations else PASS,
        observed=observed,
        expected=(
            f"count(t−S, t] ≤ r·S + r·(n−1)·w + {feeders}·S/w with S = n·w = {span_ms} ms, "
            f"r = {what}"
        ),
        tolerance=f"{feeders}·S/w = {feeders * span_ms // w} connections (delay cap w)",
        witnesses=wit,
        explanation=(
            f"the recorded connection rate exceeded {what} beyond its burst allowance"
            if violations
            else f"{what} held over every {span_ms} ms span"
        )
        + f"; the meter fired {fired} time(s)",
        judged=events,
        exercised=True,
        peak=peak,
        limit=burst_then,
    )


def _protected_names(run: Run) -> list[str]:
    return sorted({x for lim in run.timeline.limits for x in lim.listeners if lim.is_protected(x)})


def counted(k: Kind) -> bool:
    """A connection of the kind `_accepts` keeps: accepted, and not IP-throttled."""
    return k.accepted and k.outcome != "throttle_close"


def _accepts(run: Run) -> DataFrame:
    from pyspark.sql import functions as F

    conns = acceptor_conns(run).where(
        F.col("accept_ns").isNotNull()
        & (F.col("outcome").isNull() | (F.col("outcome") != "throttle_close"))
    )
    return conns.withColumn("ns", F.col("accept_ns")).withColumn("ts", F.col("accept_ts"))


def broker_rate_set(run: Run) -> str | None:
    """None when max.connection.creation.rate is set at some time of the run."""
    return None if run.timeline.ever(lambda x: x.broker_rate) else "max.connection.creation.rate"


def listener_rate_set(run: Run) -> str | None:
    """None when some listener.name.<l>.max.connection.creation.rate is set at some time."""
    if any(v < INT_MAX for lim in run.timeline.limits for v in lim.listener_rates().values()):
        return None
    return "listener.name.<l>.max.connection.creation.rate"


def ip_rate_set(run: Run) -> str | None:
    """None when a connection_creation_rate (ip default or one address's) is set at some time."""
    if run.timeline.ever(lambda x: x.ip_quota_default) or any(
        v < INT_MAX for lim in run.timeline.limits for v in lim.ip_quotas.values()
    ):
        return None
    return "connection_creation_rate (ip quota)"


def check_broker_rate(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    if (unset := broker_rate_set(run)) is not None:
        return not_configured("broker_rate_span", run, unset)
    ev = _accepts(run)
    prot = _protected_names(run)
    if prot:
        ev = ev.where(~F.col("listener").isin(*prot))
    listeners = {x for lim in run.timeline.limits for x in lim.listeners} - set(prot)
    fired = tally(
        census(run),
        lambda k: (
            counted(k)
            and k.delay_reason == "broker_rate"
            and (not prot or outside(k.listener, prot))
        ),
    )
    return _span_check(
        run,
        "broker_rate_span",
        "max.connection.creation.rate",
        ev,
        None,
        lambda lim, _k: lim.broker_rate,
        max(1, len(listeners)),
        fired,
        "the broker-wide arrival rate (storm) above max.connection.creation.rate",
    )


def check_listener_rate(run: Run) -> CheckResult:
    if (unset := listener_rate_set(run)) is not None:
        return not_configured("listener_rate_span", run, unset)
    ev = _accepts(run)
    return _span_check(
        run,
        "listener_rate_span",
        "listener.name.<l>.max.connection.creation.rate",
        ev,
        "listener",
        lambda lim, k: lim.listener_rate_for(k),
        1,
        tally(census(run), lambda k: counted(k) and k.delay_reason == "listener_rate"),
        "the arrival rate on the limited listener",
    )


def check_ip_rate(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    if (unset := ip_rate_set(run)) is not None:
        return not_configured("ip_rate_span", run, unset)
    conns = acceptor_conns(run).where(F.col("outcome").isin("admit", "reject"))
    ev = conns.withColumn("ns", F.col("t1_ns")).withColumn("ts", F.col("admit_ts"))
    n_listeners = max(1, len({x for lim in run.timeline.limits for x in lim.listeners}))
    throttled = tally(census(run), lambda k: k.outcome == "throttle_close")
    return _span_check(
        run,
        "ip_rate_span",
        "connection_creation_rate (ip quota)",
        ev,
        "client_ip",
        lambda lim, k: lim.ip_quota(k),
        n_listeners,
        throttled,
        "the arrival rate of one IP (single-IP flood) above its connection_creation_rate",
    )


CHECKS = [
    Check(
        "broker_rate_span",
        "rate_spans",
        check_broker_rate,
        True,
        doc="broker-wide accepts per n·w span within bound·span + burst",
        judges_limit=True,
        applies=broker_rate_set,
        frames=("acceptor_conns", "census"),
    ),
    Check(
        "listener_rate_span",
        "rate_spans",
        check_listener_rate,
        True,
        doc="per-listener accepts per n·w span within bound·span + burst",
        judges_limit=True,
        applies=listener_rate_set,
        frames=("acceptor_conns", "census"),
    ),
    Check(
        "ip_rate_span",
        "rate_spans",
        check_ip_rate,
        True,
        doc="per-IP (non-throttled) connections per n·w span within bound·span + burst",
        judges_limit=True,
        applies=ip_rate_set,
        frames=("acceptor_conns", "census"),
    ),
]
