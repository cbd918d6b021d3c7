"""Kafka's connection and request quota semantics as a pure, sans-IO library.

Nothing here touches a socket or reads a clock: callers pass ``now_ms``. Outcomes are
values with reasons; exceptions mean a caller bug or invalid configuration
(``ConfigError``). Reference: ``/work/shared/reference/kafka-quota-model.md``.
"""

from harness.quota.client_quota_admin import (
    INVALID_REQUEST,
    IP_QUOTA_KEYS,
    REQUEST_QUOTA_KEYS,
    validate_alteration,
    validate_describe_filter,
)
from harness.quota.config import (
    INT_MAX,
    ConfigError,
    ListenerSpec,
    QuotaConfig,
    apply_dynamic_update,
    listener_key,
    parse_config,
    resolve_host,
)
from harness.quota.connections import (
    Admission,
    ConnectionQuotas,
    Decision,
    Outcome,
    QuotaSnapshot,
    RateStep,
)
from harness.quota.meter import QuotaCheck, RateMeter, SampledAvg, java_round
from harness.quota.requests import (
    CLUSTER_ACTION_API_KEYS,
    DEFAULT,
    EXEMPT_API_KEYS,
    ClientQuota,
    Default,
    RequestCharge,
    RequestQuotas,
    combine,
)

__all__ = [
    "CLUSTER_ACTION_API_KEYS",
    "DEFAULT",
    "EXEMPT_API_KEYS",
    "INT_MAX",
    "INVALID_REQUEST",
    "IP_QUOTA_KEYS",
    "REQUEST_QUOTA_KEYS",
    "Admission",
    "ClientQuota",
    "ConfigError",
    "ConnectionQuotas",
    "Decision",
    "Default",
    "ListenerSpec",
    "Outcome",
    "QuotaCheck",
    "QuotaConfig",
    "QuotaSnapshot",
    "RateMeter",
    "RateStep",
    "RequestCharge",
    "RequestQuotas",
    "SampledAvg",
    "apply_dynamic_update",
    "combine",
    "java_round",
    "listener_key",
    "parse_config",
    "resolve_host",
    "validate_alteration",
    "validate_describe_filter",
]
