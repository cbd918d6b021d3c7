"""tests/cpu_profile.py's summary: CPU per module and per folder, most first."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cpu_profile import summary


def test_summary_sums_per_module_and_folder_most_cpu_first(tmp_path: Path) -> None:
    rows = [
        {"id": "tests/spark/test_a.py::test_x", "wall": 2.0, "cpu": 3.0},
        {"id": "tests/spark/test_a.py::test_y", "wall": 1.0, "cpu": 1.5},
        {"id": "tests/integration/test_b.py::test_z", "wall": 9.0, "cpu": 6.0},
    ]
    path = tmp_path / "cpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = summary(path).splitlines()
    assert lines[0] == "3 tests, 10 CPU-s: integration 6, spark 4"
    assert lines[1].split() == ["6.0", "CPU-s", "9.0", "s", "wall", "1", "tests",
                                "tests/integration/test_b.py"]  # fmt: skip
    assert lines[2].split()[0] == "4.5" and lines[2].endswith("tests/spark/test_a.py")
