"""``layered_update``: Kafka's cluster-default and per-broker dynamic layers."""

from __future__ import annotations

from base.quota.config import layered_update

KEY = "max.connections"


def test_per_broker_wins_and_its_deletion_reveals_the_default() -> None:
    eff, cluster, node = layered_update({}, {}, {KEY: "10"}, per_broker=False)
    assert (eff, cluster, node) == ({KEY: "10"}, {KEY: "10"}, {})
    eff, cluster, node = layered_update(cluster, node, {KEY: "20"}, per_broker=True)
    assert (eff, cluster, node) == ({KEY: "20"}, {KEY: "10"}, {KEY: "20"})
    eff, cluster, node = layered_update(cluster, node, {KEY: "30"}, per_broker=False)
    assert eff == {KEY: "20"} and cluster == {KEY: "30"}  # hidden by the per-broker value
    eff, cluster, node = layered_update(cluster, node, {KEY: None}, per_broker=True)
    assert (eff, cluster, node) == ({KEY: "30"}, {KEY: "30"}, {})
    eff, cluster, node = layered_update(cluster, node, {KEY: None}, per_broker=False)
    assert (eff, cluster, node) == ({KEY: None}, {}, {})  # None: static value or default


def test_inputs_are_not_mutated_and_other_keys_are_left_alone() -> None:
    cluster, node = {KEY: "1", "max.connections.per.ip": "5"}, {KEY: "2"}
    eff, c2, n2 = layered_update(cluster, node, {KEY: None}, per_broker=False)
    assert eff == {KEY: "2"} and c2 == {"max.connections.per.ip": "5"} and n2 == node
    assert cluster == {KEY: "1", "max.connections.per.ip": "5"}
