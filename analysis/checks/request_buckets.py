"""Request quotas per bucket from the client side (KIP-124, target broker): a response is
never throttled while its bucket is provably under its quota.

On a broker target the checker cannot see Kafka's charges, only each response's
`in_flight_ms` (kafka-python's send → response, recorded by `loadprofiles.steady_conns`),
the user the connection logged in as (`detail.principal`) and its client id. That bounds
the charge from above:

- Kafka charges a request its handler-thread time plus, unthrottled, its network-thread
  time, both inside the request's send → response interval, so at most `in_flight_ms`;
  requests Kafka does not charge (exempt APIs, anything before the login) only make the
  bound looser.
- The login's network time is charged to the first request after it: at most the time
  from the connection's `connect_invoke` to that request's send, added to it.
- A charge is recorded when its response is queued, before the client reads it, so the
  charges in Kafka's meter at a response the client read at t are among those of responses
  read by t.
- Kafka's rate over a bucket's samples divides what `quota.window.num` windows of
  `quota.window.size.seconds` hold by at least (num − 1) windows (`Rate.windowSize`), and a
  sample older than num windows is purged, so at t the rate is at most
  U(t) = 100 · Σ bound of the bucket's responses read in (t − num·w, t] / ((num − 1)·w) %.

The bucket is Kafka's `DefaultQuotaCallback` over the runner's quotas (never the
enforcer's word: `analysis.checks.request_model.QuotaCallback`). A response with
`throttle_time_ms` > 0 whose bucket has no quota, or whose U(t) is at most the smallest
quota its bucket had in any version within one such span of t (a change takes effect at
Kafka some time around the runner's `config` row), is a witness: Kafka charged a bucket
the model does not (another entity's quota, a wrong precedence) or more than the request
could cost. Responses of a bucket that may be over its quota are not judged (the bound
proves nothing there); connections whose principal is unknown (a client certificate
names it) are not judged either.
"""

from __future__ import annotations

import copy
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
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
    witness,
)
from analysis.checks.request_model import QuotaCallback, quota_versions, request_quotas_set
from analysis.columns import detail_col

if TYPE_CHECKING:
    from analysis.load import Run

NAME = "client_request_quota_buckets"
MS = 1_000_000
#: requests a client sends before its login completes (never charged; their time is inside
#: the login bound added to the first request after them)
_LOGIN_APIS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


@dataclass
class _Charges:
    """One bucket's charge bounds (ns) at the instants their responses were read, with
    running sums so the bound over any span is two bisects."""

    at: list[int] = field(default_factory=list)
    cum: list[int] = field(default_factory=lambda: [0])

    def add(self, at_ns: int, bound_ns: int) -> None:
        self.at.append(at_ns)
        self.cum.append(self.cum[-1] + bound_ns)

    def within(self, lo_ns: int, hi_ns: int) -> int:
        """Sum of the bounds read in (lo, hi]."""
        return self.cum[bisect_right(self.at, hi_ns)] - self.cum[bisect_right(self.at, lo_ns)]


def _bounds(rows: list[dict[str, Any]], invoke_ns: dict[str, int]) -> list[int]:
    """Each response's charge bound (ns), rows of one connection in read order: its
    in-flight time, and on the first request after the login also the login's time."""
    out = []
    login_open = True
    for r in rows:
        bound = int(r["in_flight_ms"] * MS)
        if login_open and r["api_key"] not in _LOGIN_APIS:
            login_open = False
            start = invoke_ns.get(r["conn_id"])
            if start is not None:
                bound += max(0, r["mono_ns"] - bound - start)
        out.append(bound)
    return out


