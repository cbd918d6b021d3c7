"""A Locust master with two workers runs a catalog scenario; same verdict as one process.

``--processes 2`` is Locust's own master/worker mode with the workers as separate
(forked) processes on this machine: the master coordinates, each worker runs one
EngineDriver for its slot of the schedule (``k % 2``) and writes its own history.
The catalog's ``ci-gate`` runs twice through ``harness run`` against the acceptor,
once in one process and once as master + two workers; the merged history of the
two workers must offer the same arrivals from the same addresses, and the verdict
must be the same. Each worker also measured its clock offset to the master; on one
machine the true offset is 0, so the estimate must lie within its own bound (RTT/2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.history import read_history

pytestmark = pytest.mark.timeout(900)

CATALOG = Path(__file__).resolve().parents[2] / "loadprofiles" / "scenarios"


def run_scenario(spec: dict[str, Any], tmp: Path, name: str) -> tuple[Path, dict[str, Any], str]:
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
        )
    text = log.read_text()
    runs = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    assert len(runs) == 1, text[-3000:]
    verdict = runs[0] / "report" / "verdict.json"
    assert verdict.is_file(), text[-3000:]
    return runs[0], json.loads(verdict.read_text()), text


def rows(run_dir: Path) -> list[dict[str, Any]]:
    out = read_history(run_dir, "client").to_pylist()
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
    dist_dir, distributed, log2 = run_scenario(dist, tmp_path, "distributed")

    # two workers, each its own history writer
    files = sorted((dist_dir / "history" / "client").glob("*.parquet"))
    writers = {f.name.rsplit("-", 1)[0] for f in files}
    assert len(writers) == 2, (files, log2[-3000:])

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

    # clock alignment: each worker recorded its offset to the master and its bound
    with_clock = [r["d"] for r in invoked if "clock_offset_ns" in r["d"]]
    assert with_clock, "no worker recorded its clock offset"
    for d in with_clock:
        assert abs(d["clock_offset_ns"]) <= d["clock_rtt_ns"] // 2 + 1_000_000

    # the verdict, and every check's status, equal the single-process run's
    assert distributed["verdict"] == single["verdict"], (log1[-2000:], log2[-2000:])
    status = {c["name"]: c["verdict"] for c in single["checks"]}
    assert {c["name"]: c["verdict"] for c in distributed["checks"]} == status
