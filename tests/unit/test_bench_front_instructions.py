"""bench.front_instructions reads the instruction count of a callgrind dump."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.front_instructions import dump_total


def test_the_total_is_the_dumps_totals_line_else_its_summary(tmp_path: Path) -> None:
    dump = tmp_path / "callgrind.out.1.1"
    dump.write_text("version: 1\ncmd: python\nevents: Ir\nfl=x.c\n5 120\nsummary: 987\n")
    assert dump_total(dump) == 987
    dump.write_text("events: Ir\nsummary: 987\ntotals: 1234\n")
    assert dump_total(dump) == 1234


def test_a_file_that_is_no_dump_is_refused(tmp_path: Path) -> None:
    dump = tmp_path / "callgrind.out.1.1"
    dump.write_text("events: Ir\n")
    with pytest.raises(ValueError, match="no totals or summary"):
        dump_total(dump)
