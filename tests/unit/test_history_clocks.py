"""Moving a history file written on another machine onto the runner's clock
(base.history.clocks), and the client writer's record of its clock: no Spark, no
sockets; files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.load import align_files
from base.history import clocks
from base.history.clocks import Shift, alignment, file_metadata, shift_table
from base.history.rows import ClientConnectInvoke, ClientConnectInvokeDetail, ClientConnectOk
from loadprofiles import clock
from loadprofiles.client_history import ClientHistory

pytestmark = pytest.mark.unit

REF = {"boot_id": "runner-boot", "wall_minus_mono_ns": 1_000_000_000_000}


def _meta(boot: str, wm: int, offset: int, rtt: int | None = 400_000) -> dict[bytes, bytes]:
    return file_metadata(boot, wm, offset, rtt)


def test_a_file_of_the_runners_machine_or_an_older_run_is_not_moved() -> None:
    assert alignment(_meta("runner-boot", 5, 7), REF) is None  # same kernel: same clock
    assert alignment({}, REF) is None  # written before files said which clock
    assert alignment(None, REF) is None
    assert alignment(_meta("other", 5, 7), {}) is None  # the runner recorded none
    assert alignment(_meta("", 5, 7), REF) is None


def test_another_machines_file_moves_by_its_clocks_and_its_offset() -> None:
    # the worker's wall runs 200 ms ahead of the master's (offset −200 ms) and its
    # monotonic clock started 3 s before the runner's: wall−mono there is 3.2 s more
    wm = REF["wall_minus_mono_ns"] + 3_200_000_000
    got = alignment(_meta("worker-boot", wm, -200_000_000), REF)
    assert got == Shift(mono_ns=3_000_000_000, wall_ns=-200_000_000, error_ns=200_000)
    assert alignment(_meta("worker-boot", wm, -200_000_000, None), REF).error_ns is None  # type: ignore[union-attr]


def test_a_reference_clock_read_with_the_offset_is_used_over_the_runs_start_reading() -> None:
    # the runner's wall clock was slewed 3.7 s ahead of its monotonic one between the run's
    # start (run.json) and the worker's exchange with the master, a process on the runner's
    # kernel: the master's own reading, taken with the offset, is the one that holds
    slewed = REF["wall_minus_mono_ns"] + 3_700_000_000
    wm = slewed + 3_200_000_000
    meta = file_metadata("worker-boot", wm, -200_000_000, 400_000, ("runner-boot", slewed))
    assert alignment(meta, REF) == Shift(3_000_000_000, -200_000_000, 200_000)
    # a master on another kernel has another monotonic clock: the run's reading stands
    other = file_metadata("worker-boot", wm, -200_000_000, 400_000, ("master-boot", slewed))
    assert alignment(other, REF) == Shift(6_700_000_000, -200_000_000, 200_000)


def test_the_client_writer_keeps_the_clocks_read_with_its_offset(tmp_path: Path) -> None:
    h = ClientHistory(tmp_path / "history", "r", name="client-w", simulated_skew_ns=5)
    h.clock_offset_ns, h.clock_rtt_ns = -5, 100_000
    h.clock_sample = (42, "runner-boot", 40)
    h.append(ClientConnectOk(5_002_000_000, "c-1", latency_ms=2.0))
    h.close()
    (part,) = (tmp_path / "history" / "client").glob("*.parquet")
    meta = pq.read_schema(part).metadata
    assert meta[clocks.WALL_MINUS_MONO] == b"42"
    assert meta[clocks.REFERENCE_BOOT_ID] == b"runner-boot"
    assert meta[clocks.REFERENCE_WALL_MINUS_MONO] == b"40"
    assert alignment(meta, REF) == Shift(mono_ns=42 - 5 - 40, wall_ns=-5, error_ns=50_000)


def _written(tmp_path: Path, skew_ns: int, offset_ns: int) -> tuple[Path, list[dict]]:
    h = ClientHistory(tmp_path / "history", "r", name="client-w", simulated_skew_ns=skew_ns)
    h.clock_offset_ns, h.clock_rtt_ns = offset_ns, 100_000
    detail: ClientConnectInvokeDetail = {"intended_mono_ns": 4_999_000_000, "profile": "storm"}
    h.append(ClientConnectInvoke(5_000_000_000, "c-1", detail=detail))
    h.append(ClientConnectOk(5_002_000_000, "c-1", latency_ms=2.0))
    path = h.flush()
    assert path is not None
    return path, pq.read_table(path).to_pylist()


def test_a_simulated_machine_reads_late_on_both_clocks_and_says_so(tmp_path: Path) -> None:
    """The test seam for other machines: every instant the writer records, the detail's
    included, reads 200 ms late; its boot id is not this kernel's, wall−mono unchanged."""
    plain_path, plain = _written(tmp_path / "a", 0, 0)
    skewed_path, skewed = _written(tmp_path / "b", 200_000_000, -200_000_000)
    assert [r["mono_ns"] - p["mono_ns"] for r, p in zip(skewed, plain, strict=True)] == [
        200_000_000
    ] * 2
    assert json.loads(skewed[0]["detail"])["intended_mono_ns"] == 4_999_000_000 + 200_000_000
    meta = pq.read_schema(skewed_path).metadata
    assert meta[clocks.BOOT_ID].decode() != clocks.boot_id()
    assert meta[clocks.OFFSET] == b"-200000000" and meta[clocks.RTT] == b"100000"
    plain_meta = pq.read_schema(plain_path).metadata
    assert plain_meta[clocks.BOOT_ID].decode() == clocks.boot_id()
    # wall−mono is the machine's, not moved by the skew (two writers read it apart: µs)
    wm = int(meta[clocks.WALL_MINUS_MONO]) - int(plain_meta[clocks.WALL_MINUS_MONO])
    assert abs(wm) < 50_000_000


