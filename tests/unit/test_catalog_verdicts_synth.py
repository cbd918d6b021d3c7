"""`bench.catalog_verdicts synth`: every broken run breaks something; the `lost_change` one
gets a runner's change to lose (without one it conformed and was judged PASS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import analysis.synth
from bench import catalog_verdicts


def test_the_lost_change_run_has_a_change_to_lose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs: dict[str, Any] = {}

    def fake_generate(path: Path, spec: Any) -> dict[str, int]:
        specs[spec.run_id] = spec
        return {"events": 0}

    monkeypatch.setattr(analysis.synth, "generate", fake_generate)
    assert catalog_verdicts.synth(tmp_path, events=1000, scale=0.28) == 0
    lost = specs["synth-lost-change-acceptor-20000101T000000Z-s7"]
    assert lost.broken == frozenset({"lost_change"})
    assert lost.config_change == catalog_verdicts.LOST_CHANGE
    others = [s for name, s in specs.items() if "lost-change" not in name]
    assert others and all(s.config_change is None for s in others)
