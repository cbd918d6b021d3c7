"""bench.analysis: its sizes, its reading of the analysis's progress lines (seconds per
check and per shared frame) and its before → after table, with the verdicts compared."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.analysis import Timings, parse_sizes, table


def test_sizes_as_a_comma_list_or_several() -> None:
    assert parse_sizes(["4000,10000,100000"]) == [4000, 10000, 100000]
    assert parse_sizes(["100000", "4000,4000"]) == [4000, 100000]
    with pytest.raises(SystemExit, match="'10k' is not a number of events"):
        parse_sizes(["4000,10k"])
    with pytest.raises(SystemExit, match="0 events: a size must be positive"):
        parse_sizes(["0"])


def test_progress_lines_become_seconds_per_check_and_frame(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = Timings("4,000 after cold")
    for line in (
        "checks…",
        "  [frame] acceptor_conns                     (0.8s)",
        "  [frame] census          (0.1s): not built (Boom: x), left to its checks",
        "  acceptor process 1 of 2 (pid 111)",
        "  max_connections                    n/a      (0.0s)",
        "  client_acceptor_agreement          pass     (1.3s)",
        "  [frame] acceptor_conns                     (0.5s)",
        "  client_acceptor_agreement          fail     (0.2s)",
    ):
        clock(line)
    assert clock.frames == {"acceptor_conns": 1.3, "census": 0.1}
    assert clock.checks == {"max_connections": 0.0, "client_acceptor_agreement": 1.5}
    assert clock.verdicts["client_acceptor_agreement"] == "fail"
    assert "[4,000 after cold]   checks…" in capsys.readouterr().out


def _row(tree: str, wall: float, check_s: float, frames: dict[str, float]) -> dict[str, Any]:
    verdict = {
        "verdict": "pass",
        "checks": [{"name": "max_connections", "verdict": "pass", "judged": 10, "witnesses": []}],
    }
    mode = {
        "wall_s": wall,
        "cpu_s": wall * 2,
        "checks_s": {"max_connections": check_s},
        "frames_s": frames,
    }
    return {
        "target_events": 4000,
        "tree": tree,
        "events": 4123,
        "connections": 400,
        "cold": dict(mode),
        "warm": {**mode, "wall_s": wall / 2},
        "verdict": {"cold": verdict, "warm": copy.deepcopy(verdict)},
        "load_avg_1m_at_end": 1.5,
    }


def test_the_table_says_before_to_after_and_whether_any_verdict_changed() -> None:
    before = _row("before", 20.0, 2.0, {})
    after = _row("after", 10.0, 0.5, {"acceptor_conns": 1.0})
    text = table([before, after])
    assert "| 4,123 | 400 | cold | 20.00 → 10.00 (0.50) | 40.00 → 20.00 (0.50) |" in text
    assert "| [frame] acceptor_conns | 1.00 |" in text
    assert "| max_connections | 2.00 → 0.50 (0.25) |" in text
    assert "verdicts: the same, check by check" in text
    after["verdict"]["warm"]["checks"][0]["judged"] = 9
    text = table([before, after])
    assert "verdicts: DIFFERENT" in text
    assert "4,000 after warm: max_connections.judged: 10 -> 9" in text
