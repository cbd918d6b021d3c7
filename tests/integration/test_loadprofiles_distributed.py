"""A Locust master with two workers runs a catalog scenario; same verdict as one process.

``--processes 2`` is Locust's own master/worker mode with the workers as separate
(forked) processes on this machine: the master coordinates, each worker runs one
EngineDriver for its slot of the schedule (``k % 2``) and writes its own history.
The catalog's ``ci-gate`` runs twice through ``harness run`` against the acceptor,
once in one process and once as master + two workers; the merged history of the
two workers must offer the same arrivals from the same addresses, and the verdict
must be the same. The two workers run as if on machines whose clocks read 200 ms late
and 200 ms early (``HARNESS_TEST_CLOCK_SKEW_NS``): each measures its offset to the master
(the skew, within its own bound RTT/2) and the analysis moves their rows onto the
runner's clock before any check reads them (base.history.clocks), so the verdict is
the single process's; judged without that alignment, the same history fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

CATALOG = Path(__file__).resolve().parents[2] / "loadprofiles" / "scenarios"


SKEWS = (200_000_000, -200_000_000)


def run_scenario(
    spec: dict[str, Any], tmp: Path, name: str, env: dict[str, str] | None = None
) -> tuple[Path, dict[str, Any], str]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp / name
    log = tmp / f"{name}.log"
    with open(log, "w") as fh:
        subprocess.run(
            [sys.executable, "-m", "harness", "run", str(path), "--out", str(out)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
            env={**os.environ, **(env or {})},
        )
    text = log.read_text()
    runs = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    assert len(runs) == 1, text[-3000:]
    verdict = runs[0] / "report" / "verdict.json"
    assert verdict.is_file(), text[-3000:]
    return runs[0], json.loads(verdict.read_text()), text


def rows(run_dir: Path) -> list[dict[str, Any]]:
    """The client rows as the analysis reads them: on the runner's clock."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from analysis.load import align_files, history_files

    run_json = json.loads((run_dir / "run.json").read_text())
    files = [f for f in history_files(run_dir) if f.parent.name == "client"]
    files, _ = align_files(run_dir, files, run_json.get("clock"))
    tables = [pq.read_table(f) for f in files]
    out = pa.concat_tables([t.replace_schema_metadata(None) for t in tables]).to_pylist()
    for r in out:
        r["d"] = json.loads(r["detail"]) if r["detail"] else {}
    return out


def intended(rows: list[dict[str, Any]]) -> list[float]:
    """The schedule: every intended arrival (offered or not), ms from the first."""
    t = sorted(
        r["d"]["intended_mono_ns"]
        for r in rows
        if r["event"] == "connect_invoke" or r["reason"] == "not_offered"
    )
    return [(x - t[0]) / 1e6 for x in t]


