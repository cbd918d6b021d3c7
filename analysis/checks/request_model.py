"""Request quotas judged by the checker's own model (KIP-124, reference §0.5, §4.2, §4.3).

Every answered request is charged its request-handler time as a percentage of one thread
(`detail.charged_ms` of its `request` row where the acceptor recorded one: the broker's
own `localTimeMs` read from its request log, or a fetch long poll without its purgatory
wait; else `latency_ms`; × 100 / 1000) to its entity's bucket when the response is queued
(the row's instant), with a quota check: a violation iff the bucket's rate over the window
exceeds `request_percentage`; the throttle is min(round((rate − q)/q · W), w). Then its
network-thread time (`detail.network_ms`, the log's `sendTimeMs`) is recorded without a
check, as Kafka's `recordNoThrottle`. A charge the acceptor made when the broker's line
came after the response (`charge_source` `broker_log_late` / `wall_late`: it could not
throttle, so none was checked) is recorded without a check at `mono_ns + late_ms`.
Cluster-action (exempt) APIs are not charged. The bucket and its quota follow Kafka's
`DefaultQuotaCallback`: `quotaMetricTags` (a single enabled quota type fixes the key;
otherwise the first of the 8 precedence levels that exists) and `quotaLimit`. The quotas
are the runner's (its `config` rows), never the enforcer's.

Judged per request: the model's throttle against the recorded `request_throttle` row of
the same connection and instant. A throttle the model owes but none recorded, one recorded
while the bucket was under its quota, or a `throttle_time_ms` off by more than the
tolerance is a witness. Charges of one bucket stamped in the same millisecond have no
order the model can know (Kafka's quota clock is whole milliseconds, and requests finishing
on different threads are charged in whichever order they get there; the acceptor's
processes likewise): a decision stands if it is the model's for some order of its
millisecond, i.e. between charging it first and charging it last among them.
"""

from __future__ import annotations

import copy
from collections.abc import Container
from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    fmt,
    not_configured,
    not_exercised,
    witness,
)
from analysis.columns import detail_col
from analysis.model import RateMeter, java_round

if TYPE_CHECKING:
    from analysis.load import Run

NAME = "request_quota_model"
DEFAULT = "<default>"
THROTTLE_TOL_MS = 1  # both sides use whole-ms time; X is rounded to a whole ms
RATE_REL_TOL = 1e-9  # float arithmetic on the charged percentage
Entity = tuple[str | None, str | None]  # (user, client-id); None = dimension absent


def _entities(raw: dict[str, Any]) -> dict[Entity, float]:
    """request_quotas of one config row → {(user, client): percentage}."""
    out: dict[Entity, float] = {}
    rq = raw.get("request_quotas") or []
    items: list[dict[str, Any]] = []
    if isinstance(rq, list):
        items = [q for q in rq if isinstance(q, dict)]
    elif isinstance(rq, dict):  # the acceptor's form: {"user=...,client-id=...": pct}
        for key, pct in rq.items():
            q: dict[str, Any] = {"request_percentage": pct}
            for part in str(key).split(","):
                k, _, v = part.partition("=")
                if k.strip() in ("user", "client-id"):
                    q[k.strip()] = None if v.strip() in ("", DEFAULT) else v.strip()
            items.append(q)
    for q in items:
        pct = q.get("request_percentage")
        if pct is None:
            continue
        user = (q.get("user") or DEFAULT) if "user" in q else None
        client = (q.get("client-id") or DEFAULT) if "client-id" in q else None
        out[(user, client)] = float(pct)
    return out


