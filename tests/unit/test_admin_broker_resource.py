"""`check_broker_resource`: ConfigAdminManager.preprocess's checks, order and messages, as
a Kafka 4.3.1 broker with node.id 1 answered them (tests/integration/test_admin_quotas.py
compares with the real broker)."""

from __future__ import annotations

import pytest

from acceptor.admin import check_broker_resource

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
MC = "max.connections"


@pytest.mark.parametrize(
    ("name", "configs", "answer"),
    [
        ("", [(MC, SET, "100")], None),
        ("1", [(MC, SET, "100")], None),
        ("+1", [(MC, DELETE, None)], None),  # Integer.parseInt accepts a sign
        ("2", [(MC, SET, "100")], (42, "Unexpected broker id, expected 1, but received 2")),
        ("x", [(MC, SET, "100")], (42, "Node id must be an integer, but it is: x")),
        (" 1", [(MC, SET, "100")], (42, "Node id must be an integer, but it is:  1")),
        (
            "99999999999",
            [(MC, SET, "1")],
            (42, "Node id must be an integer, but it is: 99999999999"),
        ),
        ("", [(MC, SET, "1"), (MC, SET, "2")], (42, "Error due to duplicate config keys")),
        ("", [(MC, SET, None)], (42, "Null value not supported for : max.connections")),
        ("2", [(MC, SET, None)], (42, "Null value not supported for : max.connections")),
        ("", [(MC, 7, "1")], (42, "Unknown operations type 7")),
        (
            "",
            [(MC, APPEND, "1")],
            (40, "Config value append is not allowed for config key: max.connections"),
        ),
        (
            "",
            [(MC, SUBTRACT, "1")],
            (40, "Config value subtract is not allowed for config key: max.connections"),
        ),
    ],
)
def test_kafka_answers(
    name: str, configs: list[tuple[str, int, str | None]], answer: tuple[int, str] | None
) -> None:
    assert check_broker_resource(name, configs, 1) == answer


def test_an_unknown_node_id_refuses_every_broker_but_not_the_cluster_default() -> None:
    assert check_broker_resource("", [(MC, SET, "1")], None) is None
    code, message = check_broker_resource("1", [(MC, SET, "1")], None) or (0, "")
    assert code == 42 and "set node.id" in message
