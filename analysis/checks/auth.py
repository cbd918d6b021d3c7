"""Kafka's failed-login delay (KIP-306), judged from the client's side of a SASL listener.

A SASL failure raised by Kafka's authenticator withholds its error response for
``connection.failed.authentication.delay.ms`` (d), then sends it and closes; the channel
stays open and counted meanwhile (`../shared/reference/kafka-security-listeners.md` §3).
The storm engine records, for every refused login, ``answer_ms``: from sending the failing
request to its answer, on the client's own clock (`sasl_fail` rows).

- Lower bound, d − 1 ms: Kafka stamps the close deadline as ``time.milliseconds() + d`` when
  the request fails and closes once ``time.milliseconds() >= deadline`` (`Selector`
  ``DelayedAuthenticationFailureClose.tryClose``); both are whole milliseconds, so the
  answer can come up to 1 ms before d after the failure, and the failure itself comes
  after the client sent the request. A refused login answered sooner was not delayed.
- Upper bound, d + 300 ms + s: the delayed closes are completed once per processor poll, and
  an idle processor polls every 300 ms (``Processor.poll`` → ``selector.poll(300)``); s is
  the slowest successful login of the same run (``sasl_done.sasl_ms``, every round trip of a
  login that was not delayed): the network and broker time this run measured on the same
  path, not a chosen margin. Without a successful login in the run the upper bound is not
  judged (its part reads unjudged).

`kafka_metric_auth_counts` takes Kafka's own counters as testimony: between the run's first
and last scrape, the increase of `failed-authentication-total` and
`successful-authentication-total` on each secured listener (summed over its processors)
lies between what the clients surely saw inside that interval and what could have happened
in it. Kafka records a failed login when the failing request is read, inside the client's
[send, answer]; a successful one when the channel becomes ready, inside [connect_invoke,
first response] (an SSL listener's authentication is its handshake; SASL's, the login). So:
connections whose interval lies inside the scrapes' interval are surely counted, those
overlapping it possibly; a failure can also be a TLS alert or a connection the client gave
up on, so the upper bounds count every attempt that overlapped and was not closed before
its handshake. A counter that went down (a broker restart) leaves the rule unjudged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    NA,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    Part,
    fmt,
    witness,
)
from analysis.checks.broker_side import per_broker
from analysis.checks.kafka_metrics import (
    listener_aliases,
    no_scrapes,
    per_listener,
    scrape_interval,
    scrapes,
)
from analysis.checks.login_delay import DELAYED_ERRORS, KAFKA_CLOCK_MS, configured_delay_ms
from analysis.checks.stalls import client_stalls
from analysis.columns import detail_col

if TYPE_CHECKING:
    from analysis.load import Run

#: `Processor.poll`: ``selector.poll(300)``, the longest an idle processor waits
PROCESSOR_POLL_MS = 300.0


def check_failed_login_delay(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    name = "client_failed_login_delay"
    fails: list[Any] = []
    if not run.lacks("sasl_fail", source="client"):  # most runs refuse none: no job
        fails = (
            run.events("sasl_fail", source="client")
            .select(
                "mono_ns",
                "ts",
                "client_ip",
                "client_port",
                "conn_id",
                detail_col("client", "sasl_fail", "error_code").cast("int").alias("code"),
                detail_col("client", "sasl_fail", "answer_ms").cast("double").alias("answer_ms"),
                detail_col("client", "sasl_fail", "round").cast("int").alias("round"),
            )
            .where(F.col("code").isin(*DELAYED_ERRORS) & F.col("answer_ms").isNotNull())
            .collect()
        )
    expected_checks = run.expect.get("checks") or []
    if not fails:
        return CheckResult(
            name,
            UNKNOWN if name in expected_checks else NA,
            observed="no login refused with a delayed error (58, 33) by the broker",
            expected="refused logins, each answered after the failed-authentication delay",
            explanation="nothing to judge: no client's login was refused",
        )
    slowest_ok = (
        run.events("sasl_done", source="client")
        .select(detail_col("client", "sasl_done", "sasl_ms").cast("double").alias("ms"))
        .agg(F.max("ms"))
        .collect()[0][0]
    )
    d = configured_delay_ms(run)
    low = d - KAFKA_CLOCK_MS
    high = d + PROCESSOR_POLL_MS + float(slowest_ok) if slowest_ok is not None else None
    bad: list[dict[str, Any]] = []
    stalls = client_stalls(run) if high is not None else None
    untimed = 0
    for r in fails:
        ms = float(r["answer_ms"])
        why = None
        if ms < low:  # a stall of the observer only ever makes an answer look later
            why = f"answered {fmt(ms)} ms after the failing request: sooner than d − 1 = {fmt(low)}"
        elif high is not None and ms > high:
            assert stalls is not None
            if stalls.covers(r["conn_id"], "", int(r["mono_ns"])):
                untimed += 1  # seen inside a stall its own engine measured: not timed
                continue
            why = f"answered {fmt(ms)} ms after the failing request: later than {fmt(high)}"
        if why:
            bad.append(witness(r.asDict(), why, round=r["round"], error_code=r["code"]))
    answers = [float(r["answer_ms"]) for r in fails]
    parts = [
        Part("not before the delay", len(fails)),
        Part(
            "within one processor poll after it",
            len(fails) - untimed if high is not None else 0,
            (
                f"{untimed} not timed: answered late inside a stall their engine measured "
                f"({stalls.describe()})"
                if untimed and stalls is not None
                else ""
            ),
            hint="a successful login in the same run (its time bounds the broker's own latency)",
        ),
    ]
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed=f"{len(fails)} refused logins answered {fmt(min(answers))}–{fmt(max(answers))} ms "
        f"after the failing request (d = {fmt(d)} ms)",
        expected=f"≥ d − 1 ms = {fmt(low)} ms"
        + (f" and ≤ d + 300 ms + {fmt(float(slowest_ok))} ms = {fmt(high)} ms" if high else ""),
        tolerance="1 ms (Kafka's millisecond deadline); above: one processor poll (300 ms) plus "
        "the slowest successful login of the run; an answer seen late inside a stall its own "
        "engine measured is not timed against the upper bound",
        witnesses=bad[:10],
        judged=len(fails),
        exercised=d > 0,
        peak=min(answers),
        limit=low,
        parts=parts,
    )


#: outcomes of attempts closed before any TLS or SASL byte: they never reach authentication
_BEFORE_AUTH = ("eof_after_accept", "refused", "not_offered")


def _sasl_listeners(run: Run) -> list[str]:
    """Secured listeners whose authentication is a SASL login (`run.json`), lower case."""
    secured = run.meta.get("listener_security") or {}
    return [
        str(name).lower()
        for name, spec in secured.items()
        if str((spec or {}).get("protocol", "")).upper().startswith("SASL_")
    ]


def _secured_listeners(run: Run) -> list[str]:
    """Listeners with TLS or SASL (`run.json`), lower case: Kafka authenticates every
    connection there."""
    secured = run.meta.get("listener_security") or {}
    return [
        str(name).lower()
        for name, spec in secured.items()
        if str((spec or {}).get("protocol", "PLAINTEXT")).upper() != "PLAINTEXT"
    ]


def _auth_intervals(run: Run) -> Any:
    """One row per client connection that started TLS or a login, or connected to a secured
    listener: its listener (lower case),
    whether it authenticated (``ok``: the login on a SASL listener, the handshake on an SSL
    one) or was refused a login (``failed``), and the client intervals holding Kafka's
    record of each: success in [connect_invoke, first response], failure in [send, answer]."""
    from pyspark.sql import functions as F

    c = run.events(
        "connect_invoke", "connect_ok", "tls_start", "tls_done", "sasl_done", "sasl_fail",
        "ready", "closed", source="client",
    ).select(
        "client_ip", "client_port", "conn_id", "listener", "event", "mono_ns",
        detail_col("client", "sasl_fail", "error_code").cast("int").alias("code"),
        detail_col("client", "sasl_fail", "answer_ms").cast("double").alias("answer_ms"),
        detail_col("client", "closed", "outcome").alias("outcome"),
        F.when(
            F.col("event") == "connect_invoke",
            detail_col("client", "connect_invoke", "broker").cast("int"),
        ).alias("broker"),
    )  # fmt: skip

    def first(event: str) -> Any:
        return F.min(F.when(F.col("event") == event, F.col("mono_ns")))

    refused = (F.col("event") == "sasl_fail") & F.col("code").isin(*DELAYED_ERRORS)
    g = c.groupBy("client_ip", "client_port", "conn_id").agg(
        F.lower(F.first("listener", ignorenulls=True)).alias("lst"),
        first("connect_invoke").alias("invoke"),
        first("connect_ok").alias("connected"),
        first("tls_start").alias("tls_start"),
        first("tls_done").alias("tls_done"),
        first("sasl_done").alias("sasl_done"),
        first("sasl_fail").alias("sasl_fail"),
        first("ready").alias("ready"),
        F.max(F.when(F.col("event") == "closed", F.col("mono_ns"))).alias("closed"),
        F.min(F.when(refused, F.col("mono_ns"))).alias("fail_at"),
        F.min(F.when(refused, F.col("answer_ms"))).alias("answer_ms"),
        F.first("outcome", ignorenulls=True).alias("outcome"),
        F.first("broker", ignorenulls=True).alias("broker"),
    )
    started = F.col("tls_start").isNotNull() | F.col("sasl_done").isNotNull()
    # a client that records no login of its own (kafka-python's sockets, which log in
    # inside the library) may still have been authenticated once connected to a secured
    # listener: in every upper bound, never in a sure count
    connected = F.col("connected").isNotNull() & F.col("lst").isin(*_secured_listeners(run))
    g = g.where(started | F.col("sasl_fail").isNotNull() | connected)
    sasl = F.col("lst").isin(*_sasl_listeners(run))
    ok = F.when(sasl, F.col("sasl_done").isNotNull()).otherwise(F.col("tls_done").isNotNull())
    far = F.lit(2**62)
    return g.select(
        "lst",
        "broker",
        ok.alias("ok"),
        F.coalesce("ready", "closed", far).alias("ok_hi"),
        F.col("fail_at").isNotNull().alias("failed"),
        (F.col("fail_at") - (F.col("answer_ms") * 1e6).cast("long")).alias("fail_lo"),
        F.col("fail_at").alias("fail_hi"),
        F.col("invoke").alias("lo"),
        F.coalesce("closed", far).alias("hi"),
        F.coalesce(F.col("outcome").isin(*_BEFORE_AUTH), F.lit(False)).alias("before_auth"),
    )


def check_auth_counts(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    name = "kafka_metric_auth_counts"
    none = CheckResult(
        name,
        NA,
        observed="no client connection on a secured listener",
        expected="TLS or SASL connections",
        explanation="n/a: Kafka records no authentication on PLAINTEXT listeners",
    )
    # a plaintext run (no secured listener, no client that began TLS or a login) has no
    # row `_auth_intervals` keeps: one pass over the client's rows says so, not its grouping
    if not _secured_listeners(run) and run.lacks(
        "tls_start", "sasl_done", "sasl_fail", source="client"
    ):
        return none
    conns = _auth_intervals(run)
    if run.node is not None:  # a cluster: one broker's view (broker_side.per_broker)
        conns = conns.where(F.col("broker") == run.node)
    if conns.limit(1).count() == 0:
        return none
    # behind the acceptor, Kafka still authenticates: its own exporter's rows (`upstream`)
    data = scrapes(run, upstream=run.target == "acceptor")
    if len(data) < 2:
        return no_scrapes(name, run, taken=len(data))
    # a cluster the harness did not start: its own names of the load's listeners
    aliases = listener_aliases(run)
    (a0, a1), (b0, b1) = scrape_interval(*data[0]), scrape_interval(*data[-1])

    def inside(lo: str, hi: str) -> Any:  # surely between the two scrapes
        return (F.col(lo) >= a1) & (F.col(hi) <= b0)

    def count(cond: Any) -> Any:
        return F.sum(F.when(cond, 1).otherwise(0))

    may = ~F.col("before_auth") & (F.col("hi") >= a0) & (F.col("lo") <= b1)
    rows = (
        conns.groupBy("lst")
        .agg(
            count(F.col("ok") & inside("lo", "ok_hi")).alias("ok_sure"),
            count(F.col("failed") & inside("fail_lo", "fail_hi")).alias("fail_sure"),
            count(may).alias("may"),
        )
        .collect()
    )
    (_, first), (_, last) = data[0], data[-1]
    bad: list[dict[str, Any]] = []
    seen: list[str] = []
    for r in rows:
        lst, possible = str(r["lst"]), int(r["may"])
        parts = []
        for what, metric, sure in (
            ("successful", "successful_authentication", int(r["ok_sure"])),
            ("failed", "failed_authentication", int(r["fail_sure"])),
        ):
            before, after = (
                per_listener(first, metric, aliases).get(lst),
                per_listener(last, metric, aliases).get(lst),
            )
            if before is None or after is None or after < before:
                continue  # not exported, or the broker restarted and its counters with it
            delta = after - before
            parts.append(f"+{fmt(delta, 0)} {what} (clients {sure}–{possible})")
            why = None
            if delta < sure:
                why = f"Kafka counted {fmt(delta, 0)} {what} authentications; clients saw {sure}"
            elif delta > possible:
                why = (
                    f"Kafka counted {fmt(delta, 0)} {what} authentications, more than the "
                    f"{possible} attempts that could have reached authentication"
                )
            if why:
                bad.append({"listener": lst, "metric": metric, "why": why})
        if parts:
            seen.append(f"{lst}: " + ", ".join(parts))
    if not seen:
        return CheckResult(
            name,
            UNKNOWN,
            observed="no secured listener's authentication counters in two scrapes",
            expected="Kafka's failed- and successful-authentication-total per secured listener",
            explanation="the scrapes carry no authentication counters for these listeners "
            "(an exporter without them, or a broker restart reset them)",
        )
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed="; ".join(seen),
        expected="each counter's increase between the first and last scrape ≥ what the clients "
        "surely saw inside and ≤ the attempts that overlapped and reached authentication",
        tolerance="none: scrape and client instants on one clock, Kafka's bracketed",
        witnesses=bad[:10],
        judged=len(seen),
    )


CHECKS = [
    Check(
        "client_failed_login_delay",
        "auth",
        check_failed_login_delay,
        False,
        ("acceptor", "broker"),  # behind the acceptor the broker still authenticates
        doc="a refused SASL login is answered after connection.failed.authentication.delay.ms "
        "(−1 ms) and within one processor poll (+ the run's slowest login) after it",
        judges_limit=True,
    ),
    Check(
        "kafka_metric_auth_counts",
        "auth",
        per_broker(check_auth_counts),
        False,
        ("acceptor", "broker"),  # behind the acceptor: the scrapes of the Kafka behind it
        doc="Kafka's failed-/successful-authentication-total per secured listener agree with "
        "the logins and handshakes the clients saw between the first and last scrape (on "
        "the acceptor target, those of the Kafka behind it)",
    ),
]