class QuotaCallback:
    """Kafka's DefaultQuotaCallback for one quota type (request), from the reference §4.2."""

    def __init__(self) -> None:
        self.overrides: dict[Entity, float] = {}
        self.types: set[str] = set()  # only ever gains types (quotaTypesEnabled)

    def update(self, overrides: dict[Entity, float]) -> None:
        self.overrides = overrides
        for user, client in overrides:
            self.types.add("user+client" if user and client else ("user" if user else "client"))

    def tags(self, user: str, client: str) -> tuple[str, str]:
        if len(self.types) <= 1:
            only = next(iter(self.types), "client")
            return {"client": ("", client), "user": (user, ""), "user+client": (user, client)}[only]
        o = self.overrides
        if (user, client) in o or (user, DEFAULT) in o:
            return user, client
        if (user, None) in o:
            return user, ""
        if (DEFAULT, client) in o or (DEFAULT, DEFAULT) in o:
            return user, client
        if (DEFAULT, None) in o:
            return user, ""
        return "", client

    def limit(self, tags: tuple[str, str]) -> float | None:
        user, client = tags
        o = self.overrides
        if user and client:
            keys: list[Entity] = [(user, client), (user, DEFAULT), (DEFAULT, client)]
            keys.append((DEFAULT, DEFAULT))
        elif user:
            keys = [(user, None), (DEFAULT, None)]
        else:
            keys = [(None, client), (None, DEFAULT)]
        for k in keys:
            if k in o:
                return o[k]
        return None


def charged_ms_of(r: Any) -> float:
    """The time the acceptor charged: `detail.charged_ms` where it differs from the
    request's latency (a fetch long poll's purgatory wait is not charged), else latency_ms."""
    if r["charged_ms"] is not None:
        return float(r["charged_ms"])
    return float(r["latency_ms"] or 0.0)


def quota_versions(run: Run) -> list[tuple[int, dict[Entity, float]]]:
    """The runner's request quotas in each config version: (start, {entity: percentage})."""
    return [
        (start, _entities(raw))
        for start, raw in zip(run.timeline.starts, run.timeline.raw, strict=True)
    ]


def request_quotas_set(run: Run) -> str | None:
    """None when some (user, client-id) request_percentage is set at some time of the run."""
    return None if any(v for _s, v in quota_versions(run)) else "request_percentage quotas"


