"""`analysis.session.cds_options`: which class archive the analysis JVM is started with."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import session

pytestmark = pytest.mark.unit


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "spark-x.jsa"
    monkeypatch.setattr(session, "archive_path", lambda: path)
    monkeypatch.delenv("HARNESS_SPARK_CDS", raising=False)
    monkeypatch.delenv("HARNESS_SPARK_CDS_DUMP", raising=False)
    return path


def test_an_archive_made_is_read_and_a_mismatch_is_no_error(archive: Path) -> None:
    archive.write_bytes(b"made by build")
    opts = session.cds_options()
    assert f"-XX:SharedArchiveFile={archive}" in opts and "-Xshare:auto" in opts


def test_without_an_archive_the_jvm_starts_as_before(archive: Path) -> None:
    assert session.cds_options() == ""


def test_it_can_be_turned_off(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive.write_bytes(b"made by build")
    monkeypatch.setenv("HARNESS_SPARK_CDS", "off")
    assert session.cds_options() == ""


def test_the_jvm_that_makes_it_writes_it_on_exit(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_SPARK_CDS_DUMP", "/tmp/x.tmp")
    assert session.cds_options() == "-XX:ArchiveClassesAtExit=/tmp/x.tmp"


def test_no_java_no_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "java_path", lambda: None)
    assert session.archive_path() is None
