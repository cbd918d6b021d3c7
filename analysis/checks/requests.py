"""Model-free: request-quota throttles (KIP-124) are bounded and never on exempt APIs.

ClientRequestQuotaManager bounds the throttle at the quota window; cluster-action APIs
(LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, Vote,
quorum epochs, AlterPartition, Envelope, broker registration/heartbeat, AllocateProducerIds,
share-group state) are exempt. UpdateFeatures is a cluster action but throttled on a broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.checks.base import (
    FAIL,
    PASS,
    Check,
    CheckResult,
    fmt,
    not_configured,
    nothing_judged,
    witness,
)

if TYPE_CHECKING:
    from analysis.load import Run

#: The only API a Kafka 4.3.1 broker answers without a request-quota throttle
#: (`KafkaApis`: `sendResponseExemptThrottle`). DescribeQuorum (55), UpdateFeatures (57) and
#: the share-group-state APIs (83-87) are cluster actions too but are answered through
#: `sendMaybeThrottle` (forwarded or throttled), so they are charged like any request
#: (reference Errata, section 4.4; Kafka's own RequestQuotaTest excludes them from its set).
EXEMPT_API_KEYS = {27: "WriteTxnMarkers"}

#: Cluster actions a broker does not serve at all (ZooKeeper-era and controller-only
#: APIs): no quota outcome is defined for them, so the request model does not judge them.
NOT_SERVED_BY_A_BROKER = {
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    52: "Vote",
    53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch",
    56: "AlterPartition",
    58: "Envelope",
    62: "BrokerRegistration",
    63: "BrokerHeartbeat",
    67: "AllocateProducerIds",
}


def check_request_throttles(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    w = float(max(lim.window_ms for lim in run.timeline.limits))
    rows = run.events("request_throttle", source="acceptor")
    is_bad = (F.col("delay_ms") > F.lit(w + 0.5)) | F.col("api_key").isin(*EXEMPT_API_KEYS)
    stats = rows.agg(
        F.count(F.lit(1)).alias("n"),
        F.max("delay_ms").alias("max"),
        F.sum(F.when(is_bad, 1).otherwise(0)).alias("bad"),
    ).first()
    assert stats is not None
    n_bad = int(stats["bad"] or 0)
    n = int(stats["n"] or 0)
    if not n:
        if not any(raw.get("request_quotas") for raw in run.timeline.raw):
            return not_configured("request_throttle_bounds", run, "request_percentage quotas")
        res = nothing_judged("request_throttle_bounds", "request throttles")
        res.raise_hint = "the request load of a quota'd user/client-id above request_percentage"
        return res
    wit = []
    for r in rows.where(is_bad).orderBy("mono_ns").limit(10).collect() if n_bad else []:
        if r["api_key"] in EXEMPT_API_KEYS:
            why = f"throttled exempt API {EXEMPT_API_KEYS[r['api_key']]} (key {r['api_key']})"
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


CHECKS = [
    Check(
        "request_throttle_bounds",
        "requests",
        check_request_throttles,
        False,
        doc="request throttles ≤ window and never on exempt (cluster-action) APIs",
    ),
]
