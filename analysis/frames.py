"""The frames several checks read, built once per run and shared by the checks.

One acceptor row per event becomes one row per connection (`acceptor_conns`), and the
client's rows become one row per connection attempt (`client_conns`: an attempt starts at
`connect_invoke`, so a reused source port starts a new attempt); each acceptor connection
joined to the client attempt that made it (`attempt_join`); the acceptor connections
counted by kind (`census`: the counts several checks ask before they judge); the runner's
`process_stats` readings (`process_stats_rows`: every process role's loops and CPU). Each
is built once per run or view (`Run.cached`), the tables kept by Spark (`Run.persist`)
until the run is judged (`Run.release`). `SHARED` names them; a check declares those it
reads (`Check.frames`) and `build` makes them before the checks start, so a check's time
is its own. A frame no check declared is built by the first check that asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.columns import detail_col, socket_rows
from base.history.rows import HarnessProcessStats, HarnessProcessStatsDetail

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from analysis.load import Run

MS = 1_000_000


def acceptor_conns(run: Run) -> DataFrame:
    def build() -> DataFrame:
        from pyspark.sql import functions as F

        a = run.events(source="acceptor").where(
            F.col("event").isin(
                "accept", "delay", "admit", "register", "reject", "throttle_close", "close", "evict"
            )
            & F.col("conn_id").isNotNull()
        )

        def on(event: str, value: Column) -> Column:
            return F.when(F.col("event") == event, value)

        def detail(event: str, key: str) -> Column:
            return detail_col("acceptor", event, key)

        # the few `detail` fields a connection needs, parsed once on their own rows before
        # the grouping, so the raw JSON never travels through the shuffle
        a = a.select(
            "conn_id", "event", "mono_ns", "ts", "listener", "client_ip", "client_port",
            "reason", "delay_ms",
            on("delay", detail("delay", "broker_delay_ms").cast("double")).alias(
                "broker_delay_ms"
            ),
            on("throttle_close", detail("throttle_close", "throttle_start_mono_ns").cast("long")
               ).alias("throttle_start_mono_ns"),
            on("throttle_close", detail("throttle_close", "closed_by")).alias("closed_by"),
            on("register", detail("register", "queue_depth").cast("int")).alias("queue_depth"),
            on("accept", detail("accept", "protected").cast("boolean")).alias("protected"),
        )  # fmt: skip

        def at(event: str, col: str = "mono_ns") -> Column:
            return F.min(F.when(F.col("event") == event, F.col(col)))

        ended = F.col("event").isin("close", "evict")
        df = a.groupBy("conn_id").agg(
            F.first("listener", ignorenulls=True).alias("listener"),
            F.first("client_ip", ignorenulls=True).alias("client_ip"),
            F.first("client_port", ignorenulls=True).alias("client_port"),
            at("accept").alias("accept_ns"),
            at("accept", "ts").alias("accept_ts"),
            F.max(on("delay", F.col("delay_ms"))).alias("delay_ms"),
            F.first(on("delay", F.col("reason")), ignorenulls=True).alias("delay_reason"),
            F.first("broker_delay_ms", ignorenulls=True).alias("delay_broker_ms"),
            at("admit").alias("admit_ns"),
            at("admit", "ts").alias("admit_ts"),
            at("reject").alias("reject_ns"),
            at("throttle_close").alias("throttle_close_ns"),
            F.min("throttle_start_mono_ns").alias("throttle_start_ns"),
            F.max(on("throttle_close", F.col("delay_ms"))).alias("throttle_ms"),
            F.first("closed_by", ignorenulls=True).alias("throttle_closed_by"),
            at("register").alias("register_ns"),
            F.max("queue_depth").alias("queue_depth"),
            F.min(F.when(ended, F.col("mono_ns"))).alias("close_ns"),
            F.first(F.when(ended, F.col("reason")), ignorenulls=True).alias("close_reason"),
            F.max("protected").alias("protected_flag"),
        )
        df = df.withColumn("listener", F.lower("listener")).withColumn(
            "outcome",
            F.when(F.col("throttle_close_ns").isNotNull(), F.lit("throttle_close"))
            .when(F.col("reject_ns").isNotNull(), F.lit("reject"))
            .when(F.col("admit_ns").isNotNull(), F.lit("admit")),
        )
        df = df.withColumn(
            "t1_ns",
            F.coalesce("admit_ns", "reject_ns", "throttle_start_ns", "throttle_close_ns"),
        )
        return run.persist(df)

    return run.cached("acceptor_conns", build)  # type: ignore[no-any-return]


def client_conns(run: Run) -> DataFrame:
    def build() -> DataFrame:
        from pyspark.sql import functions as F

        c = run.events(source="client").where(
            F.col("client_ip").isNotNull() & F.col("client_port").isNotNull()
        )
        # `detail` parsed once, on its own rows, before the window's shuffle
        c = c.select(
            "client_ip", "client_port", "conn_id", "mono_ns", "seq", "event", "ts", "listener",
            "reason", "latency_ms",
            F.when(
                F.col("event").isin("connect_invoke", "connect_fail"),
                detail_col("client", "connect_invoke", "profile"),
            ).alias("profile"),
            F.when(F.col("event") == "closed", detail_col("client", "closed", "outcome")).alias(
                "outcome"
            ),
            F.when(
                F.col("event") == "connect_invoke",
                detail_col("client", "connect_invoke", "broker").cast("int"),
            ).alias("broker"),
            # who the client logged in as (SASL) or its certificate names (mutual TLS)
            F.when(F.col("event") == "closed", detail_col("client", "closed", "principal"))
            .when(F.col("event") == "request_ok", detail_col("client", "request_ok", "principal"))
            .alias("principal"),
        )  # fmt: skip
        starts = F.when(
            (F.col("event") == "connect_invoke")
            | ((F.col("event") == "connect_fail") & (F.col("reason") == "not_offered")),
            F.col("mono_ns"),
        )
        c = c.withColumn("attempt_ns", F.last(starts, ignorenulls=True).over(socket_rows()))
        c = c.where(F.col("attempt_ns").isNotNull())

        def first(event: str, col: str = "mono_ns") -> Column:
            return F.min(F.when(F.col("event") == event, F.col(col)))

        # dropped by the server after accept: EOF (or a reset when the client had already
        # written): the client's view of a reject or a throttle-close
        eof = F.col("event").isin("request_fail", "closed") & F.col("reason").isin("eof", "reset")
        df = c.groupBy("client_ip", "client_port", "attempt_ns").agg(
            F.first("listener", ignorenulls=True).alias("c_listener"),
            # the client's own id of the attempt (a storm engine's `c<pid>-<k>`: its observer)
            F.first("conn_id", ignorenulls=True).alias("c_conn_id"),
            first("connect_invoke").alias("invoke_ns"),
            F.first("profile", ignorenulls=True).alias("profile"),
            # a cluster: the node id of the broker the attempt connected to
            F.first("broker", ignorenulls=True).alias("broker"),
            first("connect_ok").alias("connect_ok_ns"),
            F.min(F.when(F.col("event") == "connect_ok", F.col("ts"))).alias("connect_ok_ts"),
            first("ready").alias("ready_ns"),
            first("ready", "latency_ms").alias("ready_latency_ms"),
            F.min(F.when(eof, F.col("mono_ns"))).alias("eof_ns"),
            F.min(F.when(F.col("event") == "connect_fail", F.col("reason"))).alias("fail_reason"),
            F.first("outcome", ignorenulls=True).alias("closed_outcome"),
            first("tls_start").alias("tls_start_ns"),
            first("tls_done").alias("tls_done_ns"),
            F.first("principal", ignorenulls=True).alias("c_principal"),
            F.max(F.when(F.col("event") == "closed", F.col("mono_ns"))).alias("closed_ns"),
        )
        return run.persist(df)

    return run.cached("client_conns", build)  # type: ignore[no-any-return]


def match_attempts(conns: DataFrame, attempts: DataFrame, run: Run) -> DataFrame:
    """Join acceptor connections (alias a) to the client attempt (alias c) they belong to.

    Same (client_ip, client_port), the latest attempt started at or before the accept and
    within 120 s of it: a source port reused later (or earlier) is a different attempt.
    "Before" allows the run's clock-alignment bound (`Run.clock_error_ns`: client rows
    moved from another machine are placed within half their offset ping's round trip), so
    an attempt that started a few µs before its accept is not lost to that error.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    j = conns.alias("a").join(
        attempts.alias("c"),
        (F.col("a.client_ip") == F.col("c.client_ip"))
        & (F.col("a.client_port") == F.col("c.client_port"))
        & (F.col("c.attempt_ns") <= F.col("a.accept_ns") + F.lit(run.clock_error_ns))
        & (F.col("c.attempt_ns") >= F.col("a.accept_ns") - F.lit(120_000 * MS)),
    )
    latest = Window.partitionBy(F.col("a.conn_id")).orderBy(F.col("c.attempt_ns").desc())
    return j.withColumn("_rank", F.row_number().over(latest)).where(F.col("_rank") == 1)


