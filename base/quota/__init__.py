"""Kafka's connection and request quota semantics as a pure, sans-IO library.

Nothing here touches a socket or reads a clock: callers pass ``now_ms``. Outcomes are
values with reasons; exceptions mean invalid configuration (``ConfigError``: key, value,
reason) or a caller bug. Reference: ``/work/shared/reference/kafka-quota-model.md``.

One accepted socket, as Kafka's acceptor handles it::

    cfg = parse_config(props)                      # Kafka's keys, validated
    quotas = ConnectionQuotas(cfg)
    step = quotas.record_connection_rate(L, t0)    # broker/listener rate: delay, +1 kept
    ... wait until now >= t0 + step.delay_ms and quotas.slot_available(L) ...
    adm = quotas.admit(L, ip, t1)                  # IP rate, then counts and per-IP cap
    # adm.outcome: ADMITTED | THROTTLED_IP (hold adm.throttle_ms, then close)
    #              | REJECTED_IP_COUNT (close now)
    quotas.release(L, ip)                          # when an admitted connection closes

Modules: ``meter`` (Kafka's windowed rate), ``config`` (keys, dynamic updates),
``connections`` (KIP-402/612 admission), ``client_quota_admin`` (Alter/Describe
ClientQuotas validation), ``requests`` (KIP-124 request and byte-rate quotas), ``mute``
(KIP-219 channel mute states).
"""

from base.quota.client_quota_admin import (
    INVALID_REQUEST,
    IP_QUOTA_KEYS,
    REQUEST_QUOTA_KEYS,
    validate_alteration,
    validate_describe_filter,
)
from base.quota.config import (
    INT_MAX,
    ConfigError,
    ListenerSpec,
    QuotaConfig,
    apply_dynamic_update,
    listener_key,
    parse_config,
    resolve_host,
)
from base.quota.connections import (
    Admission,
    ConnectionQuotas,
    Decision,
    Outcome,
    QuotaSnapshot,
    RateStep,
)
from base.quota.meter import QuotaCheck, RateMeter, SampledAvg, java_round
from base.quota.mute import ChannelMute, MuteEvent, MuteState
from base.quota.requests import (
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
    "ChannelMute",
    "ClientQuota",
    "ConfigError",
    "ConnectionQuotas",
    "Decision",
    "Default",
    "ListenerSpec",
    "MuteEvent",
    "MuteState",
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
