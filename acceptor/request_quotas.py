"""Request quotas (KIP-124) enforced at the acceptor, with Kafka 2.0+ throttling (KIP-219).

Why at the acceptor: the broker only sees the acceptor's connections, so per-client request
quotas set through the acceptor's admin path are charged and enforced here. The charge is
the broker time of a request as the acceptor sees it (forward -> response), the bucket is
Kafka's (principal, client-id) precedence from `base.quota.RequestQuotas`; PLAINTEXT
clients are principal `ANONYMOUS`. On a violation the response is sent at once with
`throttle_time_ms` raised to the throttle (decoded and re-encoded with kafka-python, where
the response schema has the field), and the connection is muted (nothing more read from
the client) for the throttle time.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_header import ResponseClassRegistry

from base.quota.requests import DEFAULT, EntityName

REQUEST_PERCENTAGE = "request_percentage"


def entity_key(user: EntityName, client_id: EntityName) -> str:
    """A stable text key for the state file: `user=alice,client-id=<default>`."""
    parts = []
    for label, name in (("user", user), ("client-id", client_id)):
        if name is None:
            continue
        parts.append(f"{label}={'<default>' if name is DEFAULT else name}")
    return ",".join(parts)


def parse_entity_key(key: str) -> tuple[EntityName, EntityName]:
    user: EntityName = None
    client: EntityName = None
    for part in key.split(","):
        label, _, name = part.partition("=")
        value: EntityName = DEFAULT if name == "<default>" else name
        if label == "user":
            user = value
        elif label == "client-id":
            client = value
        else:
            raise ValueError(f"bad request-quota entity {key!r}")
    return user, client


def with_throttle_time(frame: bytes, api_key: int, api_version: int, throttle_ms: int) -> bytes:
    """The same response with throttle_time_ms = max(its own, throttle_ms).

    Responses whose schema has no throttle_time_ms (or that kafka-python cannot decode)
    are returned unchanged: the mute alone then throttles the client, as for pre-KIP-219
    clients.
    """
    registry: dict[int, Any] = ResponseClassRegistry._response_class_registry
    cls = registry.get(api_key)
    if cls is None:
        return frame
    try:
        versioned = cls[api_version]
        resp = versioned.decode(frame[4:], version=api_version, header=True)
        if not hasattr(resp, "throttle_time_ms"):
            return frame
        current = resp.throttle_time_ms or 0
        if current >= throttle_ms:
            return frame
        resp.throttle_time_ms = throttle_ms
        # (no version= here: kafka-python 3.0 cannot set it on a decoded response header)
        return bytes(resp.encode(header=True, framed=True))
    except Exception:
        return frame
