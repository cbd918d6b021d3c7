"""Checks of a broker's own enforcement that client-side observation can prove (target broker).

Kafka's instants are not in the history on a broker target; each client attempt brackets
them: the rate step (t0) and the IP step (t1) of a served connection lie in
[connect_invoke, ready], of a dropped one in [connect_invoke, EOF], and Kafka's count
interval contains the client's [ready, closed]. Every check below holds for *every*
placement of Kafka's instants inside those intervals (bounds: analysis.checks.kafka_bounds,
derivations: docs/kafka-reference.md), so it never blames Kafka for the client clock:

- `client_broker_rate_span` / `client_listener_rate_span`: served connections surely
  accepted within one span of n·w never exceed what the broker/listener meter allows;
- `client_ip_rate_span`: the same per source address against its connection_creation_rate;
- `client_over_throttling`: an EOF before any response is Kafka's fault unless a per-IP
  rate throttle or count limit (or, on a non-protected listener, an LRU eviction) could
  have caused it under some consistent timing; a served connection of the protected
  listener closed by Kafka is its fault (Kafka never evicts those);
- `client_connection_count`: served connections open at once per listener / broker-wide
  never exceed listener.name.<l>.max.connections / max.connections;
- `client_request_throttle`: `throttle_time_ms` in responses is ≤ w and appears only when
  a request quota is configured.

Spans that cross a broker kill/restart (a new broker starts with fresh meters) are not
judged; EOFs inside fault windows are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    NA,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    cluster_nodes,
    fmt,
    not_configured,
    nothing_judged,
)
from analysis.checks.kafka_bounds import (
    ip_span_bound,
    ip_throttle_possible,
    longest_span_ms,
    max_overlap,
    rate_span_bound,
    slots,
    sure_counts,
)
from analysis.columns import detail_col
from analysis.model import INT_MAX

if TYPE_CHECKING:
    import pandas as pd

    from analysis.load import Run

MS = 1_000_000
#: Kafka's processor notices a client's close on its next poll (poll(300) returns at once on
#: I/O): a count is released at most this long after the client closed, plus the run's slack.
PROCESSOR_POLL_MS = 300.0


@dataclass(frozen=True)
class Attempts:
    """One row per client attempt that reached TCP (pandas), plus the run's segments."""

    df: pd.DataFrame
    faults: list[tuple[int, int]]  # fault windows (mono_ns)
    kills: list[tuple[int, int]]  # broker_kill windows: meters restart after them
    #: the node each fault window / kill hit in a cluster (None: the one broker, or all)
    fault_nodes: list[int | None] | None = None
    kill_nodes: list[int | None] | None = None

    def on(self, node: int) -> Attempts:
        """One broker's attempts and the faults that hit it (the others' do not touch its
        meters or counts)."""

        def mine(windows: list[tuple[int, int]], nodes: list[int | None] | None) -> list[Any]:
            nodes = nodes or [None] * len(windows)
            return [w for w, n in zip(windows, nodes, strict=True) if n is None or n == node]

        return Attempts(
            self.df[self.df["broker"] == node],
            mine(self.faults, self.fault_nodes),
            mine(self.kills, self.kill_nodes),
        )


def fault_windows(
    run: Run,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[int | None], list[int | None]]:
    """Fault windows, broker-kill windows, and the node each hit (`fault_start`'s
    ``detail.broker`` in a cluster; None otherwise)."""
    from pyspark.sql import functions as F

    rows = (
        run.events("fault_start", "fault_end", source="harness")
        .select("event", "mono_ns", "reason", F.get_json_object("detail", "$.broker").alias("node"))
        .orderBy("mono_ns")
        .collect()
    )
    open_: dict[str, tuple[int, int | None]] = {}
    out: list[tuple[int, int, str, int | None]] = []
    end_ns = run.span_ns()[1]
    for r in rows:
        kind = str(r["reason"] or "")
        if r["event"] == "fault_start":
            open_[kind] = (int(r["mono_ns"]), int(r["node"]) if r["node"] else None)
        elif kind in open_:
            start, node = open_.pop(kind)
            out.append((start, int(r["mono_ns"]), kind, node))
    out += [(s, end_ns, k, n) for k, (s, n) in open_.items()]
    # a broker whose log directory filled may have stopped itself and been restarted
    kills = [o for o in out if o[2] in ("broker_kill", "broker_disk_full")]
    return (
        [(s, e) for s, e, _k, _n in out],
        [(s, e) for s, e, _k, _n in kills],
        [n for *_x, n in out],
        [n for *_x, n in kills],
    )


