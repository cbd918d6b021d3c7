"""Kafka's client-quota admin rules (AlterClientQuotas / DescribeClientQuotas validation).

The acceptor answers these requests itself, so ``kafka-configs.sh`` must see exactly the
error codes and messages a KRaft broker gives (``ClientQuotaControlManager``,
``ClientQuotasImage``; reference §5.2-5.3). Pure functions of the request; the only
outside touch is host resolution for ``ip`` entity names, which is injectable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from base.quota.config import INT_MAX, Resolver, resolve_host

__all__ = [
    "INVALID_REQUEST",
    "IP_QUOTA_KEYS",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "REQUEST_QUOTA_KEYS",
    "UNKNOWN_SERVER_ERROR",
    "UNKNOWN_SERVER_ERROR_MESSAGE",
    "UNSUPPORTED_VERSION",
    "DescribeComponent",
    "enforced_ip_quotas",
    "ip_entity_address",
    "validate_alteration",
    "validate_describe_filter",
]

INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35
UNKNOWN_SERVER_ERROR = -1
#: `Errors.UNKNOWN_SERVER_ERROR.message()` (kafka-clients 4.3.1)
UNKNOWN_SERVER_ERROR_MESSAGE = (
    "The server experienced an unexpected error when processing the request."
)

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

#: ``QuotaConfig.ipConfigs()``: one INT key.
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})
#: ``QuotaConfig`` user/client-id keys and their ConfigDef types.
REQUEST_QUOTA_KEYS: Mapping[str, type] = {
    "request_percentage": float,
    "producer_byte_rate": int,
    "consumer_byte_rate": int,
    "controller_mutation_rate": float,
}
_INT_KEYS = frozenset({"connection_creation_rate"})  # INT; the byte rates are LONG
_LONG_MAX = 9.223372036854775807e18


def ip_entity_address(name: str | None, resolve: Resolver = resolve_host) -> str | None:
    """The address an ``ip`` quota entity applies to (``None`` = the default entity).

    Kafka stores the entity under the name as given (``ClientQuotasImage``: describe answers
    ``[::1]`` or ``localhost`` back) and enforces it on ``InetAddress.getByName(name)``
    (``ClientQuotaMetadataManager.handleIpQuota``), so ``::ffff:127.0.0.9`` limits clients
    from ``127.0.0.9``. Raises ``OSError`` for a name that does not resolve.
    """
    return None if name is None else resolve(name)


def enforced_ip_quotas(
    by_name: Mapping[str, int], resolve: Resolver = resolve_host
) -> dict[str, int]:
    """``{"default" | entity name: rate}`` (in the order set) -> ``{"default" | address:
    rate}``: what the quotas apply to, for ``config`` rows (the checker matches client
    addresses). Two names of one address: the last set wins, as in ``ConnectionQuotas``; a
    name that no longer resolves is left out (nothing can match it)."""
    out: dict[str, int] = {}
    for name, rate in by_name.items():
        if name == "default":
            out[name] = rate
            continue
        try:
            address = ip_entity_address(name, resolve)
        except (OSError, UnicodeError, ValueError):
            continue
        if address is not None:
            out.pop(address, None)
            out[address] = rate
    return out


def _resolvable(name: str, resolve: Resolver) -> bool:
    try:
        resolve(name)
    except (OSError, UnicodeError, ValueError):
        return False
    return True


def _validate_entity(entity: Mapping[str, str | None], resolve: Resolver) -> tuple[int, str] | None:
    if not entity:
        return INVALID_REQUEST, "Invalid empty client quota entity"
    has_user = has_client = has_ip = False
    for entity_type, name in entity.items():
        if name == "":
            return INVALID_REQUEST, f"Empty {entity_type} not supported"
        if entity_type == USER:
            has_user = True
        elif entity_type == CLIENT_ID:
            has_client = True
        elif entity_type == IP:
            if name is not None and not _resolvable(name, resolve):
                return INVALID_REQUEST, f"{name} is not a valid IP or resolvable host."
            has_ip = True
        else:
            return INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}"
    if has_ip and (has_user or has_client):
        # The missing space is Kafka's (ClientQuotaControlManager).
        return (
            INVALID_REQUEST,
            "Invalid quota entity combination, IP entity should"
            "not be combined with User or ClientId",
        )
    return None


def _validate_value(
    key: str, value: float, integral: bool, int_range: bool
) -> tuple[int, str] | None:
    if value <= 0.0:
        return INVALID_REQUEST, f"Quota {key} must be greater than 0"
    if not integral:
        return None
    if int_range and value > INT_MAX:
        return INVALID_REQUEST, f"Proposed value for {key} is too large for an INT."
    if not int_range and value > _LONG_MAX:
        return INVALID_REQUEST, f"Proposed value for {key} is too large for a LONG."
    if abs(value % 1.0) > 1e-6:
        return INVALID_REQUEST, f"{key} cannot be a fractional value."
    return None


def _java_string_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def java_entity_string(entity: Mapping[str, str | None]) -> str:
    """``ClientQuotaEntity.toString()`` of the entity a controller decodes from the request.

    Its map is a ``java.util.HashMap`` built with the entity's size as initial capacity, so
    the entries print in bucket order (``(h ^ h >>> 16) & (capacity - 1)`` of
    ``String.hashCode``), insertion order within a bucket; a default name prints ``null``.
    A repeated type keeps its first position and its last name, as a Python dict does.
    """
    items = list(entity.items())
    capacity = 1
    while capacity < max(len(items), 1):
        capacity *= 2
    threshold = int(capacity * 0.75)
    for size in range(1, len(items) + 1):
        if size > threshold:
            capacity *= 2
            threshold = int(capacity * 0.75)

    def bucket(key: str) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    ordered = sorted(enumerate(items), key=lambda p: (bucket(p[1][0]), p[0]))
    body = ", ".join(f"{k}={'null' if v is None else v}" for _, (k, v) in ordered)
    return f"ClientQuotaEntity(entries={{{body}}})"


def validate_alteration(
    entity: Mapping[str, str | None],
    ops: Sequence[tuple[str, float | None]],
    *,
    resolve: Resolver = resolve_host,
) -> tuple[int, str] | None:
    """Validate one AlterClientQuotas entry as a KRaft controller does.

    ``entity`` maps entity types to names (``None`` = the default entity); ``ops`` are
    ``(key, value)`` with ``None`` = remove. Returns ``(error_code, message)`` or ``None``.
    Removals are not checked at all, as in ``ClientQuotaControlManager.alterClientQuotaEntity``:
    any key may be removed, and removing a key that is not set is a successful no-op.
    """
    keys = [key for key, _ in ops]
    if len(set(keys)) != len(keys):  # checked before the entity, and reported as the entity
        return INVALID_REQUEST, f"Ignoring duplicate entity {java_entity_string(entity)}"
    error = _validate_entity(entity, resolve)
    if error is not None:
        return error
    is_ip = IP in entity
    for key, value in ops:
        if value is None:  # removals are not validated (alterClientQuotaEntity)
            continue
        if is_ip:
            valid = key in IP_QUOTA_KEYS
        else:
            valid = key in REQUEST_QUOTA_KEYS
        if not valid:
            return INVALID_REQUEST, f"Invalid configuration key {key}"
        integral = key in _INT_KEYS or (not is_ip and REQUEST_QUOTA_KEYS[key] is int)
        error = _validate_value(key, float(value), integral, key in _INT_KEYS)
        if error is not None:
            return error
    return None


MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
#: One DescribeClientQuotas filter component: ``(entity_type, match_type, match)``; a bare
#: entity type stands for ``(entity_type, MATCH_SPECIFIED, None)``.
DescribeComponent = tuple[str, int, str | None]


def validate_describe_filter(
    components: Iterable[str | DescribeComponent],
) -> tuple[int, str] | None:
    """DescribeClientQuotas filter components, checked as ``ClientQuotasImage.describe`` does.

    Same order and messages as Kafka 4.3.1: per component, an empty type, a type already
    seen ("cannot appear more than once"), an unsupported type, then the match type and its
    match string (EXACT needs one, DEFAULT and SPECIFIED must not have one); after the loop,
    ``ip`` combined with ``user``/``client-id``. The broker sends the exception's code and
    message in the response (``getErrorResponse``).
    """
    seen: set[str] = set()
    for component in components:
        t, match_type, match = (
            (component, MATCH_SPECIFIED, None) if isinstance(component, str) else component
        )
        if not t:
            return INVALID_REQUEST, "Invalid empty entity type."
        if t in seen:
            return INVALID_REQUEST, f"Entity type {t} cannot appear more than once in the filter."
        if t not in (USER, CLIENT_ID, IP):
            return UNSUPPORTED_VERSION, f"Unsupported entity type {t}"
        if match_type == MATCH_EXACT:
            if match is None:
                return (
                    INVALID_REQUEST,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                )
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                return (
                    INVALID_REQUEST,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                )
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                return (
                    INVALID_REQUEST,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )
        else:
            return INVALID_REQUEST, f"Unknown match type {match_type}"
        seen.add(t)
    if IP in seen and (USER in seen or CLIENT_ID in seen):
        return (
            INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component.",
        )
    return None
