"""Client-side checks: both ends agree, the load was really offered, steady clients fared.

- agreement: join the client's attempt and the acceptor's connection on (client_ip,
  client_port); a reject / throttle_close must be an EOF at the client and never served;
  a delayed-then-admitted connection's ready latency is at least the acceptor's delay.
- offered load: every intended arrival is a connect_invoke or a connect_fail
  reason=not_offered; below 95 % offered (overall, or in a phase with an intended_rate)
  the checks that need that load are `unknown`, not `pass`.
- fairness: steady clients' request latency p99 during storm phases vs before the storm;
  judged against run.json expect.fairness_p99_ratio only when set.
- client concurrency (target broker): connections served at once per IP, seen from the
  client (ready → closed lies inside the broker's count interval), ≤ the per-IP max.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    NA,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    Part,
    cluster_nodes,
    fmt,
    not_configured,
    not_exercised,
    witness,
)
from analysis.checks.login_delay import DELAYED_ERRORS, KAFKA_CLOCK_MS, configured_delay_ms
from analysis.checks.loops import busy_readings, loop_summary, role_rows
from analysis.columns import detail_col, driver_table
from analysis.frames import acceptor_conns, attempt_join, client_conns
from analysis.model import INT_MAX
from base.history.rows import HarnessPhaseStart

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from analysis.load import Run

OFFERED_MIN = 0.95
MS = 1_000_000
#: a client's `closed` reason when it closed the connection itself (every profile: the storm
#: engine, the steady profile's kafka-python connections, also one kafka-python closes while
#: it is still initialising, `loadprofiles.steady_conns.own_close`)
OWN_CLOSE = "done"


def closed_unread(run: Run, cand: DataFrame) -> DataFrame:
    """The rows of `cand` (columns client_ip, client_port, closed_ns, and any others; a
    few rows) that the client closed itself: its `closed` row at closed_ns says reason
    `OWN_CLOSE`. A caller asks it of a connection that had read nothing (no response, no
    EOF) when it closed within the slack of the enforcer's close: such a client saw
    nothing of that close either way, so its missing EOF is not judged."""
    from pyspark.sql import functions as F

    keys = ["client_ip", "client_port", "closed_ns"]
    own = (
        run.events("closed", source="client")
        .where(F.col("reason") == OWN_CLOSE)
        .select("client_ip", "client_port", F.col("mono_ns").alias("closed_ns"))
    )
    return F.broadcast(cand).join(own, keys)  # the few candidates, not every closed row


#: the acceptor connections of one address that no client attempt made and nothing
#: explains (`_agreement_counts`): (n, client_ip, first accept, its port, conn_id, listener)
Unexplained = tuple[int, str | None, int, int | None, str | None, str | None]


def _agreement_counts(run: Run, a: DataFrame, j: DataFrame) -> Any:
    """One job: over every acceptor connection ``a`` (its match in ``j``, if any), how many
    there are, matched, disagreeing (``why``), unmatched and unexplained; and the ten
    addresses with the most unexplained ones (most first).

    Every profile records each attempt it makes (its source address and port), so an
    acceptor connection with no client attempt on its (client_ip, client_port) is
    explained only as a connection the load did not make, or whose record the load could
    not make: one accepted before the first client row, or after the load from its
    address stopped (the end of the last phase whose source addresses hold it; for an
    address no phase uses, the last client row): the runner's probes and start-up admin
    requests, the final describe, and attempts a stopping Locust process cut off inside
    connect() (a client writes its attempt once connect() returns its port); or one that
    carried admin requests the acceptor answered (the runner's quota changes). Any other
    is the enforcer and the clients disagreeing about who connected: witnesses, grouped
    by the address the enforcer saw.
    """
    from pyspark.sql import functions as F

    bounds = run.events(source="client").agg(
        F.coalesce(F.min("mono_ns"), F.lit(0)).alias("lo"),
        F.coalesce(F.max("mono_ns"), F.lit(0)).alias("hi"),
    )
    admin = (
        run.events("admin", source="acceptor")
        .select("conn_id")
        .distinct()
        .withColumn("admin", F.lit(True))
    )
    ends = list(_load_end_by_address(run).items())
    end_df = driver_table(run.spark, ends, [("client_ip", "string"), ("load_end", "long")])
    matched = j.select(F.col("a.conn_id").alias("conn_id"), "why", F.lit(True).alias("matched"))
    rows = (
        a.select("conn_id", "client_ip", "client_port", "listener", "accept_ns")
        .join(matched, "conn_id", "left")
        .join(admin, "conn_id", "left")
        .join(end_df, "client_ip", "left")
        .crossJoin(F.broadcast(bounds))
    )
    unmatched = F.col("matched").isNull()
    during_load = (F.col("accept_ns") >= F.col("lo")) & (
        F.col("accept_ns") <= F.coalesce(F.col("load_end"), F.col("hi"))
    )
    unexplained = unmatched & F.coalesce(during_load, F.lit(False)) & F.col("admin").isNull()

    def n(cond: Any) -> Any:
        return F.sum(F.when(cond, 1).otherwise(0))

    first = F.min(F.when(unexplained, F.struct("accept_ns", "client_port", "conn_id", "listener")))
    by_ip = rows.groupBy("client_ip").agg(
        F.count(F.lit(1)).alias("total"),
        n(F.col("matched").isNotNull()).alias("joined"),
        n(F.col("why").isNotNull()).alias("bad"),
        n(unmatched).alias("unmatched"),
        n(unexplained).alias("unexplained"),
        first.alias("first"),
    )
    worst = F.when(
        F.col("unexplained") > 0,
        F.struct(
            F.col("unexplained").alias("n"),
            F.col("client_ip"),
            F.col("first.accept_ns").alias("first_ns"),
            F.col("first.client_port").alias("port"),
            F.col("first.conn_id").alias("conn_id"),
            F.col("first.listener").alias("listener"),
        ),
    )
    return by_ip.agg(
        F.sum("total").alias("total"),
        F.sum("joined").alias("joined"),
        F.sum("bad").alias("bad"),
        F.sum("unmatched").alias("unmatched"),
        F.sum("unexplained").alias("unexplained"),
        F.slice(F.sort_array(F.collect_list(worst), asc=False), 1, 10).alias("worst"),
    ).first()


def _unexplained_witnesses(run: Run, worst: list[Any]) -> list[dict[str, Any]]:
    """The addresses whose acceptor connections no client attempt made, each a witness."""
    client_ips = {
        r["client_ip"] for r in run.events(source="client").select("client_ip").distinct().collect()
    }
    wit = []
    for r in worst:
        used = "a client address" if r["client_ip"] in client_ips else "no client used it"
        wit.append(
            witness(
                {
                    "conn_id": r["conn_id"],
                    "client_ip": r["client_ip"],
                    "client_port": r["port"],
                    "listener": r["listener"],
                    "mono_ns": r["first_ns"],
                },
                f"{r['n']} acceptor connection(s) keyed {r['client_ip']} match no client "
                f"attempt ({used}) during the load",
                connections=int(r["n"]),
            )
        )
    return wit


def _pool(spec: str) -> list[str]:
    """A phase's `source_ips` (`127.0.0.2-127.0.0.9`, `127.0.0.9`, a comma list)."""
    out: list[str] = []
    for part in str(spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            a, b = (
                ipaddress.ip_address(first.strip()),
                ipaddress.ip_address((last or first).strip()),
            )
        except ValueError:
            continue
        n = int(b) - int(a)
        if 0 <= n < 65536:
            out.extend(str(ipaddress.ip_address(int(a) + i)) for i in range(n + 1))
    return out


def _load_end_by_address(run: Run) -> dict[str, int]:
    """Each load address: when the last phase using it ended (its `phase_end` row)."""
    ends: dict[str, int] = {}
    for p in phases(run):
        for ip in _pool(str(p.get("source_ips") or "")):
            ends[ip] = max(ends.get(ip, 0), int(p["end"]))
    return ends


def check_agreement(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    if not run.has_source("client"):
        return CheckResult(
            "client_acceptor_agreement",
            UNKNOWN,
            observed="no client history",
            expected="client and acceptor records of each connection agree",
            explanation="without client rows the two ends cannot be compared",
        )
    a = acceptor_conns(run).where(F.col("outcome").isNotNull())
    j = attempt_join(run).where(F.col("a.outcome").isNotNull())
    tol = float(run.expect.get("delay_tolerance_ms") or 2.0)
    dropped = F.col("a.outcome").isin("reject", "throttle_close")
    served_but_dropped = dropped & (
        F.col("c.ready_ns").isNotNull() | F.col("c.closed_outcome").isin("served", "delayed_served")
    )
    # A client that gave up (timeout) before the acceptor closed its socket (while it sat
    # in the kernel backlog, or parked for its IP throttle) could not see that close: only
    # a client still open after the close, beyond the clock-alignment bound, must see EOF.
    closed_by_acceptor = F.coalesce("a.throttle_close_ns", "a.reject_ns", "a.accept_ns")
    dropped_no_eof = (
        dropped
        & F.col("c.eof_ns").isNull()
        & F.col("c.closed_ns").isNotNull()
        & (F.col("c.closed_ns") > closed_by_acceptor + F.lit(run.clock_error_ns))
    )
    # One that had read nothing and closed within the slack of that close may have closed
    # it itself before reading (`closed_unread`, asked only of a failing run): not judged.
    slack_ns = int(run.slack_ms * MS)
    unread = (
        dropped_no_eof
        & ~served_but_dropped
        & F.col("c.ready_ns").isNull()
        & (F.col("c.closed_ns") <= closed_by_acceptor + F.lit(slack_ns))
    )
    too_fast = (
        (F.col("a.outcome") == "admit")
        & (F.col("a.delay_ms") > 0)
        & (F.col("c.ready_latency_ms") < F.col("a.delay_ms") - F.lit(tol))
    )
    j = j.withColumn(
        "why",
        F.when(
            served_but_dropped,
            F.concat(F.lit("acceptor "), F.col("a.outcome"), F.lit(" but the client was served")),
        )
        .when(
            dropped_no_eof,
            F.concat(F.lit("acceptor "), F.col("a.outcome"), F.lit(" but the client saw no EOF")),
        )
        .when(
            too_fast,
            F.concat(
                F.lit("client ready after "),
                F.col("c.ready_latency_ms").cast("string"),
                F.lit(" ms < acceptor delay "),
                F.col("a.delay_ms").cast("string"),
                F.lit(" ms"),
            ),
        ),
    )
    # every count, and the addresses nothing explains, in one job
    counts = _agreement_counts(run, a, j)
    assert counts is not None
    total, joined, bad = (int(counts[k] or 0) for k in ("total", "joined", "bad"))
    n_unmatched, n_unexplained = int(counts["unmatched"] or 0), int(counts["unexplained"] or 0)
    own: list[str] = []
    if bad:  # which of those the client closed itself, before reading
        cand = j.where(unread).select(
            F.col("a.conn_id").alias("conn_id"),
            F.col("c.client_ip").alias("client_ip"),
            F.col("c.client_port").alias("client_port"),
            F.col("c.closed_ns").alias("closed_ns"),
        )
        own = sorted({r["conn_id"] for r in closed_unread(run, cand).select("conn_id").collect()})
    bad -= len(own)
    rows = (
        j.where(F.col("why").isNotNull() & ~F.col("a.conn_id").isin(own))
        .select(
            "a.conn_id",
            "a.client_ip",
            "a.client_port",
            "a.listener",
            "a.accept_ts",
            "a.accept_ns",
            "why",
        )
        .orderBy("accept_ns")
        .limit(10)
        .collect()
        if bad  # only a disagreement needs its witnesses
        else []
    )
    wit = [witness(r.asDict(), r["why"]) for r in rows]
    worst = counts["worst"] or []
    wit = (_unexplained_witnesses(run, worst) if worst else []) + wit
    unread_note = (
        f"{len(own)} not judged: a reject or throttle_close the client closed itself within "
        f"the slack ({fmt(run.slack_ms)} ms) of it, having read nothing (it saw nothing of "
        "that close either way)"
        if own
        else ""
    )
    parts = [
        Part(
            "both ends agree on each matched connection",
            joined - len(own),
            unread_note if joined else "no acceptor connection matched a client attempt",
            "load through the acceptor that the clients record",
        ),
        Part("every unmatched acceptor connection explained", total),
    ]
    if bad or n_unexplained:
        verdict = FAIL
    elif total == 0:
        verdict = UNKNOWN
    else:
        verdict = PASS
    explained = n_unmatched - n_unexplained
    return CheckResult(
        "client_acceptor_agreement",
        verdict,
        observed=(
            f"{joined}/{total} acceptor connections matched a client attempt; {bad} of those "
            f"disagree"
            + (
                f", {len(own)} not judged (closed by the client itself before reading)"
                if own
                else ""
            )
            + f"; {n_unmatched} unmatched ({explained} explained: before or after the "
            f"load, or admin; {n_unexplained} not)"
        ),
        expected=(
            "every acceptor connection made by a client attempt (or explained: before/after "
            "the load, admin); reject/throttle_close ↔ client EOF, never served; ready "
            "latency ≥ acceptor delay"
        ),
        tolerance=(
            f"{fmt(tol)} ms on latency vs delay; none on matching; a dropped connection the "
            f"client closed itself (reason {OWN_CLOSE}) within the slack ({fmt(run.slack_ms)} ms) "
            "of the acceptor's close, before it read a response or the EOF, is not judged"
        ),
        witnesses=wit,
        explanation=(
            "the two ends of each connection were joined on (client_ip, client_port)"
            + (
                "; the enforcer saw connections no client made: it keys clients by addresses "
                "they did not use (a PROXY header ignored?) or records what did not happen"
                if n_unexplained
                else ""
            )
        ),
        judged=joined - len(own),
        parts=parts if total else [],
    )


def _phases(run: Run) -> list[dict[str, Any]]:

    rows = (
        run.events("phase_start", "phase_end", source="harness")
        .select("event", "mono_ns", "detail")
        .orderBy("mono_ns")
        .collect()
    )
    open_: dict[str, dict[str, Any]] = {}
    phases: list[dict[str, Any]] = []
    last_ns = run.span_ns()[1]
    for r in rows:
        try:
            d = HarnessPhaseStart.parse(r["detail"])
        except ValueError:
            d = {}
        name = str(d.get("name") or d.get("profile") or "phase")
        if r["event"] == "phase_start":
            open_[name] = {**d, "name": name, "start": int(r["mono_ns"])}
        elif name in open_:
            p = open_.pop(name)
            p["end"] = int(r["mono_ns"])
            phases.append(p)
    for p in open_.values():
        p["end"] = last_ns
        phases.append(p)
    return sorted(phases, key=lambda p: p["start"])


def phases(run: Run) -> list[dict[str, Any]]:
    return run.cached("phases", lambda: _phases(run))  # type: ignore[no-any-return]


def offered_stats(run: Run) -> dict[str, Any]:
    def build() -> dict[str, Any]:
        from pyspark.sql import functions as F

        c = run.events("connect_invoke", "connect_fail", source="client")
        intended_col = detail_col("client", "connect_invoke", "intended_mono_ns").cast("long")
        c = c.withColumn("intended", intended_col).withColumn(
            "profile", detail_col("client", "connect_fail", "profile")
        )
        not_offered = (F.col("event") == "connect_fail") & (F.col("reason") == "not_offered")
        rated = [p for p in phases(run) if float(p.get("intended_rate") or 0) > 0]
        at = F.coalesce("intended", "mono_ns")
        sums = []
        for i, p in enumerate(rated):  # one scan for the totals and every phase
            cond = (F.col("event") == "connect_invoke") & (at >= p["start"]) & (at < p["end"])
            if p.get("profile"):
                cond = cond & (F.col("profile") == p["profile"])
            sums.append(F.sum(F.when(cond, 1).otherwise(0)).alias(f"p{i}"))
        got_row = c.agg(
            F.sum(F.when(F.col("event") == "connect_invoke", 1).otherwise(0)).alias("offered"),
            F.sum(F.when(not_offered, 1).otherwise(0)).alias("not_offered"),
            *sums,
        ).first()
        offered = int(got_row["offered"] or 0) if got_row else 0
        missed = int(got_row["not_offered"] or 0) if got_row else 0
        short_phases = []
        for i, p in enumerate(rated):
            rate = float(p["intended_rate"])
            dur = max((p["end"] - p["start"]) / 1e9, 1e-9)
            achieved = int((got_row[f"p{i}"] if got_row else 0) or 0) / dur
            if achieved < OFFERED_MIN * rate:
                short_phases.append(
                    {"phase": p["name"], "intended_rate": rate, "offered_rate": achieved}
                )
        return {"offered": offered, "not_offered": missed, "short_phases": short_phases}

    return run.cached("offered", build)  # type: ignore[no-any-return]


def check_offered_load(run: Run) -> CheckResult:
    if not run.has_source("client"):
        return CheckResult(
            "offered_load",
            UNKNOWN,
            observed="no client history",
            expected=f"offered ≥ {OFFERED_MIN:.0%} of intended arrivals",
            explanation="without client rows nobody can say the storm was really offered",
        )
    s = offered_stats(run)
    intended = s["offered"] + s["not_offered"]
    ratio = s["offered"] / intended if intended else 0.0
    short = s["short_phases"]
    ok = intended > 0 and ratio >= OFFERED_MIN and not short
    parts = [f"offered {s['offered']}/{intended} intended arrivals ({ratio:.1%})"]
    for p in short:
        parts.append(
            f"phase {p['phase']}: {p['offered_rate']:.1f}/s offered"
            f" vs {p['intended_rate']:.1f}/s intended"
        )
    # how busy the generator's own loops were, read as the front's are (`front_saturation`)
    readings = busy_readings(role_rows(run, "load"))
    if readings:
        parts.append(loop_summary(readings, run.scenario_t0_ns(), "the generator"))
    return CheckResult(
        "offered_load",
        PASS if ok else UNKNOWN,
        observed="; ".join(parts),
        expected=f"offered ≥ {OFFERED_MIN:.0%} of intended, overall and in every phase with a rate",
        tolerance=f"{1 - OFFERED_MIN:.0%}",
        explanation=(
            "the generator offered the load the scenario intended"
            if ok
            else "the generator fell short of its intended arrivals; checks that need the load "
            "cannot pass on this run (they are unknown)"
        ),
        data={"short": not ok},
    )


def fairness_bound_set(run: Run) -> str | None:
    """None when the scenario states a fairness bound (or the run has no client rows: the
    check says `unknown` itself); without one `steady_fairness` is `n/a` before any job,
    its ratio not measured."""
    if run.expect.get("fairness_p99_ratio") is not None or not run.has_source("client"):
        return None
    return "a fairness bound (expect.fairness_p99_ratio)"


def check_fairness(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    bound = run.expect.get("fairness_p99_ratio")
    if not run.has_source("client"):
        return CheckResult(
            "steady_fairness",
            UNKNOWN,
            observed="no client history",
            expected="steady clients' p99 ratio",
            explanation="no client rows",
        )
    unset = fairness_bound_set(run)
    if unset is not None:  # what the analysis decides before any job, said the same here
        return not_configured("steady_fairness", run, unset)
    assert bound is not None  # the bound is stated: without one the check is n/a above
    storms = [p for p in phases(run) if str(p.get("profile") or p["name"]) != "steady"]
    steady = (
        client_conns(run)
        .where(F.col("profile") == "steady")
        .select("client_ip", "client_port", "attempt_ns")
    )
    if not storms:
        return CheckResult(
            "steady_fairness",
            UNKNOWN if bound else NA,
            observed="no storm phase in the history",
            expected="steady p99 during storm / before storm" + (f" ≤ {bound}" if bound else ""),
            explanation="no phase_start rows with a non-steady profile: nothing to compare",
        )
    first_storm = min(p["start"] for p in storms)
    # Steady victims are real kafka-python clients that own their connections, so their
    # request rows carry detail.profile rather than a connection of ours to join on.
    all_req = run.events("request_ok", source="client").withColumn(
        "req_profile", detail_col("client", "request_ok", "profile")
    )
    # (the steady clients' sockets write a row per response too, with no latency of their own)
    by_detail = all_req.where(
        (F.col("req_profile") == "steady") & F.col("latency_ms").isNotNull()
    ).select("mono_ns", "latency_ms")
    by_conn = (
        all_req.where(F.col("req_profile").isNull() | (F.col("req_profile") != "steady"))
        .join(F.broadcast(steady), ["client_ip", "client_port"])
        .where(F.col("mono_ns") >= F.col("attempt_ns"))
        .select("mono_ns", "latency_ms")
    )
    req = by_detail.unionByName(by_conn)
    in_storm = F.lit(False)
    for p in storms:
        in_storm = in_storm | ((F.col("mono_ns") >= p["start"]) & (F.col("mono_ns") < p["end"]))
    row = req.agg(
        F.percentile_approx(
            F.when(F.col("mono_ns") < first_storm, F.col("latency_ms")), 0.99, 10000
        ).alias("base"),
        F.percentile_approx(F.when(in_storm, F.col("latency_ms")), 0.99, 10000).alias("storm"),
        F.sum(F.when(F.col("mono_ns") < first_storm, 1).otherwise(0)).alias("n_base"),
        F.sum(F.when(in_storm, 1).otherwise(0)).alias("n_storm"),
    ).first()
    assert row is not None
    base, storm = row["base"], row["storm"]
    if not base or storm is None:
        return CheckResult(
            "steady_fairness",
            UNKNOWN if bound else NA,
            observed=(
                f"steady requests: {row['n_base'] or 0} before storm, {row['n_storm'] or 0} during"
            ),
            expected="steady requests both before and during the storm",
            explanation="not enough steady-client requests to compare latencies",
            exercised=False if bound else None,
            raise_hint="the steady profile: it must send requests before and during the storm",
        )
    ratio = float(storm) / float(base)
    observed = (
        f"steady p99 {fmt(base, 2)} ms before → {fmt(storm, 2)} ms during storm "
        f"(ratio {ratio:.2f}; n={row['n_base']}/{row['n_storm']})"
    )
    judged = int(row["n_base"] or 0) + int(row["n_storm"] or 0)
    return CheckResult(
        "steady_fairness",
        FAIL if ratio > float(bound) else PASS,
        observed=observed,
        expected=f"p99 ratio ≤ {bound} (run.json expect.fairness_p99_ratio)",
        tolerance="p99 by percentile_approx (accuracy 1/10000)",
        explanation="how much the storm cost the well-behaved steady clients",
        data={"ratio": ratio},
        judged=judged,
        exercised=True,
        peak=ratio,
        limit=float(bound),
    )


def _refused_login_holds(run: Run) -> Any:
    """Each refused SASL login's slot, (broker, client_ip, client_port, start, end): Kafka
    withholds the refusal and the close for connection.failed.authentication.delay.ms from
    reading the failing request, so the connection surely counts from the client's send of
    that request (it had its earlier answers: accepted) until the send + the delay − 1 ms
    (Kafka's whole-millisecond deadline). A broker that freed the slot sooner and admitted
    another connection from the address overlaps it."""
    from pyspark.sql import functions as F

    held_ns = int((configured_delay_ms(run) - KAFKA_CLOCK_MS) * MS)
    code = detail_col("client", "sasl_fail", "error_code").cast("int")
    answer = detail_col("client", "sasl_fail", "answer_ms").cast("double")
    fails = (
        run.events("sasl_fail", source="client")
        .where(code.isin(*DELAYED_ERRORS) & answer.isNotNull())
        .select(
            "client_ip",
            "client_port",
            "conn_id",
            (F.col("mono_ns") - (answer * MS).cast("long")).alias("sent_ns"),
        )
    )
    keys = ["client_ip", "client_port", "conn_id"]
    brokers = run.events("connect_invoke", source="client").select(
        *keys, detail_col("client", "connect_invoke", "broker").cast("int").alias("broker")
    )
    return (
        fails.join(brokers, keys, "left")
        .groupBy("broker", *keys)
        .agg(F.min("sent_ns").alias("start"))
        .select(
            "broker",
            "client_ip",
            "client_port",
            F.col("start"),
            (F.col("start") + F.lit(held_ns)).alias("end"),
        )
        .where(F.col("end") > F.col("start"))
    )


def client_per_ip_set(run: Run) -> str | None:
    """None when max.connections.per.ip (or an override) is set at some time of the run."""
    tl = run.timeline
    if any(lim.max_connections_per_ip < INT_MAX or lim.per_ip_overrides for lim in tl.limits):
        return None
    return "max.connections.per.ip"


def check_client_ip_concurrency(run: Run) -> CheckResult:
    """Target broker: served connections open at once per IP, from the client's view, and
    each refused login's slot through the failed-authentication delay."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if (unset := client_per_ip_set(run)) is not None:
        return not_configured("client_ip_concurrency", run, unset)
    cc = client_conns(run).where(F.col("ready_ns").isNotNull() & F.col("closed_ns").isNotNull())
    unattributed = 0
    if cluster_nodes(run):  # never merge connections whose broker is unknown into one count
        unattributed = cc.where(F.col("broker").isNull()).count()
        cc = cc.where(F.col("broker").isNotNull())
    # per broker in a cluster (each broker counts its own connections per IP)
    spans = cc.select(
        "broker",
        "client_ip",
        "client_port",
        F.col("ready_ns").alias("start"),
        F.col("closed_ns").alias("end"),
    )
    held = _refused_login_holds(run)
    if cluster_nodes(run):
        held = held.where(F.col("broker").isNotNull())
    spans = spans.unionByName(held)
    up = spans.select(
        "broker", "client_ip", "client_port", F.col("start").alias("ns"), F.lit(1).alias("d")
    )
    down = spans.select(
        "broker", "client_ip", "client_port", F.col("end").alias("ns"), F.lit(-1).alias("d")
    )
    w = (
        Window.partitionBy("broker", "client_ip")
        .orderBy("ns", "d")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    ev = up.unionByName(down).withColumn("count", F.sum("d").over(w)).where(F.col("d") == 1)
    from analysis.checks.concurrency import keyed_limit

    ev = ev.withColumn(
        "limit",
        keyed_limit(
            run,
            F.col("ns"),
            F.col("client_ip"),
            lambda x: {k: float(v) for k, v in x.per_ip_overrides.items()},
            lambda x: x.max_connections_per_ip,
        ),
    )
    n_bad = ev.where(F.col("count") > F.col("limit")).count()
    peak = ev.agg(F.max("count")).first()
    closest = ev.agg(
        F.max_by(F.struct("count", "limit"), F.col("count") - F.col("limit")).alias("c"),
        F.count(F.lit(1)).alias("n"),
    ).first()
    judged = int(closest["n"] or 0) if closest else 0
    c = closest["c"] if closest else None
    c_peak = float(c["count"]) if c is not None else 0.0
    c_lim = float(c["limit"]) if c is not None else float(INT_MAX)
    if not n_bad and c_peak < c_lim:
        return not_exercised(
            "client_ip_concurrency",
            "max.connections.per.ip",
            c_peak,
            c_lim,
            judged=judged,
            unit="served at once",
            hint="the connections one IP holds open at once",
        )
    wit = [
        witness(
            r.asDict() | {"mono_ns": r["ns"]},
            f"{r['count']} served at once from {r['client_ip']} > {fmt(r['limit'])}"
            + (f" on broker {r['broker']}" if r["broker"] is not None else ""),
        )
        for r in ev.where(F.col("count") > F.col("limit")).orderBy("ns").limit(10).collect()
    ]
    unsure = (
        f"; {unattributed} served connections name no broker: not judged" if unattributed else ""
    )
    return CheckResult(
        "client_ip_concurrency",
        FAIL if n_bad else (UNKNOWN if unattributed else PASS),
        observed=f"peak {peak[0] if peak else 0} served at once per IP; {n_bad} over{unsure}",
        expected="served connections at once per IP ≤ max.connections.per.ip (client view)",
        tolerance="none: the client's ready→closed lies inside the broker's count interval; "
        "a refused login's from its failing request's send to the send + the delay − 1 ms",
        witnesses=wit,
        explanation="from the client side only: a lower bound on the broker's own count",
        judged=judged,
        exercised=True,
        peak=c_peak,
        limit=c_lim,
    )


CHECKS = [
    Check(
        "client_acceptor_agreement",
        "clients",
        check_agreement,
        False,
        doc="client outcomes agree with the acceptor's records",
        frames=("acceptor_conns", "client_conns", "attempt_join"),
    ),
    Check(
        "offered_load",
        "clients",
        check_offered_load,
        False,
        ("acceptor", "broker"),
        doc="the generator offered ≥ 95 % of its intended arrivals",
        frames=("process_stats",),
    ),
    Check(
        "steady_fairness",
        "clients",
        check_fairness,
        True,
        ("acceptor", "broker"),
        doc="steady clients' p99 during storms vs baseline",
        applies=fairness_bound_set,
        frames=("client_conns",),
    ),
    Check(
        "client_ip_concurrency",
        "clients",
        check_client_ip_concurrency,
        True,
        ("broker",),
        doc="target broker: served connections per IP ≤ per-IP max (client view)",
        judges_limit=True,
        applies=client_per_ip_set,
        frames=("client_conns",),
    ),
]
