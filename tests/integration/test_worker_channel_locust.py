"""Histories home over Locust's own channel, with real Locust processes: a master as
``harness run --workers 2`` starts it (``--history-home channel``) and two ``harness worker``
processes that take the profile from it (``-f -``), on loopback, against a port nobody
listens on (every arrival refused: rows without a broker). Each worker's files land in the
run folder under the master's pid, whole (the roster's rows equal the files' rows); the
two shares make up the one schedule; the readiness markers are the master's, per worker."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from base.localnet import free_port
from base.supervisor import ManagedProcess
from harness.runner.loadgen import LoadTarget, Workers, locust_argv, max_arrivals, ready_dir
from harness.runner.scenario import parse_scenario
from harness.runner.workers import worker_argv
from loadprofiles.readiness import phase_state
from loadprofiles.workers import problems, read_roster

pytestmark = pytest.mark.timeout(300)

SPEC = {
    "name": "channel",
    "description": "two workers, refused arrivals",
    "duration": 4,
    "load": [
        {
            "name": "storm",
            "profile": "storm",
            "arrival": "constant:rate=20",
            "source_ips": "per-worker",
        }
    ],
}


def test_two_workers_send_their_histories_home_whole(tmp_path: Path) -> None:
    sc = parse_scenario(SPEC)
    phase = sc.load[0]
    closed, master_port = free_port(), free_port()
    workers = Workers(2, "127.0.0.1", master_port, 60.0)
    argv = locust_argv(
        phase,
        locust_bin=str(Path(sys.executable).with_name("locust")),
        profile_dir=Path(__file__).resolve().parents[2] / "loadprofiles",
        target=LoadTarget("127.0.0.1", closed),
        run_dir=tmp_path,
        run_id="channel",
        seed=3,
        workers=workers,
    )
    master = ManagedProcess("master", argv, log_path=tmp_path / "master.log")
    tmps = [tmp_path / f"tmp{j}" for j in range(2)]  # each worker's TMPDIR
    for t in tmps:
        t.mkdir()
    procs = [
        ManagedProcess(
            f"worker{j}",
            [*worker_argv(workers.address), "--phases", "1"],
            log_path=tmp_path / f"worker{j}.log",
            env={**os.environ, "TMPDIR": str(tmps[j])},
        )
        for j in range(2)
    ]
    ready = ready_dir(tmp_path, phase)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and master.poll() is None:
            if phase_state(ready)[1] >= 2:
                break
            time.sleep(0.2)
        logs = "\n".join(p.tail(20) for p in (master, *procs))
        assert phase_state(ready) == (2, 2), logs
        master.signal_group(signal.SIGTERM)  # as the runner does once every worker is done
        master.wait(30)
        for p in procs:
            assert p.wait(60) == 0, p.tail(30)
    finally:
        master.stop(timeout=5)
        for p in procs:
            p.stop(timeout=5)

    assert [list(t.iterdir()) for t in tmps] == [[], []]  # each phase's folder removed
    roster = read_roster(ready)
    assert problems(roster, 2) == [], roster
    files = sorted((tmp_path / "history" / "client").glob("*.parquet"))
    by_worker = {i: [f for f in files if f"-w{i}-{master.pid}-" in f.name] for i in (0, 1)}
    assert all(by_worker.values()) and sum(map(len, by_worker.values())) == len(files), files
    for w in roster["workers"].values():
        rows = sum(pq.read_metadata(f).num_rows for f in by_worker[int(w["index"])])
        assert rows == w["rows_received"] == w["done"]["rows"] == w["rows_reported"], w
        assert w["addresses"] == ["127.0.0.1"]
    # the two shares are the one schedule: every intended arrival once
    table = pq.read_table(files, columns=["event", "conn_id", "reason"]).to_pylist()
    invoked = [r["conn_id"] for r in table if r["event"] == "connect_invoke"]
    late = [r for r in table if r["reason"] == "not_offered"]  # a busy machine's
    assert len(invoked) == len(set(invoked))
    assert len(invoked) + len(late) == max_arrivals(phase), (len(invoked), len(late))
    assert {c.split("-")[0].rpartition("w")[2] for c in invoked} == {"0", "1"}
    assert json.loads((ready / "w0.done").read_text())["worker"] == 0


def test_a_worker_stopped_by_its_run_removes_its_phase_folder(tmp_path: Path) -> None:
    """SIGTERM (the runner stopping a worker after its phases) while it waits for a master
    that never answers: its phase folder goes with it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    worker = ManagedProcess(
        "worker",
        worker_argv(f"127.0.0.1:{free_port()}"),
        log_path=tmp_path / "worker.log",
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(tmp.iterdir()):
            time.sleep(0.1)
        assert list(tmp.iterdir()), worker.tail(20)  # it made its phase folder
        worker.signal_group(signal.SIGTERM)
        assert worker.wait(30) is not None, worker.tail(20)
    finally:
        worker.stop(timeout=5)
    assert list(tmp.iterdir()) == [], worker.tail(20)
