"""All checks, one module per family; `ALL_CHECKS` in the order the report shows them."""

from __future__ import annotations

from analysis.checks import (
    accounting,
    auth,
    broker_side,
    clients,
    concurrency,
    delays,
    front,
    kafka_metrics,
    late_charge,
    model_replay,
    processors,
    rate_spans,
    request_buckets,
    request_model,
    requests,
    secured,
    strictness,
    testimony,
)
from analysis.checks.base import FAIL, NA, PASS, UNKNOWN, Check, CheckResult, merge, run_check

ALL_CHECKS: list[Check] = [
    *model_replay.CHECKS,
    *concurrency.CHECKS,
    *rate_spans.CHECKS,
    *delays.CHECKS,
    *processors.CHECKS,
    *requests.CHECKS,
    *request_model.CHECKS,
    *late_charge.CHECKS,
    *clients.CHECKS,
    *accounting.CHECKS,
    *front.CHECKS,
    *broker_side.CHECKS,
    *request_buckets.CHECKS,
    *auth.CHECKS,
    *secured.CHECKS,
    *kafka_metrics.CHECKS,
    *strictness.CHECKS,
    *testimony.CHECKS,
]

__all__ = [
    "ALL_CHECKS",
    "FAIL",
    "NA",
    "PASS",
    "UNKNOWN",
    "Check",
    "CheckResult",
    "merge",
    "run_check",
]
