"""AlterClientQuotas / DescribeClientQuotas validation with KRaft's codes and messages."""

from __future__ import annotations

import pytest

from base.quota import INVALID_REQUEST, validate_alteration, validate_describe_filter


def resolve(host: str) -> str:
    if host in ("localhost", "1.2.3.4", "127.0.0.1"):
        return "127.0.0.1" if host == "localhost" else host
    raise OSError(host)


def check(
    entity: dict[str, str | None], ops: list[tuple[str, float | None]]
) -> tuple[int, str] | None:
    return validate_alteration(entity, ops, resolve=resolve)


@pytest.mark.parametrize(
    ("entity", "ops"),
    [
        ({"ip": "1.2.3.4"}, [("connection_creation_rate", 100.0)]),
        ({"ip": None}, [("connection_creation_rate", 5.0)]),
        ({"ip": "localhost"}, [("connection_creation_rate", None)]),
        ({"user": "u", "client-id": None}, [("request_percentage", 200.0)]),
        ({"user": None}, [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]),
        ({"client-id": "c"}, [("request_percentage", 0.5), ("controller_mutation_rate", 1.5)]),
        ({"ip": "1.2.3.4"}, [("connection_creation_rate", 2147483647.0)]),
        ({"ip": "1.2.3.4"}, [("connection_creation_rate", 3.0000001)]),  # within 1e-6
    ],
)
def test_valid_alterations(
    entity: dict[str, str | None], ops: list[tuple[str, float | None]]
) -> None:
    assert check(entity, ops) is None


CCR, RP, PBR = "connection_creation_rate", "request_percentage", "producer_byte_rate"


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        (
            {"ip": "1.2.3.4", "user": "u"},
            [(CCR, 1.0)],
            # Kafka's message really lacks the space ("should" "not" concatenated).
            "Invalid quota entity combination, IP entity should"
            "not be combined with User or ClientId",
        ),
        (
            {"ip": "no.such.host"},
            [(CCR, 1.0)],
            "no.such.host is not a valid IP or resolvable host.",
        ),
        ({}, [(CCR, 1.0)], "Invalid empty client quota entity"),
        ({"broker": "1"}, [("x", 1.0)], "Unhandled client quota entity type: broker"),
        ({"user": ""}, [(RP, 1.0)], "Empty user not supported"),
        ({"ip": "1.2.3.4"}, [(RP, 1.0)], f"Invalid configuration key {RP}"),
        ({"user": "u"}, [(CCR, 1.0)], f"Invalid configuration key {CCR}"),
        ({"ip": None}, [(CCR, 0.0)], f"Quota {CCR} must be greater than 0"),
        ({"user": "u"}, [(RP, -1.0)], f"Quota {RP} must be greater than 0"),
        ({"ip": None}, [(CCR, 1.5)], f"{CCR} cannot be a fractional value."),
        ({"user": "u"}, [(PBR, 10.25)], f"{PBR} cannot be a fractional value."),
        ({"ip": None}, [(CCR, 2147483648.0)], f"Proposed value for {CCR} is too large for an INT."),
    ],
)
def test_invalid_alterations(
    entity: dict[str, str | None], ops: list[tuple[str, float | None]], message: str
) -> None:
    assert check(entity, ops) == (INVALID_REQUEST, message)


def test_duplicate_keys_are_invalid() -> None:
    err = check(
        {"ip": None}, [("connection_creation_rate", 1.0), ("connection_creation_rate", 2.0)]
    )
    assert err is not None and err[0] == INVALID_REQUEST


def test_describe_filters() -> None:
    assert validate_describe_filter(["ip"]) is None
    assert validate_describe_filter(["user", "client-id"]) is None
    assert validate_describe_filter(["ip", "user"]) == (
        INVALID_REQUEST,
        "Invalid entity filter component combination. IP filter component should not be used "
        "with user or clientId filter component.",
    )
    err = validate_describe_filter(["topic"])
    assert err is not None and err[0] == 35
