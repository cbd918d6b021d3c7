"""A response charged late could not have been throttled (KIP-124, reference §0.5, §4.3).

Reading the broker's request log, the acceptor charges Kafka's own handler time; a
response whose log line has not come yet is held for it, unless its charge could not
throttle it whatever it turns out to be (a bucket far from its quota): then the response
goes at once, unthrottled, and the charge is made without a check when the line comes
(`charge_source` `broker_log_late` / `wall_late`, at `mono_ns + late_ms`). That shortcut
is the enforcer's claim, and `request_quota_model` takes it on trust (it records late
charges without a check). This check judges it with the checker's own model: at the
response's instant (`mono_ns`), the bucket as every charge before it left it, plus the
most the response could be charged (the bound the claim is made with: the broker time
the acceptor saw, `latency_ms`, of which the handler time it was charged, `charged_ms`,
is a part), must not be over `request_percentage` — else Kafka, charging it then with its
check, could have throttled a response the acceptor let through. The enforcer asks over
the shortest window Kafka's `Rate` measures (n − 1 windows, its padding), so a claim it
makes right is right by the model too.

Charges of one bucket stamped in the same millisecond have no order the model can know
(`request_model`'s docstring): the claim is judged before any of them, the kindest order.
A model throttle within `THROTTLE_TOL_MS` or a rate within `RATE_REL_TOL` of the quota is
not a witness.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    fmt,
    not_configured,
    witness,
)
from analysis.checks.request_model import (
    RATE_REL_TOL,
    THROTTLE_TOL_MS,
    QuotaCallback,
    charged_bucket,
    charged_ms_of,
    kafka_throttle_ms,
    quota_versions,
    request_quotas_set,
    step_value,
)
from analysis.columns import detail_col
from analysis.model import RateMeter

if TYPE_CHECKING:
    from analysis.load import Run

NAME = "late_charge_could_not_throttle"
MS = 1_000_000
#: the `charge_source` of a charge made after its response went out
LATE_SOURCES = ("broker_log_late", "wall_late")
_CLAIM, _CHARGE = 0, 1  # a claim is judged before the charges of its millisecond

EXPECTED = (
    "every response charged late (no check) found its bucket, plus the most it could be "
    "charged (its latency), within request_percentage at its instant"
)


def _claimed_ms(r: Any) -> float:
    """The bound a late charge was claimed under: the broker time the acceptor saw
    (forward -> response), never less than what it was then charged."""
    return max(float(r["latency_ms"] or 0.0), charged_ms_of(r))


def _rows(run: Run) -> list[Any]:
    col = "acceptor", "request"
    return (
        run.events("request", source="acceptor")
        .select(
            "conn_id", "client_ip", "client_port", "listener", "mono_ns", "ts", "seq",
            "api_key", "client_id", "principal", "latency_ms",
            detail_col(*col, "sample").cast("int").alias("sample"),
            detail_col(*col, "charged_ms").cast("double").alias("charged_ms"),
            detail_col(*col, "network_ms").cast("double").alias("network_ms"),
            detail_col(*col, "late_ms").cast("double").alias("late_ms"),
            detail_col(*col, "charge_source").alias("charge_source"),
        )
        .orderBy("mono_ns", "seq")
        .collect()
    )  # fmt: skip


def check_late_charges(run: Run) -> CheckResult:
    if (unset := request_quotas_set(run)) is not None:
        return not_configured(NAME, run, unset)
    versions = quota_versions(run)
    rows = _rows(run)
    claims = [r for r in rows if r["charge_source"] in LATE_SOURCES]
    if not claims:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed=f"{len(rows)} request rows, none charged after its response",
            expected=EXPECTED,
            explanation="no response went out before its charge (no broker request log "
            "read, or every bucket near its quota held its responses): no claim to judge",
            exercised=False,
        )
    if any(r["sample"] is not None and int(r["sample"]) > 1 for r in rows):
        return CheckResult(
            NAME,
            UNKNOWN,
            observed="request rows are sampled",
            expected=EXPECTED,
            explanation="the buckets are replayed from every charge; a sampled history cannot be",
        )
    # every charge as `request_model` replays it (the checked one at the response, its
    # network time right after, a late one when its line came), and each late response's
    # claim at its response, before the charges of its millisecond
    events: list[tuple[int, int, int, int, Any, bool]] = []
    for i, r in enumerate(rows):
        ns = int(r["mono_ns"])
        if r["charge_source"] in LATE_SOURCES:
            events.append((ns // MS, _CLAIM, ns, 2 * i, r, False))
            at = ns + int(float(r["late_ms"] or 0.0) * MS)
            events.append((at // MS, _CHARGE, at, 2 * i, r, False))
        else:
            events.append((ns // MS, _CHARGE, ns, 2 * i, r, True))
            if r["network_ms"]:
                events.append((ns // MS, _CHARGE, ns, 2 * i + 1, r, False))
    events.sort(key=lambda e: e[:4])
    lim0 = run.timeline.limits[0]
    n_w, w = lim0.window_num, lim0.window_ms
    overlap = run.semantics.sampled_stat_overlap
    sem = run.semantics
    uncharged = set(sem.exempt_api_keys) | set(sem.not_served_api_keys)
    cb = QuotaCallback()
    version = -1
    meters: dict[tuple[str, str], RateMeter] = {}
    judged = n_bad = 0
    peak = 0.0
    wit: list[dict[str, Any]] = []
    for _ms, kind, at_ns, _order, r, checked in events:
        v = run.timeline.index_at(at_ns)
        if v != version:
            version = v
            cb.update(versions[v][1])
        charge = charged_bucket(cb, r, at_ns, uncharged)
        if charge is None:  # exempt, a login's, or no quota applies to its entity
            continue
        tags, t, quota = charge
        meter = meters.get(tags)
        if meter is None:
            meter = meters[tags] = RateMeter(quota, n_w, w, overlap=overlap)
        meter.bound = quota
        if kind == _CHARGE:
            meter.record(step_value(r, checked) * 100.0 / 1000.0, t)
            continue
        # the claim: charged then, at most its bound, with Kafka's check: no throttle
        bound_ms = _claimed_ms(r)
        probe = copy.deepcopy(meter)
        probe.record(bound_ms * 100.0 / 1000.0, t)
        rate, window_s = probe.measure(t)
        model = kafka_throttle_ms(rate, window_s, quota=quota, w=w)
        judged += 1
        peak = max(peak, rate / quota if quota else float("inf"))
        if model > THROTTLE_TOL_MS and abs(rate - quota) > quota * RATE_REL_TOL:
            n_bad += 1
            if len(wit) < 10:
                why = (
                    f"charged late without a check, but up to {fmt(bound_ms, 3)} ms put "
                    f"bucket user={tags[0]!r} client-id={tags[1]!r} at {fmt(rate, 3)} % > "
                    f"quota {fmt(quota)} %: the model throttles it {model} ms"
                )
                wit.append(witness(r.asDict(), why))
    if not judged:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed=f"{len(claims)} responses charged late, none of an entity with a quota",
            expected=EXPECTED,
            explanation="no late charge fell in a quota'd bucket: nothing to judge",
            exercised=False,
        )
    return CheckResult(
        NAME,
        FAIL if n_bad else PASS,
        observed=(
            f"{judged} responses charged late; their buckets peaked at "
            f"{fmt(peak * 100, 1)} % of the quota; {n_bad} would have been throttled"
        ),
        expected=EXPECTED,
        tolerance=(
            f"{THROTTLE_TOL_MS} ms on the model's throttle; a rate within {RATE_REL_TOL:g} of "
            "the quota (float) is not judged; same-millisecond charges after the claim"
        ),
        witnesses=wit,
        explanation="replayed every charge through the checker's own request-quota model "
        "and judged each late charge at its response, with its check",
        judged=judged,
        exercised=True,
        peak=round(peak * 100, 1),
        limit=100.0,
    )


CHECKS = [
    Check(
        NAME,
        "requests",
        check_late_charges,
        False,
        doc="a response charged late (unthrottled) could not have been throttled by the model",
        applies=request_quotas_set,
    ),
]
