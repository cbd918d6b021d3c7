"""`--noise`: the spec refused with key, value and reason; the group starts, makes its
neighbours, and leaves nothing behind when stopped."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.runner.noise import Noise, NoiseError, NoiseSpec


def test_a_spec_is_read_in_any_order_and_printed_back() -> None:
    spec = NoiseSpec.parse("io=1, cpu=2,fork=20")
    assert spec == NoiseSpec(cpu=2, fork=20.0, io=1)
    assert str(spec) == "cpu=2,fork=20,io=1"
    assert NoiseSpec.parse("cpu=0") == NoiseSpec() and not NoiseSpec()


@pytest.mark.parametrize(
    "text, says",
    [
        ("cpu=x", "'cpu' value 'x': not a whole number"),
        ("gpu=2", "'gpu' (value '2'): unknown"),
        ("cpu=2,cpu=3", "'cpu' given twice"),
        ("fork=-1", "'fork' value '-1': must be 0 to 500"),
        ("cpu=65", "'cpu' value '65': must be 0 to 64"),
        ("cpu", "expected key=value"),
    ],
)
def test_a_bad_spec_is_refused_with_key_value_and_reason(text: str, says: str) -> None:
    with pytest.raises(NoiseError) as err:
        NoiseSpec.parse(text)
    assert says in str(err.value)


def _group(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                out.append(int(name))
    return out


def test_the_group_runs_its_neighbours_and_stops_whole(tmp_path: Path) -> None:
    noise = Noise(NoiseSpec(cpu=1, fork=10, io=1), tmp_path / ".noise", 60, tmp_path / "n.log")
    noise.start()
    try:
        pgid = noise.pgid
        assert pgid is not None
        deadline = time.monotonic() + 10
        while len(_group(pgid)) < 3 and time.monotonic() < deadline:  # itself, spin, writer
            time.sleep(0.05)
        assert len(_group(pgid)) >= 3
        assert noise.record()["spec"] == "cpu=1,fork=10,io=1"
    finally:
        noise.stop()
    deadline = time.monotonic() + 5
    while _group(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group(pgid) == []
    assert not (tmp_path / ".noise").exists()