def attempt_join(run: Run) -> DataFrame:
    """Every acceptor connection (alias a) joined to the client attempt that made it (alias
    c), `match_attempts` over the whole of both tables: a check that judges some of the
    connections filters on ``a.``'s columns, which picks the same attempt as joining only
    those (the match is per acceptor connection)."""
    return run.cached(  # type: ignore[no-any-return]
        "attempt_join",
        lambda: run.persist(match_attempts(acceptor_conns(run), client_conns(run), run)),
    )


@dataclass(frozen=True)
class Kind:
    """One kind of acceptor connection (`census`), and how many there were."""

    listener: str | None
    outcome: str | None
    delay_reason: str | None
    accepted: bool  # an `accept` row
    delayed: bool  # a rate delay > 0 recorded
    registered: bool  # handed to a processor
    n: int


def census(run: Run) -> list[Kind]:
    """The acceptor connections counted by listener, outcome, delay reason and whether each
    was accepted, delayed and registered: one small job answers the counts several checks
    need before they judge (`tally`)."""

    def build() -> list[Kind]:
        from pyspark.sql import functions as F

        rows = (
            acceptor_conns(run)
            .groupBy(
                "listener",
                "outcome",
                "delay_reason",
                F.col("accept_ns").isNotNull().alias("accepted"),
                F.coalesce(F.col("delay_ms") > 0, F.lit(False)).alias("delayed"),
                F.col("register_ns").isNotNull().alias("registered"),
            )
            .count()
            .collect()
        )
        return [
            Kind(
                listener=r["listener"],
                outcome=r["outcome"],
                delay_reason=r["delay_reason"],
                accepted=bool(r["accepted"]),
                delayed=bool(r["delayed"]),
                registered=bool(r["registered"]),
                n=int(r["count"]),
            )
            for r in rows
        ]

    return run.cached("census", build)  # type: ignore[no-any-return]


