"""The frames several checks read are named in one place (`analysis.frames.SHARED`), each
check declares those it reads (`Check.frames`), and the counts several checks ask first
come from one census of the acceptor's connections (`frames.tally`); the runner's
`process_stats` readings are read once and each role's taken from them in Python. No
Spark here: a run whose readings are already cached reads none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS
from analysis.checks.loops import cores_by_role, role_rows
from analysis.frames import SHARED, Kind, build, outside, tally
from analysis.load import Run, config_timeline


def _run(readings: list[tuple[int, float, dict[str, Any]]]) -> Run:
    no_spark: Any = None  # nothing here starts a job
    run = Run(Path("/nonexistent"), {}, no_spark, no_spark, config_timeline([], None), [])
    run._cache["process_stats"] = readings
    return run


def test_every_declared_frame_is_a_shared_one() -> None:
    declared = {(c.name, f) for c in ALL_CHECKS for f in c.frames}
    assert declared, "no check declares a frame"
    assert {f for _name, f in declared} <= set(SHARED), declared


def test_a_frame_built_from_those_before_it() -> None:
    """`build` makes them in `SHARED`'s order: the join after both tables it joins."""
    order = list(SHARED)
    assert order.index("attempt_join") > order.index("acceptor_conns")
    assert order.index("attempt_join") > order.index("client_conns")
    assert order.index("census") > order.index("acceptor_conns")


def test_an_unknown_frame_is_named() -> None:
    with pytest.raises(ValueError, match=r"no shared frame named \['acceptor_conn'\]"):
        list(build(_run([]), {"acceptor_conn", "census"}))


def _kind(listener: str | None, outcome: str | None, reason: str | None, n: int) -> Kind:
    return Kind(listener, outcome, reason, accepted=True, delayed=reason is not None,
                registered=outcome == "admit", n=n)  # fmt: skip


KINDS = [
    _kind("client", "admit", None, 7),
    _kind("client", "admit", "broker_rate", 3),
    _kind("replication", "admit", "broker_rate", 2),
    _kind(None, "admit", "broker_rate", 1),
    _kind("client", "throttle_close", None, 4),
    _kind("client", "reject", None, 5),
]


def test_tally_counts_the_kinds_taken() -> None:
    assert tally(KINDS, lambda k: True) == 22
    assert tally(KINDS, lambda k: k.outcome == "reject") == 5
    assert tally(KINDS, lambda k: k.delay_reason == "broker_rate") == 6
    assert tally(KINDS, lambda k: k.registered) == 13
    assert tally([], lambda k: True) == 0


def test_outside_reads_a_listener_as_spark_reads_not_isin() -> None:
    """`~listener.isin(*names)` is null, so not taken, for a row with no listener."""
    assert outside("client", ["replication"])
    assert not outside("replication", ["replication"])
    assert not outside(None, ["replication"])
    fired = tally(
        KINDS, lambda k: outside(k.listener, ["replication"]) and k.delay_reason == "broker_rate"
    )
    assert fired == 3


READINGS: list[tuple[int, float, dict[str, Any]]] = [
    (1_000, 0.5, {"role": "acceptor", "loop_busy": 0.2, "cpu_s": 1.5}),
    (1_000, 0.4, {"role": "load", "loop_busy": 0.9, "cpu_s": 3}),
    (2_000, 0.5, {"role": "acceptor", "loop_busy": 0.3, "cpu_s": 2.5}),
    (2_000, 0.1, {"role": "machine", "cpu_s": 9.0}),
    (3_000, 0.5, {"role": "acceptor", "loop_busy": 0.1}),  # no CPU reading
    (3_000, 0.5, {"role": "noise", "cpu_s": True}),  # not a number: Spark's cast gives null
    (4_000, 0.2, {"cpu_s": 1.0}),  # no role
]


def test_each_role_reads_its_own_rows_in_order() -> None:
    run = _run(READINGS)
    assert role_rows(run, "acceptor") == [READINGS[0], READINGS[2], READINGS[4]]
    assert role_rows(run, "load") == [READINGS[1]]
    assert role_rows(run, "broker") == []


def test_cores_by_role_takes_numbers_only() -> None:
    assert cores_by_role(_run(READINGS)) == {
        "acceptor": [(1_000, 1.5), (2_000, 2.5)],
        "load": [(1_000, 3.0)],
        "machine": [(2_000, 9.0)],
        "None": [(4_000, 1.0)],
    }