def attempts(run: Run) -> Attempts:
    """Client attempts that reached the broker (connect_ok), as pandas, cached per run."""

    def build() -> Attempts:
        from pyspark.sql import functions as F

        from analysis.frames import client_conns

        c = client_conns(run).where(F.col("connect_ok_ns").isNotNull())
        df: Any = c.select(
            "client_ip",
            "client_port",
            F.lower(F.col("c_listener")).alias("listener"),
            "invoke_ns",
            "connect_ok_ns",
            "ready_ns",
            "eof_ns",
            "closed_ns",
            "closed_outcome",
            "broker",
        ).toPandas()
        df["invoke_ns"] = df["invoke_ns"].fillna(df["connect_ok_ns"])
        faults, kills, fault_nodes, kill_nodes = fault_windows(run)
        return Attempts(df, faults, kills, fault_nodes, kill_nodes)

    return run.cached("broker_side_attempts", build)  # type: ignore[no-any-return]


def _window(run: Run) -> tuple[int, int]:
    lim = run.timeline.limits[0]
    return lim.window_num, lim.window_ms


def _limit_over(run: Run, start_ns: int, end_ns: int, pick: Any, how: Any = max) -> float:
    """The largest (or ``how``) value of a limit in force at any instant of [start, end]."""
    tl = run.timeline
    i0, i1 = tl.index_at(start_ns), tl.index_at(end_ns)
    return float(how(float(pick(tl.limits[i])) for i in range(i0, i1 + 1)))


