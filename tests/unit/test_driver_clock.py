"""The load driver hands its best clock estimate, with the clocks read in the same exchange
(loadprofiles.clock.OnOffset), to its client history whether the history is made before or
after the estimate. Locust is imported in a child interpreter: importing it patches this
process with gevent."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

CHILD = """
from locust.env import Environment
from loadprofiles.driver import EngineDriver

late = EngineDriver(Environment(), "storm", "storm")  # the estimate before the history
late._set_offset(-5, 100, (42, "master-boot", 40))
h = late._history()
print(h.clock_offset_ns, h.clock_rtt_ns, h.clock_sample)

early = EngineDriver(Environment(), "storm", "storm")  # the history before the estimate
h = early._history()
early._set_offset(-7, 300, (44, "master-boot", 41))
print(h.clock_offset_ns, h.clock_rtt_ns, h.clock_sample)
"""


def test_the_estimate_and_its_clock_readings_reach_the_history_either_way() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out == ["-5 100 (42, 'master-boot', 40)", "-7 300 (44, 'master-boot', 41)"]
