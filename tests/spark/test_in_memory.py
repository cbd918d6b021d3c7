"""A small history is read into memory once (`analysis.load.read_history`); the checks
then judge it exactly as they judge the same history scanned from its Parquet parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import analysis.load as load
from analysis.load import load_run
from analysis.synth import SynthSpec, generate
from analysis.verdict import run_checks

#: a history whose checks pass and fail: three rules broken, the rest kept
BROKEN = frozenset({"ip_rate", "client_disagree", "delay_over_window"})


def _judged(spark: Any, run_dir: Path) -> tuple[bool, list[tuple[Any, ...]]]:
    run = load_run(spark, run_dir)
    results = run_checks(run)
    return run.in_memory, [
        (r.name, r.verdict, r.observed, r.judged, r.witnesses, r.exercised) for r in results
    ]


def test_in_memory_and_parquet_judge_alike(
    spark: Any, synth_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = synth_root / "in-memory-broken"
    generate(run_dir, SynthSpec(run_id=run_dir.name, cycles=1, broken=BROKEN))
    in_memory, judged = _judged(spark, run_dir)
    assert in_memory
    monkeypatch.setattr(load, "IN_MEMORY_EVENTS", 0)
    scanned, from_parquet = _judged(spark, run_dir)
    assert not scanned
    assert judged == from_parquet
    verdicts = {name: verdict for name, verdict, *_ in judged}
    assert {n for n, v in verdicts.items() if v == "fail"} >= {
        "ip_rate_span",
        "client_acceptor_agreement",
        "rate_delay_within_window",
    }
    assert "pass" in verdicts.values()