def _segments_ok(kills: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return not any(s <= hi and e >= lo for s, e in kills)


# --- a cluster: every per-broker rule judged per broker -----------------------------------


def _broker_narrowing(node: int) -> dict[str, Any]:
    """One broker's view of a cluster run (`Run.on_broker`): every check reading
    `attempts` (and `kafka_metrics.scrapes`) judges that broker alone (its own meters,
    counts and per-IP quotas, its own exporter's scrapes); the rest is the run's."""
    return {
        "broker_side_attempts": lambda att: att.on(node),
        "kafka_metric_scrapes": lambda every: [
            (ns, d) for ns, d in every if d.get("broker") == node
        ],
    }


def per_broker(fn: Any) -> Any:
    """A per-broker rule on a cluster run: judged on each broker's attempts apart, the
    verdicts merged (fail > unknown > pass), every witness naming its broker. Attempts with
    no broker (a profile that cannot say which broker it reached) make it `unknown`: never
    merged into one broker's, nor all brokers' into one."""

    def judge(run: Run) -> CheckResult:
        nodes = cluster_nodes(run)
        if not nodes:
            return fn(run)  # type: ignore[no-any-return]
        df = attempts(run).df
        results: list[tuple[int, CheckResult]] = []
        for node in nodes:
            results.append((node, fn(run.on_broker(node, _broker_narrowing(node)))))
        unreached = [n for n in nodes if not (df["broker"] == n).any()]
        return merge_brokers(results, int(df["broker"].isna().sum()), len(df), unreached)

    judge.__name__ = getattr(fn, "__name__", "per_broker")
    judge.__doc__ = fn.__doc__
    return judge


def merge_brokers(
    results: list[tuple[int, CheckResult]],
    unattributed: int,
    total: int,
    unreached: list[int] | None = None,
) -> CheckResult:
    from analysis.checks.base import adds_nothing, merge, merge_parts

    first = results[0][1]
    name = first.name
    # a broker where the rule found nothing to judge (unknown, 0 judged) adds nothing to what
    # the others proved; it stays visible in `observed` and the per-broker table
    judged_here = [r for _n, r in results if not adds_nothing(r)]
    verdict = merge(r.verdict for r in (judged_here or [r for _n, r in results]))
    witnesses = [{"broker": n, **w} for n, r in results for w in r.witnesses][:10]
    observed = "; ".join(f"broker {n}: {r.observed}" for n, r in results)
    exercised_on = [n for n, r in results if r.exercised]
    ratios = [
        (r.peak / r.limit, n, r) for n, r in results if r.peak is not None and r.limit
    ]  # fmt: skip
    worst = max(ratios, key=lambda t: t[0]) if ratios else None
    explanation = (
        f"judged per broker (each broker's own meters and counts); exercised on broker(s) "
        f"{', '.join(map(str, exercised_on)) or 'none'}. " + results[0][1].explanation
    )
    if unreached:
        observed += f"; never reached by the load: broker {', '.join(map(str, unreached))}"
    if unattributed:
        if verdict != FAIL:
            verdict = UNKNOWN
        observed = (
            f"{unattributed} of {total} client attempts name no broker (their profile cannot "
            f"say which broker it reached): not judged per broker; " + observed
        )
    merged = CheckResult(
        name,
        verdict,
        observed=observed,
        expected=results[0][1].expected + " (on every broker)",
        tolerance=results[0][1].tolerance,
        witnesses=witnesses,
        explanation=explanation,
        judged=sum(r.judged for _n, r in results),
        exercised=bool(exercised_on) if any(r.exercised is not None for _n, r in results) else None,
        peak=worst[2].peak if worst else None,
        limit=worst[2].limit if worst else None,
        family=first.family,
        needs_load=first.needs_load,
        raise_hint=first.raise_hint,
        judges_limit=first.judges_limit,
        parts=merge_parts([r for _n, r in results]),
    )
    merged.data = {
        "per_broker": {
            str(n): {
                "verdict": r.verdict,
                "judged": r.judged,
                "exercised": r.exercised,
                "peak": r.peak,
                "limit": r.limit,
                "observed": r.observed,
            }
            for n, r in results
        }
    }
    # a window judged by no check (a front's outage) keeps the run's verdict from passing
    outage = [f"broker {n}: {w}" for n, r in results for w in r.data.get("outage", [])]
    if outage:
        merged.data["outage"] = outage
    return merged


def _wit(row: Any, run: Run, why: str) -> dict[str, Any]:
    out = {
        "client_ip": row.client_ip,
        "client_port": int(row.client_port),
        "listener": row.listener,
        "mono_ns": int(row.invoke_ns),
        "ts": run.wall(int(row.invoke_ns)),
        "why": why,
    }
    return {k: v for k, v in out.items() if v is not None}


# --- over-admission: rate spans -----------------------------------------------------------


def _span_check(
    run: Run,
    name: str,
    groups: dict[str, pd.DataFrame],
    limit_of: Any,
    bound_of: Any,
    what: str,
) -> CheckResult:
    """Judge every span (b - T, b] ending at a served connection's ready instant; T is the
    longest span the release's rate meter remembers whole (n·w − 2 ms from Kafka 3.8.0,
    (n−1)·w − 1 ms before it: `kafka_bounds.memory_ms`)."""
    n, w = _window(run)
    overlap = run.semantics.sampled_stat_overlap
    span_ms = longest_span_ms(n, w, overlap)
    # A dynamic change reaches Kafka's meters when the broker's metadata publisher applies
    # the committed record: milliseconds on one node, assumed within one quota window of
    # the runner's row (which follows the admin call's answer) on either side.
    change_ns = int(w * MS)
    kills = attempts(run).kills
    judged = 0
    worst: tuple[float, int, int, str, float] | None = None  # ratio, count, bound, key, b
    wit: list[dict[str, Any]] = []
    peak_offered = 0.0
    exercised_at = 0.0
    for key, g in groups.items():
        served = g[g["ready_ns"].notna()]
        if served.empty:
            continue
        lo = served["invoke_ns"].astype("int64").tolist()
        hi = served["ready_ns"].astype("int64").tolist()
        counts = sure_counts([x / MS for x in lo], [x / MS for x in hi], span_ms)
        offered = sure_counts(
            [x / MS for x in g["invoke_ns"].astype("int64")],
            [x / MS for x in g["invoke_ns"].astype("int64")],
            span_ms,
        )
        for b_ms, count in counts:
            b = int(b_ms * MS)
            a = b - int(span_ms * MS)
            if not _segments_ok(kills, a, b):
                continue
            limit = _limit_over(
                run, a - change_ns, b + change_ns, lambda lim, k=key: limit_of(lim, k)
            )
            if limit >= INT_MAX:
                continue
            bound = bound_of(limit, span_ms, n, w, key, overlap)
            judged += 1
            ratio = count / bound if bound else float("inf")
            if worst is None or ratio > worst[0]:
                worst = (ratio, count, bound, key, b_ms)
            if count > bound and not wit:
                inside = served[(served["invoke_ns"] > a) & (served["ready_ns"] <= b)]
                for r in inside.head(10).itertuples():
                    wit.append(
                        _wit(
                            r,
                            run,
                            f"{count} served connections of {key} surely accepted within "
                            f"{span_ms / 1000:g} s > {bound} allowed by the meter",
                        )
                    )
        for b_ms, count in offered:
            b = int(b_ms * MS)
            limit = _limit_over(
                run,
                b - int(span_ms * MS) - change_ns,
                b + change_ns,
                lambda lim, k=key: limit_of(lim, k),
            )
            if limit >= INT_MAX:
                continue
            # more attempts in n·w than a fresh meter's burst r·(n-1)·w: the meter engaged
            burst = limit * (n - 1) * w / 1000.0
            if count / max(burst, 1.0) > peak_offered:
                peak_offered = count / max(burst, 1.0)
                exercised_at = float(count)
    if worst is None:
        ever = any(
            float(limit_of(lim, k)) < INT_MAX for lim in run.timeline.limits for k in groups
        ) or any(float(limit_of(lim, "")) < INT_MAX for lim in run.timeline.limits)
        if not ever:
            return not_configured(name, run, what)
        return nothing_judged(name, f"spans of served connections under {what}")
    ratio, count, bound, key, _ = worst
    failed = bool(wit)
    exercised = peak_offered > 1.0
    return CheckResult(
        name,
        FAIL if failed else PASS,
        observed=(
            f"peak {count} served connections surely accepted in one {span_ms / 1000:g} s span "
            f"({key}) vs {bound} allowed ({ratio:.0%} of the bound); {judged} spans judged"
        ),
        expected=f"≤ the meter's bound in every span, {what}",
        tolerance="none: the bound is derived from the meter (docs/kafka-reference.md §2)",
        witnesses=wit,
        explanation=(
            "each served connection's accept lies in [connect_invoke, ready]; only connections "
            "whose whole interval lies in a span are counted there"
            + ("" if exercised else "; the offered load never exceeded a fresh meter's burst")
        ),
        judged=judged,
        exercised=exercised,
        peak=float(count),
        limit=float(bound),
        data={"peak_offered": exercised_at, "tightness": ratio},
    )


def _never_set(run: Run, values: Any) -> bool:
    """Every value ``values(limits)`` gives is Int.MaxValue in every version of the run's
    limits: the rate is in force at no time, for no key (read from the config timeline,
    before the attempts are built). `_span_check` then finds no span to judge and says
    `not_configured`, which the span checks below say before any job instead."""
    return all(float(v) >= INT_MAX for lim in run.timeline.limits for v in values(lim))


def _nonprotected(run: Run, df: pd.DataFrame) -> pd.DataFrame:
    lim = run.timeline.limits[-1]
    return df.loc[[not lim.is_protected(x) for x in df["listener"]]]


def check_broker_rate_span(run: Run) -> CheckResult:
    name, what = "client_broker_rate_span", "max.connection.creation.rate"
    if _never_set(run, lambda lim: (lim.broker_rate,)):
        return not_configured(name, run, what)
    df = attempts(run).df
    np_df = _nonprotected(run, df)
    k = max(1, np_df["listener"].nunique())

    def bound(limit: float, span: float, n: int, w: int, _key: str, overlap: bool) -> int:
        return rate_span_bound(limit, span, n, w, acceptors=k, overlap=overlap)

    return _span_check(run, name, {"broker": np_df}, lambda lim, _k: lim.broker_rate, bound, what)


def check_listener_rate_span(run: Run) -> CheckResult:
    name, what = "client_listener_rate_span", "listener.name.<l>.max.connection.creation.rate"
    # a listener's rate is its own, else the broker-wide one (`Limits.listener_rate_for`)
    if _never_set(run, lambda lim: (lim.broker_rate, *lim.listener_rate.values())):
        return not_configured(name, run, what)
    df = attempts(run).df
    groups = {str(name): g for name, g in df.groupby("listener")}

    def bound(limit: float, span: float, n: int, w: int, _key: str, overlap: bool) -> int:
        return rate_span_bound(limit, span, n, w, acceptors=1, overlap=overlap)

    return _span_check(run, name, groups, lambda lim, key: lim.listener_rate_for(key), bound, what)


def behind_proxy(run: Run) -> bool:
    """Whether the runner sent some of the load through a proxy (HAProxy, or PROXY
    headers of its own): then the enforcer's record of who connected is itself a claim
    under test, and the clients' own addresses are the reference."""
    return any(
        str(p.get("via") or "direct") != "direct" or str(p.get("proxy_protocol") or "off") != "off"
        for p in run.meta.get("load") or []
        if isinstance(p, dict)
    )


def check_ip_rate_span(run: Run) -> CheckResult:
    if run.target != "broker" and not behind_proxy(run):
        return CheckResult(
            "client_ip_rate_span",
            NA,
            observed="no load behind a proxy: the acceptor's own per-IP rows are judged",
            expected="nothing (ip_rate_span judges the acceptor's admissions)",
            explanation="on the acceptor target the client-side span check judges only load "
            "sent through a proxy, whose client addresses the acceptor must take from the "
            "PROXY header",
        )
    what = "connection_creation_rate (ip)"
    # an address's quota is its own, else the default (`Limits.ip_quota`)
    if _never_set(run, lambda lim: (lim.ip_quota_default, *lim.ip_quotas.values())):
        return not_configured("client_ip_rate_span", run, what)
    df = attempts(run).df
    groups = {str(ip): g for ip, g in df.groupby("client_ip")}

    def bound(limit: float, span: float, n: int, w: int, _key: str, overlap: bool) -> int:
        return ip_span_bound(limit, n, w, overlap=overlap)

    return _span_check(
        run, "client_ip_rate_span", groups, lambda lim, ip: lim.ip_quota(ip), bound, what
    )


# --- over-throttling -----------------------------------------------------------------------


def check_over_throttling(run: Run) -> CheckResult:
    """Every EOF before a response must be explainable by a per-IP limit under some timing."""
    att = attempts(run)
    df = att.df
    if df.empty:
        return nothing_judged("client_over_throttling", "client connections")
    n, w = _window(run)
    # nothing older than the ring's m·w is in the IP meter's value (kafka_bounds.slots)
    lag_ns = int(slots(n, run.semantics.sampled_stat_overlap) * w * MS)
    release_ns = int((PROCESSOR_POLL_MS + run.slack_ms) * MS)
    far = 2**62
    eof_mask = df["ready_ns"].isna() & df["eof_ns"].notna()
    end = df["ready_ns"].fillna(df["eof_ns"]).fillna(df["closed_ns"]).fillna(far)
    close_end = df["closed_ns"].fillna(df["eof_ns"]).fillna(far)
    protected_max = any(
        lim.max_connections < INT_MAX and any(lim.is_protected(x) for x in lim.listeners)
        for lim in run.timeline.limits
    )
    last = run.timeline.limits[-1]
    judged = skipped = 0
    bad: list[dict[str, Any]] = []
    by_ip = {ip: g.index for ip, g in df.groupby("client_ip")}
    for idx in df.index[eof_mask]:
        row = df.loc[idx]
        inv, eof = int(row["invoke_ns"]), int(row["eof_ns"])
        if any(s <= eof and e >= inv for s, e in att.faults):
            skipped += 1
            continue
        judged += 1
        if protected_max and not last.is_protected(str(row["listener"] or "")):
            # Kafka's non-protected processors close their least recently used channel
            # while the total is over max.connections (closeExcessConnections): any
            # connection of theirs may be the victim. Never a protected listener's.
            continue
        ip = row["client_ip"]
        mine = by_ip[ip].drop(idx)
        # the lenient direction for this rule: the smallest quota / count limit that may
        # have been in force at t1 (a change reaches the broker some time around its row)
        q = _limit_over(run, inv - lag_ns, eof + lag_ns, lambda lim, a=ip: lim.ip_quota(a), min)
        others_rate = int(((df.loc[mine, "invoke_ns"] <= eof) & (end[mine] > inv - lag_ns)).sum())
        if ip_throttle_possible(others_rate, q, n, w):
            continue
        m = _limit_over(run, inv - lag_ns, eof + lag_ns, lambda lim, a=ip: lim.max_for_ip(a), min)
        others_open = int(
            ((df.loc[mine, "invoke_ns"] <= eof) & (close_end[mine] + release_ns >= inv)).sum()
        )
        if m < INT_MAX and others_open >= m:
            continue
        why = "EOF before any response, and no per-IP limit could have closed it"
        if q < INT_MAX:
            why += (
                f": at most {others_rate} other connections of {ip} could count in its "
                f"rate window, a throttle at {fmt(q)}/s needs more than "
                f"{fmt(q * (n - 1) * w / 1000 - 1)}"
            )
        if m < INT_MAX:
            why += f"; at most {others_open} others open vs max.connections.per.ip {fmt(m)}"
        bad.append(_wit(row, run, why))
    p_judged, p_bad, p_skipped, p_peak, p_max = _protected_closes(run, att, last)
    exercised = True if p_peak > p_max else None
    total = len(df)
    if judged == 0 and skipped == 0 and p_judged == 0 and p_skipped == 0:
        return CheckResult(
            "client_over_throttling",
            PASS,
            observed=f"0 of {total} connections closed before a response",
            expected="every EOF explained by a per-IP limit",
            judged=total,
            explanation="no connection was dropped, so none was dropped without cause",
        )
    observed = (
        f"{len(bad)} of {judged} EOFs before a response unexplained"
        + (f"; {skipped} inside fault windows not judged" if skipped else "")
        + (
            "; a non-protected connection may be evicted (max.connections, protected listener)"
            if protected_max
            else ""
        )
    )
    if p_judged or p_skipped:
        observed += (
            f"; protected listener: {len(p_bad)} of {p_judged} served connections closed by "
            f"Kafka ({p_skipped} near a fault or the end not judged), peak {p_peak} open at "
            f"once vs max.connections {fmt(p_max)}"
        )
    bad += p_bad
    return CheckResult(
        "client_over_throttling",
        FAIL if bad else PASS,
        observed=observed,
        expected=(
            "every EOF could have come from a per-IP rate throttle or count limit (or an "
            "eviction off the protected listener); no protected connection closed by Kafka"
        ),
        tolerance=(
            "an IP's other connections count if their interval meets (invoke - m·w, EOF] "
            "(m the meter ring's slots); "
            f"counts are released up to {fmt(PROCESSOR_POLL_MS + run.slack_ms)} ms after the "
            "client closed"
        ),
        witnesses=bad[:10],
        explanation=(
            "over-strict enforcement is a bug like over-admission: a drop no limit explains "
            "under any timing consistent with the client's view is Kafka's (or the setup's)"
            + (
                "; exercised: the protected listener held more connections than "
                "max.connections, and Kafka kept them (SocketServer.scala 1463-1474)"
                if exercised
                else ""
            )
        ),
        judged=judged + p_judged,
        exercised=exercised,
        peak=float(p_peak) if exercised else None,
        limit=float(p_max) if exercised else None,
    )


#: Kafka closes an idle connection after connections.max.idle.ms (default 10 min): a
#: protected connection this old when Kafka closed it is not judged.
IDLE_MS = 600_000.0


def _protected_closes(
    run: Run, att: Attempts, last: Any
) -> tuple[int, list[dict[str, Any]], int, int, float]:
    """Served connections of a protected listener that Kafka closed (EOF after a response).

    Kafka 4.3.1 never evicts them: `Processor.closeExcessConnections` closes an LRU channel
    only while `maxConnectionsExceeded(listener)` = `totalCount > brokerMaxConnections &&
    !protectedListener(listener)` (SocketServer.scala 1111–1116, 1463–1464), and a
    protected listener always finds a slot under max.connections
    (`connectionSlotAvailable`, 1467–1474). Not judged: closes in a fault window, after
    the load ended (the broker stops), or of a connection older than the idle timeout.
    Returns (judged, witnesses, skipped, peak protected open at once, largest max).
    """
    df = att.df
    if df.empty:
        return 0, [], 0, 0, float(INT_MAX)
    prot = df["listener"].map(lambda x: bool(last.is_protected(str(x or "")))).astype(bool)
    served = df[prot & df["ready_ns"].notna()]
    broker_max = max(float(lim.max_connections) for lim in run.timeline.limits)
    if served.empty or broker_max >= INT_MAX:
        return 0, [], 0, 0, broker_max
    from analysis.checks.clients import phases

    ends = [int(p["end"]) for p in phases(run)]
    load_end = max(ends) if ends else run.span_ns()[1]
    judged = skipped = 0
    bad: list[dict[str, Any]] = []
    for r in served[served["eof_ns"].notna()].itertuples():
        inv, eof = int(r.invoke_ns), int(r.eof_ns)
        if (
            any(s <= eof and e >= inv for s, e in att.faults)
            or eof > load_end
            or (eof - inv) / MS >= IDLE_MS
        ):
            skipped += 1
            continue
        judged += 1
        bad.append(
            _wit(
                r,
                run,
                f"Kafka closed a served connection of the protected listener {r.listener}: "
                "it never evicts or closes those for max.connections",
            )
        )
    judged += len(served) - int(served["eof_ns"].notna().sum())
    # client-closed: [ready, closed] lies in Kafka's count; closed by Kafka: only ready
    end = served["closed_ns"].where(served["eof_ns"].isna(), served["ready_ns"])
    end = end.fillna(served["ready_ns"])
    peak, _ = max_overlap(served["ready_ns"].astype("int64").tolist(), end.astype("int64").tolist())
    return judged, bad, skipped, int(peak), broker_max


# --- connection counts -----------------------------------------------------------------------


def check_connection_count(run: Run) -> CheckResult:
    """Served connections open at once ≤ max.connections (non-protected) and per listener."""
    df = attempts(run).df
    served = df[df["ready_ns"].notna()]
    # client-closed: [ready, closed] lies in Kafka's count interval; dropped later by the
    # broker (EOF after a response): only the ready instant is surely counted
    end = served["closed_ns"].where(served["eof_ns"].isna(), served["ready_ns"])
    end = end.fillna(served["ready_ns"])
    tl = run.timeline
    broker_max = max(float(lim.max_connections) for lim in tl.limits)
    checks: list[tuple[str, list[bool], float]] = []
    if broker_max < INT_MAX:
        mask = [not tl.limits[-1].is_protected(x) for x in served["listener"]]
        checks.append(("broker (non-protected listeners)", mask, broker_max))
    for name in sorted(set(served["listener"].dropna())):
        lmax = max(lim.listener_max_for(name) for lim in tl.limits)
        if lmax < INT_MAX:
            checks.append((f"listener {name}", [x == name for x in served["listener"]], lmax))
    if not checks:
        if broker_max < INT_MAX or any(
            v < INT_MAX for lim in tl.limits for v in lim.listener_maxes().values()
        ):
            return nothing_judged(
                "client_connection_count", "served connections with client-side rows"
            )
        return not_configured(
            "client_connection_count", run, "max.connections / listener.name.<l>.max.connections"
        )
    worst: tuple[int, float, str] | None = None
    bad: list[dict[str, Any]] = []
    # max.connections engages on Kafka's total over every listener, the protected one
    # included (`connectionSlotAvailable`); the client's own connections on all of them
    # are a lower bound of it (Kafka's own, e.g. a ZooKeeper controller's channel to
    # itself, are not seen here)
    all_peak, _ = max_overlap(
        served["ready_ns"].astype("int64").tolist(), end.astype("int64").tolist()
    )
    reached = broker_max < INT_MAX and all_peak >= broker_max
    for label, mask, limit in checks:
        sel = served.loc[mask]
        peak, at = max_overlap(
            sel["ready_ns"].astype("int64").tolist(), end[sel.index].astype("int64").tolist()
        )
        reached = reached or peak >= limit
        if worst is None or peak / limit > worst[0] / worst[1]:
            worst = (peak, limit, label)
        if peak > limit and at is not None:
            open_now = sel[(sel["ready_ns"] <= at) & (end[sel.index] > at)]
            for r in open_now.head(10).itertuples():
                bad.append(_wit(r, run, f"{peak} served at once on {label} > {fmt(limit)}"))
    assert worst is not None
    peak, limit, label = worst
    every = f", every listener {all_peak}" if broker_max < INT_MAX and all_peak > peak else ""
    return CheckResult(
        "client_connection_count",
        FAIL if bad else PASS,
        observed=f"peak {peak} served connections open at once ({label}{every}) vs {fmt(limit)}",
        expected="≤ max.connections (non-protected listeners) and ≤ each listener's max",
        tolerance="none: the client's [ready, closed] lies inside Kafka's count interval",
        explanation="max.connections is reached when the connections of every listener "
        "together (the protected listener's included) reach it",
        witnesses=bad[:10],
        judged=len(served),
        exercised=reached,
        peak=float(peak),
        limit=float(limit),
    )


# --- request quotas ---------------------------------------------------------------------------


def check_request_throttle(run: Run) -> CheckResult:
    """throttle_time_ms in responses: ≤ w (bounded request throttle), and only with a quota."""
    from pyspark.sql import functions as F

    configured = [bool(raw.get("request_quotas")) for raw in run.timeline.raw]
    rows = (
        run.events("request_ok", source="client")
        .select(
            "mono_ns",
            "client_ip",
            "client_port",
            "listener",
            "api_key",
            detail_col("client", "request_ok", "throttle_time_ms").cast("double").alias("thr"),
        )
        .where(F.col("thr").isNotNull() & (F.col("thr") > 0))
        .collect()
    )
    total = run.events("request_ok", source="client").count()
    _, w = _window(run)
    if not any(configured):
        if not rows:
            return CheckResult(
                "client_request_throttle",
                NA,
                observed=f"no request quota configured; {total} responses, none throttled",
                expected="nothing (no request_percentage configured)",
                explanation="n/a: the rule does not apply to this run",
            )
    bad: list[dict[str, Any]] = []
    peak = 0.0
    for r in rows:
        thr = float(r["thr"])
        peak = max(peak, thr)
        idx = run.timeline.index_at(int(r["mono_ns"]))
        quota_here = any(configured[max(0, idx - 1) : idx + 1])
        why = None
        if thr > w:
            why = f"throttle_time_ms {fmt(thr)} > the request-quota cap w = {w} ms"
        elif not quota_here:
            why = f"throttle_time_ms {fmt(thr)} with no request quota configured"
        if why:
            bad.append(
                {
                    "client_ip": r["client_ip"],
                    "client_port": r["client_port"],
                    "api_key": r["api_key"],
                    "mono_ns": int(r["mono_ns"]),
                    "ts": run.wall(int(r["mono_ns"])),
                    "why": why,
                }
            )
    if total == 0:
        return nothing_judged("client_request_throttle", "responses")
    verdict = FAIL if bad else PASS
    return CheckResult(
        "client_request_throttle",
        verdict if any(configured) or bad else UNKNOWN,
        observed=f"{len(rows)} of {total} responses throttled; max {fmt(peak)} ms",
        expected=f"throttle_time_ms ≤ w = {w} ms, and only while a request quota is set",
        tolerance="none (Kafka sends whole milliseconds)",
        witnesses=bad[:10],
        judged=total,
        exercised=bool(rows),
        peak=peak,
        limit=float(w),
    )


#: On a broker target, the acceptor-side checks a scenario's `expect.checks` names are
#: judged by these (empty: nothing the client or Kafka's metrics can prove there; the
#: replay is a diagnostic). For analysis.verdict.overall on target broker.
BROKER_EQUIVALENTS: dict[str, tuple[str, ...]] = {
    "ip_rate_span": ("client_ip_rate_span",),
    "broker_rate_span": ("client_broker_rate_span",),
    "listener_rate_span": ("client_listener_rate_span",),
    "ip_throttle_within_window": ("kafka_metric_throttle_bounded", "kafka_metric_ip_throttle_seen"),
    "rate_delay_within_window": ("kafka_metric_throttle_bounded",),
    "client_acceptor_agreement": ("client_over_throttling",),
    "ip_count_reject_closes_at_once": ("client_over_throttling",),
    "max_connections": ("client_connection_count", "kafka_metric_connection_count"),
    "listener_max_connections": ("client_connection_count", "kafka_metric_connection_count"),
    "max_connections_per_ip": ("client_ip_concurrency",),
    "request_throttle_bounds": ("client_request_throttle",),
    "request_quota_model": ("client_request_throttle",),
    "admission_wait_explained": ("kafka_metric_throttle_bounded",),
    "eviction_rule": ("client_over_throttling",),
    "config_testimony": (),
    "model_replay": (),
    "protected_listener_not_delayed": (),
    "processor_queue_depth": (),
}


def broker_expectations(expected: list[str]) -> list[str]:
    """A scenario's expected checks as they are judged on a broker target."""
    out: list[str] = []
    for name in expected:
        for equivalent in BROKER_EQUIVALENTS.get(name, (name,)):
            if equivalent not in out:
                out.append(equivalent)
    return out


CHECKS = [
    Check(
        "client_broker_rate_span",
        "broker_side",
        per_broker(check_broker_rate_span),
        True,
        ("broker",),
        doc="served connections per span the meter remembers ≤ the broker-wide meter's bound "
        "(client intervals)",
        judges_limit=True,
    ),
    Check(
        "client_listener_rate_span",
        "broker_side",
        per_broker(check_listener_rate_span),
        True,
        ("broker",),
        doc="served connections per span the meter remembers ≤ the listener meter's bound "
        "(client intervals)",
        judges_limit=True,
    ),
    Check(
        "client_ip_rate_span",
        "broker_side",
        per_broker(check_ip_rate_span),
        True,
        ("broker", "acceptor"),
        doc="served connections per IP per span the meter remembers ≤ q·m·w (m = n+1 from 3.8, "
        "else n; client intervals; on the acceptor target for load behind a proxy, keyed by "
        "the clients' own addresses)",
        judges_limit=True,
    ),
    Check(
        "client_over_throttling",
        "broker_side",
        per_broker(check_over_throttling),
        False,
        ("broker",),
        doc="every EOF before a response is explainable by a per-IP limit under some timing",
        judges_limit=True,  # exercised only when protected connections went past max
    ),
    Check(
        "client_connection_count",
        "broker_side",
        per_broker(check_connection_count),
        True,
        ("broker",),
        doc="served connections open at once ≤ max.connections / listener max (client view)",
        judges_limit=True,
    ),
    Check(
        "client_request_throttle",
        "broker_side",
        check_request_throttle,
        False,
        ("broker",),
        doc="throttle_time_ms ≤ w and only while a request quota is configured",
        judges_limit=True,
    ),
]
