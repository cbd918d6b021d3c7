"""One SparkSession for the whole tests/spark folder (a JVM start costs ~10 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from analysis.session import SMALL_RUN_EVENTS, build_session, sized_conf

    # the tests' histories are small: the session a small run's analysis gets (C1-compiled
    # code, the class archive, no adaptive re-planning, one shuffle partition)
    session = build_session("local[2]", app_name="harness-tests", small=True)
    for key, value in sized_conf(SMALL_RUN_EVENTS - 1).items():
        session.conf.set(key, value)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synth")