def check_request_model(run: Run) -> CheckResult:

    if (unset := request_quotas_set(run)) is not None:
        return not_configured(NAME, run, unset)
    versions = quota_versions(run)
    req = run.events("request", source="acceptor")
    rows = (
        req.select(
            "conn_id", "client_ip", "client_port", "listener", "mono_ns", "ts", "seq",
            "api_key", "client_id", "principal", "latency_ms",
            detail_col("acceptor", "request", "sample").cast("int").alias("sample"),
            detail_col("acceptor", "request", "charged_ms").cast("double").alias("charged_ms"),
            detail_col("acceptor", "request", "network_ms").cast("double").alias("network_ms"),
            detail_col("acceptor", "request", "late_ms").cast("double").alias("late_ms"),
            detail_col("acceptor", "request", "charge_source").alias("charge_source"),
        )
        .orderBy("mono_ns", "seq")
        .collect()
    )  # fmt: skip
    expected = (
        "throttle iff the bucket's charged request time over the window exceeds "
        "request_percentage, throttle_time_ms as the model's"
    )
    if not rows:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed="request quotas configured but no `request` rows in the history",
            expected=expected,
            explanation="the acceptor recorded no requests (history.request.sample=0?) or the "
            "target records none (broker): the charged time cannot be replayed",
        )
    sampled = {int(r["sample"]) for r in rows if r["sample"] is not None and int(r["sample"]) > 1}
    if sampled:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed=f"request rows are sampled (1 in {max(sampled)})",
            expected=expected,
            explanation="every request's time is charged; a sampled history cannot be replayed",
        )
    throttles = {
        (r["conn_id"], int(r["mono_ns"])): float(r["delay_ms"] or 0.0)
        for r in run.events("request_throttle", source="acceptor")
        .select("conn_id", "mono_ns", "delay_ms")
        .collect()
    }
    lim0 = run.timeline.limits[0]
    n_w, w = lim0.window_num, lim0.window_ms
    overlap = run.semantics.sampled_stat_overlap  # the release's rate meter
    meters: dict[tuple[str, str], RateMeter] = {}
    judged = over = 0
    peak_ratio = 0.0
    wit: list[dict[str, Any]] = []
    n_bad = 0
    # (instant, order, row, checked): the checked charge at the response, the network time
    # right after it, a late charge (no check) when its line came
    steps: list[tuple[int, int, Any, bool]] = []
    for i, r in enumerate(rows):
        ns = int(r["mono_ns"])
        if str(r["charge_source"] or "").endswith("_late"):
            steps.append((ns + int(float(r["late_ms"] or 0.0) * 1_000_000), 2 * i, r, False))
        else:
            steps.append((ns, 2 * i, r, True))
            if r["network_ms"]:
                steps.append((ns, 2 * i + 1, r, False))
    steps.sort(key=lambda s: (s[0], s[1]))
    # each step's bucket, millisecond and quota (Kafka's callback: its enabled quota types
    # only grow as config versions pass); same-millisecond peers per bucket: their charges'
    # order is unknowable (docstring)
    cb = QuotaCallback()
    version = -1
    sem = run.semantics  # which APIs its release and metadata mode charge
    uncharged = set(sem.exempt_api_keys) | set(sem.not_served_api_keys)
    charges: list[tuple[tuple[str, str], int, float] | None] = []
    for at_ns, _o, r, _c in steps:
        v = run.timeline.index_at(at_ns)
        if v != version:
            version = v
            cb.update(versions[v][1])
        charges.append(charged_bucket(cb, r, at_ns, uncharged))
    peers: dict[tuple[Any, int], list[int]] = {}
    for i, charge in enumerate(charges):
        if charge is not None:
            peers.setdefault(charge[:2], []).append(i)
    snapshots: dict[tuple[Any, int], RateMeter] = {}
    for pos, (_at, _order, r, checked) in enumerate(steps):
        ns = int(r["mono_ns"])
        charge = charges[pos]
        if charge is None:  # exempt, or no quota applies to its entity
            continue
        tags, t, quota = charge
        meter = meters.get(tags)
        if meter is None:
            meter = meters[tags] = RateMeter(quota, n_w, w, overlap=overlap)
        meter.bound = quota
        group = peers.get((tags, t), [])
        requests_in_ms = sum(1 for i in group if steps[i][3])
        if requests_in_ms > 1 and group[0] == pos:
            snapshots[(tags, t)] = copy.deepcopy(meter)  # before any charge of the ms
        if not checked:  # network time after the decision, or a late charge: no check
            meter.record(step_value(r, checked) * 100.0 / 1000.0, t)
            continue
        meter.record(step_value(r, checked) * 100.0 / 1000.0, t)
        rate, ws = meter.measure(t)
        model = kafka_throttle_ms(rate, ws, quota=quota, w=w)
        if model:
            over += 1
        borderline = abs(rate - quota) <= quota * RATE_REL_TOL
        if requests_in_ms > 1:
            # charged first in its millisecond, and charged after all the others of it
            first = copy.deepcopy(snapshots[(tags, t)])
            first.record(step_value(r, checked) * 100.0 / 1000.0, t)
            last = copy.deepcopy(meter)
            for i in group:
                if i > pos and steps[i][2] is not r:
                    last.record(step_value(steps[i][2], steps[i][3]) * 100.0 / 1000.0, t)
            lo = kafka_throttle_ms(*first.measure(t), quota=quota, w=w)
            hi = kafka_throttle_ms(*last.measure(t), quota=quota, w=w)
            recorded_here = throttles.get((r["conn_id"], ns), 0.0)
            if min(lo, hi) - THROTTLE_TOL_MS <= recorded_here <= max(lo, hi) + THROTTLE_TOL_MS:
                model = int(recorded_here)  # an order of its millisecond gives this decision
        judged += 1
        peak_ratio = max(peak_ratio, rate / quota if quota else float("inf"))
        recorded = throttles.get((r["conn_id"], ns), 0.0)
        why = None
        bucket = f"bucket user={tags[0]!r} client-id={tags[1]!r}"
        if model > THROTTLE_TOL_MS and recorded == 0 and not borderline:
            why = (
                f"throttle due ({bucket}: rate {fmt(rate, 3)} % > quota {fmt(quota)} %, model "
                f"{model} ms) but none applied"
            )
        elif recorded > THROTTLE_TOL_MS and model == 0 and not borderline:
            why = (
                f"throttled {fmt(recorded)} ms while under quota ({bucket}: rate "
                f"{fmt(rate, 3)} % ≤ {fmt(quota)} %)"
            )
        elif model and recorded and abs(recorded - model) > THROTTLE_TOL_MS:
            why = f"throttle_time_ms {fmt(recorded)} vs model {model} ms ({bucket})"
        if why:
            n_bad += 1
            if len(wit) < 10:
                wit.append(witness(r.asDict(), why))
    if not judged:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed=f"{len(rows)} request rows, none from an entity with a request quota",
            expected=expected,
            explanation="no request of a quota'd entity was answered: nothing to judge",
            exercised=False,
            raise_hint="requests from the quota'd user/client-id",
        )
    if not over and not n_bad:
        res = not_exercised(
            NAME,
            "request_percentage",
            round(peak_ratio * 100, 1),
            100,
            judged=judged,
            unit="% of the quota",
            hint="the request load of the quota'd user/client-id above request_percentage",
        )
        return res
    return CheckResult(
        NAME,
        FAIL if n_bad else PASS,
        observed=(
            f"{judged} requests charged to {len(meters)} bucket(s); model throttles {over}, "
            f"recorded {sum(1 for x in throttles.values() if x > 0)}; {n_bad} disagree"
        ),
        expected=expected,
        tolerance=(
            f"{THROTTLE_TOL_MS} ms on throttle_time_ms (whole-ms time, rounded X); decisions at "
            f"rate = quota within {RATE_REL_TOL:g} (float) are not judged"
        ),
        witnesses=wit,
        explanation="replayed every answered request through the checker's own request-quota "
        "model (Kafka's 8-level precedence)",
        judged=judged,
        exercised=True,
        peak=round(peak_ratio * 100, 1),
        limit=100.0,
    )


