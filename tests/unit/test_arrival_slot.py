"""How one load process picks its share of the arrival schedule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from loadprofiles.options import arrival_slot

pytestmark = pytest.mark.unit


def _opts(arrival_slots: int = 0, processes: int = 0) -> SimpleNamespace:
    return SimpleNamespace(arrival_slots=arrival_slots, processes=processes)


def test_a_lone_process_takes_the_whole_schedule_unless_given_a_slot_count() -> None:
    assert arrival_slot(_opts(), None) == (0, 1)
    assert arrival_slot(_opts(arrival_slots=3), None) == (0, 3)


def test_workers_split_by_processes_then_wrap() -> None:
    assert [arrival_slot(_opts(processes=2), i) for i in range(4)] == [
        (0, 2),
        (1, 2),
        (0, 2),
        (1, 2),
    ]
    # an explicit slot count wins over --processes
    assert arrival_slot(_opts(arrival_slots=3, processes=2), 4) == (1, 3)
    assert arrival_slot(_opts(processes=2), -1) == (0, 2)
