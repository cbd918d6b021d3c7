"""Model-free: request-quota throttles (KIP-124) are bounded, never on exempt APIs, and
hold the throttled connection (KIP-219).

ClientRequestQuotaManager bounds the throttle at the quota window; cluster-action APIs
(LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, Vote,
quorum epochs, AlterPartition, Envelope, broker registration/heartbeat, AllocateProducerIds,
share-group state) are exempt. UpdateFeatures is a cluster action but throttled on a broker.

KIP-219: the response carrying a throttle goes out at once and the channel is then muted
until the throttle ends, so nothing more of that connection is read before it ends
(`request_throttle_mutes`). Only a client that ignores `throttle_time_ms` and pipelines
(the `greedy` profile) can show a broker that skips the mute: Kafka's own clients wait
the throttle out themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.checks.base import (
    FAIL,
    PASS,
    Check,
    CheckResult,
    Part,
    fmt,
    not_configured,
    nothing_judged,
    witness,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from analysis.load import Run

#: The APIs a broker answers without a request-quota throttle (`KafkaApis`:
#: `sendResponseExemptThrottle`) and the cluster actions it does not serve depend on its
#: metadata mode: `analysis.versions` (`Semantics.exempt_api_keys`, `not_served_api_keys`).
#: On KRaft only WriteTxnMarkers is exempt; DescribeQuorum (55), UpdateFeatures (57) and
#: the share-group-state APIs (83-87) are cluster actions too but are answered through
#: `sendMaybeThrottle` (forwarded or throttled), so they are charged like any request
#: (reference Errata, section 4.4; Kafka's own RequestQuotaTest excludes them from its set).


def _no_throttles(run: Run) -> CheckResult:
    if not any(raw.get("request_quotas") for raw in run.timeline.raw):
        return not_configured("request_throttle_bounds", run, "request_percentage quotas")
    res = nothing_judged("request_throttle_bounds", "request throttles")
    res.raise_hint = "the request load of a quota'd user/client-id above request_percentage"
    return res


def check_request_throttles(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    if run.lacks("request_throttle", source="acceptor"):  # no throttle at all: no job
        return _no_throttles(run)
    w = float(max(lim.window_ms for lim in run.timeline.limits))
    exempt = run.semantics.exempt_api_keys  # the release's metadata mode decides
    rows = run.events("request_throttle", source="acceptor")
    is_bad = (F.col("delay_ms") > F.lit(w + 0.5)) | F.col("api_key").isin(*exempt)
    stats = rows.agg(
        F.count(F.lit(1)).alias("n"),
        F.max("delay_ms").alias("max"),
        F.sum(F.when(is_bad, 1).otherwise(0)).alias("bad"),
    ).first()
    assert stats is not None
    n_bad = int(stats["bad"] or 0)
    n = int(stats["n"] or 0)
    if not n:
        return _no_throttles(run)
    wit = []
    for r in rows.where(is_bad).orderBy("mono_ns").limit(10).collect() if n_bad else []:
        if r["api_key"] in exempt:
            why = f"throttled exempt API {exempt[r['api_key']]} (key {r['api_key']})"
        else:
            why = f"request throttle {fmt(r['delay_ms'])} ms > window {fmt(w)} ms"
        wit.append(witness(r.asDict(), why))
    return CheckResult(
        "request_throttle_bounds",
        FAIL if n_bad else PASS,
        observed=f"{stats['n']} request throttles; max {fmt(stats['max'])} ms; {n_bad} invalid",
        expected=f"throttle ≤ w = {fmt(w)} ms and never on a cluster-action (exempt) API",
        tolerance="0.5 ms",
        witnesses=wit,
        explanation=(
            "request quotas mute the channel for min(X, w); exempt APIs are never throttled"
        ),
        judged=n,
        exercised=True,
    )


#: libuv (uvloop) keeps timers in whole milliseconds, so the acceptor's unmute timer may
#: run up to 1 ms before the instant it was armed for, on the same monotonic clock as the
#: rows; the client side needs no tolerance (see `_client_mutes`).
TIMER_RESOLUTION_MS = 1.0


def _client_mutes(run: Run) -> tuple[int, DataFrame]:
    """Client side: after a response carrying throttle t, the connection's next response
    comes no earlier than its request's send instant + t. Kafka starts the throttle when
    it queues the response, which is after the request was sent (send = response instant
    − the request's latency), and reads nothing more from the channel until it ends; so the
    bound is exact, no tolerance. The send time is the request's latency back from the
    response, or for kafka-python's own sockets (the steady clients) `in_flight_ms`, taken
    from when kafka-python queued the request (at or before its bytes left: the bound only
    loosens)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from analysis.columns import detail_col

    sent_ago = F.coalesce(
        F.col("latency_ms"),
        detail_col("client", "request_ok", "in_flight_ms").cast("double"),
    )
    rows = (
        run.events("request_ok", source="client")
        .where(sent_ago.isNotNull() & F.col("conn_id").isNotNull())
        .select(
            "conn_id",
            "client_ip",
            "client_port",
            "listener",
            "ts",
            "mono_ns",
            sent_ago.alias("latency_ms"),
            F.coalesce(
                detail_col("client", "request_ok", "throttle_time_ms").cast("double"), F.lit(0.0)
            ).alias("thr"),
        )
    )
    w = Window.partitionBy("conn_id").orderBy("mono_ns")
    rows = rows.withColumn("next_ns", F.lead("mono_ns").over(w))
    judged = rows.where((F.col("thr") > 0) & F.col("next_ns").isNotNull()).withColumn(
        "end_ns", F.col("mono_ns") - F.col("latency_ms") * 1e6 + F.col("thr") * 1e6
    )
    bad = judged.where(F.col("next_ns") < F.col("end_ns")).withColumn(
        "early_ms", (F.col("end_ns") - F.col("next_ns")) / 1e6
    )
    return judged.count(), bad


def _acceptor_mutes(run: Run) -> tuple[int, DataFrame]:
    """Acceptor side: after a `request_throttle` row (the response sent at its instant,
    the channel muted for `delay_ms`), the connection's next `request` was forwarded
    (its row's instant − its latency) no earlier than the throttle's end."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = ["conn_id", "client_ip", "client_port", "listener", "ts", "mono_ns", "seq"]
    thr = run.events("request_throttle", source="acceptor").select(
        *cols, F.lit(1).alias("kind"), F.col("delay_ms").alias("thr"), F.lit(None).alias("fwd_ns")
    )
    req = run.events("request", source="acceptor").select(
        *cols,
        F.lit(0).alias("kind"),
        F.lit(None).cast("double").alias("thr"),
        (F.col("mono_ns") - F.col("latency_ms") * 1e6).alias("fwd_ns"),
    )
    # a throttle row follows its own request's row at the same instant: order by kind
    w = Window.partitionBy("conn_id").orderBy("mono_ns", "kind", "seq")
    ev = thr.unionByName(req).withColumn("next_kind", F.lead("kind").over(w))
    ev = ev.withColumn("next_fwd_ns", F.lead("fwd_ns").over(w))
    judged = ev.where((F.col("kind") == 1) & (F.col("next_kind") == 0)).withColumn(
        "end_ns", F.col("mono_ns") + F.col("thr") * 1e6
    )
    bad = judged.where(
        F.col("next_fwd_ns") < F.col("end_ns") - F.lit(TIMER_RESOLUTION_MS * 1e6)
    ).withColumn("early_ms", (F.col("end_ns") - F.col("next_fwd_ns")) / 1e6)
    return judged.count(), bad


def request_quotas_stated(run: Run) -> str | None:
    """None when some config row of the run states request quotas."""
    if any(raw.get("request_quotas") for raw in run.timeline.raw if isinstance(raw, dict)):
        return None
    return "request_percentage quotas"


def check_throttle_mutes(run: Run) -> CheckResult:
    if (unset := request_quotas_stated(run)) is not None:
        return not_configured("request_throttle_mutes", run, unset)
    on_acceptor = run.has_source("acceptor")
    n_client, bad_client = _client_mutes(run)
    parts = [
        Part(
            "client: no response before the throttle ends",
            n_client,
            ""
            if n_client
            else "no throttled response with a later one on its connection "
            "from a client that records send times",
            "a client that ignores throttle_time_ms and pipelines (profile greedy) over its "
            "request quota",
        )
    ]
    wit = [
        witness(
            r.asDict(),
            f"response {r['early_ms']:.1f} ms before the throttle of {fmt(r['thr'])} ms "
            "on its connection ended",
        )
        for r in bad_client.orderBy("mono_ns").limit(5).collect()
    ]
    n_bad = bad_client.count() if wit else 0
    if on_acceptor:
        n_acc, bad_acc = _acceptor_mutes(run)
        parts.append(
            Part(
                "acceptor: no request forwarded before the throttle ends",
                n_acc,
                "" if n_acc else "no throttled connection sent another request",
                "a client that ignores throttle_time_ms and pipelines (profile greedy)",
            )
        )
        acc_wit = [
            witness(
                r.asDict(),
                f"next request forwarded {r['early_ms']:.1f} ms before the throttle of "
                f"{fmt(r['thr'])} ms ended (tolerance {fmt(TIMER_RESOLUTION_MS)} ms)",
            )
            for r in bad_acc.orderBy("mono_ns").limit(5).collect()
        ]
        if acc_wit:
            n_bad += bad_acc.count()
            wit += acc_wit
    judged = sum(p.judged for p in parts)
    return CheckResult(
        "request_throttle_mutes",
        FAIL if n_bad else PASS,
        observed="; ".join(p.describe() for p in parts) + f"; {n_bad} early",
        expected="a throttled connection is muted until its throttle ends (KIP-219): its "
        "next response no earlier than the throttled request's send + throttle_time_ms; "
        "on the acceptor its next request forwarded no earlier than the throttle's end",
        tolerance=f"client: none (the bound is exact); acceptor: {fmt(TIMER_RESOLUTION_MS)} ms "
        "(libuv timer resolution)",
        witnesses=wit,
        explanation="nothing more is read from a throttled channel until its throttle ends",
        judged=judged,
        exercised=judged > 0,
        parts=parts,
    )


CHECKS = [
    Check(
        "request_throttle_mutes",
        "requests",
        check_throttle_mutes,
        False,
        ("acceptor", "broker"),
        doc="a throttled connection reads nothing more until its throttle ends (KIP-219)",
        judges_limit=True,
        applies=request_quotas_stated,
    ),
    Check(
        "request_throttle_bounds",
        "requests",
        check_request_throttles,
        False,
        doc="request throttles ≤ window and never on exempt (cluster-action) APIs",
    ),
]