def test_aligning_puts_a_skewed_file_back_on_the_runners_clock(tmp_path: Path) -> None:
    """Written 200 ms late with the offset it would measure (−200 ms), the copy the
    analysis reads has this machine's instants again, the detail's too; the original file
    is untouched, and a file of this machine is read where it is."""
    run = tmp_path / "run"
    plain_path, plain = _written(run / "a", 0, 0)
    skewed_path, _ = _written(run / "b", 200_000_000, -200_000_000)
    before = skewed_path.read_bytes()
    reference = clocks.host_clock()
    # the runner's reading of its clocks: the one the skewed writer made (another reading
    # differs by the µs between the two)
    reference["wall_minus_mono_ns"] = int(
        pq.read_schema(skewed_path).metadata[clocks.WALL_MINUS_MONO]
    )
    files, notes = align_files(run, [plain_path, skewed_path], reference)
    assert files[0] == plain_path and files[1] != skewed_path
    assert files[1].parent.name == "client"  # still read as the client source
    assert skewed_path.read_bytes() == before
    aligned = pq.read_table(files[1]).to_pylist()
    assert [r["mono_ns"] for r in aligned] == [r["mono_ns"] for r in plain]
    gaps = [abs((r["ts"] - p["ts"]).total_seconds()) for r, p in zip(aligned, plain, strict=True)]
    assert max(gaps) < 0.05
    assert json.loads(aligned[0]["detail"]) == json.loads(plain[0]["detail"])
    assert notes == [{"file": str(skewed_path.relative_to(run)), "shift_ms": -200.0,
                      "error_ms": 0.05}]  # fmt: skip
    # without a recorded clock (a run from before), nothing is moved
    assert align_files(run, [plain_path, skewed_path], None) == ([plain_path, skewed_path], [])


def test_shift_table_moves_only_monotonic_detail_keys(tmp_path: Path) -> None:
    path, rows = _written(tmp_path, 0, 0)
    moved = shift_table(pq.read_table(path), 10, 5_000).to_pylist()
    d = json.loads(moved[0]["detail"])
    assert d == {"intended_mono_ns": 4_999_000_010, "profile": "storm"}
    assert moved[1]["detail"] is None
    assert (moved[0]["ts"] - rows[0]["ts"]).total_seconds() == 5e-6


def test_the_simulated_skew_is_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clock.SKEW_ENV, raising=False)
    assert clock.simulated_skew_ns(0) == 0
    monkeypatch.setenv(clock.SKEW_ENV, "200000000,-200000000")
    assert [clock.simulated_skew_ns(i) for i in (-1, 0, 1, 2)] == [
        200_000_000, 200_000_000, -200_000_000, 200_000_000
    ]  # fmt: skip


def test_a_skewed_worker_starts_the_masters_schedule_at_the_same_instant() -> None:
    """Its wall clock reads 200 ms late and its offset says so: the start on its own
    (unskewed, here) monotonic clock is where an unskewed worker's would be."""
    import time

    master_start = time.time_ns() + 1_000_000_000
    plain = clock.local_start_mono_ns(master_start, 0)
    skewed = clock.local_start_mono_ns(master_start, -200_000_000, 200_000_000)
    assert abs(skewed - plain) < 50_000_000  # two reads of the clocks apart, not 200 ms
