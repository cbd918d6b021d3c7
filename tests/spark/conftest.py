"""One SparkSession for the whole tests/spark folder (a JVM start costs ~10 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from analysis.session import build_session

    session = build_session("local[2]", app_name="harness-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synth")
