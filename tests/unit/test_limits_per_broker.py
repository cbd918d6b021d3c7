"""The limits each broker of a cluster is judged by (analysis.load.for_node,
pinned_runner_rows): the runner's rows for that broker, and on a front that applied a
change another front took, the instant it applied it. No Spark: rows in, rows out."""

from __future__ import annotations

import json
from typing import Any

import analysis.load as load
from analysis.load import for_node, pinned_runner_rows

RATE = "max.connection.creation.rate"
LISTENERS = {"listeners": "CLIENT://127.0.0.1:1"}


def _runner(ns: int, rate: int, cause: str, node: int | None = None) -> tuple[int, dict[str, Any]]:
    d: dict[str, Any] = {RATE: rate, "origin": "runner", "cause": cause, **LISTENERS,
                         "applied_from_mono_ns": ns - 100}  # fmt: skip
    if node is not None:
        d["node.id"] = node
    return ns, d


ROWS = [
    _runner(1_000, 100, "start"),
    _runner(2_000, 15, "schedule@12"),
    _runner(3_000, 15, "schedule@20"),  # the cluster's limits after broker 2's own change
    _runner(3_000, 6, "schedule@20", node=2),
    _runner(4_000, 12, "schedule@25"),  # a later cluster change: broker 2 keeps its own 6
    _runner(4_000, 6, "schedule@25", node=2),
]


def _rates(t: load.Testimony) -> list[int]:
    return [d[RATE] for _ns, d in t.runner]


def test_each_broker_takes_its_own_row_of_a_change_where_it_has_one() -> None:
    t = load.Testimony(ROWS, [])
    assert _rates(for_node(t, None)) == [100, 15, 15, 12]
    assert _rates(for_node(t, 1)) == [100, 15, 15, 12]
    assert _rates(for_node(t, 2)) == [100, 15, 6, 6]


def _enforcer(ns: int, rate: int, cause: str) -> tuple[int, dict[str, Any]]:
    return ns, {RATE: rate, "cause": cause, **LISTENERS}


def test_a_front_holds_a_change_from_when_it_applied_it_and_not_before() -> None:
    runner = [_runner(1_000, 100, "start"), _runner(2_000, 15, "schedule@12")]
    applied_late = [_enforcer(500, 100, "start"), _enforcer(2_030, 15, "metadata_log")]
    t = load.Testimony(runner, applied_late)
    at = [ns for ns, _d in pinned_runner_rows(t, propagated=True)]
    assert at == [1_000, 2_030]
    assert [ns for ns, _d in pinned_runner_rows(t)] == [1_000, 2_000]  # one acceptor
    # a row with other limits, or written for another reason, is not the application
    wrong = [_enforcer(500, 100, "start"), _enforcer(2_030, 9, "metadata_log")]
    assert [ns for ns, _d in pinned_runner_rows(load.Testimony(runner, wrong), True)][1] == 2_000
    admin = [_enforcer(500, 100, "start"), _enforcer(2_030, 15, "alter_client_quotas")]
    assert [ns for ns, _d in pinned_runner_rows(load.Testimony(runner, admin), True)][1] == 2_000
    assert json.loads(pinned_runner_rows(t, True)[1][1])[RATE] == 15


def test_a_release_the_runner_did_not_state_does_not_hide_the_application() -> None:
    """compose's runner states no metadata mode; the front's row names its default."""
    runner = [_runner(1_000, 100, "start"), _runner(2_000, 15, "schedule@12")]
    late = _enforcer(2_030, 15, "metadata_log")
    late[1]["kafka.metadata"] = "kraft"
    t = load.Testimony(runner, [_enforcer(500, 100, "start"), late])
    assert [ns for ns, _d in pinned_runner_rows(t, propagated=True)] == [1_000, 2_030]
