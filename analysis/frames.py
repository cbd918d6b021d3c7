"""Derived per-connection tables, built once per analysis and shared by the checks.

One acceptor row per event becomes one row per connection (`acceptor_conns`), and the
client's rows become one row per connection attempt (`client_conns`: an attempt starts at
`connect_invoke`, so a reused source port starts a new attempt). Both are persisted, so
the history is scanned a handful of times, not once per check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.columns import detail_col, socket_rows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from analysis.load import Run

MS = 1_000_000


def acceptor_conns(run: Run) -> DataFrame:
    def build() -> DataFrame:
        from pyspark import StorageLevel
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
        return df.persist(StorageLevel.MEMORY_AND_DISK)

    return run.cached("acceptor_conns", build)  # type: ignore[no-any-return]


def client_conns(run: Run) -> DataFrame:
    def build() -> DataFrame:
        from pyspark import StorageLevel
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
        return df.persist(StorageLevel.MEMORY_AND_DISK)

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


def unpersist(run: Run) -> None:
    for key in ("acceptor_conns", "client_conns"):
        df = run._cache.pop(key, None)
        if df is not None:
            df.unpersist()