def charged_bucket(
    cb: QuotaCallback, r: Any, at_ns: int, uncharged: Container[int]
) -> tuple[tuple[str, str], int, float] | None:
    """The quota bucket a request is charged to, its millisecond and its quota; None when
    it is not charged (``uncharged``: exempt or not served in the run's release and
    metadata mode; a SASL login's request; or no quota applies to its entity)."""
    if not cb.types or r["api_key"] in uncharged or r["charge_source"] == "login":
        return None  # "login": a request of a SASL login, answered by Kafka's authenticator
    tags = cb.tags(r["principal"] or "ANONYMOUS", r["client_id"] or "")
    quota = cb.limit(tags)
    if quota is None:
        return None
    return tags, at_ns // 1_000_000, quota


def kafka_throttle_ms(rate: float, window_s: float, *, quota: float, w: int) -> int:
    """Kafka's throttle for a measured rate: min(round((rate − q)/q · W), w) over the quota."""
    if rate <= quota * (1 + RATE_REL_TOL):
        return 0
    return w if quota == 0 else min(java_round((rate - quota) / quota * window_s), w)


def step_value(r: Any, checked: bool) -> float:
    """The ms a step charges: the handler time at a checked step; after it, the network
    time; a late charge all of it at once."""
    network = float(r["network_ms"] or 0.0)
    if checked:
        return charged_ms_of(r)
    late = str(r["charge_source"] or "").endswith("_late")
    return charged_ms_of(r) + network if late else network


CHECKS = [
    Check(
        NAME,
        "requests",
        check_request_model,
        False,
        doc="request throttles where the model's charged time exceeds request_percentage",
        judges_limit=True,
        applies=request_quotas_set,
    ),
]
