"""The analysis's open-file limit (analysis.session.ensure_open_files): raised to the hard
limit by itself, and a clear refusal before any JVM starts when even that is too low.
Each case runs in a child process, whose limits the test may change."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
from analysis.session import EnvironmentProblem, ensure_open_files
try:
    print(ensure_open_files())
except EnvironmentProblem as exc:
    print("refused:", exc)
"""


def _child(soft: int, hard: int) -> str:
    code = CHILD.format(soft=soft, hard=hard)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_low_soft_limit_is_raised_to_the_hard_one() -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    top = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if top < 1024:
        pytest.skip(f"this process's hard open-file limit is {hard}")
    assert _child(256, top) == str(top)


def test_a_hard_limit_below_what_spark_needs_is_refused_naming_it() -> None:
    out = _child(256, 256)
    assert out.startswith("refused: the open-file limit is 256 (ulimit -n)")
    assert "at least 1024" in out and "ulimit -n 4096" in out