def check_request_quota_buckets(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    if (unset := request_quotas_set(run)) is not None:
        return not_configured(NAME, run, unset)
    versions = quota_versions(run)
    lim = run.timeline.limits[0]
    span_ns = lim.window_num * lim.window_ms * MS
    denominator_ns = max(lim.window_num - 1, 1) * lim.window_ms * MS
    rows = [
        r.asDict()
        for r in run.events("request_ok", source="client")
        .select(
            "conn_id",
            "client_ip",
            "client_port",
            "listener",
            "client_id",
            "api_key",
            "ts",
            "mono_ns",
            detail_col("client", "request_ok", "in_flight_ms").cast("double").alias("in_flight_ms"),
            detail_col("client", "request_ok", "principal").alias("principal"),
            F.coalesce(
                detail_col("client", "request_ok", "throttle_time_ms").cast("double"), F.lit(0.0)
            ).alias("thr"),
        )
        .where(F.col("in_flight_ms").isNotNull() & F.col("conn_id").isNotNull())
        .orderBy("mono_ns")
        .collect()
    ]
    invoke_ns = {
        r["conn_id"]: int(r["mono_ns"])
        for r in run.events("connect_invoke", source="client")
        .where(F.col("conn_id").isin(list({r["conn_id"] for r in rows}) or [""]))
        .select("conn_id", "mono_ns")
        .collect()
    }
    by_conn: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_conn[r["conn_id"]].append(r)
    for conn_rows in by_conn.values():
        for r, bound in zip(conn_rows, _bounds(conn_rows, invoke_ns), strict=True):
            r["bound_ns"] = bound

    # every response's bucket: the callback as it stands in each version (the enabled
    # quota types only ever grow, as Kafka's)
    starts = [s for s, _v in versions]
    snapshots: list[QuotaCallback] = []
    for _start, entities in versions:
        snap = copy.deepcopy(snapshots[-1]) if snapshots else QuotaCallback()
        snap.update(entities)
        snapshots.append(snap)
    charges: dict[tuple[str, str], _Charges] = defaultdict(_Charges)
    judged_rows: list[tuple[dict[str, Any], tuple[str, str]]] = []
    unknown_principal = 0
    for r in rows:
        if r["principal"] is None:
            unknown_principal += 1
            continue
        version = max(0, bisect_right(starts, r["mono_ns"]) - 1)
        tags = snapshots[version].tags(str(r["principal"]), str(r["client_id"] or ""))
        charges[tags].add(int(r["mono_ns"]), int(r["bound_ns"]))
        judged_rows.append((r, tags))

    def quotas_near(t_ns: int, user: str, client: str) -> list[float | None]:
        """The bucket's quota in every version in force within one span of t ([] when
        the bucket itself differs between them: nothing provable)."""
        lo = max(0, bisect_right(starts, t_ns - span_ns) - 1)
        hi = bisect_right(starts, t_ns + span_ns)
        buckets = {snapshots[i].tags(user, client) for i in range(lo, hi)}
        if len(buckets) != 1:
            return []
        tags = buckets.pop()
        return [snapshots[i].limit(tags) for i in range(lo, hi)]

    throttled = sum(1 for r in rows if r["thr"] > 0)
    peak_thr = max((float(r["thr"]) for r in rows), default=0.0)
    judged = 0
    bad: list[dict[str, Any]] = []
    for r, tags in judged_rows:
        t = int(r["mono_ns"])
        quotas = quotas_near(t, str(r["principal"]), str(r["client_id"] or ""))
        if not quotas:
            continue
        upper = 100.0 * charges[tags].within(t - span_ns, t) / denominator_ns
        thr = float(r["thr"])
        if all(q is None for q in quotas):
            why = "throttled, but its bucket has no request quota"
        elif any(q is None for q in quotas):
            continue  # a quota set or removed around t: nothing provable
        elif upper <= min(q for q in quotas if q is not None):
            why = (
                f"throttled while provably under its quota: at most {fmt(upper)} % "
                f"vs request_percentage {fmt(min(q for q in quotas if q is not None))} %"
            )
        else:
            continue  # may be over its quota: the bound proves nothing
        judged += 1
        if thr > 0:
            bad.append(
                witness(
                    r,
                    f"{why} (bucket user={tags[0]!r}, client-id={tags[1]!r}; "
                    f"throttle_time_ms {fmt(thr)})",
                    principal=r["principal"],
                    client_id=r["client_id"],
                )
            )
    parts = [
        Part(
            "never throttled while provably under",
            judged,
            note=f"responses of buckets under their quota (bound U ≤ quota); "
            f"{unknown_principal} with an unknown principal not judged",
            hint="a user or client id whose quota its clients stay well under",
        )
    ]
    if not rows:
        res = CheckResult(
            NAME,
            UNKNOWN,
            observed="no response with a send time (kafka-python's sockets record them)",
            expected="responses of the steady clients",
            explanation="no relevant event was recorded, so the rule was not judged",
            judged=0,
            exercised=False,
        )
        res.parts = parts
        return res
    res = CheckResult(
        NAME,
        FAIL if bad else (PASS if judged else UNKNOWN),
        observed=(
            f"{judged} responses of buckets provably under their quota, {len(bad)} of them "
            f"throttled; {throttled} of {len(rows)} responses throttled (max {fmt(peak_thr)} ms)"
        ),
        expected="no throttle on a response whose bucket is provably under its quota",
        tolerance=(
            "none: the bound over-counts (in-flight time ⊇ handler + network time; "
            f"{lim.window_num} windows read over {lim.window_num - 1})"
        ),
        witnesses=bad[:10],
        explanation=(
            "Kafka's DefaultQuotaCallback over the runner's quotas; a bucket's rate at t is "
            "at most its responses' in-flight time read in (t − n·w, t] over (n − 1)·w"
        ),
        judged=judged,
        exercised=judged > 0 and throttled > 0,
    )
    res.parts = parts
    return res


CHECKS = [
    Check(
        NAME,
        "broker_side",
        check_request_quota_buckets,
        False,
        ("acceptor", "broker"),  # judged from the clients' rows, whoever enforces
        doc="no throttle_time_ms on a response whose (user, client-id) bucket is provably "
        "under its request_percentage (in-flight time bounds the charge)",
        judges_limit=True,
        applies=request_quotas_set,
    ),
]
