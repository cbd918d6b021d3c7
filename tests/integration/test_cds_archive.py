"""`analysis.cds`: the archive `make setup` made starts a JVM; a damaged one is never given
its final name (a JVM handed a truncated archive aborts instead of starting without it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis import cds

pytestmark = pytest.mark.integration


def test_the_archive_made_starts_a_jvm_and_a_truncated_one_is_refused(tmp_path: Path) -> None:
    made = cds.build(progress=False)
    if made is None:
        pytest.skip("no java: no archive")
    assert cds._unusable(made) is None
    cut = tmp_path / "cut.jsa"
    with made.open("rb") as src:
        cut.write_bytes(src.read(1_000_000))
    why = cds._unusable(cut)
    assert why is not None and why.startswith("a JVM would not start with it"), why
    assert cds._unusable(tmp_path / "none.jsa") == "the JVM wrote none"
    shutil.rmtree(tmp_path, ignore_errors=True)
