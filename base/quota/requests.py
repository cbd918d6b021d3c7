"""Kafka's client quotas on user / client-id entities: request time (KIP-124) and byte rates.

Which quota applies, and *who shares a bucket*, is the subtle part (reference §4.2): Kafka's
``DefaultQuotaCallback.quotaMetricTags`` picks the sensor key by walking the 8 precedence
levels, and ``quotaLimit`` looks the bound up from that key; a ``<user>`` quota is one bucket
for all the user's client ids, ``<user, default-client>`` one per client id, and so on.
Each quota type (request, produce, fetch) is its own manager with its own entities and its
own "only one level ever enabled" shortcut, exactly as Kafka runs one
``ClientQuotaManager`` per type.

Throttle times: request quota bounded by the window, byte rates unbounded; when both apply
to one produce/fetch, the larger wins and a tie goes to the request manager (§4.6).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from base.quota.client_quota_admin import REQUEST_QUOTA_KEYS
from base.quota.faults import NO_FAULTS, Faults
from base.quota.meter import RateMeter

__all__ = [
    "CLUSTER_ACTION_API_KEYS",
    "DEFAULT",
    "EXEMPT_API_KEYS",
    "NANOS_TO_PERCENTAGE",
    "NOT_SERVED_CLUSTER_ACTION_API_KEYS",
    "THROTTLED_CLUSTER_ACTION_API_KEYS",
    "UNLIMITED",
    "ClientQuota",
    "Default",
    "EntityName",
    "RequestCharge",
    "RequestQuotas",
    "combine",
]


class Default(Enum):
    """The ``<default>`` entity name (Kafka's ``ConfigEntityName.DEFAULT``)."""

    DEFAULT = "<default>"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = Default.DEFAULT
#: A user or client-id component: a name, ``DEFAULT``, or ``None`` (not part of the entity).
EntityName = str | Default | None

#: ``Long.MaxValue``: the bound of a bucket without any quota (never violated).
UNLIMITED = float(2**63 - 1)
NANOS_TO_PERCENTAGE = 100.0 / 1e9
SENSOR_EXPIRY_MS = 3600 * 1000

#: ``ApiKeys`` with ``clusterAction=true`` (reference §4.4). Numbers as in kafka-python's
#: ``kafka.protocol.api_key.ApiKey`` (not imported: it loads every schema, ~250 ms).
CLUSTER_ACTION_API_KEYS: frozenset[int] = frozenset(
    {
        4,  # LeaderAndIsr
        5,  # StopReplica
        6,  # UpdateMetadata
        7,  # ControlledShutdown
        27,  # WriteTxnMarkers
        52,  # Vote
        53,  # BeginQuorumEpoch
        54,  # EndQuorumEpoch
        55,  # DescribeQuorum
        56,  # AlterPartition
        57,  # UpdateFeatures
        58,  # Envelope
        62,  # BrokerRegistration
        63,  # BrokerHeartbeat
        67,  # AllocateProducerIds
        83,  # InitializeShareGroupState
        84,  # ReadShareGroupState
        85,  # WriteShareGroupState
        86,  # DeleteShareGroupState
        87,  # ReadShareGroupStateSummary
    }
)
UPDATE_FEATURES = 57
WRITE_TXN_MARKERS = 27
#: Cluster actions a 4.3.1 *broker* does not serve (reference Errata §4.4): the ZooKeeper-era
#: handlers and the controller-only KRaft APIs. ``KafkaApis.handle`` has no case for them and
#: the listener's ``ApiVersionManager`` does not enable them, so the broker closes the
#: connection instead of answering; nothing is charged or exempted.
NOT_SERVED_CLUSTER_ACTION_API_KEYS: frozenset[int] = frozenset(
    {4, 5, 6, 7, 52, 53, 54, 56, 58, 62, 63, 67}
)
#: Cluster actions a 4.3.1 broker serves and *charges*: DescribeQuorum and UpdateFeatures are
#: forwarded to the controller (``forwardToController`` -> ``sendForwardedResponse`` ->
#: ``sendMaybeThrottle``), the share-group-state APIs answer through ``sendMaybeThrottle``.
THROTTLED_CLUSTER_ACTION_API_KEYS: frozenset[int] = frozenset({55, 57, 83, 84, 85, 86, 87})
#: Never charged to a client bucket on a KRaft broker (a ZooKeeper-mode broker exempts more:
#: `base.quota.versions.EXEMPT_ZOOKEEPER`): only WriteTxnMarkers, the one served cluster
#: action answered with ``sendResponseExemptThrottle`` (``KafkaApis.handleWriteTxnMarkersRequest``);
#: ``RequestQuotaTest`` excludes the others from its exempt set in the same way.
EXEMPT_API_KEYS: frozenset[int] = (
    CLUSTER_ACTION_API_KEYS - NOT_SERVED_CLUSTER_ACTION_API_KEYS - THROTTLED_CLUSTER_ACTION_API_KEYS
)

_KEY_FOR_KIND = {
    "request": "request_percentage",
    "produce": "producer_byte_rate",
    "fetch": "consumer_byte_rate",
}

# quotaTypesEnabled bits (ClientQuotaManager.QuotaTypes)
_CLIENT_ID_ENABLED = 1
_USER_ENABLED = 2
_USER_CLIENT_ID_ENABLED = 4

_Entity = tuple[EntityName, EntityName]


@dataclass(frozen=True, slots=True)
class RequestCharge:
    """One request's quota outcome; ``bucket`` is Kafka's (user, client-id) metric tags."""

    throttle_ms: int
    exempt: bool
    bucket: tuple[str, str]
    quota: float
    rate: float


@dataclass(frozen=True)
class ClientQuota:
    """One configured entity for DescribeClientQuotas; ``None`` names are ``<default>``."""

    entity: dict[str, str | None]
    values: dict[str, float]


class _QuotaManager:
    """One of Kafka's ``ClientQuotaManager``s: entities, enabled levels, buckets, meters."""

    def __init__(
        self,
        samples: int,
        window_ms: int,
        *,
        bounded: bool,
        legacy: bool,
        meter_cls: type[RateMeter] = RateMeter,
    ) -> None:
        self.meter_cls = meter_cls
        self.samples = samples
        self.window_ms = window_ms
        self.bounded = bounded
        self.legacy = legacy
        self.overrides: dict[_Entity, float] = {}
        self.types_enabled = 0
        self.meters: dict[tuple[str, str], RateMeter] = {}

    def set(self, entity: _Entity, value: float | None) -> None:
        user, client = entity
        if user is not None:
            self.types_enabled |= _USER_CLIENT_ID_ENABLED if client is not None else _USER_ENABLED
        elif client is not None:
            self.types_enabled |= _CLIENT_ID_ENABLED
        if value is None:
            self.overrides.pop(entity, None)
        else:
            self.overrides[entity] = float(value)
        for tags, meter in self.meters.items():  # updateQuotaMetricConfigs
            meter.bound = self.limit(tags)

    @property
    def enabled(self) -> bool:
        return self.types_enabled != 0

    def bucket(self, user: str, client_id: str) -> tuple[str, str]:
        """``quotaMetricTags``."""
        enabled = self.types_enabled
        if enabled in (0, _CLIENT_ID_ENABLED):
            return "", client_id
        if enabled == _USER_ENABLED:
            return user, ""
        if enabled == _USER_CLIENT_ID_ENABLED:
            return user, client_id
        o = self.overrides
        if (user, client_id) in o or (user, DEFAULT) in o:  # levels 1, 2
            return user, client_id
        if (user, None) in o:  # 3
            return user, ""
        if (DEFAULT, client_id) in o or (DEFAULT, DEFAULT) in o:  # 4, 5
            return user, client_id
        if (DEFAULT, None) in o:  # 6
            return user, ""
        return "", client_id  # 7, 8 (and no quota at all)

    def limit(self, tags: tuple[str, str]) -> float:
        """``quotaLimit``: the bound for a bucket, ``UNLIMITED`` when nothing applies."""
        user, client_id = tags
        o = self.overrides
        q: float | None = None
        if user and client_id:
            for key in (
                (user, client_id),
                (user, DEFAULT),
                (DEFAULT, client_id),
                (DEFAULT, DEFAULT),
            ):
                q = o.get(key)
                if q is not None:
                    break
        elif user:
            q = o.get((user, None))
            if q is None:
                q = o.get((DEFAULT, None))
        elif client_id:
            q = o.get((None, client_id))
            if q is None:
                q = o.get((None, DEFAULT))
        return UNLIMITED if q is None else q

    def meter(self, tags: tuple[str, str]) -> RateMeter:
        meter = self.meters.get(tags)
        if meter is None:
            meter = self.meter_cls(
                self.samples, self.window_ms, self.limit(tags), legacy=self.legacy
            )
            self.meters[tags] = meter
        return meter

    def record(
        self, user: str, client_id: str, value: float, now_ms: int
    ) -> tuple[int, tuple[str, str], RateMeter]:
        tags = self.bucket(user, client_id)
        meter = self.meter(tags)
        violation = meter.record(value, now_ms)
        if violation is None:
            return 0, tags, meter
        return violation.throttle_ms(self.window_ms if self.bounded else None), tags, meter

    def expire_idle(self, now_ms: int) -> None:
        stale = [
            t
            for t, m in self.meters.items()
            if m.last_record_ms is not None and now_ms - m.last_record_ms > SENSOR_EXPIRY_MS
        ]
        for t in stale:
            del self.meters[t]


def _check_name(name: EntityName, what: str) -> None:
    if name == "":
        raise ValueError(f"Empty {what} not supported")
    if not (name is None or name is DEFAULT or isinstance(name, str)):
        raise TypeError(f"{what} must be a name, DEFAULT or None, got {name!r}")


class RequestQuotas:
    """Request-percentage and byte-rate quotas of one broker, per Kafka's precedence rules.

    ``controller_mutation_rate`` is stored and described but not enforced (Kafka uses a
    token bucket for it, which is out of scope).
    """

    def __init__(
        self,
        window_num: int = 11,
        window_size_seconds: int = 1,
        *,
        legacy_meter: bool = False,
        faults: Faults = NO_FAULTS,
        exempt_api_keys: frozenset[int] = EXEMPT_API_KEYS,
    ) -> None:
        """``exempt_api_keys``: the cluster actions answered without a charge, which depend
        on the metadata mode enforced as (`base.quota.versions`; KRaft's by default)."""
        self.window_ms = window_size_seconds * 1000
        self.exempt_api_keys = exempt_api_keys
        self.faults = faults
        # The seeded-fault hooks (base.quota.faults), asked once: Kafka's in production.
        policy = faults.policy()
        meter_cls = policy.meter_class(RateMeter)
        #: (user, client id) -> the pair a request's bucket is picked by; None: as given
        self._entity = policy.request_entity()
        self._managers = {
            "request_percentage": _QuotaManager(
                window_num,
                self.window_ms,
                bounded=policy.request_throttle_bounded(True),
                legacy=legacy_meter,
                meter_cls=meter_cls,
            ),
            "producer_byte_rate": _QuotaManager(
                window_num, self.window_ms, bounded=False, legacy=legacy_meter
            ),
            "consumer_byte_rate": _QuotaManager(
                window_num, self.window_ms, bounded=False, legacy=legacy_meter
            ),
            "controller_mutation_rate": _QuotaManager(
                window_num, self.window_ms, bounded=True, legacy=legacy_meter
            ),
        }
        self._request = self._managers["request_percentage"]
        self._exempt = RateMeter(window_num, self.window_ms, UNLIMITED, legacy=legacy_meter)

    # -- configuration ----------------------------------------------------------------------

    def set_quota(
        self, user: EntityName, client_id: EntityName, key: str, value: float | None
    ) -> None:
        """Set (or with ``value=None`` remove) one quota on one entity.

        ``user``/``client_id``: a name, ``DEFAULT`` for ``<default>``, or ``None`` when that
        component is not part of the entity (``(None, None)`` is refused).
        """
        _check_name(user, "user")
        _check_name(client_id, "client-id")
        if user is None and client_id is None:
            raise ValueError("Invalid empty client quota entity")
        manager = self._managers.get(key)
        if manager is None:
            raise ValueError(f"Invalid configuration key {key}")
        if value is not None and not value > 0:
            raise ValueError(f"Quota {key} must be greater than 0")
        if value is not None:
            value = float(REQUEST_QUOTA_KEYS[key](value))
        manager.set((user, client_id), value)

    def quotas(self) -> list[ClientQuota]:
        """Every configured entity with its values (for DescribeClientQuotas)."""
        merged: dict[_Entity, dict[str, float]] = {}
        for key, manager in self._managers.items():
            for entity, value in manager.overrides.items():
                merged.setdefault(entity, {})[key] = value
        result: list[ClientQuota] = []
        for (user, client), values in merged.items():
            names: dict[str, str | None] = {}
            if user is not None:
                names["user"] = None if user is DEFAULT else str(user)
            if client is not None:
                names["client-id"] = None if client is DEFAULT else str(client)
            result.append(ClientQuota(names, dict(values)))
        return result

    def enabled(self) -> bool:
        """Whether any request quota was ever set (Kafka's `quotasEnabled`): until then no
        request is charged."""
        return self._request.enabled

    @property
    def claim_windows(self) -> int:
        """The windows `could_throttle` judges over: the shortest `Rate` measures, n - 1."""
        return self._request.samples - 1

    def could_throttle(
        self,
        user: str,
        client_id: str,
        api_key: int,
        handler_ns: int,
        now_ms: int,
        *,
        windows: int | None = None,
    ) -> bool:
        """Whether charging at most `handler_ns` now could throttle (False: it surely cannot).

        An upper bound of what `record_request` would find: the bucket's recorded sum plus
        the charge over the shortest window `Rate` can have, `(samples - 1)` windows (it pads
        to that; `windows` another count, the seeded fault `late_charge_n_windows`'s n),
        against its bound. Reads the meter without side effects (no meter made,
        nothing purged): a purge here, at a time no charge was made, would move where later
        windows start, so the enforcer's throttles would depend on when it asked, not only on
        what it charged, and the checker's replay of the charges would disagree by a few ms.
        """
        if api_key in self.exempt_api_keys or not self._request.enabled:
            return False
        manager = self._request
        if self._entity is not None:
            user, client_id = self._entity(user, client_id)
        tags = manager.bucket(user, client_id)
        bound = manager.limit(tags)
        if bound >= UNLIMITED:
            return False
        meter = manager.meters.get(tags)
        total = meter.peek_sum(now_ms) if meter is not None else 0.0
        span = self.claim_windows if windows is None else windows
        shortest_ms = max(span * manager.window_ms, 1)
        return (total + handler_ns * NANOS_TO_PERCENTAGE) / (shortest_ms / 1000.0) > bound

    def quota_for(self, user: str, client_id: str, key: str = "request_percentage") -> float:
        manager = self._managers[key]
        return manager.limit(manager.bucket(user, client_id))

    def max_value_in_quota_window(
        self, user: str, client_id: str, key: str = "consumer_byte_rate"
    ) -> float:
        """``getMaxValueInQuotaWindow``: quota x (n-1) x w, Kafka's fetch-size cap."""
        manager = self._managers[key]
        bound = manager.limit(manager.bucket(user, client_id))
        if bound >= UNLIMITED:
            return 1.7976931348623157e308  # Double.MaxValue
        return (manager.samples - 1) * (manager.window_ms / 1000) * bound

    def bucket_for(
        self, user: str, client_id: str, key: str = "request_percentage"
    ) -> tuple[str, str]:
        """The (user, client-id) metric tags whose meter this client's requests share."""
        return self._managers[key].bucket(user, client_id)

    # -- recording ---------------------------------------------------------------------------

    def record_request(
        self,
        user: str,
        client_id: str,
        api_key: int,
        handler_ns: int,
        now_ms: int,
        *,
        cluster_action_unauthorized: bool = False,
        acks_zero_produce: bool = False,
        follower_fetch: bool = False,
    ) -> RequestCharge:
        """Charge request-handler time when the response is queued (bounded throttle).

        Exempt requests (WriteTxnMarkers unless unauthorized, acks=0 produce, follower
        fetch) go to the broker-wide ``exempt-request-time`` rate and are never throttled.
        Without any request quota ever set, nothing is recorded (``quotasEnabled``).
        """
        pct = handler_ns * NANOS_TO_PERCENTAGE
        manager = self._request
        if self._entity is not None:
            user, client_id = self._entity(user, client_id)
        exempt = (
            (api_key in self.exempt_api_keys and not cluster_action_unauthorized)
            or acks_zero_produce
            or follower_fetch
        )
        if exempt:
            self._exempt.record(pct, now_ms, False)
            tags = manager.bucket(user, client_id)
            return RequestCharge(0, True, tags, manager.limit(tags), 0.0)
        if not manager.enabled:
            return RequestCharge(0, False, manager.bucket(user, client_id), UNLIMITED, 0.0)
        throttle, tags, meter = manager.record(user, client_id, pct, now_ms)
        return RequestCharge(throttle, False, tags, meter.bound, meter.peek(now_ms))

    def record_no_throttle(
        self, user: str, client_id: str, ns: int, now_ms: int, *, exempt: bool = False
    ) -> None:
        """Network-thread time of a request, recorded after the response without a check.

        For an exempt request it goes to ``exempt-request-time``, as Kafka's callback does.
        """
        if exempt:
            self._exempt.record(ns * NANOS_TO_PERCENTAGE, now_ms, False)
            return
        manager = self._request
        if not manager.enabled:
            return
        if self._entity is not None:
            user, client_id = self._entity(user, client_id)
        meter = manager.meter(manager.bucket(user, client_id))
        meter.record(ns * NANOS_TO_PERCENTAGE, now_ms, False)

    def record_bytes(
        self, kind: Literal["produce", "fetch"], user: str, client_id: str, nbytes: int, now_ms: int
    ) -> int:
        """Record produce request bytes / fetch response bytes; the unbounded throttle in ms."""
        manager = self._managers[_KEY_FOR_KIND[kind]]
        if not manager.enabled:
            return 0
        throttle, _, _ = manager.record(user, client_id, float(nbytes), now_ms)
        return throttle

    def unrecord_bytes(
        self, kind: Literal["produce", "fetch"], user: str, client_id: str, nbytes: int, now_ms: int
    ) -> None:
        """A throttled fetch returns an empty response: its bytes are taken back."""
        manager = self._managers[_KEY_FOR_KIND[kind]]
        if not manager.enabled:
            return
        manager.meter(manager.bucket(user, client_id)).record(-float(nbytes), now_ms, False)

    def rate(
        self, user: str, client_id: str, now_ms: int, key: str = "request_percentage"
    ) -> float:
        manager = self._managers[key]
        meter = manager.meters.get(manager.bucket(user, client_id))
        return 0.0 if meter is None else meter.peek(now_ms)

    def exempt_rate(self, now_ms: int) -> float:
        return self._exempt.peek(now_ms)

    def buckets(self, key: str = "request_percentage") -> Iterator[tuple[str, str]]:
        return iter(list(self._managers[key].meters))

    def expire_idle(self, now_ms: int) -> None:
        for manager in self._managers.values():
            manager.expire_idle(now_ms)


def combine(t_bytes: int, t_req: int) -> tuple[int, Literal["bytes", "request"] | None]:
    """§4.6: the response carries the larger throttle; the channel is throttled by the
    manager with the larger value, the request manager on a tie; ``None`` when both are 0."""
    if t_bytes <= 0 and t_req <= 0:
        return 0, None
    if t_bytes > t_req:
        return t_bytes, "bytes"
    return t_req, "request"
