"""Fuzz suite settings: bounded example counts, and a tally of the inputs tried.

The profile is registered, not loaded: loading it would change the defaults of every other
Hypothesis test in the same pytest session; the fuzz modules apply it with ``@FUZZ``.

Why a profile of our own: CI must finish this folder well under a minute on a loaded 2-core
machine, so every property runs a fixed, modest number of examples with no deadline (a
deadline on a shared machine only measures the neighbours). ``HARNESS_FUZZ_EXAMPLES``
scales every property for a longer local soak, e.g. ``HARNESS_FUZZ_EXAMPLES=20000``.

The summary line ("fuzz: N inputs tried ...") is what docs/hostile-input.md quotes; it is
read from Hypothesis' own per-test statistics, so it counts inputs actually executed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

BASE_EXAMPLES = int(os.environ.get("HARNESS_FUZZ_EXAMPLES", "200"))

settings.register_profile(
    "fuzz",
    max_examples=BASE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    print_blob=True,
)

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # every test in this folder is `fuzz` (`-m fuzz`, or `-m "unit and not fuzz"` without it)
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.fuzz)


_COUNT = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")
_tally: dict[str, int] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, None, None]:
    yield
    stats = getattr(item, "hypothesis_statistics", None)
    if call.when != "call" or not stats or "tests/fuzz/" not in item.nodeid:
        return
    total = 0
    for passing, failing, invalid in _COUNT.findall(stats):
        total += int(passing) + int(failing) + int(invalid)
    _tally[item.nodeid] = total


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _tally:
        return
    total = sum(_tally.values())
    terminalreporter.write_sep("-", f"fuzz: {total} inputs tried over {len(_tally)} properties")
    for nodeid, n in sorted(_tally.items()):
        terminalreporter.write_line(f"{n:>8}  {nodeid}")