def tally(kinds: list[Kind], which: Callable[[Kind], bool]) -> int:
    """How many acceptor connections of the `census` are of a kind ``which`` takes."""
    return sum(k.n for k in kinds if which(k))


def outside(listener: str | None, names: list[str]) -> bool:
    """A listener not among ``names`` as Spark's ``~listener.isin(*names)`` reads it: a
    connection with no listener is in no set and out of none (the row is dropped)."""
    return listener is not None and listener not in names


#: a `process_stats` row: (mono_ns, read span ms, detail)
StatsRow = tuple[int, float, HarnessProcessStatsDetail]


def process_stats_rows(run: Run) -> list[StatsRow]:
    """The runner's `process_stats` readings of every role (its loops' busy shares, each
    role's CPU), in time order: read once, each check takes its role's (`loops.role_rows`,
    `loops.cores_by_role`)."""

    def build() -> list[StatsRow]:
        return [
            (
                int(r["mono_ns"]),
                float(r["latency_ms"] or 0.0),
                HarnessProcessStats.parse(r["detail"]),
            )
            for r in run.events("process_stats", source="harness")
            .select("mono_ns", "latency_ms", "detail")
            .orderBy("mono_ns")
            .collect()
        ]

    return run.cached("process_stats", build)  # type: ignore[no-any-return]


#: the frames several checks read, by the name a check declares (`Check.frames`), in the
#: order they are built (a frame after those it is built from), each with the history
#: sources it is made of: a run without one of them has nothing to build it from
SHARED: dict[str, tuple[Callable[[Run], Any], tuple[str, ...]]] = {
    "acceptor_conns": (acceptor_conns, ("acceptor",)),
    "client_conns": (client_conns, ("client",)),
    "attempt_join": (attempt_join, ("acceptor", "client")),
    "census": (census, ("acceptor",)),
    "process_stats": (process_stats_rows, ("harness",)),
}


def build(run: Run, names: set[str], threads: int = 1) -> Iterator[tuple[str, float, str | None]]:
    """Make the shared frames ``names`` for the run (a kept table counted, so it is filled
    now and not by the first check that reads it; none over a source the run lacks), on
    ``threads`` threads (a frame built from another waits for it: `Run.cached`'s lock);
    yields each frame's name, seconds and the error that stopped it (None: built), in
    `SHARED`'s order. A frame that cannot be built is left to the checks that read it:
    each then says it crashed, as it would have without this."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import DataFrame

    unknown = names - set(SHARED)
    if unknown:
        raise ValueError(f"no shared frame named {sorted(unknown)} (frames: {sorted(SHARED)})")

    def make(name: str) -> tuple[str, float, str | None]:
        t = time.monotonic()
        error = None
        try:
            frame = SHARED[name][0](run)
            if isinstance(frame, DataFrame):  # a kept table: filled now
                frame.count()
        except Exception as exc:  # the checks that read it report it, each as crashed
            error = f"{type(exc).__name__}: {exc}"
        return name, time.monotonic() - t, error

    wanted = [
        name
        for name, (_make, sources) in SHARED.items()
        if name in names and all(run.has_source(src) for src in sources)
    ]
    pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="frame")
    try:
        yield from pool.map(make, wanted)
    finally:  # interrupted: what has not started never does
        pool.shutdown(wait=False, cancel_futures=True)
