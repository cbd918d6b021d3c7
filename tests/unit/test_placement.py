"""CPU placement's plan: the loop's CPU and the others', off with one CPU or when asked, and
the record run.json carries (no process is moved here)."""

from __future__ import annotations

import pytest

from harness.runner.placement import Placement


def test_two_cpus_give_the_loop_one_of_its_own() -> None:
    p = Placement.plan("auto", [0, 1])
    assert p.on and p.loop_cpus == {1} and p.other_cpus == {0}
    assert p.record()["cpus"] == {
        "acceptor loop": [1],
        "brokers, load, runner, acceptor's other threads": [0],
    }


def test_off_when_asked_or_with_one_cpu() -> None:
    assert Placement.plan("off", [0, 1]).record() == {
        "mode": "off",
        "cpus": {"every process": [0, 1]},
    }
    one = Placement.plan("auto", [3])
    assert not one.on and one.mode == "off (one CPU)"
    assert one.place_loops([12345]) == []  # nothing is moved when off


def test_off_without_a_front_to_place() -> None:
    """The broker target has no acceptor: confining its broker and load to one CPU would
    only starve them (an ssl-storm beside noise timed out every handshake so)."""
    p = Placement.plan("auto", [0, 1], front=False)
    assert not p.on and p.mode == "off (no acceptor to place)"


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="--placement 'pinned'"):
        Placement.plan("pinned", [0, 1])


def test_a_loop_that_is_gone_is_not_counted_placed() -> None:
    p = Placement.plan("auto", [0, 1])
    assert p.place_loops([2**22 + 12345]) == []  # no such pid: tried again next time
    assert p.placed == set()
