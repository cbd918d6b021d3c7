"""A cluster's broker list and hot broker, as the load options take them."""

from __future__ import annotations

import pytest

from loadprofiles.addresses import (
    AddressSpecError,
    broker_for,
    parse_brokers,
    parse_hot_broker,
)

BROKERS = ((1, "127.0.0.1", 9001), (2, "127.0.0.1", 9002), (3, "127.0.0.1", 9003))


def test_brokers_parse_by_node_id() -> None:
    assert parse_brokers("1=127.0.0.1:9001, 2=127.0.0.1:9002,3=127.0.0.1:9003") == BROKERS
    assert parse_brokers("") == ()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("127.0.0.1:9001", "expected NODE_ID=HOST:PORT"),
        ("x=127.0.0.1:9001", "expected NODE_ID=HOST:PORT"),
        ("1=127.0.0.1:9001,1=127.0.0.1:9002", "listed twice"),
        ("1=10.0.0.1:9001", "loopback"),
    ],
)
def test_bad_broker_lists_name_the_option_and_reason(text: str, reason: str) -> None:
    with pytest.raises(AddressSpecError) as info:
        parse_brokers(text)
    assert info.value.option == "--brokers" and reason in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [("2", "NODE_ID:SHARE"), ("4:0.5", "not one of"), ("2:1.5", "the share"), ("a:b", "NODE_ID")],
)
def test_bad_hot_brokers_are_refused(text: str, reason: str) -> None:
    with pytest.raises(AddressSpecError, match=reason):
        parse_hot_broker(text, BROKERS)


def test_round_robin_and_a_hot_share_spread_evenly() -> None:
    assert [broker_for(k, BROKERS, None)[0] for k in range(6)] == [1, 2, 3, 1, 2, 3]
    hot = [broker_for(k, BROKERS, (2, 0.5))[0] for k in range(100)]
    assert hot.count(2) == 50 and hot.count(1) == 25 and hot.count(3) == 25
    assert [broker_for(k, BROKERS, (3, 1.0))[0] for k in range(4)] == [3, 3, 3, 3]