def test_master_with_two_workers_matches_one_process(tmp_path: Path) -> None:
    spec = yaml.safe_load((CATALOG / "ci-gate.yaml").read_text())
    spec["duration"] = 12  # short: the point is equality, not length
    single_dir, single, log1 = run_scenario(spec, tmp_path, "single")

    dist = json.loads(json.dumps(spec))
    phase = dist["load"][0]
    phase["users"] = 2
    phase["extra_args"] = ["--processes", "2", "--arrival-slots", "2"]
    skew = {"HARNESS_TEST_CLOCK_SKEW_NS": ",".join(str(v) for v in SKEWS)}
    dist_dir, distributed, log2 = run_scenario(dist, tmp_path, "distributed", skew)

    # two workers, each its own history writer
    files = sorted((dist_dir / "history" / "client").glob("*.parquet"))
    writers = {f.name.rsplit("-", 1)[0] for f in files}
    assert len(writers) == 2, (files, log2[-3000:])
    # ... each file with the master's clock, read in the exchange that gave its offset (the
    # master runs on the runner's kernel: its boot id is run.json's)
    import pyarrow.parquet as pq

    from base.history.clocks import REFERENCE_BOOT_ID

    runner_boot = json.loads((dist_dir / "run.json").read_text())["clock"]["boot_id"]
    for f in files:
        assert pq.read_schema(f).metadata[REFERENCE_BOOT_ID].decode() == runner_boot, f

    a, b = rows(single_dir), rows(dist_dir)
    # the same schedule, every arrival intended exactly once over the two workers ...
    assert len(intended(a)) == len(intended(b)) > 0, log2[-3000:]
    # the workers share the master's start, converted with their clock offsets: equal
    # within that estimate's bound (RTT/2) plus the 1 ms rounding of ``intended``
    rtts = [r["d"]["clock_rtt_ns"] for r in b if "clock_rtt_ns" in r["d"]]
    tol_ms = (max(rtts) / 2e6 if rtts else 0.0) + 1.0
    gaps = [abs(x - y) for x, y in zip(intended(a), intended(b), strict=True)]
    assert max(gaps) <= tol_ms, (max(gaps), tol_ms)
    # ... arrival k from source address pool[k mod 8], whichever worker offered it
    pool = [f"127.0.0.{i}" for i in range(2, 10)]
    for run in (a, b):
        for r in run:
            if r["event"] == "connect_invoke":
                k = int(r["conn_id"].rsplit("-", 1)[1])
                assert r["client_ip"] == pool[k % len(pool)], r
    invoked = [r for r in b if r["event"] == "connect_invoke"]
    assert len({r["conn_id"].split("-")[0] for r in invoked}) == 2  # both workers offered

    # clock alignment: each worker recorded its offset to the master and its bound: the
    # skew it ran with (one worker each), within RTT/2 (+1 ms for the clocks' two reads)
    with_clock = [r["d"] for r in invoked if "clock_offset_ns" in r["d"]]
    assert with_clock, "no worker recorded its clock offset"
    seen = set()
    for d in with_clock:
        skew = min(SKEWS, key=lambda v: abs(d["clock_offset_ns"] + v))
        assert abs(d["clock_offset_ns"] + skew) <= d["clock_rtt_ns"] // 2 + 1_000_000, d
        seen.add(skew)
    assert seen == set(SKEWS), seen
    # ... and the analysis moved each worker's files back by it, within the same bound
    moved = distributed.get("clock_alignment", [])
    back = set()
    for a in moved:
        skew_ms = min((v / 1e6 for v in SKEWS), key=lambda v: abs(a["shift_ms"] + v))
        assert abs(a["shift_ms"] + skew_ms) <= a["error_ms"] + 1.0, a
        back.add(skew_ms)
    assert back == {v / 1e6 for v in SKEWS}, moved

    # the verdict, and every check's status, equal the single-process run's when both
    # generators offered the load as intended. On a machine busy enough that one fell behind
    # (`offered_load` short of 95 %), fewer arrivals reach the limits and the run says so:
    # `unknown` naming the offered load, never a different pass or a fail.
    status = {c["name"]: c["verdict"] for c in single["checks"]}
    status2 = {c["name"]: c["verdict"] for c in distributed["checks"]}
    if status["offered_load"] == status2["offered_load"] == "pass":
        assert distributed["verdict"] == single["verdict"], (log1[-2000:], log2[-2000:])
        assert status2 == status
    else:
        print(
            "a generator fell behind its schedule:", status["offered_load"], status2["offered_load"]
        )
        assert "fail" not in status2.values() and "fail" not in status.values(), (status, status2)
        behind = distributed if status2["offered_load"] != "pass" else single
        assert behind["verdict"] == "unknown", behind["reasons"]
        assert any("offered" in r for r in behind["reasons"]), behind["reasons"]

    # the same history judged on the workers' own clocks (no run.json clock: a run from
    # before files said which clock they are on) fails
    unaligned = tmp_path / "unaligned"
    shutil.copytree(dist_dir, unaligned, ignore=shutil.ignore_patterns("report"))
    run_json = json.loads((unaligned / "run.json").read_text())
    del run_json["clock"]
    (unaligned / "run.json").write_text(json.dumps(run_json))
    res = subprocess.run(
        [sys.executable, "-m", "harness", "analyze", str(unaligned), "--no-html"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    judged = json.loads((unaligned / "report" / "verdict.json").read_text())
    assert judged["verdict"] == "fail", (res.stdout[-3000:], res.stderr[-2000:])
    assert "clock_alignment" not in judged
    failed = [c["name"] for c in judged["checks"] if c["verdict"] == "fail"]
    print("judged on the workers' clocks, failing:", failed)
