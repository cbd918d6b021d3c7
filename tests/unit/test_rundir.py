"""The run folder is made before anything starts, never reused, and a place that cannot hold
it is a clear error (harness.runner.rundir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner.rundir import RunDir, RunFolderError

pytestmark = pytest.mark.unit


def test_a_fresh_run_folder_has_its_subfolders(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "runs" / "r1").create()
    assert all(p.is_dir() for p in (rd.history, rd.locust, rd.logs))
    assert sorted(p.name for p in rd.root.iterdir()) == ["history", "locust", "logs"]


def test_an_existing_run_folder_is_never_reused(tmp_path: Path) -> None:
    old = tmp_path / "r1"
    (old / "history").mkdir(parents=True)
    (old / "history" / "x.parquet").write_bytes(b"another run's")
    with pytest.raises(RunFolderError, match="exists already"):
        RunDir(old).create()
    assert (old / "history" / "x.parquet").read_bytes() == b"another run's"


def test_a_parent_that_is_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a folder")
    with pytest.raises(RunFolderError, match=r"out is not a folder"):
        RunDir(tmp_path / "out" / "r1").create()
