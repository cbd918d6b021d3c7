"""Test layout: unit (no JVM, no sockets), integration (real sockets, real Kafka),
spark (a local SparkSession), browser (headless Debian Chromium via Playwright)."""

from __future__ import annotations

import os
import sys

import pytest

# PySpark workers must use this interpreter (pyarrow lives here).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test's folder gives its marker, so `-m unit` and friends always work.
    for item in items:
        parts = item.path.parts
        for kind in ("unit", "integration", "spark", "browser"):
            if kind in parts and item.get_closest_marker(kind) is None:
                item.add_marker(getattr(pytest.mark, kind))
